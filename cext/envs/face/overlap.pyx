# cython: boundscheck=False, wraparound=False
"""A native thread that steps env kernels on request: the overlapped rollout's second thread.

`StepThread(kernels)` starts one POSIX thread that never takes the GIL. `start(k)` asks it to
step `kernels[k]` (the kernel's whole nogil step, as `kernel.step()` would) and returns at
once; `wait()` returns that step's result (-1, or the first env with an invalid action) once
it is done, with the kernel's outputs visible to the caller. One request at a time. Between
requests the thread spins for `spin_us` and then sleeps (overlap.h says how and why)."""

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport int64_t

from kernel_common cimport op_stepper


cdef extern from "overlap.h" nogil:
    enum: OP_STEP_THREAD_MAX
    ctypedef struct op_step_thread:
        pass
    op_step_thread *op_step_thread_start(op_stepper **steppers, int count, int64_t spin_ns,
                                         int *error)
    void op_step_thread_request(op_step_thread *t, int which)
    int op_step_thread_pending(op_step_thread *t)
    int64_t op_step_thread_wait(op_step_thread *t)
    void op_step_thread_stop(op_step_thread *t)


cdef class StepThread:
    cdef op_step_thread *_thread
    cdef readonly object kernels  # kept alive: the thread holds pointers into them
    cdef int _count

    def __cinit__(self, kernels, double spin_us=200.0):
        cdef op_stepper *steppers[OP_STEP_THREAD_MAX]
        cdef int error = 0, i
        self._thread = NULL
        kernels = tuple(kernels)
        if not 1 <= len(kernels) <= OP_STEP_THREAD_MAX:
            raise ValueError(f"StepThread takes 1 to {OP_STEP_THREAD_MAX} kernels, "
                             f"got {len(kernels)}")
        if spin_us < 0:
            raise ValueError(f"spin_us must be 0 or more, got {spin_us}")
        for i, kernel in enumerate(kernels):
            steppers[i] = <op_stepper *>PyCapsule_GetPointer(kernel.stepper(),
                                                              b"operant.op_stepper")
        self.kernels = kernels
        self._count = len(kernels)
        self._thread = op_step_thread_start(steppers, self._count, <int64_t>(spin_us * 1000.0),
                                            &error)
        if self._thread == NULL:
            raise OSError(error, "could not start the env stepping thread")

    cdef op_step_thread *_live(self) except NULL:
        if self._thread == NULL:
            raise RuntimeError("the StepThread is closed")
        return self._thread

    def start(self, int which):
        """Ask the thread to step kernels[which]; returns at once."""
        cdef op_step_thread *thread = self._live()
        if not 0 <= which < self._count:
            raise IndexError(f"kernel {which} of {self._count}")
        if op_step_thread_pending(thread):
            raise RuntimeError("a step is still running: wait() for it first")
        op_step_thread_request(thread, which)

    def wait(self):
        """The latest requested step's result, once it has finished (-1: every env moved;
        i >= 0: env i's action is invalid and no env of that kernel moved)."""
        cdef op_step_thread *thread = self._live()
        cdef int64_t result
        with nogil:
            result = op_step_thread_wait(thread)
        return result

    def close(self):
        """Finish any running step and end the thread. Idempotent."""
        cdef op_step_thread *thread = self._thread
        if thread != NULL:
            self._thread = NULL
            with nogil:
                op_step_thread_stop(thread)

    def __dealloc__(self):
        if self._thread != NULL:
            op_step_thread_stop(self._thread)
            self._thread = NULL
