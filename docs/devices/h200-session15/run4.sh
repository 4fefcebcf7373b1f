#!/usr/bin/env bash
# Session 15, run 4: the uploader's new defaults (16 MiB chunks, streamed writes within the ring's
# first 32 MiB) at the settings of runs 1 and session 14 (256 MiB through a 64 MiB ring, 1 GiB
# through 128 MiB; 16 threads), each twice, and 1 GiB through 64 MiB.
set -u
source docs/devices/h200-prelude.sh bins4.tgz
U="./b/residency-bench upload --json --no-import --threads 16"
step u256-a.json 60 $U --mib 256
step u1g-a.json 90 $U --mib 1024 --ring-mib 128
step u256-b.json 60 $U --mib 256
step u1g-b.json 90 $U --mib 1024 --ring-mib 128
step u1g-r64.json 90 $U --mib 1024 --ring-mib 64
cat r/log.txt
