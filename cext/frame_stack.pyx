# cython: boundscheck=False, wraparound=False
"""Frame stacking as a ring per row: operant.envs.frame_stack's kernel.

Layering: operant.envs.frame_stack.FrameStackEnv (the BatchEnv face) -> FrameStackKernel
(this file: nogil loops of memcpy only) over the ring and the inner env's buffers. It knows
nothing of dtypes or shapes: a frame is `frame_bytes` bytes of the inner observation (uint8
(C, H, W) frames, float32 (D,) vectors alike).

The ring holds each row's last `depth` frames in `depth` slots, one slot per step for every
row at once (all rows step together, so the rotation is global): slot `head` holds the newest
frame, slot head + 1 (mod depth) the oldest. A native inner env writes its observations
straight into slot `next_slot` (its kernel bound to the ring's slots, cext/kernel_slots.pxd);
any other env's observation buffer (`source`) is copied in after its step (F bytes a row).
Nothing slides: a step moves no byte of the older frames.

Buffers (the caller's, bound once and kept referenced; `bind` rebinds the flags and stacks):
  ring         IN/OUT  uint8 (depth, rows, F)   the frames, slot by slot
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

A row's `age` counts the frames of its episode the ring holds besides the newest (0 after a
reset, at most depth - 1): a stack position older than that reads the episode's first frame
instead (Gymnasium's padding with the reset frame), so a new episode copies nothing.

`push(flag_slot)` after each inner step: the head moves to the slot just written; a row that
ended writes its final stack (depth * F bytes: only ended rows, or only truncated ones for a
trainer, which reads no other) and its age restarts at 0.
`fill()` after a reset makes the slot just written the head, every age 0. `write_stacks(slot)`
writes the canonical stacks (depth * F bytes a row: the bytes a consumer that keeps stacks
copies anyway).
"""

from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy

import numpy as np


cdef class FrameStackKernel:
    cdef uint8_t[:, :, ::1] _ring
    cdef uint8_t[:, ::1] _source, _final_frame, _final_stack
    cdef const uint8_t[:, ::1] _own_terminated, _own_truncated, _terminated, _truncated
    cdef uint8_t[:, :, ::1] _own_stacks, _stacks, _own_final_stacks, _final_stacks
    cdef int64_t[::1] _age
    cdef bint _copies, _final_bound
    cdef readonly int64_t rows, depth, frame_bytes, head
    cdef readonly object age
    cdef object _buffers  # the caller's buffers, alive as long as the kernel
    cdef object _bound  # the slots bound last, alive while bound

    def __init__(self, ring, source, final_frame, final_stack, terminated, truncated, stack):
        self._ring = ring
        self.depth, self.rows, self.frame_bytes = ring.shape[0], ring.shape[1], ring.shape[2]
        if self.depth < 1:
            raise ValueError(f"the ring needs at least one slot, got {self.depth}")
        self._copies = source is not None
        self._source = source if self._copies else ring[0]
        self._final_frame = final_frame
        self._final_stack = final_stack
        self.head = 0
        self.age = np.zeros(self.rows, dtype=np.int64)
        self._age = self.age
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
        self._advance()
        self.age[:] = 0

    cdef void _advance(self) noexcept:
        self.head = (self.head + 1) % self.depth
        if self._copies:
            with nogil:
                memcpy(&self._ring[self.head, 0, 0], &self._source[0, 0],
                       self.rows * self.frame_bytes)

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
        self._advance()
        cdef int64_t row, j, back, size = self.frame_bytes, head = self.head
        cdef int64_t depth = self.depth, oldest = depth - 1
        with nogil:
            for row in range(self.rows):
                if not (terminated[flag_slot, row] | truncated[flag_slot, row]):
                    self._age[row] = min(self._age[row] + 1, oldest)
                    continue
                if every_end or truncated[flag_slot, row]:
                    # The ended episode's frames are 1 .. age + 1 steps back from the head.
                    for j in range(oldest):
                        back = min(oldest - j, self._age[row] + 1)
                        memcpy(&final_stacks[final_slot, row, j * size],
                               &self._ring[(head - back + depth) % depth, row, 0], size)
                    memcpy(&final_stacks[final_slot, row, oldest * size],
                           &self._final_frame[row, 0], size)
                self._age[row] = 0

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
        cdef int64_t head = self.head, oldest = depth - 1
        with nogil:
            for row in range(self.rows):
                for j in range(depth):
                    back = min(oldest - j, self._age[row])
                    memcpy(&stacks[slot, row, j * size],
                           &self._ring[(head - back + depth) % depth, row, 0], size)
