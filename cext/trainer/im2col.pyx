# cython: boundscheck=False, wraparound=False
"""The CNN policy's rollout im2col for uint8 frames (operant.trainer.policies.cnn), and the
transposes of its dense layer's weight (operant.trainer.policies.cnn.transposed_for_rollout).

`patches_u8` writes, for every frame b and output position (y, x), the k x k receptive field of
every channel, converted to float32: out[b, y, x, c, i, j] = frames[b, c, y + i, x + j], the
row layout the policy's matmul reads (conv.weight's (C, kh, kw) order). Torch's strided copy
of the same 6-D view took 590 us for 64 Breakout frames (its generic iterator over six
dimensions, about 4 ns an element); this loop writes the 147,456 floats in order.

Addresses, not tensors: the caller (operant.trainer.policies.cnn.CNNPolicy) checks dtype, shape, contiguity and
device once per call and passes data pointers, so a call allocates nothing (no buffer views
of the tensors). No GIL.
"""

from libc.stdint cimport int64_t, uint8_t, uintptr_t
from libc.string cimport memcmp, memcpy


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
    kernel, kernel) array at `out`. The caller guarantees both (operant.trainer.policies.cnn checks them)."""
    if batch < 0 or channels < 1 or kernel < 1 or height < kernel or width < kernel:
        raise ValueError(f"no {kernel}x{kernel} patches in {batch} frames of "
                         f"({channels}, {height}, {width})")
    with nogil:
        _patches(<const uint8_t *>frames, <float *>out, batch, channels, height, width, kernel)


cdef void _transpose(const float *src, float *dst, int64_t rows, int64_t cols) noexcept nogil:
    # 32 x 32 tiles: a tile's source rows and destination rows both stay in L1.
    cdef int64_t r0, c0, r, c, r_end, c_end
    for r0 in range(0, rows, 32):
        r_end = min(r0 + 32, rows)
        for c0 in range(0, cols, 32):
            c_end = min(c0 + 32, cols)
            for r in range(r0, r_end):
                for c in range(c0, c_end):
                    dst[c * rows + r] = src[r * cols + c]


def refresh_transposed(uintptr_t weight, uintptr_t seen, uintptr_t transposed, int64_t rows,
                       int64_t cols):
    """Keep `transposed` (cols, rows) equal to the C-contiguous float32 (rows, cols) `weight`
    transposed, where `seen` (rows, cols) holds the weight it was last made from: compares
    the weight's bytes with `seen` and, only where they differ, copies the weight into `seen`
    and transposes it again. Returns whether it did. The comparison is exact (bytes), so a
    weight changed any way at all (an optimiser step, a checkpoint, a broadcast) is seen."""
    if rows < 0 or cols < 0:
        raise ValueError(f"no ({rows}, {cols}) weight")
    cdef size_t size = <size_t>(rows * cols) * sizeof(float)
    cdef bint changed
    with nogil:
        changed = memcmp(<const void *>weight, <const void *>seen, size) != 0
        if changed:
            memcpy(<void *>seen, <const void *>weight, size)
            _transpose(<const float *>weight, <float *>transposed, rows, cols)
    return changed

