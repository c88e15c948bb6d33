# cython: boundscheck=False, wraparound=False
"""The CNN policy's rollout im2col for uint8 frames (operant.trainer.cnn_policy).

`patches_u8` writes, for every frame b and output position (y, x), the k x k receptive field of
every channel, converted to float32: out[b, y, x, c, i, j] = frames[b, c, y + i, x + j], the
row layout the policy's matmul reads (conv.weight's (C, kh, kw) order). Torch's strided copy
of the same 6-D view took 590 us for 64 Breakout frames (its generic iterator over six
dimensions, about 4 ns an element); this loop writes the 147,456 floats in order.

Addresses, not tensors: the caller (cnn_policy.CNNPolicy) checks dtype, shape, contiguity and
device once per call and passes data pointers, so a call allocates nothing (no buffer views
of the tensors). No GIL.
"""

from libc.stdint cimport int64_t, uint8_t, uintptr_t


cdef void _patches(const uint8_t *frames, float *out, int64_t batch, int64_t channels,
                   int64_t height, int64_t width, int64_t kernel) noexcept nogil:
    cdef int64_t b, y, x, c, i, j
    cdef int64_t out_h = height - kernel + 1, out_w = width - kernel + 1
    cdef int64_t plane = height * width
    cdef const uint8_t *frame
    cdef const uint8_t *field
    for b in range(batch):
        frame = frames + b * channels * plane
        for y in range(out_h):
            for x in range(out_w):
                for c in range(channels):
                    field = frame + c * plane + y * width + x
                    if kernel == 3:  # MinAtar's: the nine cells unrolled
                        out[0] = field[0]
                        out[1] = field[1]
                        out[2] = field[2]
                        out[3] = field[width]
                        out[4] = field[width + 1]
                        out[5] = field[width + 2]
                        out[6] = field[2 * width]
                        out[7] = field[2 * width + 1]
                        out[8] = field[2 * width + 2]
                        out += 9
                        continue
                    for i in range(kernel):
                        for j in range(kernel):
                            out[0] = field[i * width + j]
                            out += 1


def patches_u8(uintptr_t frames, uintptr_t out, int64_t batch, int64_t channels,
               int64_t height, int64_t width, int64_t kernel):
    """im2col of `batch` C-contiguous uint8 (channels, height, width) frames at `frames` into
    the C-contiguous float32 (batch, height - kernel + 1, width - kernel + 1, channels,
    kernel, kernel) array at `out`. The caller guarantees both (cnn_policy checks them)."""
    if batch < 0 or channels < 1 or kernel < 1 or height < kernel or width < kernel:
        raise ValueError(f"no {kernel}x{kernel} patches in {batch} frames of "
                         f"({channels}, {height}, {width})")
    with nogil:
        _patches(<const uint8_t *>frames, <float *>out, batch, channels, height, width, kernel)
