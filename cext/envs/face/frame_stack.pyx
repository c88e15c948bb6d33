# cython: boundscheck=False, wraparound=False
"""Frame stacking as a ring per row: operant.envs.face.frame_stack's kernel.

Layering: operant.envs.face.frame_stack.FrameStackEnv (the BatchEnv face) -> FrameStackKernel
(this file: nogil loops of memcpy and bit packing only) over the ring and the inner env's
buffers. It knows nothing of dtypes or shapes: a frame is `frame_bytes` bytes of the inner
observation (uint8 (C, H, W) frames, float32 (D,) vectors alike).

The ring holds each row's last `depth` frames in `depth` slots, one slot per step for every
row at once (all rows step together, so the rotation is global): slot `head` holds the newest
frame, slot head + 1 (mod depth) the oldest. A native inner env writes its observations
straight into slot `next_slot` (its kernel bound to the ring's slots, cext/common/kernel_slots.pxd);
any other env's observation buffer (`source`) is copied in after its step (F bytes a row).
Nothing slides: a step moves no byte of the older frames.

Buffers (the caller's, bound once and kept referenced; `bind` rebinds the flags and stacks):
  ring         IN/OUT  uint8 (depth, rows, F)   the frames, slot by slot (packed: (depth, rows,
                                                fs_packed_bytes(F)), bits)
  source       IN      uint8 (rows, F) or None  the inner env's `obs` when it cannot write
                                                the ring itself
  final_frame  IN      uint8 (rows, F)          the inner env's `final_obs`
  terminated, truncated  IN  bool (slots, rows) the inner env's flags, slot by slot (the
                                                trainer's rollout rows, or its own (1, rows))
  stacks       OUT     uint8 (slots, rows, depth * F)  canonical stacks, oldest frame first,
                                                where `write_stacks(slot)` puts them (the
                                                rollout storage's rows, or the face's `obs`)
  final_stack  OUT     uint8 (rows, depth * F)  the stack ending in the terminal frame, for
                                                rows whose episode ended (or slot by slot, as
                                                the flags: the trainer's rollout rows)

Binary frames (every byte 0 or 1, as a Box(0, 1) space of uint8 promises: MinAtar's) can be
kept packed, `packed=True`: the ring's rows are then bits, `fs_packed_bytes(F)` bytes
(cext/envs/face/frame_pack.h), `_advance` packs the source into the slot (F / 8 bytes written instead of
F), and whatever reads the ring (final stacks, canonical stacks) unpacks the same bytes back.

A row's age counts the frames of its episode the ring holds besides the newest (0 after a
reset, at most depth - 1): a stack position older than that reads the episode's first frame
instead (Gymnasium's padding with the reset frame), so a new episode copies nothing.

`push(flag_slot)` after each inner step: the head moves to the slot just written; a row that
ended writes its final stack (depth * F bytes: only ended rows, or only truncated ones for a
trainer, which reads no other) and its age restarts at 0.
`fill()` after a reset makes the slot just written the head, every age 0. `write_stacks(slot)`
writes the canonical stacks (depth * F bytes a row: the bytes a consumer that keeps stacks
copies anyway).
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy
from cpython.pycapsule cimport PyCapsule_GetPointer

cdef extern from "frame_pack.h" nogil:
    int64_t fs_packed_bytes(int64_t frame_bytes)
    void fs_pack_one(const uint8_t *src, uint8_t *dst, int64_t frame_bytes)
    void fs_unpack_one(const uint8_t *src, uint8_t *dst, int64_t frame_bytes)
    void fs_pack_rows(const uint8_t *src, int64_t src_stride, uint8_t *dst, int64_t rows,
                      int64_t frame_bytes)
    int fs_pack_init(int level)

PACK_LEVEL = fs_pack_init(2)


def pack_level(int level):
    """Choose the packing code (0 portable C, 1 at most AVX2, 2 any this CPU has: the default);
    returns the level chosen. For the tests, which compare them."""
    global PACK_LEVEL
    PACK_LEVEL = fs_pack_init(level)
    return PACK_LEVEL


def packed_bytes(int64_t frame_bytes):
    """The bytes of a packed ring row for frames of `frame_bytes` bytes."""
    return fs_packed_bytes(frame_bytes)


def pack(const uint8_t[:, ::1] frames, uint8_t[:, ::1] out):
    """Rows of binary frames into packed rows (as the ring keeps them)."""
    if out.shape[0] != frames.shape[0] or out.shape[1] != fs_packed_bytes(frames.shape[1]):
        raise ValueError("out must be (rows, packed_bytes(frame_bytes))")
    if frames.shape[0]:
        fs_pack_rows(&frames[0, 0], frames.shape[1], &out[0, 0], frames.shape[0],
                     frames.shape[1])


def unpack(const uint8_t[:, ::1] packed, uint8_t[:, ::1] out):
    """Packed rows back into frames of out.shape[1] bytes."""
    cdef int64_t row
    if out.shape[0] != packed.shape[0] or packed.shape[1] != fs_packed_bytes(out.shape[1]):
        raise ValueError("packed must be (rows, packed_bytes(frame_bytes))")
    for row in range(out.shape[0]):
        fs_unpack_one(&packed[row, 0], &out[row, 0], out.shape[1])

import numpy as np


cdef inline bint _any_set(const uint8_t *flags, int64_t rows) noexcept nogil:
    """Whether any of `rows` flag bytes is nonzero, eight at a time."""
    cdef uint64_t word, seen = 0
    cdef int64_t row = 0
    while row + 8 <= rows:
        memcpy(&word, flags + row, 8)
        seen |= word
        row += 8
    while row < rows:
        seen |= flags[row]
        row += 1
    return seen != 0


cdef class FrameStackKernel:
    cdef uint8_t[:, :, ::1] _ring
    cdef uint8_t[:, ::1] _source, _final_frame, _final_stack
    cdef const uint8_t[:, ::1] _own_terminated, _own_truncated, _terminated, _truncated
    cdef uint8_t[:, :, ::1] _own_stacks, _stacks, _own_final_stacks, _final_stacks
    cdef int64_t[::1] _start
    cdef int64_t _count
    cdef bint _copies, _final_bound, _packed
    cdef readonly int64_t rows, depth, frame_bytes, head
    cdef readonly bint inner_packs  # a packed ring's slots written by the inner kernel's steps
    cdef uint8_t **_target  # the inner kernel's packed-slot pointer (aim), or NULL
    cdef object _inner  # the inner kernel, alive while aimed at
    cdef readonly object start
    cdef object _buffers  # the caller's buffers, alive as long as the kernel
    cdef object _bound  # the slots bound last, alive while bound

    def __init__(self, ring, source, final_frame, final_stack, terminated, truncated, stack,
                 packed=False):
        self._ring = ring
        self.depth, self.rows, self.frame_bytes = ring.shape[0], ring.shape[1], ring.shape[2]
        if self.depth < 1:
            raise ValueError(f"the ring needs at least one slot, got {self.depth}")
        self._copies = source is not None
        self._packed = packed
        if packed:
            if source is None:
                raise ValueError("a packed ring is written from a source")
            self.frame_bytes = source.shape[1]
            if ring.shape[2] != fs_packed_bytes(self.frame_bytes):
                raise ValueError(f"a packed ring's rows are {fs_packed_bytes(self.frame_bytes)} "
                                 f"bytes for frames of {self.frame_bytes}, got {ring.shape[2]}")
        self._source = source if self._copies else ring[0]
        self._final_frame = final_frame
        self._final_stack = final_stack
        self.head = 0
        # A row's age is min(_count - start[row], depth - 1): `_count` counts the slots written,
        # `start` where the row's episode began, so that a step that ends no episode touches
        # no row's bookkeeping (the per-row age it replaced was a loop over every row a step).
        self._count = 0
        self.start = np.zeros(self.rows, dtype=np.int64)
        self._start = self.start
        width = self.depth * self.frame_bytes
        for name, buffer, expected in (("source", self._source, self.frame_bytes),
                                       ("final_frame", self._final_frame, self.frame_bytes),
                                       ("final_stack", self._final_stack, width)):
            if buffer.shape[0] != self.rows or buffer.shape[1] != expected:
                raise ValueError(f"{name} must be ({self.rows}, {expected}) bytes, got "
                                 f"({buffer.shape[0]}, {buffer.shape[1]})")
        self._buffers = (ring, source, final_frame, final_stack, terminated, truncated, stack)
        self._own_terminated, self._own_truncated, self._own_stacks = self._checked(
            terminated[None], truncated[None], stack[None])
        self._own_final_stacks = final_stack[None]
        self.bind()

    def _checked(self, terminated, truncated, stacks):
        flags = (np.asarray(terminated).view(np.uint8), np.asarray(truncated).view(np.uint8))
        for name, array in zip(("terminated", "truncated"), flags):
            if array.ndim != 2 or array.shape[1] != self.rows:
                raise ValueError(f"{name} must be (slots, {self.rows}), got {array.shape}")
        if stacks.ndim != 3 or stacks.shape[1:] != (self.rows, self.depth * self.frame_bytes):
            raise ValueError(f"stacks must be (slots, {self.rows}, "
                             f"{self.depth * self.frame_bytes}) bytes, got {stacks.shape}")
        return (*flags, stacks)

    def bind(self, terminated=None, truncated=None, stacks=None, final_stacks=None):
        """Slots for the flags `push(slot)` reads (bool (slots, rows)) and the final stacks it
        writes, and for the stacks `write_stacks(slot)` writes (both uint8 (slots, rows,
        depth * F)); slot -1 is always the buffers given at construction, and so is every slot
        of what is not bound here."""
        own = self._buffers[4][None], self._buffers[5][None], self._buffers[6][None]
        self._terminated, self._truncated, self._stacks = self._checked(
            *(mine if theirs is None else theirs
              for mine, theirs in zip(own, (terminated, truncated, stacks))))
        final = self._buffers[3][None] if final_stacks is None else final_stacks
        width = self.depth * self.frame_bytes
        if final.ndim != 3 or final.shape[1:] != (self.rows, width) or (
                final_stacks is not None and final.shape[0] < self._terminated.shape[0]):
            raise ValueError(f"final_stacks must be (slots, {self.rows}, {width}) bytes with "
                             f"a slot for every slot of the flags, got {final.shape}")
        self._final_stacks = final
        self._final_bound = final_stacks is not None
        self._bound = (terminated, truncated, stacks, final_stacks)

    @property
    def next_slot(self):
        """The ring slot the next step's frames go to."""
        return (self.head + 1) % self.depth

    def fill(self):
        """After a reset wrote slot `next_slot` (or `source`): that is the head, every row's
        only frame (age 0)."""
        self._advance(False)
        self.start[:] = self._count

    def aim(self, inner, target):
        """Let the inner kernel (`inner`, kept alive here) write each step's packed frames into
        the ring itself: `target` is its packed-slot pointer (MinAtarKernel.packed_target()),
        pointed at the next slot now and after every advance, with no call per step."""
        if not self._packed:
            raise ValueError("only a packed ring is written by its inner kernel")
        self._target = <uint8_t **>PyCapsule_GetPointer(target, b"operant.packed_target")
        self._inner = inner
        self.inner_packs = True
        self._aim_next()

    cdef inline void _aim_next(self) noexcept:
        if self._target != NULL:
            self._target[0] = &self._ring[(self.head + 1) % self.depth, 0, 0]

    cdef void _advance(self, bint stepped) noexcept:
        """The head moves to the slot just written, and gets its frames: a copy of the source,
        or its bits, unless the inner kernel packed them itself during the step."""
        self.head = (self.head + 1) % self.depth
        self._count += 1
        self._aim_next()
        if self._packed:
            if not (stepped and self.inner_packs):
                with nogil:
                    fs_pack_rows(&self._source[0, 0], self.frame_bytes,
                                 &self._ring[self.head, 0, 0], self.rows, self.frame_bytes)
        elif self._copies:
            with nogil:
                memcpy(&self._ring[self.head, 0, 0], &self._source[0, 0],
                       self.rows * self.frame_bytes)

    cdef inline void _frame(self, uint8_t *to, int64_t slot, int64_t row) noexcept nogil:
        """Row `row`'s frame in ring slot `slot`, as F bytes at `to`."""
        if self._packed:
            fs_unpack_one(&self._ring[slot, row, 0], to, self.frame_bytes)
        else:
            memcpy(to, &self._ring[slot, row, 0], self.frame_bytes)

    def push(self, int64_t flag_slot, bint every_end=True):
        """After a step that wrote slot `next_slot` (or `source`), with its flags in slot
        `flag_slot` of the bound flags (-1: the own ones): see the module's docstring. Final
        stacks are written for every row that ended, or with `every_end` false for the rows
        that were truncated only (all a bootstrapping trainer reads)."""
        cdef const uint8_t[:, ::1] terminated = self._own_terminated
        cdef const uint8_t[:, ::1] truncated = self._own_truncated
        cdef uint8_t[:, :, ::1] final_stacks = self._own_final_stacks
        cdef int64_t final_slot = 0
        if flag_slot >= 0:
            if flag_slot >= self._terminated.shape[0]:
                raise IndexError(f"flag slot {flag_slot} is past the bound flags")
            terminated, truncated = self._terminated, self._truncated
            if self._final_bound:
                final_stacks, final_slot = self._final_stacks, flag_slot
        else:
            flag_slot = 0
        self._advance(True)
        cdef int64_t row, j, back, size = self.frame_bytes, head = self.head
        cdef int64_t depth = self.depth, oldest = depth - 1, count = self._count
        cdef int64_t rows = self.rows
        cdef const uint8_t *ended = &terminated[flag_slot, 0]
        cdef const uint8_t *cut = &truncated[flag_slot, 0]
        cdef int64_t *start = &self._start[0]
        with nogil:
            # Final stacks first (they read the ended episode's start), and only when a row
            # needs one: a trainer's step truncates no row nearly always.
            if _any_set(cut, rows) or (every_end and _any_set(ended, rows)):
                for row in range(rows):
                    if not (cut[row] or (every_end and ended[row])):
                        continue
                    # The ended episode's frames are 1 .. age + 1 steps back from the head (its
                    # age before this step's frame: count - 1 - start, at most depth - 1).
                    for j in range(oldest):
                        back = min(oldest - j, count - start[row])
                        self._frame(&final_stacks[final_slot, row, j * size],
                                    (head - back + depth) % depth, row)
                    memcpy(&final_stacks[final_slot, row, oldest * size],
                           &self._final_frame[row, 0], size)
            # Then every row that ended starts its episode here: without a branch per row
            # (a tenth of a random Breakout batch ends each step, unpredictably: the branchy
            # loop was 4.5% of a k = 4 step, perf, 2026-11-26).
            for row in range(rows):
                start[row] += (count - start[row]) & -<int64_t>((ended[row] | cut[row]) != 0)

    def write_stacks(self, int64_t slot):
        """Every row's stack, oldest frame first, into slot `slot` of the bound stacks (-1:
        the own ones)."""
        cdef uint8_t[:, :, ::1] stacks = self._own_stacks
        if slot >= 0:
            if slot >= self._stacks.shape[0]:
                raise IndexError(f"stack slot {slot} is past the bound stacks")
            stacks = self._stacks
        else:
            slot = 0
        cdef int64_t row, j, back, size = self.frame_bytes, depth = self.depth
        cdef int64_t head = self.head, oldest = depth - 1, count = self._count
        with nogil:
            for row in range(self.rows):
                for j in range(depth):
                    back = min(oldest - j, count - self._start[row])
                    self._frame(&stacks[slot, row, j * size], (head - back + depth) % depth, row)

    def load(self, const uint8_t[:, ::1] stacks):
        """Canonical stacks (rows, depth * F), oldest frame first, into the ring (the newest in
        slot `head`); every position then reads its own slot (ages depth - 1: the stacks hold
        their padding as frames)."""
        if stacks.shape[0] != self.rows or stacks.shape[1] != self.depth * self.frame_bytes:
            raise ValueError(f"stacks must be ({self.rows}, {self.depth * self.frame_bytes}) "
                             f"bytes, got ({stacks.shape[0]}, {stacks.shape[1]})")
        cdef int64_t row, j, target, size = self.frame_bytes, depth = self.depth
        cdef int64_t oldest = (self.head + 1) % depth
        with nogil:
            for row in range(self.rows):
                for j in range(depth):
                    target = (oldest + j) % depth
                    if self._packed:
                        fs_pack_one(&stacks[row, j * size], &self._ring[target, row, 0], size)
                    else:
                        memcpy(&self._ring[target, row, 0], &stacks[row, j * size], size)
        self.start[:] = self._count - (depth - 1)
