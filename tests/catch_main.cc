// Catch2's main() for cross builds (tests/CMakeLists.txt): the host's prebuilt one does not
// link into a program for another architecture.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
