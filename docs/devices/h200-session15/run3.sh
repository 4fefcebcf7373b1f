#!/usr/bin/env bash
# Session 15, run 3: 16 MiB chunks by default (a quarter of the ring where less) and the stream
# window (`--window-mib`: a streamed write's chunks cycle through the ring's first N MiB): the
# upload's main rows at 256 MiB and 1 GiB, rings of 32-128 MiB with and without a 32/64 MiB
# window, 16 threads (the default), 5 repetitions each.
set -u
source docs/devices/h200-prelude.sh bins3.tgz
U="./b/residency-bench upload --json --no-import"
step u256-r32.json 60 $U --mib 256 --ring-mib 32
step u256-r64.json 60 $U --mib 256 --ring-mib 64
step u256-r64-w32.json 60 $U --mib 256 --ring-mib 64 --window-mib 32
step u256-r128-w32.json 60 $U --mib 256 --ring-mib 128 --window-mib 32
step u256-r32-t8.json 60 $U --mib 256 --ring-mib 32 --threads 8
step u1g-r32.json 90 $U --mib 1024 --ring-mib 32
step u1g-r64.json 90 $U --mib 1024 --ring-mib 64
step u1g-r128.json 90 $U --mib 1024 --ring-mib 128
step u1g-r128-w32.json 90 $U --mib 1024 --ring-mib 128 --window-mib 32
step u1g-r128-w64.json 90 $U --mib 1024 --ring-mib 128 --window-mib 64
step u1g-r64-t8.json 90 $U --mib 1024 --ring-mib 64 --threads 8
cat r/log.txt
