# cython: language_level=3
"""The fused PPO update and rollout forward of a small MLP actor-critic (fused_mlp.h,
fused_ppo.h), called without the GIL.

Layering: operant.trainer.loop.fused builds a `FusedMLP` from an ActorCritic (its layer table of
flat-buffer offsets) and hands over, per call, numpy views of torch's own tensors: the rollout
(IN; observations as (rows, obs_dim) float32, or uint8 for a network built with `obs_u8`),
FlatParameters' param and grad and FlatAdam's moments (IN/OUT, updated in place), and a
scratch buffer it allocated once per row count (OUT, contents meaningless between calls).
Nothing here allocates.
"""

cimport cython
from libc.stdint cimport int64_t, uint8_t
from libc.math cimport expf
from libc.string cimport memcpy, memset


cdef extern from "fused_ppo.h":
    ctypedef struct mlp_layer:
        pass

    ctypedef struct mlp_spec:
        const mlp_layer *layers
        int64_t towers, depth, obs_dim, num_actions
        int relu
        int continuous
        int64_t log_std
        int obs_u8
        float obs_scale
        float clip_coef, vf_coef, ent_coef
        int norm_adv, clip_vloss

    ctypedef struct mlp_batch:
        const float *obs
        const uint8_t *obs_u8
        const int64_t *actions
        const float *cactions
        const float *logprobs
        const float *advantages
        const float *returns
        const float *values

    ctypedef struct mlp_scratch:
        int64_t rows
        int64_t lanes
        int64_t total
        float *x
        float *logp
        float *prob
        int64_t *xoff

    ctypedef struct mlp_adam:
        double lr, beta1, beta2, eps, max_grad_norm

    int64_t mlp_scratch_floats(const mlp_spec *s, int64_t rows) nogil
    mlp_scratch mlp_carve(const mlp_spec *s, float *buffer, int64_t rows) nogil
    mlp_scratch mlp_block(const mlp_spec *s, const mlp_scratch *w, int64_t start) nogil
    void mlp_pack_row(const mlp_spec *s, const mlp_scratch *w, int64_t i,
                      const uint8_t *row) nogil
    ctypedef struct mlp_pool:
        int64_t threads

    int mlp_pool_start(mlp_pool *pool, int64_t threads) nogil
    void mlp_pool_stop(mlp_pool *pool) nogil
    int64_t mlp_worker_floats(const mlp_spec *s, int64_t rows, int64_t n_params) nogil
    void mlp_gradient(const mlp_spec *s, const mlp_scratch *w, const mlp_batch *b,
                      const int64_t *order, const float *moments, const float *param,
                      float *grad, int64_t n_params, float *stats, mlp_pool *pool,
                      float *spare) nogil
    void mlp_act(const mlp_spec *s, const mlp_scratch *w, const float *param,
                 const float *uniforms, int64_t *actions, float *logprobs, float *values,
                 mlp_pool *pool, float *spare, int64_t n_params) nogil
    void mlp_clip_adam(int64_t n, float *param, float *grad, float *m, float *v,
                       const mlp_adam *adam, int64_t step) nogil
    void mlp_prepare(const mlp_spec *s, const mlp_scratch *w, const float *param) nogil
    void mlp_forward(const mlp_spec *s, const mlp_scratch *w, const float *param,
                     int64_t towers) nogil
    void mlp_forward_tower(const mlp_spec *s, const mlp_scratch *w, const float *param,
                           int64_t t) nogil
    const float *mlp_logits(const mlp_spec *s, const mlp_scratch *w, int64_t i) nogil
    float MLP_HALF_LOG_2PI
    float mlp_value(const mlp_spec *s, const mlp_scratch *w, int64_t i) nogil
    void mlp_softmax(const mlp_spec *s, const mlp_scratch *w) nogil


