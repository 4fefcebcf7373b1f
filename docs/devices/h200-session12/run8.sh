#!/usr/bin/env bash
# Session 12, run 8 (main after h-fbcost and h-mddeclare): feedback cost with the read-before-
# atomicOr change, host vs device-local feedback (docs/devices/h200-fbcost/run.sh), and the fixed
# multi_ray_query / multi_map tests and multi_barriers on NVIDIA.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins8.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for t in multi_ray_query multi_map multi_barriers; do
  step test-$t.txt 60 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync RESIDENCY_REQUIRE_VALIDATION=1 ./b/t-$t --test-threads 1 --nocapture
done
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
A="--textures 64 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
step fb-hw-host.json 100 ./b/residency stream $T $A --path hardware
step fb-hw-device.json 100 ./b/residency stream $T $A --path hardware --feedback-device-local
step fb-sw-host.json 100 ./b/residency stream $T $A --path software
step fb-sw-device.json 100 ./b/residency stream $T $A --path software --feedback-device-local
step fb-hw-device-idle.json 100 ./b/residency stream $T $A --path hardware --feedback-device-local --feedback-interval 2
step fb-4096-device.json 150 ./b/residency stream $T --textures 4096 --size 8192,8192,8192,8192,4096,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json --feedback-device-local --pin-mip-tiles 1
cat r/log.txt; grep -h "test result" r/test-*.txt
