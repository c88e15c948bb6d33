# cython: boundscheck=False, wraparound=False
"""The token encoder's per-token layer and masked max-pool (cext/trainer/token_encoder.h): forward
with the pool's argmax (or without it, for the rollout), and the gradients of both embedding
tables, the layer's weight and its bias, for uint8 tokens and float32 weights on the host.

Addresses, not tensors, as operant.cext.sparse_conv: the caller
(operant.trainer.policies.token_encoder) checks dtypes, shapes, contiguity and device and passes data
pointers, so a call allocates nothing. No GIL.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t


cdef extern from "token_encoder.h" nogil:
    ctypedef struct te_shape:
        int64_t batch, tokens, features, embed, hidden
    int64_t te_table_rows(const te_shape *s)
    void te_forward(const uint8_t *obs, const float *fv, const float *loc, const float *weight,
                    const float *bias, float *weight_t, float *table, uint8_t *flags,
                    float *pooled, int32_t *arg, const te_shape *s)
    void te_backward(const uint8_t *obs, const float *fv, const float *loc,
                     const float *weight, const float *pooled, const int32_t *arg,
                     const float *grad, float *grad_fv, float *grad_loc, float *grad_weight,
                     float *grad_bias, double *sums, uint8_t *flags, const te_shape *s)


cdef te_shape _shape(int64_t batch, int64_t tokens, int64_t features, int64_t embed,
                     int64_t hidden) except *:
    if (batch < 0 or tokens < 0 or tokens >= 1 << 31 or features < 1 or embed < 1
            or hidden < 1):
        raise ValueError(f"no token encoder of {features} feature ids, embedding {embed}, "
                         f"hidden {hidden} over ({batch}, {tokens}) tokens")
    return te_shape(batch=batch, tokens=tokens, features=features, embed=embed, hidden=hidden)


def table_rows(int64_t features):
    """Rows of the scratch table (and flag bytes) for `features` feature ids."""
    cdef te_shape s = _shape(0, 0, features, 1, 1)
    return te_table_rows(&s)


def forward(uintptr_t obs, uintptr_t fv, uintptr_t loc, uintptr_t weight, uintptr_t bias,
            uintptr_t weight_t, uintptr_t table, uintptr_t flags, uintptr_t pooled,
            uintptr_t arg, int64_t batch, int64_t tokens, int64_t features, int64_t embed,
            int64_t hidden):
    """pooled (B, H) and, where `arg` is not 0, the argmax slots (B, H) int32; `weight_t`
    (E, H), `table` (table_rows x H floats at least) and `flags` (table_rows bytes) are
    scratch."""
    cdef te_shape s = _shape(batch, tokens, features, embed, hidden)
    with nogil:
        te_forward(<const uint8_t *>obs, <const float *>fv, <const float *>loc,
                   <const float *>weight, <const float *>bias, <float *>weight_t,
                   <float *>table, <uint8_t *>flags, <float *>pooled, <int32_t *>arg, &s)


def backward(uintptr_t obs, uintptr_t fv, uintptr_t loc, uintptr_t weight, uintptr_t pooled,
             uintptr_t arg, uintptr_t grad, uintptr_t grad_fv, uintptr_t grad_loc,
             uintptr_t grad_weight, uintptr_t grad_bias, uintptr_t sums, uintptr_t flags,
             int64_t batch, int64_t tokens, int64_t features, int64_t embed, int64_t hidden):
    """The four gradients (overwritten) of forward's pooled output given its gradient `grad`
    (B, H); `sums` ((table_rows + 1) x H doubles: forward's `table` is allocated that large)
    and `flags` (table_rows bytes) are scratch."""
    cdef te_shape s = _shape(batch, tokens, features, embed, hidden)
    with nogil:
        te_backward(<const uint8_t *>obs, <const float *>fv, <const float *>loc,
                    <const float *>weight, <const float *>pooled, <const int32_t *>arg,
                    <const float *>grad, <float *>grad_fv, <float *>grad_loc,
                    <float *>grad_weight, <float *>grad_bias, <double *>sums,
                    <uint8_t *>flags, &s)
