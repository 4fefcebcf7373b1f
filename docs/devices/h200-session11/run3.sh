#!/usr/bin/env bash
# Session 11, run 3: the driver's sparse virtual-size limit (#32's 1 TB), pressure with the frame
# target made first (#34), W1-W3 and contention repeated for medians (#31).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins3.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for a in "--side 8192" "--side 8192 --no-mips" "--side 4096" "--side 16384" "--side 8192 --layers 2" "--side 2048"; do
  step "capacity$(echo $a | tr -d ' -').json" 60 ./b/residency-bench sparse-capacity $a --max 40000
done
step pressure.json 100 ./b/residency-bench pressure --json --budget-mib 4096 --buffer-kib 4096 --touch-kib 256 --per-frame-mib 256
for i in 2 3; do
  step alloc-w123-$i.json 60 ./b/residency-bench alloc --only w1,w2,w3 --json
  step contention-$i.json 60 ./b/residency-bench contention --json --only driver,vma,gpu-allocator,placed-1,placed-n,offset-allocator,ranges-1,ranges-n
done
cat r/log.txt; cat r/capacity*.json; grep -h '"frame_ms_p99\|p99_over\|frames_waiting' r/pressure.json
