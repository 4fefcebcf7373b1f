#!/usr/bin/env bash
# Compiles every GLSL shader in this folder to SPIR-V next to it (`NAME.comp` -> `NAME.comp.spv`).
# The SPIR-V is committed so that building the library needs no shader compiler; the test
# `shaders_are_up_to_date` (`tests/misuse_shaders.rs`) recompiles with glslc and fails when a .spv is stale.
set -euo pipefail
cd "$(dirname "$0")"
for src in *.comp *.vert *.frag *.rgen *.rmiss *.rchit; do
  [ -e "$src" ] || continue
  glslc --target-env=vulkan1.3 -O -I include -o "$src.spv" "$src"
done
