#!/usr/bin/env bash
# Session 11, run 2b: 4096 textures past 1 TB virtual (#32: 2560 of 8192² and 1536 of 4096²,
# 1.05 TB of the driver's 1 TiB sparse address space; budget and references kept small, since the
# first try with the defaults ran out at vkCreateImage), and the software path at 4K (feedback share).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins2.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
step stream-1tb.json 240 ./b/residency stream $T --textures 4096 --size 8192,8192,8192,8192,8192,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
step stream-software-64.json 150 ./b/residency stream $T --textures 64 --path software --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json
step stream-software-1080p.json 150 ./b/residency stream $T --textures 64 --path software --width 1920 --height 1080 --frames-in-flight 2 --frames 300 --json
cat r/log.txt; tail -n 3 r/*.err
