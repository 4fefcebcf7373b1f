#!/bin/bash
# GPU-assisted validation sweep on lavapipe (continued): per binary 600 s cap, nice 19.
cd /work/main/crates/residency-vulkan
export RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=gpu
for t in /tmp/gavbins/*; do
  n=$(basename $t); grep -q "^$n " /tmp/gavlogs/summary.txt && continue
  s=$(date +%s)
  nice -n 19 timeout 600 $t --test-threads 1 > /tmp/gavlogs/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(( $(date +%s) - s ))s passed=$(grep -cE '^test .* ok$' /tmp/gavlogs/$n.log) failed=$(grep -cE '^test .* FAILED$' /tmp/gavlogs/$n.log) last=$(grep -E '^test ' /tmp/gavlogs/$n.log | tail -1 | cut -c1-100) $(grep -E '^test result' /tmp/gavlogs/$n.log | tail -1)" >> /tmp/gavlogs/summary.txt
done
echo finished >> /tmp/gavlogs/summary.txt
