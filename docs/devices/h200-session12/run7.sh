#!/usr/bin/env bash
# Session 12, run 7 (main after the session's merges): uploads with 16 vs 8 copy threads,
# contention with the new rows (driver-named, unnamed pools), W1-W3, the defrag copy probe.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins7.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
step upload-256-t16.json 60 ./b/residency-bench upload --json --mib 256 --threads 16
step upload-256-t8.json 60 ./b/residency-bench upload --json --mib 256 --threads 8
step upload-1g-t16.json 90 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 16
step contention.json 150 ./b/residency-bench contention --json --threads 1,2,4,8,16 --only driver,driver-named,vma,gpu-allocator,placed-1,placed-n,placed-1-unnamed,placed-n-unnamed
step alloc-w123.json 90 ./b/residency-bench alloc --only w1,w2,w3 --json
step defrag-probe.json 90 ./b/residency-bench defrag --json
cat r/log.txt
# The #35 tests on NVIDIA (one GPU opened twice) and the stereo example, tracker vs full barriers.
for t in multi_ray_query multi_queries multi_map multi_copy multi_indirect multi_bindless multi_barriers acceleration_structure misuse_shaders; do
  step test-$t.txt 60 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/t-$t --test-threads 1 --skip shaders_are_up_to_date --nocapture
done
step stereo.txt 60 env RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/stereo
step stereo-full.txt 60 env RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/stereo full-barriers
step stereo-nv.txt 60 ./b/stereo
step stereo-nv-full.txt 60 ./b/stereo full-barriers
cat r/log.txt; grep -h "test result" r/test-*.txt
