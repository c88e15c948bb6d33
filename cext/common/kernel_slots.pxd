# Slots: a kernel's caller-owned buffers rebound, step by step, to rows of larger arrays.
#
# A kernel is built over its own buffers (op_batch_bind). `op_slots_bind` then hands it
# arrays shaped (slots, N, ...) — the rollout storage's (num_steps, rows, ...) tensors, or a
# frame-stack ring's (depth, rows, ...) slots — and `op_slots_select` points the kernel at
# one slot of each before a step: pointer arithmetic only, nogil, nothing allocated. Slot -1
# (or an array not bound) is the kernel's own buffer, so a kernel whose slots are never
# bound behaves exactly as before. Observations select their slot apart from the step's
# other buffers (rewards, flags, actions, final observations): the rollout writes step t's
# outcome into row t and the observation it leads to into row t + 1.
#
# Every slot is checked once, when bound, as op_batch_bind checks the kernel's own buffers
# (dtype, shape, C-contiguous rows, writeable); the slot stride is the array's first stride.
from libc.stdint cimport int64_t, uint8_t, uintptr_t

from kernel_common cimport op_batch

cdef enum:
    OP_SLOT_OBS = 0
    OP_SLOT_REWARDS = 1
    OP_SLOT_TERMINATED = 2
    OP_SLOT_TRUNCATED = 3
    OP_SLOT_ACTIONS = 4
    OP_SLOT_FINAL_OBS = 5
    OP_SLOT_KINDS = 6

cdef struct op_slot_table:
    unsigned char *own[6]   # the buffers bound at construction
    unsigned char *base[6]  # slot 0 of each bound array; NULL where none is bound
    int64_t stride[6]       # bytes from one slot to the next
    int64_t count[6]        # slots of each bound array (0 where none is bound)
    int64_t step_slot       # the step slot selected last (-1: the kernel's own)


cdef inline unsigned char *op_slot_pointer(const op_slot_table *s, int k,
                                           int64_t slot) noexcept nogil:
    if slot < 0 or s.base[k] == NULL:
        return s.own[k]
    return s.base[k] + slot * s.stride[k]


cdef inline int op_slots_select(op_batch *b, op_slot_table *s, int64_t obs_slot,
                                int64_t step_slot) noexcept nogil:
    """Point `b` at slot `obs_slot` of the bound observations and `step_slot` of the other
    bound arrays (-1: the kernel's own). Returns -1, and changes nothing, where a slot is past
    its array's end; else 0."""
    cdef int k
    cdef int64_t slot
    for k in range(OP_SLOT_KINDS):
        slot = obs_slot if k == OP_SLOT_OBS else step_slot
        if s.base[k] != NULL and slot >= s.count[k]:
            return -1
    b.obs = op_slot_pointer(s, OP_SLOT_OBS, obs_slot)
    b.final_obs = op_slot_pointer(s, OP_SLOT_FINAL_OBS, step_slot)
    b.rewards = <float *>op_slot_pointer(s, OP_SLOT_REWARDS, step_slot)
    b.terminated = <uint8_t *>op_slot_pointer(s, OP_SLOT_TERMINATED, step_slot)
    b.truncated = <uint8_t *>op_slot_pointer(s, OP_SLOT_TRUNCATED, step_slot)
    if b.action_dim == 0:
        b.discrete_actions = <const int64_t *>op_slot_pointer(s, OP_SLOT_ACTIONS, step_slot)
    else:
        b.continuous_actions = <const float *>op_slot_pointer(s, OP_SLOT_ACTIONS, step_slot)
    s.step_slot = step_slot if step_slot >= 0 and s.base[OP_SLOT_ACTIONS] != NULL else -1
    return 0


cdef inline void op_slots_init(op_batch *b, op_slot_table *s) noexcept nogil:
    """Remember `b`'s buffers (just bound by op_batch_bind) as its own; nothing bound."""
    cdef int k
    s.own[OP_SLOT_OBS] = b.obs
    s.own[OP_SLOT_FINAL_OBS] = b.final_obs
    s.own[OP_SLOT_REWARDS] = <unsigned char *>b.rewards
    s.own[OP_SLOT_TERMINATED] = b.terminated
    s.own[OP_SLOT_TRUNCATED] = b.truncated
    if b.action_dim == 0:
        s.own[OP_SLOT_ACTIONS] = <unsigned char *>b.discrete_actions
    else:
        s.own[OP_SLOT_ACTIONS] = <unsigned char *>b.continuous_actions
    for k in range(OP_SLOT_KINDS):
        s.base[k] = NULL
        s.stride[k] = 0
        s.count[k] = 0
    s.step_slot = -1


cdef inline tuple op_slots_bind(op_batch *b, op_slot_table *s, obs_dtype, tuple obs_row_shape,
                                tuple arrays):
    """Bind `arrays` (obs, rewards, terminated, truncated, actions, final_obs; None keeps the
    kernel's own) as `s`'s slot arrays, after pointing `b` back at its own buffers. Each array is
    (slots, *buffer shape) with every slot what op_batch_bind accepts for that buffer; else
    ValueError naming it, and nothing is bound. Returns the arrays, which the kernel must keep
    referenced while they are bound."""
    import numpy as np

    cdef int64_t n = b.num_envs
    if b.action_dim == 0:
        action_buffer = (np.dtype(np.int64), (n,))
    else:
        action_buffer = (np.dtype(np.float32), (n, b.action_dim))
    expected = ((np.dtype(obs_dtype), (n, *obs_row_shape)), (np.dtype(np.float32), (n,)),
                (np.dtype(np.bool_), (n,)), (np.dtype(np.bool_), (n,)), action_buffer,
                (np.dtype(obs_dtype), (n, *obs_row_shape)))
    names = ("obs", "rewards", "terminated", "truncated", "actions", "final_obs")
    for name, array, (dtype, shape) in zip(names, arrays, expected):
        if array is None:
            continue
        if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim < 1 \
                or array.shape[1:] != shape or array.shape[0] < 1 \
                or not array[0].flags.c_contiguous or not array.flags.writeable \
                or array.strides[0] < 0:
            raise ValueError(f"slots for {name} must be a writeable {dtype} array of shape "
                             f"(slots, {', '.join(map(str, shape))}) whose slots are "
                             f"C-contiguous, got {getattr(array, 'dtype', type(array).__name__)}"
                             f" {getattr(array, 'shape', '')}")
    op_slots_select(b, s, -1, -1)
    cdef int k
    for k in range(OP_SLOT_KINDS):
        array = arrays[k]
        s.base[k] = NULL if array is None else <unsigned char *><uintptr_t>array.ctypes.data
        s.stride[k] = 0 if array is None else array.strides[0]
        s.count[k] = 0 if array is None else array.shape[0]
    return arrays
