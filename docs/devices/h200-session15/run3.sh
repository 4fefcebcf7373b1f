#!/usr/bin/env bash
# Session 15, run 3: 16 MiB chunks by default (a quarter of the ring where less): the upload's
# main rows at 256 MiB and 1 GiB with rings of 32 and 64 MiB (and 128 at 1 GiB), 16 threads (the
# default) and 8, 5 repetitions each.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins3.tgz && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for ring in 32 64; do
  for t in 16 8; do
    step upload-256-r$ring-t$t.json 60 ./b/residency-bench upload --json --mib 256 --ring-mib $ring --threads $t --no-import
  done
done
for ring in 32 64 128; do
  for t in 16 8; do
    step upload-1g-r$ring-t$t.json 90 ./b/residency-bench upload --json --mib 1024 --ring-mib $ring --threads $t --no-import
  done
done
cat r/log.txt
