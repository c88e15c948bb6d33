# cython: boundscheck=False, wraparound=False
"""The rollout's truncation bootstrap, batched: operant.trainer.collect's row gather.

A truncated episode's reward takes gamma * V(final observation). Rather than run the value
network over every row on each step that truncates some (most steps, once episodes reach
the time limit), the collector gathers the final observations of the truncated rows into one
fixed-size batch as the steps go, runs the network when the batch is full and at the end of
the rollout, and scatters the values back to their (step, row) positions. The network sees
the same rows at the same parameters; only how they are batched changes.

Buffers (the caller's, bound once):
  batch      OUT  uint8 (capacity, F)    the gathered rows, as bytes (F: one observation)
  positions  OUT  int64 (capacity,)      each gathered row's flat index step * rows + row
nogil loops of memcpy; nothing is allocated.
"""

from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy


cdef class RowGather:
    cdef uint8_t[:, ::1] _batch
    cdef int64_t[::1] _positions
    cdef readonly int64_t count, start, capacity
    cdef object _buffers

    def __init__(self, batch, positions):
        self._batch = batch
        self._positions = positions
        self.capacity = self._batch.shape[0]
        if self._positions.shape[0] != self.capacity or self.capacity < 1:
            raise ValueError(f"positions must have the batch's {self.capacity} rows (at least "
                             f"one), got {self._positions.shape[0]}")
        self._buffers = (batch, positions)
        self.count = 0
        self.start = 0

    def take(self, const uint8_t[:, ::1] flags, int64_t slot, const uint8_t[:, ::1] rows,
             int64_t base):
        """Append `rows[i]` (and base + i) for every i flagged in `flags[slot]`, from where the
        last call that filled the batch stopped. Returns True when every flagged row is taken,
        False when the batch filled first (empty it with `scatter`, then call again). One
        flag table for every step: an array's first export as a buffer allocates, once."""
        if rows.shape[0] != flags.shape[1] or rows.shape[1] != self._batch.shape[1]:
            raise ValueError(f"rows must be ({flags.shape[1]}, {self._batch.shape[1]}) bytes, "
                             f"got ({rows.shape[0]}, {rows.shape[1]})")
        if not 0 <= slot < flags.shape[0]:
            raise IndexError(f"flag slot {slot} is past the flags")
        cdef int64_t i, n = flags.shape[1], size = rows.shape[1]
        cdef int64_t count = self.count, capacity = self.capacity
        with nogil:
            i = self.start
            while i < n and count < capacity:
                if flags[slot, i]:
                    memcpy(&self._batch[count, 0], &rows[i, 0], size)
                    self._positions[count] = base + i
                    count += 1
                i += 1
            while i < n and not flags[slot, i]:
                i += 1
        self.count = count
        self.start = 0 if i >= n else i
        return i >= n

    def scatter(self, const float[::1] values, float[::1] out):
        """out[position] = the value of each gathered row (`values`: the batch's, in order);
        the batch is empty again."""
        cdef int64_t k
        if values.shape[0] < self.count:
            raise ValueError(f"values must cover the batch's {self.count} rows")
        for k in range(self.count):
            if not 0 <= self._positions[k] < out.shape[0]:
                raise IndexError(f"position {self._positions[k]} is past the output")
        with nogil:
            for k in range(self.count):
                out[self._positions[k]] = values[k]
        self.count = 0


def rollout_dones(const uint8_t[::1] terminated, const uint8_t[::1] truncated,
                  float[::1] dones):
    """dones[i] = 1.0 where terminated[i] or truncated[i], else 0.0, over a whole rollout's
    flags (bool (steps * rows,) as uint8); returns how many were truncated. One pass in C:
    once a rollout, right after the update's work has left the caches cold, one small loop
    costs less than numpy's or torch's calls."""
    cdef int64_t i, n = dones.shape[0], truncations = 0
    if terminated.shape[0] != n or truncated.shape[0] != n:
        raise ValueError(f"terminated and truncated must have the {n} flags of dones")
    with nogil:
        for i in range(n):
            dones[i] = <float>(terminated[i] | truncated[i])
            truncations += truncated[i]
    return truncations
