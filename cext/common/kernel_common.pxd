# Declarations of kernel_common.h for the env kernels (cimport this, never restate it), and
# `op_batch_bind`, which kernel_common.pxi's kernel class calls to allocate the kernel-owned
# arrays, check the caller's buffers and point the C struct at both. (Kernels are separate
# extension modules; an inline function here is compiled into each of them.)
from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef extern from "kernel_common.h" nogil:
    uint64_t op_rng_next(uint64_t *state)
    uint64_t op_rng_seed(uint64_t seed, uint64_t index)
    double op_rng_uniform(uint64_t *state, double low, double high)
    ctypedef struct op_episode_stats:
        double episodes
        double return_sum
        double return_min
        double return_max
        double length_sum
        double length_min
        double length_max
        double reserved
    void op_episode_done(op_episode_stats *stats, double *ring_returns, double *ring_lengths,
                         uint64_t *ring_head, uint64_t ring_capacity,
                         double episode_return, double episode_length)
    double op_pow2(double x)
    float op_pow2f(float x)
    double op_py_mod(double a, double b)

    ctypedef struct op_batch:
        int64_t num_envs
        int64_t max_episode_steps
        int64_t obs_row_bytes
        int64_t action_dim
        int64_t num_actions
        double *state
        uint64_t *rng
        const int64_t *discrete_actions
        const float *continuous_actions
        unsigned char *obs
        unsigned char *final_obs
        float *rewards
        uint8_t *terminated
        uint8_t *truncated
        double *episode_return
        int64_t *episode_length
        op_episode_stats *stats
        double *recent_returns
        double *recent_lengths
        uint64_t *recent_head
        uint64_t recent_capacity
        int64_t index_offset

    ctypedef void (*op_reset_fn)(op_batch *b, int64_t i) noexcept nogil
    ctypedef void (*op_obs_fn)(op_batch *b, int64_t i) noexcept nogil
    ctypedef double (*op_step_fn)(op_batch *b, int64_t i, int *terminated) noexcept nogil

    float *op_obs_f32(const op_batch *b)
    void op_write_state_obs(op_batch *b, int64_t i, int64_t obs_dim)
    int64_t op_first_invalid_action(const op_batch *b)
    void op_batch_reset(op_batch *b, bint reseed, uint64_t seed, op_reset_fn reset_one,
                        op_obs_fn write_obs)
    void op_batch_write_obs(op_batch *b, op_obs_fn write_obs)
    int64_t op_batch_step(op_batch *b, op_step_fn step_one, op_obs_fn write_obs,
                          op_reset_fn reset_one)
    ctypedef void (*op_step_all_fn)(op_batch *b) noexcept nogil
    ctypedef int64_t (*op_kernel_step_fn)(op_batch *b) noexcept nogil
    ctypedef struct op_stepper:
        op_batch *batch
        op_kernel_step_fn step
    int64_t op_batch_step_all(op_batch *b, op_step_all_fn step_all, op_obs_fn write_obs,
                              op_reset_fn reset_one)


cdef inline object op_episode_stats_record():
    """A cleared statistics record as numpy sees op_episode_stats: a structured array of shape
    (1,) whose 8 float64 fields are the struct's, in order (the layout of
    operant.envs.contract.EPISODE_STATS_DTYPE); minima +inf and maxima -inf, so the first
    episode sets them."""
    import numpy as np

    names = ("episodes", "return_sum", "return_min", "return_max", "length_sum", "length_min",
             "length_max", "reserved")
    dtype = np.dtype([(name, np.float64) for name in names])
    if dtype.itemsize != sizeof(op_episode_stats):
        raise RuntimeError("op_episode_stats and its numpy layout disagree")
    record = np.zeros(1, dtype=dtype)
    for name in names:
        if name.endswith("_min"):
            record[name] = np.inf
        elif name.endswith("_max"):
            record[name] = -np.inf
    return record


cdef inline unsigned char *op_row_buffer(str name, array, int num_envs, obs_dtype,
                                         tuple row_shape) except NULL:
    """The first byte of `array`, an observation buffer: a writeable, aligned, C-contiguous
    numpy array of shape (num_envs, *row_shape) and dtype `obs_dtype`; else ValueError."""
    import numpy as np

    expected = (num_envs, *row_shape)
    if np.dtype(obs_dtype).itemsize * int(np.prod(row_shape, dtype=np.int64)) <= 0:
        raise ValueError(f"an observation row must hold at least one byte, got {obs_dtype} "
                         f"{row_shape}")
    if not isinstance(array, np.ndarray) or array.dtype != obs_dtype \
            or array.shape != expected or not array.flags.c_contiguous \
            or not array.flags.aligned or not array.flags.writeable:
        raise ValueError(f"buffer {name} must be a writeable C-contiguous {obs_dtype} array of "
                         f"shape {expected} (this kernel's observation rows are {obs_dtype} "
                         f"{row_shape}), got {getattr(array, 'dtype', type(array).__name__)} "
                         f"{getattr(array, 'shape', '')}")
    cdef unsigned char[::1] view = array.reshape(-1).view(np.uint8)
    return &view[0]


