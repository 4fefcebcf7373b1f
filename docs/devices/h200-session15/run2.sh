#!/usr/bin/env bash
# Session 15, run 2: the upload grid widened to larger chunks and rings (4-32 MiB chunks, rings of
# 32-256 MiB, 8 and 16 threads) at 256 MiB and 1 GiB, to find whether a default reaches issue #31's
# 40 / 45 GB/s; W1/W2 a third time.
set -u
source docs/devices/h200-prelude.sh bins1.tgz
step upload-grid-256.json 180 ./b/residency-bench upload --json --mib 256 --no-import --reps 3 --grid-staging wc --grid-ring-mib 32,64,128,256 --grid-chunk-kib 4096,8192,16384,32768 --grid-threads 8,16 --grid-streaming off
step upload-grid-1g.json 200 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --no-import --reps 3 --grid-staging wc --grid-ring-mib 64,128,256 --grid-chunk-kib 8192,16384,32768 --grid-threads 8,16 --grid-streaming off,on
step alloc-w12.json 60 ./b/residency-bench alloc --only w1,w2 --json
cat r/log.txt
