// The sampling rule of `FeedbackSampling::pixel_writes`: whether pixel `p` writes feedback in
// `frame` when one pixel of every `stride × stride` block writes, every `interval` frames, the
// block's pixels taken in turn. A stride over 65535 counts as 65535 (stride² fits 32 bits, so
// the modulus below is never 0). Included by feedback.glsl and feedback_deferred.glsl (once).
#ifndef RESIDENCY_FEEDBACK_PIXEL_WRITES
#define RESIDENCY_FEEDBACK_PIXEL_WRITES
bool feedbackPixelWrites(uvec2 p, uint frame, uint stride, uint interval) {
    stride = clamp(stride, 1u, 65535u);
    interval = max(interval, 1u);
    if (frame % interval != 0u) return false;
    uint j = (frame / interval) % (stride * stride);
    return p.x % stride == j % stride && p.y % stride == j / stride;
}
#endif
