#!/usr/bin/env bash
# Session 13, run 1 (integ = main + compcopy, fbdefer, bindthread, placed1, ranges, upload at ~20:40):
# the new tests on NVIDIA, compaction compute copy, uploads (import), contention/W1-3, streaming.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins1.tgz && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
A="--textures 64 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
S="--size 8192,8192,8192,8192,4096,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json --pin-mip-tiles 1"
step fb-hw-deferred.json 100 ./b/residency stream $T $A --path hardware
step fb-hw-direct.json 100 ./b/residency stream $T $A --path hardware --feedback-direct
step fb-sw-deferred.json 100 ./b/residency stream $T $A --path software
step fb-sw-direct.json 100 ./b/residency stream $T $A --path software --feedback-direct
step s64-worker.json 100 ./b/residency stream $T --textures 64 $S --bind-worker
step s4096-worker.json 150 ./b/residency stream $T --textures 4096 $S --bind-worker
step s4096.json 150 ./b/residency stream $T --textures 4096 $S
step sw4096-8k.json 200 ./b/residency stream $T --textures 4096 --size 8192 --budget-mib 3000 --references 8 --path software --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
cat r/log.txt; grep -h "test result" r/test-*.txt
