# Cross build for ARM64 Linux with Debian's cross compiler (g++-aarch64-linux-gnu) and the
# ARM64 packages of the dependencies (dpkg --add-architecture arm64; libhwy-dev:arm64,
# libtbb-dev:arm64; xsimd and Catch2 are headers). Tests run under qemu-aarch64 (Debian:
# qemu-user); QEMU_CPU in the environment chooses the emulated CPU. The `arm64` preset
# uses this file: cmake --preset arm64 && cmake --build --preset arm64 && ctest --preset arm64-neon
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: the ARM64 libraries and their CMake packages live in /usr/lib/aarch64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# The programs load the multiarch libc6:arm64 (/lib/ld-linux-aarch64.so.1), which the
# ARM64 packages above bring. Not qemu's -L /usr/aarch64-linux-gnu: that loader is the
# cross toolchain's glibc build, and paired with the multiarch libc.so.6 its threads hang.
find_program(OCTATTN_QEMU_AARCH64 qemu-aarch64)
if(OCTATTN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${OCTATTN_QEMU_AARCH64})
endif()
