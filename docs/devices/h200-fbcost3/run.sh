#!/usr/bin/env bash
# Issue #32, feedback ≤ 5 % of the render at 4K: one batch that localizes feedback's GPU cost
# (--feedback-ablate) and measures the candidates (--feedback-pass, --feedback-writers,
# --feedback-block, --no-pixel-counts) on both paths (15 runs). Same setup as session 13's run1b.sh
# (8 synthetic 4096² files, 64 textures, 3840 × 2160, 2 in flight, 300 frames); runs of
# ~20–30 s each. Reading: feedback_gpu_ms_mean per run (docs/streaming.md, "Localizing feedback's
# GPU cost"): test = all − branch, branch body = branch − store, resolve = all − resolve,
# write = store − (all − resolve).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
cd .h200 && tar xzf bins.tgz && mkdir -p r && rm -f r/*
save() { tar czf $OUT/r.tgz r; }
step() { local n=$1 t=$2; shift 2; local s=$(date +%s); timeout $t "$@" > r/$n 2> r/$n.err; echo "$n rc=$? $(( $(date +%s) - s )) s" >> r/log.txt; save; }
for k in 0 1 2 3 4 5 6 7; do ./b/residency vt build --synthetic $k --size 4096 -o t$k.rvt > /dev/null 2>&1 & done; wait
T="t0.rvt t1.rvt t2.rvt t3.rvt t4.rvt t5.rvt t6.rvt t7.rvt"
A="--textures 64 --width 3840 --height 2160 --frames-in-flight 2 --frames 300 --json"
for p in hw sw; do
  P=$([ $p = hw ] && echo hardware || echo software)
  step fb-$p.json 100 ./b/residency stream $T $A --path $P
  step fb-$p-ablate-resolve.json 100 ./b/residency stream $T $A --path $P --feedback-ablate resolve
  step fb-$p-ablate-store.json 100 ./b/residency stream $T $A --path $P --feedback-ablate store
  step fb-$p-ablate-branch.json 100 ./b/residency stream $T $A --path $P --feedback-ablate branch
  step fb-$p-pass.json 100 ./b/residency stream $T $A --path $P --feedback-pass
  [ $p = hw ] && step fb-$p-pass-ablate-resolve.json 100 ./b/residency stream $T $A --path $P --feedback-pass --feedback-ablate resolve
  step fb-$p-writers.json 100 ./b/residency stream $T $A --path $P --feedback-writers 32768
done
step fb-hw-block4.json 100 ./b/residency stream $T $A --path hardware --feedback-block 4
step fb-hw-nocounts.json 100 ./b/residency stream $T $A --path hardware --no-pixel-counts
cat r/log.txt
for j in r/fb-*.json; do
  python3 -c "import json,sys; r=json.load(open('$j')); print('%-34s fb %.3f / render %.3f ms = %.1f %%  p95 %d  conv %d  psnr %.1f  writers %d  req %.0f' % ('$j', r['feedback_gpu_ms_mean'], r['render_gpu_ms_mean'], 100*r['feedback_gpu_ms_mean']/r['render_gpu_ms_mean'], r['latency_frames_p95'], r['converged_frames'], r['psnr_db_mean'], r['feedback_writing_pixels'], r['feedback_requests_mean']))"
done
