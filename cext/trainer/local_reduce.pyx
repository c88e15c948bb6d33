# An all-reduce between the ranks of one machine through shared memory (local_reduce.h).
from libc.stdint cimport int64_t, uint64_t


cdef extern from "local_reduce.h" nogil:
    int64_t lr_segment_bytes(int64_t world, int64_t slot_bytes)
    int lr_all_reduce_sum_f32(char *base, int64_t world, int64_t rank, int64_t slot_bytes,
                              float *data, int64_t n, uint64_t call, double timeout_s,
                              float divisor, int fd)
    int lr_all_reduce_sum_f64(char *base, int64_t world, int64_t rank, int64_t slot_bytes,
                              double *data, int64_t n, uint64_t call, double timeout_s,
                              double divisor, int fd)
    int lr_all_gather(char *base, int64_t world, int64_t rank, int64_t slot_bytes,
                      const void *data, int64_t bytes, char *out, uint64_t call,
                      double timeout_s, int fd)


def segment_bytes(int64_t world, int64_t slot_bytes):
    """Bytes of a segment for `world` ranks and vectors of up to `slot_bytes` bytes."""
    return lr_segment_bytes(world, slot_bytes)


cdef char *_base(unsigned char[::1] segment, int64_t world, int64_t slot_bytes,
                 int64_t bytes) except NULL:
    if bytes > slot_bytes:
        raise ValueError(f"{bytes} bytes do not fit the segment's slots of {slot_bytes}")
    if segment.shape[0] < lr_segment_bytes(world, slot_bytes):
        raise ValueError("the segment is smaller than its world and slots need")
    return <char *>&segment[0]


ctypedef fused real:
    float
    double


def all_reduce_sum(unsigned char[::1] segment, int64_t world, int64_t rank,
                   int64_t slot_bytes, real[::1] data, uint64_t call, double timeout_s,
                   bint mean=False, int fd=-1):
    """`data` (float32 or float64) becomes the sum over the ranks (in rank order, the same
    bits on every rank), divided by `world` with `mean`. Returns 0, -1 when the other ranks
    did not all arrive within timeout_s, or -2 - r when rank r's process ended (seen through
    the lock it holds on byte r of `fd`'s file; fd -1: not looked at)."""
    cdef int64_t n = data.shape[0]
    cdef char *base = _base(segment, world, slot_bytes, n * sizeof(real))
    cdef real divisor = world if mean else 1
    cdef int status
    with nogil:
        if real is float:
            status = lr_all_reduce_sum_f32(base, world, rank, slot_bytes, &data[0], n, call,
                                           timeout_s, divisor, fd)
        else:
            status = lr_all_reduce_sum_f64(base, world, rank, slot_bytes, &data[0], n, call,
                                           timeout_s, divisor, fd)
    return status


def all_gather(unsigned char[::1] segment, int64_t world, int64_t rank, int64_t slot_bytes,
               const unsigned char[::1] data, unsigned char[::1] out, uint64_t call,
               double timeout_s, int fd=-1):
    """`out` (world x len(data) bytes) becomes every rank's `data` in rank order; the status
    as all_reduce_sum's."""
    cdef int64_t n = data.shape[0]
    cdef char *base = _base(segment, world, slot_bytes, n)
    cdef int status
    if out.shape[0] != world * n:
        raise ValueError(f"out holds {out.shape[0]} bytes, not {world} x {n}")
    if n == 0:
        return 0
    with nogil:
        status = lr_all_gather(base, world, rank, slot_bytes, &data[0], n, <char *>&out[0],
                               call, timeout_s, fd)
    return status
