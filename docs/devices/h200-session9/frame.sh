#!/usr/bin/env bash
# own_frame on the H200: the examples test binary (own_frame default + every early-return site,
# and the other examples), misuse_own_frame and adopt, release, synchronization validation.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync
mkdir -p /work && ln -sfn "$PWD" /work/main
cd .h200 && rm -rf bin && tar xzf bins2.tgz && mkdir -p logs2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > logs2/gpu.txt 2>&1
for t in bin/*; do
  n=$(basename $t); s=$(date +%s)
  (cd .. && timeout 200 .h200/$t --test-threads 1 > .h200/logs2/$n.log 2>&1); rc=$?
  echo "$n rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' logs2/$n.log | tail -1)" >> logs2/summary.txt
done
tar czf $OUT/results2.tgz logs2
cat logs2/summary.txt
