# cython: boundscheck=False, wraparound=False
"""The CNN policy's first convolution from the frames' nonzero cells (cext/trainer/sparse_conv.h):
forward with ReLU, and the weight and bias gradients, for uint8 frames on the host.

Addresses, not tensors, as operant.cext.im2col: the caller (operant.trainer.policies.cnn's SparseConvReLU)
checks dtypes, shapes, contiguity and device and passes data pointers, so a call allocates
nothing. No GIL.
"""

from libc.stdint cimport int64_t, uint8_t, uintptr_t


cdef extern from "sparse_conv.h" nogil:
    ctypedef struct sc_shape:
        int64_t batch, channels, height, width, kernel, out_channels
    void sc_transpose(const float *src, float *dst, int64_t rows, int64_t cols)
    int64_t sc_weight_rows(const sc_shape *s)
    void sc_forward(const uint8_t *frames, const float *weight_t, const float *bias, float *out,
                    const sc_shape *s)
    void sc_backward(const uint8_t *frames, const float *out, const float *grad,
                     float *grad_weight_t, float *grad_bias, float *masked, const sc_shape *s)
    int64_t sc_count_nonzero(const uint8_t *bytes, int64_t n)


cdef sc_shape _shape(int64_t batch, int64_t channels, int64_t height, int64_t width,
                     int64_t kernel, int64_t out_channels) except *:
    if (batch < 0 or channels < 1 or out_channels < 1 or kernel < 1 or height < kernel
            or width < kernel):
        raise ValueError(f"no {kernel}x{kernel} convolution of {out_channels} channels over "
                         f"{batch} frames of ({channels}, {height}, {width})")
    cdef sc_shape s
    s.batch = batch
    s.channels = channels
    s.height = height
    s.width = width
    s.kernel = kernel
    s.out_channels = out_channels
    return s


def forward(uintptr_t frames, uintptr_t weight, uintptr_t bias, uintptr_t weight_t,
            uintptr_t out, int64_t batch, int64_t channels, int64_t height, int64_t width,
            int64_t kernel, int64_t out_channels):
    """ReLU(conv(frames)) into `out` (B, H', W', O); `weight_t` is (C, k, k, O) scratch."""
    cdef sc_shape s = _shape(batch, channels, height, width, kernel, out_channels)
    with nogil:
        sc_transpose(<const float *>weight, <float *>weight_t, out_channels, sc_weight_rows(&s))
        sc_forward(<const uint8_t *>frames, <const float *>weight_t, <const float *>bias,
                   <float *>out, &s)


def backward(uintptr_t frames, uintptr_t out, uintptr_t grad, uintptr_t grad_weight,
             uintptr_t grad_bias, uintptr_t grad_weight_t, uintptr_t masked, int64_t batch,
             int64_t channels, int64_t height, int64_t width, int64_t kernel,
             int64_t out_channels):
    """The weight (O, C, k, k) and bias (O,) gradients of forward's output, given that output
    and its gradient (both (B, H', W', O)); `grad_weight_t` (C, k, k, O) and `masked`
    (H' x W' x O floats) are scratch. Both gradients are overwritten."""
    cdef sc_shape s = _shape(batch, channels, height, width, kernel, out_channels)
    with nogil:
        sc_backward(<const uint8_t *>frames, <const float *>out, <const float *>grad,
                    <float *>grad_weight_t, <float *>grad_bias, <float *>masked, &s)
        sc_transpose(<const float *>grad_weight_t, <float *>grad_weight, sc_weight_rows(&s),
                     out_channels)


def count_nonzero(uintptr_t data, int64_t n):
    """How many of the n bytes at `data` are nonzero."""
    cdef int64_t count
    with nogil:
        count = sc_count_nonzero(<const uint8_t *>data, n)
    return count
