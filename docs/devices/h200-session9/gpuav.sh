#!/usr/bin/env bash
# One device batch: every residency-vulkan test binary under GPU-assisted validation
# (RESIDENCY_VALIDATION=gpu), 8 binaries at a time, each test single-threaded, under a hard
# deadline; counts out-of-bounds reports per binary; results always tarred into $OUT.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=gpu
mkdir -p /work && ln -sfn "$PWD" /work/main
cd .h200 && tar xzf bins.tgz && mkdir -p logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > logs/gpu.txt 2>&1
one() {
  t=$1; n=$(basename $t); s=$(date +%s)
  timeout 400 ./$t --test-threads 1 > logs/$n.log 2>&1; rc=$?
  oob=$(grep -cE '02705|02706|highest byte accessed|out of bounds|used to index descriptor' logs/$n.log)
  noise=$(grep -c 'VkSemaphore-state-timeout' logs/$n.log)
  echo "$n rc=$rc $(( $(date +%s) - s ))s oob_reports=$oob layer_noise=$noise $(grep -E '^test result' logs/$n.log | tail -1)" >> logs/summary.txt
}
export -f one
: > logs/summary.txt
(ls -S bin/* | xargs -P 8 -I{} bash -c 'one {}') &
pid=$!
for i in $(seq 1 ${DEADLINE:-500}); do kill -0 $pid 2>/dev/null || break; sleep 1; done
pkill -f 'test-threads 1' ; sleep 2
for t in bin/*; do n=$(basename $t); grep -q "^$n " logs/summary.txt || echo "$n cut_at_deadline oob_reports=$(grep -cE '02705|02706|highest byte accessed|out of bounds|used to index descriptor' logs/$n.log 2>/dev/null) $(grep -cE '^test .* ok$' logs/$n.log 2>/dev/null) tests passed before the cut" >> logs/summary.txt; done
sort -o logs/summary.txt logs/summary.txt
tar czf $OUT/results.tgz logs
cat logs/summary.txt
