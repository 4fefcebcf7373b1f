#!/usr/bin/env bash
# Session 11, run 2a (main after the memory-priority opt-in and the raymarch, slice-bias, compaction
# and TLSF merges): wgpu example under required sync validation (#33), contention with the peers
# and the driver (#31), W1/W2/W3 (#31), the new GPU tests on NVIDIA, batched compaction (#32).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins2.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
export RESIDENCY_REQUIRE_VALIDATION=1
step wgpu-hardware.txt 60 env RESIDENCY_VALIDATION=sync ./b/wgpu_virtual_texture hardware
step wgpu-software.txt 60 env RESIDENCY_VALIDATION=sync ./b/wgpu_virtual_texture software
unset RESIDENCY_REQUIRE_VALIDATION
for t in b/t-*; do n=$(basename $t); step test-$n.txt 60 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync $t --test-threads 1 --skip shaders_are_up_to_date; done
step contention.json 170 ./b/residency-bench contention --json
step alloc-w123.json 90 ./b/residency-bench alloc --only w1,w2,w3 --json
step defrag.json 90 ./b/residency-bench defrag --json
step pressure.json 100 ./b/residency-bench pressure --json --budget-mib 4096 --buffer-kib 4096 --touch-kib 256 --per-frame-mib 256
cat r/log.txt; grep -h "test result" r/test-*.txt; tail -n 2 r/wgpu-*.txt
