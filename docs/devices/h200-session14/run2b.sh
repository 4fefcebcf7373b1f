#!/usr/bin/env bash
# Session 14, run 2b: uploads after h-upload2 (streamed ring, chunk and staging-memory grid), W1-W3
# with h-alloc4's split rows, the session's new tests on NVIDIA.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins2.tgz && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for t in upload misuse_session13; do
  step test-$t.txt 90 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/t-$t --test-threads 1 --skip shaders_are_up_to_date
done
step upload-256.json 60 ./b/residency-bench upload --json --mib 256 --threads 16 --no-import
step upload-1g.json 90 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 16 --no-import
step upload-grid-256.json 150 ./b/residency-bench upload --json --mib 256 --no-import --reps 3 --grid-staging wc,cached --grid-ring-mib 16,64 --grid-chunk-kib 1024,4096 --grid-threads 8,16 --grid-streaming on,off
step upload-grid-1g.json 120 ./b/residency-bench upload --json --mib 1024 --no-import --reps 3 --grid-staging wc,cached --grid-ring-mib 32,128 --grid-chunk-kib 2048,8192 --grid-threads 16 --grid-streaming on
step alloc-w123.json 120 ./b/residency-bench alloc --only w1,w2,w3 --json
cat r/log.txt; grep -h "test result" r/test-*.txt
