#!/usr/bin/env bash
# Same-run comparison repeated 3x interleaved, before (c5d9f8f) and after (restacked main).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins3.tgz && mkdir -p r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > r/gpu.txt 2>&1
(cat /etc/os-release; ldd --version | head -1; gcc --version | head -1; g++ --version | head -1; cmake --version | head -1; ninja --version; nproc; python3 --version) > r/env.txt 2>&1
save() { tar czf $OUT/r.tgz r; }
save
for k in 0 1 2 3 4 5 6 7; do ./after/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1; done
echo "vt built $SECONDS s" >> r/log.txt
run() { # $1 = version, $2 = round
  s=$(date +%s%N); timeout 80 ./$1/residency-bench alloc --json > r/alloc-$1-$2.json 2> r/alloc-$1-$2.err; echo "alloc $1 $2 rc=$? $(( ($(date +%s%N)-s)/1000000 )) ms" >> r/log.txt; save
  s=$(date +%s%N); timeout 80 ./$1/residency stream t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt --textures 64 --width 3840 --height 2160 --frames 120 --json > r/stream-$1-$2.json 2> r/stream-$1-$2.err; echo "stream $1 $2 rc=$? $(( ($(date +%s%N)-s)/1000000 )) ms" >> r/log.txt; save
}
run before 1; run after 1
run after 2; run before 2
run before 3; run after 3
cat r/log.txt
