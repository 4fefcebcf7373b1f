#!/usr/bin/env bash
# Session 15, run 1 (main with LocalRanges): the new tests on NVIDIA under sync validation, W1-W3
# twice (w3-range with residency-local), contention with every contender at 1-16 threads, uploads
# at the defaults.
set -u
source docs/devices/h200-prelude.sh bins1.tgz
for t in memory concurrency; do
  step test-$t.txt 120 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/t-$t --test-threads 1
done
step alloc-w123.json 120 ./b/residency-bench alloc --only w1,w2,w3 --json
step alloc-w3-b.json 120 ./b/residency-bench alloc --only w3 --json
step contention.json 200 ./b/residency-bench contention --json --threads 1,2,4,8,16
step upload-256.json 60 ./b/residency-bench upload --json --mib 256 --threads 16 --no-import
step upload-1g.json 90 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 16 --no-import
cat r/log.txt; grep -h "test result" r/test-*.txt
