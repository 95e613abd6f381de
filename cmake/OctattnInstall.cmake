# Installs the libraries, the header, a CMake package (find_package(octattn)) and a
# pkg-config file (pkg-config --cflags --libs [--static] octattn).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS octattn octattn_static EXPORT octattnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT octattnTargets NAMESPACE octattn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/octattn)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/octattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/octattnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/octattn)
# Releases only append to the ABI (versioned symbols, structs that grow at their end):
# a program asking for 0.6 runs with 0.7, so any newer release of the same major
# version satisfies a request.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/octattnConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/octattnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/octattnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/octattn)
if(OCTATTN_BUILD_TOOLS)
  install(TARGETS octattn_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# The .pc file finds the prefix from its own place: libdir/pkgconfig up to the prefix.
file(RELATIVE_PATH OCTATTN_PC_UP "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" OCTATTN_PC_UP "${OCTATTN_PC_UP}")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/octattn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/octattn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/octattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
