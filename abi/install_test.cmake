# Installs the build tree to a staging prefix, builds abi/install against it with
# find_package(octattn) and the C consumer with pkg-config (shared, and static with
# --static), and runs all four. Arguments: BUILD, SOURCE, WORK, CC.
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja -DCMAKE_PREFIX_PATH=${WORK}/prefix)
run(${CMAKE_COMMAND} --build ${WORK}/build)
set(ENV{LD_LIBRARY_PATH} "${WORK}/prefix/lib")
run(${WORK}/build/consumer_shared)
run(${WORK}/build/consumer_static)

# pkg-config, as a Makefile would use it: the shared library, then the static archive
# with the private dependencies that --static adds.
set(ENV{PKG_CONFIG_PATH} "${WORK}/prefix/lib/pkgconfig")
foreach(mode shared static)
  set(flags --cflags --libs octattn)
  if(mode STREQUAL static)
    set(flags --cflags --libs --static octattn)
  endif()
  execute_process(COMMAND pkg-config ${flags} OUTPUT_VARIABLE pc RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${flags} failed")
  endif()
  separate_arguments(pc UNIX_COMMAND "${pc}")
  if(mode STREQUAL static)  # the archive, not the shared library of the same name
    list(TRANSFORM pc REPLACE "^-loctattn$" "-l:liboctattn.a")
  endif()
  run(${CC} -std=c99 ${SOURCE}/../consumer.c -o ${WORK}/pc_${mode} ${pc})
  run(${WORK}/pc_${mode})
endforeach()
# The static program does not load liboctattn.so.
execute_process(COMMAND objdump -p ${WORK}/pc_static OUTPUT_VARIABLE deps)
if(deps MATCHES "NEEDED +liboctattn")
  message(FATAL_ERROR "pc_static needs liboctattn.so:\n${deps}")
endif()
