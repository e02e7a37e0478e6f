# CMake toolchain file: pmc for arm64 (aarch64-linux-gnu) from an x86-64 Debian 12 host, for the
# emulated-PMU stage (tests/hw/emulated-pmu.sh). The compiler is Debian's cross gcc
# (gcc-aarch64-linux-gnu, with its own C library in /usr/aarch64-linux-gnu); the libraries pmc
# depends on come from arm64 .debs unpacked with dpkg -x into a sysroot (apt-get download: never
# a multiarch install, which would remove the host's -dev packages that are not Multi-Arch).
#
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=tests/hw/emulated/aarch64-linux-gnu.cmake \
#         -DPMC_ARM64_SYSROOT=/path/to/sysroot
#
# protoc-c is the host's: only the generated C is compiled for arm64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)

set(PMC_ARM64_SYSROOT "$ENV{PMC_ARM64_SYSROOT}" CACHE PATH
  "arm64 .debs of pmc's dependencies, unpacked (dpkg -x)")
if(NOT PMC_ARM64_SYSROOT OR NOT IS_DIRECTORY "${PMC_ARM64_SYSROOT}/usr/include")
  message(FATAL_ERROR "PMC_ARM64_SYSROOT='${PMC_ARM64_SYSROOT}': not an unpacked arm64 sysroot")
endif()
# try_compile() projects read this file again: give them the sysroot too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES PMC_ARM64_SYSROOT)

# Libraries and headers from the sysroot (then the cross C library); programs from the host.
set(CMAKE_FIND_ROOT_PATH "${PMC_ARM64_SYSROOT}" /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the sysroot's .pc files only, and prefixes their paths with it.
set(ENV{PKG_CONFIG_DIR} "")
set(ENV{PKG_CONFIG_LIBDIR}
  "${PMC_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${PMC_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${PMC_ARM64_SYSROOT}")

# Headers the .pc files leave out (pkg-config drops -I/usr/include) and libraries linked by
# name (pfm); -rpath-link finds what the sysroot's libraries need in turn (libsystemd: liblzma,
# libzstd, ...). The programs run in a guest whose /lib holds the same libraries.
set(_pmc_libdirs "${PMC_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu"
  "${PMC_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
set(CMAKE_C_FLAGS_INIT "-isystem ${PMC_ARM64_SYSROOT}/usr/include")
set(_pmc_ldflags "")
foreach(d ${_pmc_libdirs})
  string(APPEND _pmc_ldflags " -L${d} -Wl,-rpath-link,${d}")
endforeach()
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_pmc_ldflags}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_pmc_ldflags}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_pmc_ldflags}")
