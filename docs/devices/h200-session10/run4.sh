#!/usr/bin/env bash
# Session 10, after the merges of #31 (alloc, rules), #32 (scale, codes), #34 (pressure): main 0d6bb7c.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins4.tgz && mkdir -p r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > r/gpu.txt 2>&1
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
step contention.json 170 ./b/residency-bench contention --json
step pressure.json 100 ./b/residency-bench pressure --json --budget-mib 4096 --buffer-kib 4096 --touch-kib 256 --per-frame-mib 256
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1; done
step stream-4096.json 200 ./b/residency stream t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt --textures 4096 --size 8192 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
step contention-driver.txt 50 ./b/residency-bench contention --threads 1,4,16 --only driver,driver-memory-per-thread,driver-plain,driver-messenger
cat r/log.txt