cdef inline tuple op_batch_bind(op_batch *b, int num_envs, int state_dim, obs_dtype,
                                tuple obs_row_shape, int action_dim, int num_actions,
                                int max_episode_steps, actions, obs, rewards, terminated,
                                truncated, final_obs, int64_t index_offset=0,
                                int recent_capacity=1024):
    """Allocate a kernel's own arrays, check the caller's buffers, and fill `b`.

    `obs` and `final_obs` are any C-contiguous (num_envs, *obs_row_shape) arrays of
    `obs_dtype`, what the kernel declares its observation rows to be; `b` sees them as bytes.
    `action_dim` 0 means one int64 action per env in 0 .. num_actions - 1; otherwise actions
    are float32 (num_envs, action_dim). A buffer of another dtype or shape is refused with a
    ValueError naming it. Returns the kernel-owned arrays (state, rng_state, episode_return,
    episode_length, stats (op_episode_stats_record), recent_returns, recent_lengths,
    recent_head); the kernel must keep them and the caller's buffers referenced for as long
    as `b` is used.
    """
    import numpy as np

    if num_envs <= 0:
        raise ValueError(f"num_envs must be positive, got {num_envs}")
    if max_episode_steps <= 0:
        raise ValueError(f"max_episode_steps must be positive, got {max_episode_steps}")
    obs_dtype = np.dtype(obs_dtype)
    if action_dim == 0:
        expected_actions = (np.dtype(np.int64), (num_envs,))
    else:
        expected_actions = (np.dtype(np.float32), (num_envs, action_dim))
    for name, array, (dtype, shape) in (
            ("actions", actions, expected_actions),
            ("rewards", rewards, (np.dtype(np.float32), (num_envs,))),
            ("terminated", terminated, (np.dtype(np.bool_), (num_envs,))),
            ("truncated", truncated, (np.dtype(np.bool_), (num_envs,)))):
        if not isinstance(array, np.ndarray) or array.dtype != dtype or array.shape != shape \
                or not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError(f"buffer {name} must be a writeable C-contiguous {dtype} array of "
                             f"shape {shape}, got {getattr(array, 'dtype', type(array).__name__)} "
                             f"{getattr(array, 'shape', '')}")
    b.obs = op_row_buffer("obs", obs, num_envs, obs_dtype, obs_row_shape)
    b.final_obs = op_row_buffer("final_obs", final_obs, num_envs, obs_dtype, obs_row_shape)
    state = np.zeros((state_dim, num_envs), dtype=np.float64)
    rng_state = np.zeros(num_envs, dtype=np.uint64)
    episode_return = np.zeros(num_envs, dtype=np.float64)
    episode_length = np.zeros(num_envs, dtype=np.int64)
    stats = op_episode_stats_record()
    recent_returns = np.zeros(recent_capacity, dtype=np.float64)
    recent_lengths = np.zeros(recent_capacity, dtype=np.float64)
    recent_head = np.zeros(1, dtype=np.uint64)

    cdef double[:, ::1] state_view = state
    cdef uint64_t[::1] rng_view = rng_state
    cdef double[::1] return_view = episode_return
    cdef int64_t[::1] length_view = episode_length
    cdef double[::1] stats_view = stats.view(np.float64)
    cdef double[::1] ring_returns_view = recent_returns
    cdef double[::1] ring_lengths_view = recent_lengths
    cdef uint64_t[::1] head_view = recent_head
    cdef float[::1] rewards_view = rewards
    cdef uint8_t[::1] terminated_view = terminated.view(np.uint8)
    cdef uint8_t[::1] truncated_view = truncated.view(np.uint8)
    cdef int64_t[::1] discrete_view
    cdef float[:, ::1] continuous_view

    b.num_envs = num_envs
    b.max_episode_steps = max_episode_steps
    b.obs_row_bytes = obs_dtype.itemsize * int(np.prod(obs_row_shape, dtype=np.int64))
    b.action_dim = action_dim
    b.num_actions = num_actions
    b.discrete_actions = NULL
    b.continuous_actions = NULL
    if action_dim == 0:
        discrete_view = actions
        b.discrete_actions = &discrete_view[0]
    else:
        continuous_view = actions
        b.continuous_actions = &continuous_view[0, 0]
    b.state = &state_view[0, 0]
    b.rng = &rng_view[0]
    b.rewards = &rewards_view[0]
    b.terminated = &terminated_view[0]
    b.truncated = &truncated_view[0]
    b.episode_return = &return_view[0]
    b.episode_length = &length_view[0]
    b.stats = <op_episode_stats *>&stats_view[0]
    b.recent_returns = &ring_returns_view[0]
    b.recent_lengths = &ring_lengths_view[0]
    b.recent_head = &head_view[0]
    b.recent_capacity = recent_capacity
    b.index_offset = index_offset
    return (state, rng_state, episode_return, episode_length, stats, recent_returns,
            recent_lengths, recent_head)
