#!/usr/bin/env bash
# Session 12, run 5: 4096 textures at 0.918 TB with the coarse mips pinned (--pin-mip-tiles 1, 4),
# and 64 textures of the same size list (the 64 vs 4096 streamer-CPU comparison).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins5.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
S="--size 8192,8192,8192,8192,4096,4096,4096,4096 --budget-mib 8192 --references 8 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
step stream-4096-pin1.json 200 ./b/residency stream $T --textures 4096 $S --pin-mip-tiles 1
step stream-4096-pin4.json 200 ./b/residency stream $T --textures 4096 $S --pin-mip-tiles 4
step stream-64-samesize.json 120 ./b/residency stream $T --textures 64 $S
step stream-64-samesize-pin1.json 120 ./b/residency stream $T --textures 64 $S --pin-mip-tiles 1
cat r/log.txt; tail -n 3 r/*.err
