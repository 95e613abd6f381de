# Warnings for the project's own targets.
function(octattn_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wno-unused-parameter)
  if(OCTATTN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