cdef class FusedMLP:
    """One network's layout and loss options; the buffers come with each call."""

    cdef mlp_spec spec
    cdef const int64_t[:, ::1] layers
    cdef mlp_pool pool
    cdef bint pooled
    cdef int64_t n_params

    def __init__(self, const int64_t[:, ::1] layers, int64_t towers, int64_t obs_dim,
                 int64_t num_actions, bint relu, double clip_coef, double vf_coef,
                 double ent_coef, bint norm_adv, bint clip_vloss, bint obs_u8=False,
                 double obs_scale=1.0, int64_t threads=1, int64_t n_params=0,
                 int64_t log_std=-1):
        """`obs_u8`: the observations are byte rows (frames, tokens: uint8, flattened), which
        the first layer reads sparse, their values times `obs_scale`; else float32 rows.
        `threads` > 1: each minibatch's gradient is shared among that many threads (the
        caller's and workers started here), for flat parameters of `n_params` floats.
        `log_std` >= 0: a Gaussian head over `num_actions` dimensions whose log standard
        deviations start there in the flat parameters; else a categorical one."""
        if layers.shape[1] != 5 or layers.shape[0] % towers:
            raise ValueError("layers must be (towers x depth, 5) int64 rows")
        if not 1 <= threads <= 16 or (threads > 1 and n_params < 1):
            raise ValueError("threads must be 1 to 16, and more than 1 needs n_params")
        self.layers = layers
        self.spec.layers = <const mlp_layer *> &layers[0, 0]
        self.spec.towers = towers
        self.spec.depth = layers.shape[0] // towers
        self.spec.obs_dim = obs_dim
        self.spec.num_actions = num_actions
        self.spec.relu = relu
        self.spec.continuous = log_std >= 0
        self.spec.log_std = log_std
        self.spec.obs_u8 = obs_u8
        self.spec.obs_scale = obs_scale
        self.spec.clip_coef = clip_coef
        self.spec.vf_coef = vf_coef
        self.spec.ent_coef = ent_coef
        self.spec.norm_adv = norm_adv
        self.spec.clip_vloss = clip_vloss
        self.n_params = n_params
        if threads > 1 and not self.pooled:
            if mlp_pool_start(&self.pool, threads):
                mlp_pool_stop(&self.pool)
                raise OSError("the update's worker threads could not be started")
            self.pooled = True

    def __dealloc__(self):
        if self.pooled:
            with nogil:
                mlp_pool_stop(&self.pool)

    @property
    def threads(self):
        """The threads each minibatch's gradient runs on (1: the caller's alone)."""
        return self.pool.threads if self.pooled else 1

    def scratch_floats(self, int64_t rows):
        """The scratch length (float32 elements) a call on `rows` rows needs."""
        return mlp_scratch_floats(&self.spec, rows) + (self.threads - 1) * mlp_worker_floats(
            &self.spec, rows, self.n_params)

    cdef mlp_pool *_pool(self, int64_t n) except? NULL:
        """The pool for a call on flat parameters of n floats (None without workers)."""
        if not self.pooled:
            return NULL
        if n != self.n_params:
            raise ValueError(f"the parameters hold {n} floats, the workers' gradients {self.n_params}")
        return &self.pool

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def epoch(self, obs, actions,
              const float[::1] logprobs, const float[::1] advantages,
              const float[::1] returns, const float[::1] values, const int64_t[::1] order,
              int64_t minibatch, float[::1] scratch, float[::1] param, float[::1] grad,
              float[::1] exp_avg, float[::1] exp_avg_sq, double lr, double beta1,
              double beta2, double eps, double max_grad_norm, int64_t step,
              bint keep_stats, float[::1] sums):
        """One epoch's minibatch steps over the batch in `order` (IN: the rollout; IN/OUT:
        param, grad, exp_avg, exp_avg_sq; OUT: scratch). `step` is Adam's step count before
        the first; the statistics' sums are added to `sums` (5,) when `keep_stats` (the
        entropy is the minibatch's before its step, from the loss's own forward). Returns the
        minibatches stepped."""
        cdef int64_t batch = order.shape[0], n = param.shape[0], start, steps = 0, k
        cdef mlp_batch b = self._batch(obs, actions, logprobs, advantages, returns, values)
        cdef mlp_scratch w
        cdef mlp_adam adam
        cdef float stats[5]
        cdef mlp_pool *pool
        cdef float *spare
        if batch != obs.shape[0]:
            raise ValueError("the order must name every row of the rollout once")
        self._check(batch, minibatch, scratch, n, grad, exp_avg, exp_avg_sq, obs)
        self._check_indices(order, batch, actions, batch)
        adam.lr, adam.beta1, adam.beta2, adam.eps = lr, beta1, beta2, eps
        adam.max_grad_norm = max_grad_norm
        w = mlp_carve(&self.spec, &scratch[0], minibatch)
        pool = self._pool(n)
        spare = &scratch[0] + mlp_scratch_floats(&self.spec, minibatch)
        with nogil:
            start = 0
            while start < batch:
                for k in range(5):
                    stats[k] = 0
                mlp_gradient(&self.spec, &w, &b, &order[start], NULL, &param[0], &grad[0], n,
                             stats, pool, spare)
                steps += 1
                mlp_clip_adam(n, &param[0], &grad[0], &exp_avg[0], &exp_avg_sq[0], &adam,
                              step + steps)
                if keep_stats:
                    for k in range(5):
                        sums[k] += stats[k]
                start += minibatch
        return steps

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def gradient(self, obs, actions,
                 const float[::1] logprobs, const float[::1] advantages,
                 const float[::1] returns, const float[::1] values, const int64_t[::1] order,
                 moments, float[::1] scratch, const float[::1] param, float[::1] grad,
                 float[::1] stats):
        """The loss's gradient for one minibatch, the rows `order` of the rollout, into
        `grad` (OUT, overwritten), its five mean statistics added to `stats` (OUT).
        `moments`: None (the minibatch's own advantage moments) or (mean, std)."""
        cdef int64_t rows = order.shape[0]
        cdef mlp_batch b = self._batch(obs, actions, logprobs, advantages, returns, values)
        cdef mlp_scratch w
        cdef float given[2]
        cdef float *moments_at = NULL
        cdef mlp_pool *pool = self._pool(param.shape[0])
        cdef float *spare
        if stats.shape[0] != 5 or grad.shape[0] != param.shape[0]:
            raise ValueError("stats must hold 5 floats and grad one per parameter")
        self._check(rows, rows, scratch, param.shape[0], grad, grad, grad, obs)
        self._check_indices(order, obs.shape[0], actions, rows)
        if moments is not None:
            given[0], given[1] = moments
            moments_at = given
        w = mlp_carve(&self.spec, &scratch[0], rows)
        spare = &scratch[0] + mlp_scratch_floats(&self.spec, rows)
        with nogil:
            mlp_gradient(&self.spec, &w, &b, &order[0], moments_at, &param[0], &grad[0],
                         param.shape[0], &stats[0], pool, spare)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def clip_adam(self, float[::1] param, float[::1] grad, float[::1] exp_avg,
                  float[::1] exp_avg_sq, double lr, double beta1, double beta2, double eps,
                  double max_grad_norm, int64_t step):
        """FlatParameters.clip_grad_norm_ then FlatAdam.step number `step` (IN/OUT: all
        four buffers)."""
        clip_adam(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, max_grad_norm, step)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def act(self, obs, const float[::1] uniforms, float[::1] scratch,
            const float[::1] param, int64_t[::1] actions, float[::1] logprobs,
            float[::1] values):
        """Sample one action per row (IN: obs, one uniform per row; OUT: actions, their
        log-probabilities, the values, scratch): the categorical's CDF inverted at the
        uniform, as operant.trainer.policies.sampling.sample_categorical does."""
        cdef int64_t rows = obs.shape[0], n = param.shape[0]
        cdef mlp_scratch w
        cdef mlp_pool *pool = self._pool(n)
        cdef float *spare
        if uniforms.shape[0] != rows:
            raise ValueError("uniforms must hold one per row")
        if actions.shape[0] != rows or logprobs.shape[0] != rows or values.shape[0] != rows:
            raise ValueError("actions, logprobs and values must have one entry per row")
        if scratch.shape[0] < self.scratch_floats(rows):
            raise ValueError("scratch is shorter than scratch_floats(rows)")
        w = mlp_carve(&self.spec, &scratch[0], rows)
        self._load(obs, &w, NULL)
        spare = &scratch[0] + mlp_scratch_floats(&self.spec, rows)
        with nogil:
            mlp_act(&self.spec, &w, &param[0], &uniforms[0], &actions[0], &logprobs[0],
                    &values[0], pool, spare, n)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def act_gaussian(self, obs, float[:, ::1] actions, float[::1] scratch,
                     const float[::1] param, float[::1] logprobs, float[::1] values):
        """A Gaussian head's samples (IN: obs, and in `actions` one standard normal draw per
        row and dimension; OUT: actions = mean + std * draw, their log-probabilities, the
        values, scratch), as ActorCritic.act's continuous branch computes them."""
        cdef int64_t rows = obs.shape[0], n = self.spec.num_actions, i, j, start
        cdef mlp_scratch w, block
        cdef const float *mean
        cdef float std[16]
        cdef float inv_std[16]
        cdef float offset[16]
        cdef float z, logp
        if not self.spec.continuous or n > 16:
            raise ValueError("act_gaussian is for a Gaussian head of at most 16 dimensions")
        if actions.shape[0] != rows or actions.shape[1] != n:
            raise ValueError(f"actions must be (rows, {n})")
        if logprobs.shape[0] != rows or values.shape[0] != rows:
            raise ValueError("logprobs and values must have one entry per row")
        if scratch.shape[0] < mlp_scratch_floats(&self.spec, rows):
            raise ValueError("scratch is shorter than scratch_floats(rows)")
        w = mlp_carve(&self.spec, &scratch[0], rows)
        self._load(obs, &w, NULL)
        with nogil:
            for j in range(n):  # (the torch path's exp(log_std), exp(-log_std), offset)
                std[j] = expf(param[self.spec.log_std + j])
                inv_std[j] = expf(-param[self.spec.log_std + j])
                offset[j] = param[self.spec.log_std + j] + MLP_HALF_LOG_2PI
            mlp_prepare(&self.spec, &w, &param[0])
            start = 0
            while start < rows:
                block = mlp_block(&self.spec, &w, start)
                mlp_forward(&self.spec, &block, &param[0], self.spec.towers)
                for i in range(block.rows):
                    mean = mlp_logits(&self.spec, &block, i)
                    logp = 0
                    for j in range(n):
                        actions[start + i, j] = actions[start + i, j] * std[j] + mean[j]
                        z = (actions[start + i, j] - mean[j]) * inv_std[j]
                        logp = logp + (offset[j] + 0.5 * z * z)
                    logprobs[start + i] = -logp
                    values[start + i] = mlp_value(&self.spec, &block, i)
                start += block.rows

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def value(self, obs, float[::1] scratch, const float[::1] param,
              float[::1] values, const uint8_t[::1] where=None, float[::1] add_to=None,
              float scale=0):
        """The critic's value of every row (IN: obs; OUT: values, scratch): the value tower
        alone (separate) or the whole net (shared), as ActorCritic.value computes it. With
        `where` (one flag per row), only the flagged rows are gathered and valued, the others
        get 0 (a row's value does not depend on the rows beside it: every row is summed in
        the same order wherever it falls); with `add_to` too (IN/OUT, one per row), each
        flagged row's scale * value is added there (the truncation bootstrap's reward)."""
        cdef int64_t rows = obs.shape[0], i, count = 0
        cdef mlp_scratch w
        if values.shape[0] != rows:
            raise ValueError("values must hold one per row")
        if where is not None and where.shape[0] != rows:
            raise ValueError("where must have one flag per row")
        if add_to is not None and (where is None or add_to.shape[0] != rows):
            raise ValueError("add_to goes with where, one entry per row")
        if scratch.shape[0] < mlp_scratch_floats(&self.spec, rows):
            raise ValueError("scratch is shorter than scratch_floats(rows)")
        if where is None:
            w = mlp_carve(&self.spec, &scratch[0], rows)
            self._load(obs, &w, NULL)
            with nogil:
                self._values(&w, &param[0], &values[0], NULL, rows)
            return
        with nogil:
            for i in range(rows):
                count += where[i] != 0
        if count == 0:
            memset(&values[0], 0, rows * sizeof(float))
            return
        w = mlp_carve(&self.spec, &scratch[0], count)
        self._load(obs, &w, &where[0])
        with nogil:
            self._values(&w, &param[0], &values[0], &where[0], rows)
            if add_to is not None:
                for i in range(rows):
                    if where[i]:
                        add_to[i] += scale * values[i]

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _load(self, obs, mlp_scratch *w, const uint8_t *where) except -1:
        """w's rows from `obs` (rows, obs_dim), every row or (`where`) the flagged ones in
        order: float32 rows read in place (flagged ones copied into the scratch), byte rows
        packed (mlp_pack_row). w must be carved for that many rows."""
        cdef const float[:, ::1] floats
        cdef const uint8_t[:, ::1] frames
        cdef int64_t i, count = 0, rows = obs.shape[0], dim = self.spec.obs_dim
        if obs.ndim != 2 or obs.shape[1] != dim:
            raise ValueError(f"obs must be (rows, {dim}), not {obs.shape}")
        if self.spec.obs_u8:
            frames = obs
            with nogil:
                w.xoff[0] = 0
                for i in range(rows):
                    if where == NULL or where[i]:
                        mlp_pack_row(&self.spec, w, count, &frames[i, 0])
                        count += 1
            return 0
        floats = obs
        if where == NULL:
            w.x = <float *> &floats[0, 0]  # read only: the forward never writes its input
            return 0
        with nogil:
            for i in range(rows):
                if where[i]:
                    memcpy(w.x + count * dim, &floats[i, 0], dim * sizeof(float))
                    count += 1
        return 0

    cdef void _values(self, const mlp_scratch *w, const float *param, float *values,
                      const uint8_t *where, int64_t rows) noexcept nogil:
        """The value tower over w's rows, block by block, into values[i] (or, with `where`,
        the k-th row into the k-th flagged entry, 0 into the others)."""
        cdef int64_t start = 0, i, row = 0
        cdef mlp_scratch block
        mlp_prepare(&self.spec, w, param)
        while start < w.total:
            block = mlp_block(&self.spec, w, start)
            mlp_forward_tower(&self.spec, &block, param, self.spec.towers - 1)
            for i in range(block.rows):
                if where != NULL:
                    while not where[row]:
                        values[row] = 0
                        row += 1
                values[row] = mlp_value(&self.spec, &block, i)
                row += 1
            start += block.rows
        if where != NULL:
            while row < rows:
                values[row] = 0
                row += 1

    cdef mlp_batch _batch(self, obs, actions,
                          const float[::1] logprobs, const float[::1] advantages,
                          const float[::1] returns, const float[::1] values):
        cdef Py_ssize_t rows = obs.shape[0]
        cdef const float[:, ::1] floats
        cdef const uint8_t[:, ::1] frames
        cdef const int64_t[::1] indices
        cdef const float[:, ::1] samples
        if obs.ndim != 2 or obs.shape[1] != self.spec.obs_dim:
            raise ValueError(f"obs has {obs.shape[1:]} columns, the network reads {self.spec.obs_dim}")
        if self.spec.continuous and (actions.ndim != 2 or actions.shape[1] != self.spec.num_actions):
            raise ValueError(f"actions must be (rows, {self.spec.num_actions}) float32 samples")
        if not (actions.shape[0] == logprobs.shape[0] == advantages.shape[0] == rows
                and returns.shape[0] == values.shape[0] == rows):
            raise ValueError("every rollout tensor must have one entry per observation")
        cdef mlp_batch b
        b.obs, b.obs_u8 = NULL, NULL
        if self.spec.obs_u8:  # (the caller holds obs: the pointers outlive these views)
            frames = obs
            b.obs_u8 = &frames[0, 0]
        else:
            floats = obs
            b.obs = &floats[0, 0]
        b.actions, b.cactions = NULL, NULL
        if self.spec.continuous:
            samples = actions
            b.cactions = &samples[0, 0]
        else:
            indices = actions
            b.actions = &indices[0]
        b.logprobs = &logprobs[0]
        b.advantages = &advantages[0]
        b.returns = &returns[0]
        b.values = &values[0]
        return b

    cdef _check(self, int64_t batch, int64_t minibatch, const float[::1] scratch,
                int64_t n_params, const float[::1] grad, const float[::1] exp_avg,
                const float[::1] exp_avg_sq, obs):
        if minibatch < 2 or batch % minibatch or batch > obs.shape[0]:
            raise ValueError("the order must cover the batch in minibatches of 2 rows or more")
        if scratch.shape[0] < self.scratch_floats(minibatch):
            raise ValueError("scratch is shorter than scratch_floats(minibatch)")
        if grad.shape[0] != n_params or exp_avg.shape[0] != n_params or exp_avg_sq.shape[0] != n_params:
            raise ValueError("param, grad, exp_avg and exp_avg_sq must be one length")
        for w, ldw, b, n_in, n_out in self.layers:
            if w < 0 or b < 0 or w + (n_in - 1) * ldw + n_out > n_params or b + n_out > n_params:
                raise ValueError("a layer lies outside the flat parameters")

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef _check_indices(self, const int64_t[::1] order, int64_t batch, actions, int64_t rows):
        # Both index memory: one bad entry would read outside the rollout.
        cdef int64_t i, bad = 0, count = self.spec.num_actions
        cdef const int64_t[::1] indices
        if order.shape[0] < rows:
            raise ValueError("the order is shorter than the rows it should name")
        with nogil:
            for i in range(rows):
                bad |= (order[i] < 0) | (order[i] >= batch)
        if not self.spec.continuous:
            indices = actions
            with nogil:
                for i in range(batch):
                    bad |= (indices[i] < 0) | (indices[i] >= count)
        if bad:
            raise ValueError("an order entry is outside the batch or an action outside the space")


@cython.boundscheck(False)
@cython.wraparound(False)
def clip_adam(float[::1] param, float[::1] grad, float[::1] exp_avg, float[::1] exp_avg_sq,
              double lr, double beta1, double beta2, double eps, double max_grad_norm,
              int64_t step):
    """FlatParameters.clip_grad_norm_ then FlatAdam.step number `step` over any flat
    parameters (IN/OUT: all four buffers): the native update's, and the torch update's of the
    policies whose loss is native (operant.trainer.loop.ppo_loss)."""
    cdef int64_t n = param.shape[0]
    cdef mlp_adam adam
    if grad.shape[0] != n or exp_avg.shape[0] != n or exp_avg_sq.shape[0] != n:
        raise ValueError("param, grad, exp_avg and exp_avg_sq must be one length")
    adam.lr, adam.beta1, adam.beta2, adam.eps = lr, beta1, beta2, eps
    adam.max_grad_norm = max_grad_norm
    with nogil:
        mlp_clip_adam(n, &param[0], &grad[0], &exp_avg[0], &exp_avg_sq[0], &adam, step)
