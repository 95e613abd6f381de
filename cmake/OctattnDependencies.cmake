# Highway, xsimd, oneTBB (and Catch2 for tests) from the system's packages.
find_package(hwy REQUIRED)
find_package(TBB REQUIRED)
# Debian's xsimd 8.1 package references an xtl target it does not ship.
if(NOT TARGET xtl)
  add_library(xtl INTERFACE IMPORTED)
endif()
find_package(xsimd REQUIRED)
find_package(Threads REQUIRED)
