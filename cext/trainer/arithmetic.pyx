# cython: language_level=3
"""Rate loops for the arithmetic bound (operant.trainer.bench.arithmetic): each function runs
one of arithmetic.h's tight float32 loops `repeats` times without the GIL, so that one Python
call's overhead is spread over enough arithmetic to vanish. Buffers are the caller's; nothing is
allocated. Layering: operant.trainer.bench.arithmetic -> this module -> arithmetic.h.
"""

cimport cython
from libc.stdint cimport int64_t

cdef extern from "arithmetic.h" nogil:
    void op_gemm_nn(int64_t m, int64_t k, int64_t n, const float *A, const float *B, float *C)
    void op_gemm_nt(int64_t m, int64_t k, int64_t n, const float *A, const float *Bt, float *C)
    void op_pointwise(int64_t count, const float *x, float *y, float scale)
    void op_clip_adam(int64_t count, float *param, float *grad, float *exp_avg,
                      float *exp_avg_sq, float max_norm, float lr, float beta1, float beta2,
                      float eps, float bc1, float bc2_sqrt)
    int OP_ADAM_FLOPS

ADAM_FLOPS = OP_ADAM_FLOPS
POINTWISE_FLOPS = 3


@cython.boundscheck(False)
@cython.wraparound(False)
def gemm_nn(const float[:, ::1] a, const float[:, ::1] b, float[:, ::1] c, int64_t repeats):
    """c = a @ b (IN a (m, k), b (k, n); OUT c (m, n)), `repeats` times."""
    cdef int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1], r
    if b.shape[0] != k or c.shape[0] != m or c.shape[1] != n:
        raise ValueError("gemm_nn needs a (m, k), b (k, n), c (m, n)")
    with nogil:
        for r in range(repeats):
            op_gemm_nn(m, k, n, &a[0, 0], &b[0, 0], &c[0, 0])


@cython.boundscheck(False)
@cython.wraparound(False)
def gemm_nt(const float[:, ::1] a, const float[:, ::1] bt, float[:, ::1] c, int64_t repeats):
    """c = a @ bt.T (IN a (m, k), bt (n, k); OUT c (m, n)), `repeats` times."""
    cdef int64_t m = a.shape[0], k = a.shape[1], n = bt.shape[0], r
    if bt.shape[1] != k or c.shape[0] != m or c.shape[1] != n:
        raise ValueError("gemm_nt needs a (m, k), bt (n, k), c (m, n)")
    with nogil:
        for r in range(repeats):
            op_gemm_nt(m, k, n, &a[0, 0], &bt[0, 0], &c[0, 0])


@cython.boundscheck(False)
@cython.wraparound(False)
def pointwise(const float[::1] x, float[::1] y, float scale, int64_t repeats):
    """y = max(x * scale + y, 0) (IN x; IN/OUT y, same length), `repeats` times."""
    cdef int64_t r
    if x.shape[0] != y.shape[0]:
        raise ValueError("pointwise needs x and y of one length")
    with nogil:
        for r in range(repeats):
            op_pointwise(x.shape[0], &x[0], &y[0], scale)


@cython.boundscheck(False)
@cython.wraparound(False)
def clip_adam(float[::1] param, float[::1] grad, float[::1] exp_avg, float[::1] exp_avg_sq,
              int64_t repeats):
    """Clip `grad` to norm 0.5 and take an Adam step on `param` with FlatAdam's defaults and the
    bias corrections of its first step (lr 1e-3, betas 0.9, 0.999, eps 1e-8); IN/OUT all four,
    one length; `repeats` times (each repeat steps again from where the last left off)."""
    cdef int64_t r, count = param.shape[0]
    if grad.shape[0] != count or exp_avg.shape[0] != count or exp_avg_sq.shape[0] != count:
        raise ValueError("clip_adam needs four arrays of one length")
    with nogil:
        for r in range(repeats):
            op_clip_adam(count, &param[0], &grad[0], &exp_avg[0], &exp_avg_sq[0], 0.5, 1e-3,
                         0.9, 0.999, 1e-8, 0.1, 0.031622776601683794)
