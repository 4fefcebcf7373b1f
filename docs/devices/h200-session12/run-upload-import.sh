#!/usr/bin/env bash
# Issue #31, uploads: zero copy (VK_EXT_external_memory_host, `Uploader::upload_buffer`) and
# streaming stores against the staged path, 256 MiB and 1 GiB; import pieces and threads; the
# staged/imported sweep for the import threshold; one run under sync validation.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins-upload.tgz && mkdir -p r
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
step upload-256-import.json 90 ./b/residency-bench upload --json --mib 256 --threads 16
step upload-1g-import.json 150 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 16
step upload-256-import-c64-t1.json 90 ./b/residency-bench upload --json --mib 256 --threads 16 --import-chunk-mib 64 --import-threads 1
step upload-256-import-c4-t8.json 90 ./b/residency-bench upload --json --mib 256 --threads 16 --import-chunk-mib 4 --import-threads 8
step upload-256-import-c8-t16.json 90 ./b/residency-bench upload --json --mib 256 --threads 16 --import-chunk-mib 8 --import-threads 16
step upload-1g-import-c32-t8.json 150 ./b/residency-bench upload --json --mib 1024 --ring-mib 128 --threads 16 --import-chunk-mib 32 --import-threads 8
step upload-sweep.json 240 ./b/residency-bench upload --json --mib 256 --threads 16 --reps 3 --sweep
RESIDENCY_VALIDATION=sync step upload-256-import-sync.json 120 ./b/residency-bench upload --json --mib 256 --threads 16 --reps 3
RESIDENCY_REQUIRE_GPU=1 RESIDENCY_VALIDATION=sync step test-upload.txt 120 ./b/upload-tests
