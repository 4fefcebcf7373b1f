#!/usr/bin/env bash
# h-fbcost (issue #32): feedback cost at 4K / 64 textures, both paths, feedback buffers in host
# memory (the default) and device-local (--feedback-device-local), plus two controls: idle frames
# (--feedback-interval 2: the measurement's own bias) and no pixel counters. Layout as
# h200-session12/run4.sh: bins4.tgz holds b/residency built from h-fbcost.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins4.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
A="--textures 64 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
step fb-hw-host.json 120 ./b/residency stream $T $A --path hardware
step fb-hw-device.json 120 ./b/residency stream $T $A --path hardware --feedback-device-local
step fb-sw-host.json 120 ./b/residency stream $T $A --path software
step fb-sw-device.json 120 ./b/residency stream $T $A --path software --feedback-device-local
step fb-hw-device-idle.json 120 ./b/residency stream $T $A --path hardware --feedback-device-local --feedback-interval 2
step fb-hw-device-nocounts.json 120 ./b/residency stream $T $A --path hardware --feedback-device-local --no-pixel-counts
# 4096 textures at 0.92 TB (run4.sh's setting) with device-local feedback: 2 × 175 MB of feedback in ReBAR
step fb-4096-device.json 300 ./b/residency stream $T --textures 4096 --size 8192,8192,8192,8192,4096,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json --feedback-device-local
cat r/log.txt
for f in r/fb-*.json; do python3 -c "import json,sys; d=json.load(open('$f')); print('$f', *(f'{k}={d[k]}' for k in ['feedback_gpu_ms_mean','render_gpu_ms_mean','feedback_gpu_ms_p50','feedback_gpu_ms_first_mean','feedback_gpu_ms_second_mean','feedback_gpu_ms_idle_mean','streamer_cpu_ms_mean','latency_frames_p95','psnr_db_min']))"; done
