#!/usr/bin/env bash
# Same-run comparison, before (c5d9f8f, session start) and after (the restack): residency-bench
# alloc and the 4K stream; each result tarred into $OUT as soon as it exists.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins3.tgz && mkdir -p r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > r/gpu.txt 2>&1
save() { tar czf $OUT/r.tgz r; }
for v in before after; do
  s=$(date +%s%N); timeout 60 ./$v/residency-bench alloc --json > r/alloc-$v.json 2> r/alloc-$v.err; echo "alloc $v rc=$? $(( ($(date +%s%N)-s)/1000000 )) ms" >> r/log.txt; save
done
for k in 0 1 2 3 4 5 6 7; do ./after/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1; done
echo "vt built" >> r/log.txt
for v in before after; do
  s=$(date +%s%N); timeout 90 ./$v/residency stream t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt --textures 64 --width 3840 --height 2160 --frames 120 --json > r/stream-$v.json 2> r/stream-$v.err; echo "stream $v rc=$? $(( ($(date +%s%N)-s)/1000000 )) ms" >> r/log.txt; save
done
cat r/log.txt
