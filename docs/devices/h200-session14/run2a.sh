#!/usr/bin/env bash
# Session 14, run 2a (main with h-fbcost3, h-sound, h-upload2, h-alloc4 merged): where feedback's
# GPU time goes (--feedback-ablate), the candidates (--feedback-pass, --feedback-writers 32768 =
# stride 16 at 4K), and 64 / 4096 textures at the writers' stride with the bind worker (default).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins2.tgz && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do [ -f t$k.rvt ] || ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
A="--textures 64 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
S="--size 8192,8192,8192,8192,4096,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json --pin-mip-tiles 1"
step fb-hw.json 100 ./b/residency stream $T $A --path hardware
step fb-hw-ablate-resolve.json 100 ./b/residency stream $T $A --path hardware --feedback-ablate resolve
step fb-hw-ablate-store.json 100 ./b/residency stream $T $A --path hardware --feedback-ablate store
step fb-hw-ablate-branch.json 100 ./b/residency stream $T $A --path hardware --feedback-ablate branch
step fb-hw-pass.json 100 ./b/residency stream $T $A --path hardware --feedback-pass
step fb-hw-writers.json 100 ./b/residency stream $T $A --path hardware --feedback-writers 32768
step fb-sw-pass.json 100 ./b/residency stream $T $A --path software --feedback-pass
step fb-sw-writers.json 100 ./b/residency stream $T $A --path software --feedback-writers 32768
step s64-writers.json 100 ./b/residency stream $T --textures 64 $S --path hardware --feedback-writers 32768
step s4096-writers.json 150 ./b/residency stream $T --textures 4096 $S --path hardware --feedback-writers 32768
cat r/log.txt
