#!/usr/bin/env bash
# Session 15, run 5: run 4's binary again, after an untimed warm-up upload (the first upload of a
# fresh machine ran 20 % slower in run 4): 256 MiB through a 64 MiB ring and 1 GiB through
# 128 MiB, three processes each, 16 threads, the uploader's defaults.
set -u
source docs/devices/h200-prelude.sh bins5.tgz
U="./b/residency-bench upload --json --no-import --threads 16"
step warm-up.json 60 $U --mib 1024 --ring-mib 128 --reps 2
for k in 1 2 3; do
  step u256-$k.json 60 $U --mib 256
  step u1g-$k.json 90 $U --mib 1024 --ring-mib 128
done
cat r/log.txt
