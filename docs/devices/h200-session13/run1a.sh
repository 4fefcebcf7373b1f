#!/usr/bin/env bash
# Session 13, run 1 (integ = main + compcopy, fbdefer, bindthread, placed1, ranges, upload at ~20:40):
# the new tests on NVIDIA, compaction compute copy, uploads (import), contention/W1-3, streaming.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins1.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for t in compaction_compute streamer_bind_worker upload graphics_draw sparse_compaction streamer_scale memory placement_policy; do
  step test-$t.txt 90 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/t-$t --test-threads 1 --skip shaders_are_up_to_date
done
step defrag.json 90 ./b/residency-bench defrag --json
step upload-256.json 90 ./b/residency-bench upload --json --mib 256 --threads 16
step upload-1g.json 120 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 16
step contention.json 120 ./b/residency-bench contention --json --threads 1,8,16 --only driver,vma,gpu-allocator,offset-allocator,placed-1,placed-n,ranges-1,ranges-n
step alloc-w123.json 90 ./b/residency-bench alloc --only w1,w2,w3 --json
cat r/log.txt; grep -h "test result" r/test-*.txt
