# Installs the build tree to a staging prefix, builds abi/install against it with
# find_package(octattn) and the C consumer with pkg-config (shared, and static with
# --static), and runs all four. Arguments: BUILD, SOURCE, WORK, CC; or SYSTEM (the
# installed Debian package, deb_test.sh), WORK/consumers being then the only folder it
# writes and nothing pointing into a prefix: CMake, pkg-config and the loader find the
# library in the system's own paths.
include(${CMAKE_CURRENT_LIST_DIR}/run.cmake)
if(SYSTEM)
  set(WORK ${WORK}/consumers)
  file(REMOVE_RECURSE ${WORK})
  unset(ENV{LD_LIBRARY_PATH})
  unset(ENV{PKG_CONFIG_PATH})
  unset(ENV{CMAKE_PREFIX_PATH})
  run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja)
else()
  file(REMOVE_RECURSE ${WORK})
  run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
  run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja -DCMAKE_PREFIX_PATH=${WORK}/prefix)
endif()
run(${CMAKE_COMMAND} --build ${WORK}/build)
if(NOT SYSTEM)
  set(ENV{LD_LIBRARY_PATH} "${WORK}/prefix/lib")
endif()
run(${WORK}/build/consumer_shared)
run(${WORK}/build/consumer_static)

# pkg-config, as a Makefile would use it: the shared library, then the static archive
# with the private dependencies that --static adds.
if(NOT SYSTEM)
  set(ENV{PKG_CONFIG_PATH} "${WORK}/prefix/lib/pkgconfig")
endif()
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
# The static program does not load liboctattn.so; the shared ones load the package's.
execute_process(COMMAND objdump -p ${WORK}/pc_static OUTPUT_VARIABLE deps)
if(deps MATCHES "NEEDED +liboctattn")
  message(FATAL_ERROR "pc_static needs liboctattn.so:\n${deps}")
endif()
if(SYSTEM)
  foreach(program build/consumer_shared pc_shared)
    execute_process(COMMAND ldd ${WORK}/${program} OUTPUT_VARIABLE libs)
    if(NOT libs MATCHES "liboctattn[.]so[.]0 => (/usr)?/lib/liboctattn[.]so[.]0")
      message(FATAL_ERROR "${program} does not load /usr/lib/liboctattn.so.0:\n${libs}")
    endif()
  endforeach()
endif()
