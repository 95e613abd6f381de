# A Debian package of the install (`cpack -G DEB --config CPackConfig.cmake` in the build
# folder): the shared and static libraries, the header, the CMake package, the
# pkg-config file and the octattn tool under /usr, as octattn_VERSION_ARCH.deb. It
# depends on what its programs load (dpkg-shlibdeps) and on the -dev packages of Highway
# and oneTBB, which the CMake package (find_dependency) and the pkg-config file
# (Requires.private) name.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME octattn)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "SIMD CPU attention kernels behind a plain C ABI")
set(CPACK_PACKAGE_DESCRIPTION
    "octattn computes the attention of a decoder on the CPU (forward, backward, decode over
plain, paged and quantized caches) in SIMD kernels for each x86-64 and ARM64 target,
chosen at run time, behind one C header. This package holds the shared and static
libraries, the header, the CMake package (find_package(octattn)), the pkg-config file
and the octattn benchmark tool.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "octattn developers")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libhwy-dev, libtbb-dev")
set(CPACK_PACKAGE_CHECKSUM SHA256)
include(CPack)
