#!/usr/bin/env bash
# Session 12, run 9: contention and W3 with the unnamed default (driver names only under validation).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins9.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
step contention.json 60 ./b/residency-bench contention --json --threads 1,8,16 --only driver,vma,gpu-allocator,placed-1,placed-n,placed-1-named,placed-n-named
step alloc-w3.json 40 ./b/residency-bench alloc --only w3 --json

cat r/log.txt
