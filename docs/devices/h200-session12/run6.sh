#!/usr/bin/env bash
# Session 12, run 6: uploads with up to 16 copy threads (default) against 8, 256 MiB and 1 GiB.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins6.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
step upload-256-t16.json 90 ./b/residency-bench upload --json --mib 256 --threads 16
step upload-256-t8.json 90 ./b/residency-bench upload --json --mib 256 --threads 8
step upload-256-t16-b.json 90 ./b/residency-bench upload --json --mib 256 --threads 16
step upload-256-t12.json 90 ./b/residency-bench upload --json --mib 256 --threads 12
step upload-1g-t16.json 120 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 16
step upload-1g-t8.json 120 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 8
cat r/log.txt
