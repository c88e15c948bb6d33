# cython: boundscheck=False, wraparound=False
"""Frame stacking over any env's observation rows, as bytes: operant.envs.frame_stack's kernel.

Layering: operant.envs.frame_stack.FrameStackEnv (the BatchEnv face) -> FrameStackKernel
(this file: one nogil loop over rows, memmove/memcpy only) over the inner env's buffers. It
knows nothing of dtypes or shapes: a row is `frame_bytes` bytes of the inner observation
(uint8 (C, H, W) frames, float32 (D,) vectors alike), and a stack is `depth` such frames,
oldest first, newest last.

Buffers (the caller's, bound once and kept referenced):
  frame        IN   uint8 (rows, F)          the inner env's `obs`, viewed as bytes
  final_frame  IN   uint8 (rows, F)          the inner env's `final_obs`, viewed as bytes
  terminated, truncated  IN  bool (rows,)    the inner env's flags after its step
  stack        OUT  uint8 (rows, depth * F)  what the policy reads (the face's `obs`)
  final_stack  OUT  uint8 (rows, depth * F)  the stack ending in the terminal frame, for rows
                                             whose episode ended (the face's `final_obs`)

`push()` after each inner step: a running row's stack slides one frame (a memmove of
(depth - 1) * F bytes) and takes the new frame last (F bytes); a row that ended writes its
final stack (the slid frames and the terminal frame: depth * F bytes) and starts its new
episode's stack as `depth` copies of the first frame (depth * F bytes). `fill()` after a reset
makes every stack `depth` copies of its first frame.
"""

from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy, memmove


cdef class FrameStackKernel:
    cdef uint8_t[:, ::1] _frame, _final_frame, _stack, _final_stack
    cdef const uint8_t[::1] _terminated, _truncated
    cdef readonly int64_t rows, depth, frame_bytes
    cdef object _buffers  # the caller's buffers, alive as long as the kernel

    def __init__(self, frame, final_frame, terminated, truncated, stack, final_stack,
                 int64_t depth):
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self._frame = frame
        self._final_frame = final_frame
        self._stack = stack
        self._final_stack = final_stack
        self._terminated = terminated.view("u1")
        self._truncated = truncated.view("u1")
        self.rows = self._frame.shape[0]
        self.frame_bytes = self._frame.shape[1]
        self.depth = depth
        for name, buffer, width in (("final_frame", self._final_frame, self.frame_bytes),
                                    ("stack", self._stack, depth * self.frame_bytes),
                                    ("final_stack", self._final_stack,
                                     depth * self.frame_bytes)):
            if buffer.shape[0] != self.rows or buffer.shape[1] != width:
                raise ValueError(f"{name} must be ({self.rows}, {width}) bytes, got "
                                 f"({buffer.shape[0]}, {buffer.shape[1]})")
        if self._terminated.shape[0] != self.rows or self._truncated.shape[0] != self.rows:
            raise ValueError(f"terminated and truncated must have {self.rows} rows")
        self._buffers = (frame, final_frame, terminated, truncated, stack, final_stack)

    def fill(self):
        """Every stack becomes `depth` copies of its row's current frame."""
        cdef int64_t row, slot, size = self.frame_bytes
        with nogil:
            for row in range(self.rows):
                for slot in range(self.depth):
                    memcpy(&self._stack[row, slot * size], &self._frame[row, 0], size)

    def push(self):
        """Slide every stack by the frame the inner env just wrote (see the module's
        docstring for ended episodes)."""
        cdef int64_t row, slot, size = self.frame_bytes, kept = (self.depth - 1) * size
        with nogil:
            for row in range(self.rows):
                if self._terminated[row] or self._truncated[row]:
                    if kept:
                        memcpy(&self._final_stack[row, 0], &self._stack[row, size], kept)
                    memcpy(&self._final_stack[row, kept], &self._final_frame[row, 0], size)
                    for slot in range(self.depth):
                        memcpy(&self._stack[row, slot * size], &self._frame[row, 0], size)
                else:
                    if kept:
                        memmove(&self._stack[row, 0], &self._stack[row, size], kept)
                    memcpy(&self._stack[row, kept], &self._frame[row, 0], size)
