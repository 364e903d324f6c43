# aarch64-linux-gnu.cmake — a CMake toolchain for building sdpa for 64-bit Arm Linux on an
# x86-64 Debian 12 host, and running its tests there under user-mode QEMU:
#
#   cmake -S . -B build-arm64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake
#   cmake --build build-arm64 && (cd build-arm64 && ctest)
#
# Debian's packages: g++-aarch64-linux-gnu (with the arm64 libstdc++ and libgomp) and qemu-user
# (scripts/setup.sh installs them). The libraries are the sysroot's; the header-only
# dependencies (fmt as header-only, CLI11, nlohmann-json) come from the host's /usr/include, and
# GoogleTest is built from Debian's source tree (/usr/src/googletest) by the top-level
# CMakeLists.txt. MPI, OpenBLAS, Google Benchmark and the Python module are left out.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)   # the host's tools (bash, python3)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)    # the target's libraries only
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)    # header-only packages from the host's /usr/include
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)    # their CMake packages
# fmt's package lives under the host's multiarch directory, which a search for aarch64 skips; its
# target fmt::fmt-header-only is all a cross build uses (SDPA_FMT in ../CMakeLists.txt).
set(fmt_DIR /usr/lib/x86_64-linux-gnu/cmake/fmt CACHE PATH "fmt's CMake package (used header-only)")

# ctest and gtest_discover_tests run the test binaries through QEMU with the arm64 sysroot's
# dynamic loader and libraries, on QEMU's default CPU, "max" (every extension QEMU has, SVE at
# 512 bits). The environment variable QEMU_CPU picks another at run time, e.g.
# QEMU_CPU=max,sve256=on (SVE at 256 bits), max,sve128=on, or max,sve=off (NEON only).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
