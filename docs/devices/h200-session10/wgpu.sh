#!/usr/bin/env bash
# The wgpu_virtual_texture example (residency-wgpu, issue #33) at its defaults on both paths under
# synchronization validation (Debian's layer 1.3.239 from .gl), H200.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json RESIDENCY_VALIDATION=sync
mkdir -p r
for p in hardware software; do
  s=$(date +%s); timeout 120 ./.h200/w/wgpu_virtual_texture $p > r/wgpu-$p.txt 2>&1; echo "wgpu $p rc=$? $(( $(date +%s) - s )) s" >> r/log.txt
  tar czf $OUT/r.tgz r
done
cat r/log.txt; tail -3 r/wgpu-*.txt
