#!/usr/bin/env bash
# Builds VkLayer_khronos_validation (SDK 1.4.357.0) on the H200 machine (Ubuntu 24.04) so that it
# loads on Debian 12 (glibc 2.36): static libstdc++, no C23 strtol redirects, a shim for the rest.
set -eux -o pipefail
S=$PWD; I=$S/inst; J=$(nproc)
F="-include $S/compat/glibc_compat.h -O2"
gcc -O2 -fPIC -std=c99 -c compat/shim.c (build_shim.c here) -o compat/shim.o
L="-static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL $S/compat/shim.o"
cm() { cmake -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$I -DCMAKE_PREFIX_PATH=$I -DCMAKE_POSITION_INDEPENDENT_CODE=ON "-DCMAKE_C_FLAGS=$F" "-DCMAKE_CXX_FLAGS=$F" "-DCMAKE_SHARED_LINKER_FLAGS=$L" "$@"; }
cm -S VH -B b/vh && cmake --install b/vh
cm -S SH -B b/sh && cmake --install b/sh
cm -S VUL -B b/vul -DBUILD_TESTS=OFF && cmake --build b/vul -j$J && cmake --install b/vul
cm -S ST -B b/st -DSPIRV-Headers_SOURCE_DIR=$S/SH -DSPIRV_SKIP_TESTS=ON -DSPIRV_SKIP_EXECUTABLES=ON -DSPIRV_WERROR=OFF -DSKIP_SPIRV_TOOLS_INSTALL=OFF && cmake --build b/st -j$J && cmake --install b/st
cm -S VVL -B b/vvl -DBUILD_TESTS=OFF -DUPDATE_DEPS=OFF -DBUILD_WSI_XCB_SUPPORT=OFF -DBUILD_WSI_XLIB_SUPPORT=OFF -DBUILD_WSI_XLIB_XRANDR_SUPPORT=OFF -DBUILD_WSI_WAYLAND_SUPPORT=OFF -DBUILD_WERROR=OFF
cmake --build b/vvl -j$J --target vvl
find b/vvl -name 'libVkLayer_khronos_validation.so' -o -name 'VkLayer_khronos_validation.json' | head
