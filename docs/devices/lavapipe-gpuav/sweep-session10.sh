#!/bin/bash
# GPU-assisted validation sweep with Vulkan-ValidationLayers 1.4.357 (built from the SDK tag on the
# H200 machine for glibc 2.36: docs/devices/lavapipe-gpuav/README.md), lavapipe, every test binary
# of the workspace (debug), --test-threads 1, nice 19, per-binary cap 1200 s.
# Input: /tmp/gav-bins.txt lines "target crate-dir executable" (cargo test --no-run --message-format=json).
export RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=gpu
export VK_LAYER_PATH=/tmp/newvvl LD_PRELOAD=/tmp/newvvl/libisoc23shim.so
out=/tmp/gav10; mkdir -p $out
while read name crate exe; do
  n="$crate-$name"; grep -q "^$n " $out/summary.txt 2>/dev/null && continue
  case $crate in main) dir=/work/main;; *) dir=/work/main/crates/$crate;; esac
  s=$(date +%s)
  (cd $dir && nice -n 19 timeout 1200 $exe --test-threads 1 > $out/$n.log 2>&1); rc=$?
  echo "$n rc=$rc $(( $(date +%s) - s ))s passed=$(grep -cE '^test .* ok$' $out/$n.log) failed=$(grep -cE '^test .* FAILED$' $out/$n.log) validation_errors=$(grep -c 'Validation Error' $out/$n.log) $(grep -E '^test result' $out/$n.log | tail -1)" >> $out/summary.txt
done < /tmp/gav-bins.txt
echo finished >> $out/summary.txt
