#!/usr/bin/env bash
# Session 11, run 1: the wgpu example on both paths under sync validation (#33), the driver's
# serialisation bisected over residency's device features (#31), 4096 textures past 1 TB (#32).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins1.tgz && mkdir -p r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > r/gpu.txt 2>&1
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done
step wgpu-hardware.txt 90 env RESIDENCY_VALIDATION=sync ./b/wgpu_virtual_texture hardware
step wgpu-software.txt 90 env RESIDENCY_VALIDATION=sync ./b/wgpu_virtual_texture software
step contention-bisect.txt 140 ./b/residency-bench contention --threads 1,16 --only driver,driver-plain,driver-plain+sparse,driver-plain+bda,driver-plain+priority,driver-plain+budget,driver-plain+rt,driver-plain+core,driver-plain+queues,driver-plain+all
wait
step stream-1tb.json 200 ./b/residency stream t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt --textures 4096 --size 8192,8192,8192,8192,8192,4096,4096,4096 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
cat r/log.txt; tail -2 r/wgpu-*.txt; cat r/contention-bisect.txt; tail -3 r/stream-1tb.json.err
