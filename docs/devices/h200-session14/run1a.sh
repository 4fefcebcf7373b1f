#!/usr/bin/env bash
# Session 14, run 1a (main at the merge of deferred feedback, bind worker, lent handles; the CLI's
# bind worker on by default): feedback cost against the writing-pixel stride, both paths, 4K/64.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins1.tgz && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do [ -f t$k.rvt ] || ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
A="--textures 64 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
step fb-hw-s8.json 100 ./b/residency stream $T $A --path hardware
step fb-hw-s16.json 100 ./b/residency stream $T $A --path hardware --feedback-stride 16
step fb-sw-s8.json 100 ./b/residency stream $T $A --path software
step fb-sw-s16.json 100 ./b/residency stream $T $A --path software --feedback-stride 16
step fb-hw-s8-nocounts.json 100 ./b/residency stream $T $A --path hardware --no-pixel-counts
step fb-hw-s8-direct.json 100 ./b/residency stream $T $A --path hardware --feedback-direct
step fb-hw-s16-direct.json 100 ./b/residency stream $T $A --path hardware --feedback-direct --feedback-stride 16
cat r/log.txt
