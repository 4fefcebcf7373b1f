#!/usr/bin/env bash
# Session 11, run 4: the fixed pressure, ptex and slice_bias tests on NVIDIA, the ptex mip-tail diagnostic,
# and 4096 textures at 0.92 TB virtual (the driver takes at most 0.957 TB: run 3).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins4.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
step test-pressure.txt 60 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync ./b/t-pressure --test-threads 1
step test-ptex.txt 60 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync ./b/t-ptex --test-threads 1
step test-slice_bias.txt 60 env RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync ./b/t-slice_bias --test-threads 1
step test-ptex-diagnostic.txt 60 env RESIDENCY_REQUIRE_GPU=1 ./b/t-ptex ptex_diagnostic --ignored --nocapture --test-threads 1
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
step stream-4096-0.92tb.json 300 ./b/residency stream $T --textures 4096 --size 8192,8192,8192,8192,4096,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
cat r/log.txt; grep -h "test result" r/test-*.txt; tail -n 30 r/test-ptex-diagnostic.txt; tail -n 3 r/stream*.err
# The software path after the min LOD is read once (h-swfeedback), and the hardware path at 4K.
step stream-software-4k.json 120 ./b/residency stream $T --textures 64 --path software --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
step stream-software-1080p.json 60 ./b/residency stream $T --textures 64 --path software --width 1920 --height 1080 --frames-in-flight 2 --frames 300 --json
step stream-hardware-4k.json 120 ./b/residency stream $T --textures 64 --path hardware --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
cat r/log.txt
