# Builds abi/subproject (octattn added from its source folder with FetchContent) and runs
# its two consumers. Only the targets this machine runs are compiled, each lane width
# once (OCTATTN_HOST_TARGETS_ONLY, OCTATTN_LEAN_TARGETS), unoptimized (-O0 compiles in
# about two thirds of the time): the parent's build is under test, not the kernels.
# Arguments: SOURCE (abi/subproject), OCTATTN_SRC, WORK.
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run.cmake)
run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK} -G Ninja -DCMAKE_BUILD_TYPE=Debug
    -DCMAKE_C_FLAGS_DEBUG=-O0 -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DOCTATTN_SRC=${OCTATTN_SRC}
    -DOCTATTN_HOST_TARGETS_ONLY=ON -DOCTATTN_LEAN_TARGETS=ON)
run(${CMAKE_COMMAND} --build ${WORK})
run(${WORK}/consumer_shared)
run(${WORK}/consumer_static)
