#!/usr/bin/env bash
# Session 14, run 3 (main with the feedback pass and the bind worker as residency stream's
# defaults): the session's misuse tests on NVIDIA, 4K/64 both paths at the defaults, the software
# path at 1080p, 64 and 4096 textures (hardware, the driver's ceiling 0.92 TB) and 4096 at 1.47 TB
# (software), all at the defaults.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins3.tgz && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for t in misuse_session13 upload; do
  step test-$t.txt 90 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/t-$t --test-threads 1 --skip shaders_are_up_to_date
done
for k in 0 1 2 3 4 5 6 7; do [ -f t$k.rvt ] || ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
A="--textures 64 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
S="--size 8192,8192,8192,8192,4096,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json --pin-mip-tiles 1"
step fb-hw.json 100 ./b/residency stream $T $A --path hardware
step fb-sw.json 100 ./b/residency stream $T $A --path software
step sw-1080p.json 100 ./b/residency stream $T --textures 64 --width 1920 --height 1080 --frames-in-flight 2 --frames 300 --json --path software
step s64.json 100 ./b/residency stream $T --textures 64 $S --path hardware
step s4096.json 150 ./b/residency stream $T --textures 4096 $S --path hardware
step sw4096-8k.json 150 ./b/residency stream $T --textures 4096 --size 8192 --budget-mib 3000 --references 8 --path software --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
cat r/log.txt; grep -h "test result" r/test-*.txt
