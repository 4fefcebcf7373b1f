# Sourced by the device runs from session 15 on (`source docs/devices/h200-prelude.sh binsN.tgz`,
# from the repository root on the device machine): the Vulkan loader and layers from `.gl`, the
# NVIDIA driver's ICD, the carried binaries unpacked in `.h200/b`, an empty `.h200/r` for
# results, and `step NAME SECONDS COMMAND...`, which runs a command under `timeout` into
# `r/NAME` (stderr in `r/NAME.err`), logs its exit status and time in `r/log.txt` and packs
# `r` into `$OUT` after every step (a later hang loses nothing).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf "$1" && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
