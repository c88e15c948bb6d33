# An all-reduce between the ranks of one machine through shared memory (local_reduce.h).
from libc.stdint cimport int64_t, uint64_t


cdef extern from "local_reduce.h" nogil:
    int64_t lr_segment_bytes(int64_t world, int64_t capacity)
    int lr_all_reduce_sum(char *base, int64_t world, int64_t rank, int64_t capacity,
                          float *data, int64_t n, uint64_t call, double timeout_s)


def segment_bytes(int64_t world, int64_t capacity):
    """Bytes of a segment for `world` ranks and vectors of up to `capacity` floats."""
    return lr_segment_bytes(world, capacity)


def all_reduce_sum(unsigned char[::1] segment, int64_t world, int64_t rank, int64_t capacity,
                   float[::1] data, uint64_t call, double timeout_s):
    """`data` becomes the sum over the ranks (in rank order, the same bits on every rank);
    False when the other ranks did not all arrive within timeout_s."""
    cdef int64_t n = data.shape[0]
    cdef int status
    if n > capacity:
        raise ValueError(f"{n} floats do not fit the segment's {capacity}")
    if segment.shape[0] < lr_segment_bytes(world, capacity):
        raise ValueError("the segment is smaller than its world and capacity need")
    with nogil:
        status = lr_all_reduce_sum(<char *>&segment[0], world, rank, capacity, &data[0], n,
                                   call, timeout_s)
    return status == 0
