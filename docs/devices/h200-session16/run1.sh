#!/usr/bin/env bash
# Session 16, run 1: the tapered tail of a streamed write (chunk_starts: the last 16 MiB in 8, 4,
# 2, 1 and 1 MiB) against the same tree without it (bench-old, HEAD~1 of d8a80a9), interleaved
# process by process after an untimed warm-up: 256 MiB through a 64 MiB ring and 1 GiB through
# 128 MiB, 16 threads, the uploader's defaults otherwise, six processes of each binary and size.
set -u
source docs/devices/h200-prelude.sh bins1.tgz
A="upload --json --no-import --threads 16 --reps 7"
step warm-up.json 60 ./b/bench-new upload --json --no-import --threads 16 --mib 1024 --ring-mib 128 --reps 2
for k in 1 2 3 4 5 6; do
  step u256-old-$k.json 60 ./b/bench-old $A --mib 256
  step u256-new-$k.json 60 ./b/bench-new $A --mib 256
  step u1g-new-$k.json 90 ./b/bench-new $A --mib 1024 --ring-mib 128
  step u1g-old-$k.json 90 ./b/bench-old $A --mib 1024 --ring-mib 128
done
cat r/log.txt
