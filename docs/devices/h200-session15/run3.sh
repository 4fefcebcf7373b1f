#!/usr/bin/env bash
# Session 15, run 3: 16 MiB chunks by default (a quarter of the ring where less): the upload's
# main rows at 256 MiB and 1 GiB with rings of 32 and 64 MiB (and 128 at 1 GiB), 16 threads (the
# default) and 8, 5 repetitions each.
set -u
source docs/devices/h200-prelude.sh bins3.tgz
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
