/* Pure C helpers shared by every environment kernel: a per-env RNG, the in-kernel reduction
 * of finished episodes, Gymnasium's scalar arithmetic where C would differ from it, and the
 * batch loop itself (validate actions, step, autoreset, reduce) that every kernel runs with its
 * own three env functions. No allocation, no globals, no Python: each function works on memory
 * the caller (a kernel's buffers) owns. */
#ifndef OPERANT_KERNEL_COMMON_H
#define OPERANT_KERNEL_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define OP_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define OP_ALWAYS_INLINE static inline
#endif

/* SplitMix64 (Steele, Lea, Flood 2014): one 64-bit word of state per env, passes BigCrush,
 * and hashes (seed, env index) into well-separated streams. */
static inline uint64_t op_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The stream of env `index` under `seed`: two rounds of mixing so neighbouring seeds and
 * neighbouring indices give unrelated streams. */
static inline uint64_t op_rng_seed(uint64_t seed, uint64_t index) {
    uint64_t s = seed ^ 0x6A09E667F3BCC909ULL;
    uint64_t a = op_rng_next(&s);
    uint64_t t = a + index * 0xD1B54A32D192ED03ULL;
    return op_rng_next(&t);
}

/* Uniform double in [low, high) from the top 53 bits. */
static inline double op_rng_uniform(uint64_t *state, double low, double high) {
    double unit = (double)(op_rng_next(state) >> 11) * 0x1.0p-53;
    return low + unit * (high - low);
}

/* Finished-episode statistics since the last drain, by name: the layout of
 * operant.envs.contract.EPISODE_STATS_DTYPE (8 float64 fields, 64 bytes), which numpy sees as a
 * structured record. A drain leaves minima at +inf and maxima at -inf; a record whose episodes
 * is 0 is also taken as empty whatever its minima and maxima hold (records saved by older
 * versions were cleared to zeros). */
typedef struct {
    double episodes;
    double return_sum;
    double return_min;
    double return_max;
    double length_sum;
    double length_min;
    double length_max;
    double reserved;
} op_episode_stats;

/* Record one finished episode: running sums/min/max since the last drain, and a ring of the
 * most recent episodes (head counts every episode ever, so readers see wrap-around). */
static inline void op_episode_done(op_episode_stats *stats, double *ring_returns,
                                   double *ring_lengths, uint64_t *ring_head,
                                   uint64_t ring_capacity, double episode_return,
                                   double episode_length) {
    if (stats->episodes == 0.0) {
        stats->return_min = episode_return;
        stats->return_max = episode_return;
        stats->length_min = episode_length;
        stats->length_max = episode_length;
    } else {
        if (episode_return < stats->return_min) stats->return_min = episode_return;
        if (episode_return > stats->return_max) stats->return_max = episode_return;
        if (episode_length < stats->length_min) stats->length_min = episode_length;
        if (episode_length > stats->length_max) stats->length_max = episode_length;
    }
    stats->episodes += 1.0;
    stats->return_sum += episode_return;
    stats->length_sum += episode_length;
    /* A power-of-two capacity (the default, 1024) takes a mask: a 64-bit division costs more
     * than the rest of an autoreset. */
    uint64_t slot = (ring_capacity & (ring_capacity - 1)) == 0 ? *ring_head & (ring_capacity - 1)
                                                               : *ring_head % ring_capacity;
    ring_returns[slot] = episode_return;
    ring_lengths[slot] = episode_length;
    *ring_head += 1;
}

/* NumPy and Python compute `x ** 2` on a scalar with libm's pow(), which differs from x*x in
 * the last bit for about 0.1% of inputs; the dynamics that use `** 2` must do the same to stay
 * bit-identical (Acrobot is chaotic: one ulp grows into a different trajectory). The exponent
 * is read through a volatile so the compiler cannot fold pow(x, 2) into x*x. */
static inline double op_pow2(double x) {
    volatile double two = 2.0;
    return pow(x, two);
}

static inline float op_pow2f(float x) {
    volatile float two = 2.0f;
    return powf(x, two);
}

/* sin and cos of x for |x| <= 0.3125 (CartPole's pole angles) as Taylor polynomials, 1/k!
 * rounded to double, through x^13 and x^14 (truncation error below 2^-60 on that range), the
 * cosine with its leading 1 - x^2/2 kept exact. No branch, so a loop over envs vectorises;
 * about 3 ns where libm's sincos takes 25 on the machines we benchmark, which would be most of
 * a CartPole step. Within 1 ulp of libm: they differ in the last bit for about 0.4% of sines
 * and 0.6% of cosines. Callers use libm outside the range. */
static inline void op_sincos_poly(double x, double *s, double *c) {
    double z, p, q, half_z, w;
    z = x * x;
    p = 0x1.6124613a86d09p-33;                  /*  1/13! */
    p = p * z - 0x1.ae64567f544e4p-26;          /* -1/11! */
    p = p * z + 0x1.71de3a556c734p-19;          /*  1/9!  */
    p = p * z - 0x1.a01a01a01a01ap-13;          /* -1/7!  */
    p = p * z + 0x1.1111111111111p-7;           /*  1/5!  */
    p = p * z - 0x1.5555555555555p-3;           /* -1/3!  */
    *s = x + (x * z) * p;
    q = -0x1.93974a8c07c9dp-37;                 /* -1/14! */
    q = q * z + 0x1.1eed8eff8d898p-29;          /*  1/12! */
    q = q * z - 0x1.27e4fb7789f5cp-22;          /* -1/10! */
    q = q * z + 0x1.a01a01a01a01ap-16;          /*  1/8!  */
    q = q * z - 0x1.6c16c16c16c17p-10;          /* -1/6!  */
    q = q * z + 0x1.5555555555555p-5;           /*  1/4!  */
    half_z = 0.5 * z;
    w = 1.0 - half_z;
    /* (1 - w) - half_z is the rounding error of w, exactly (Sterbenz). */
    *c = w + (((1.0 - w) - half_z) + (z * z) * q);
}
#define OP_SINCOS_POLY_RANGE 0.3125

/* `keep_a ? a : b` as bit operations: a conditional expression there can stop GCC from
 * vectorising a loop (it sinks the work feeding one side under a branch). */
static inline double op_select(int64_t keep_a, double a, double b) {
    uint64_t bits_a, bits_b, mask = (uint64_t)0 - (uint64_t)(keep_a != 0), bits;
    double out;
    memcpy(&bits_a, &a, sizeof bits_a);
    memcpy(&bits_b, &b, sizeof bits_b);
    bits = (bits_a & mask) | (bits_b & ~mask);
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* A function that loops over envs, compiled three times on x86-64 Linux with GCC: for the
 * x86-64-v4 level (AVX-512 F/BW/CD/DQ/VL: 512-bit registers, mask registers, AVX-512's byte,
 * word and float64<->int64 conversions), for x86-64-v3 (AVX2) and for the baseline, picked at
 * load time by the CPU's ISA level (so the build stays portable: no -march). AVX-512F alone is
 * not enough: without VL/BW/DQ the loops over bytes and flags fall back to AVX2 code, and the
 * same C loop built -mavx512f ran about 13% slower than -march=native in one run
 * (benchmarks/bench_kernel_vs_c.py's loop). setup_flags.py keeps these clones to 256-bit
 * vectors (-mprefer-vector-width=256), as -march=native's tuning does. No fused multiply-adds in any clone, although both
 * levels have FMA: a fused multiply-add rounds differently from Gymnasium, and
 * -ffp-contract=off (setup_flags.py) holds for every clone, so none is contracted;
 * tests/test_kernel_clones.py checks the flag and the clones' code. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    __GNUC__ >= 12
#define OP_VECTOR_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define OP_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OP_VECTOR_CLONES
#endif

/* Python's (and NumPy's) float modulo: the result takes the sign of the divisor. */
static inline double op_py_mod(double a, double b) {
    double mod = fmod(a, b);
    if (mod != 0.0) {
        if ((b < 0.0) != (mod < 0.0)) mod += b;
    } else {
        mod = copysign(0.0, b);
    }
    return mod;
}

/* Everything a kernel's batch loop touches besides the meaning of its state: pointers into the
 * numpy arrays the kernel object holds (so they outlive it), set once at construction.
 * Observations are bytes: row i starts at obs + i * obs_row_bytes, and holds whatever the
 * kernel declares (any dtype, any per-row shape: float32 (obs_dim,) for classic control, uint8
 * (C, H, W) for a frame). A kernel writes its rows through a pointer of its own type
 * (op_obs_f32 for float32 rows); the batch loop only copies whole rows (final_obs). */
typedef struct {
    int64_t num_envs;
    int64_t max_episode_steps;
    int64_t obs_row_bytes;
    int64_t action_dim;               /* 0: one int64 action per env; else float32 (N, action_dim) */
    int64_t num_actions;              /* discrete: valid actions are 0 .. num_actions - 1 */
    double *state;                    /* kernel-owned (state_dim, N): row k, env i at k * N + i */
    uint64_t *rng;                    /* kernel-owned (N,) */
    const int64_t *discrete_actions;  /* IN (N,) */
    const float *continuous_actions;  /* IN (N, action_dim) */
    unsigned char *obs;               /* OUT (N, *row_shape): N rows of obs_row_bytes bytes */
    unsigned char *final_obs;         /* OUT like obs: rows of envs that ended this step */
    float *rewards;                   /* OUT (N,) */
    uint8_t *terminated;              /* OUT (N,) */
    uint8_t *truncated;               /* OUT (N,) */
    double *episode_return;           /* kernel-owned (N,) */
    int64_t *episode_length;          /* kernel-owned (N,) */
    op_episode_stats *stats;          /* kernel-owned, one record */
    double *recent_returns;           /* kernel-owned ring */
    double *recent_lengths;           /* kernel-owned ring */
    uint64_t *recent_head;            /* kernel-owned (1,) */
    uint64_t recent_capacity;
    int64_t index_offset;             /* env i's RNG stream is (seed, index_offset + i): a kernel
                                         that steps rows lo.. of a larger batch seeds them as the
                                         whole batch's kernel would */
} op_batch;

/* A kernel's whole step as a plain function over its batch, for a native thread to call
 * (operant.cext.overlap): `step(batch)` is the kernel's step() without the GIL. */
typedef int64_t (*op_kernel_step_fn)(op_batch *b);
typedef struct {
    op_batch *batch;
    op_kernel_step_fn step;
} op_stepper;

/* The three functions that make an environment: draw env i's initial state from its stream
 * (b->rng[i]); write env i's observation row from its state; advance env i by its action and
 * return the reward, setting *terminated. */
typedef void (*op_reset_fn)(op_batch *b, int64_t i);
typedef void (*op_obs_fn)(op_batch *b, int64_t i);
typedef double (*op_step_fn)(op_batch *b, int64_t i, int *terminated);

/* The observation buffer of a kernel whose rows are float32 (obs_dim,): the classic-control
 * kernels write `op_obs_f32(b)[i * obs_dim + k]`. The buffer is a float32 numpy array
 * (op_batch_bind checks its dtype), so the cast is to the memory's own type. */
static inline float *op_obs_f32(const op_batch *b) {
    return (float *)b->obs;
}

/* The observation of envs whose observation is their state (CartPole, MountainCar): env i's
 * state column, as float32. `obs_dim` is the kernel's constant, so the loop unrolls. */
static inline void op_write_state_obs(op_batch *b, int64_t i, int64_t obs_dim) {
    int64_t k;
    float *obs = op_obs_f32(b);
    for (k = 0; k < obs_dim; k++) {
        obs[i * obs_dim + k] = (float)b->state[k * b->num_envs + i];
    }
}

/* Whether any action is invalid: one branch-free pass (the common case is that none is). */
OP_VECTOR_CLONES static int op_any_invalid_discrete(int64_t n, const int64_t *__restrict__ actions,
                                                    int64_t num_actions) {
    int64_t i;
    int invalid = 0;
    for (i = 0; i < n; i++) invalid |= (actions[i] < 0) | (actions[i] >= num_actions);
    return invalid;
}

OP_VECTOR_CLONES static int op_any_invalid_continuous(int64_t count,
                                                      const float *__restrict__ actions) {
    int64_t i;
    int invalid = 0;
    for (i = 0; i < count; i++) invalid |= !isfinite(actions[i]);
    return invalid;
}

/* Index of the first env whose action is outside the action space (discrete) or not finite
 * (continuous: out-of-range values are the env's business, as in Gymnasium), else -1. */
static inline int64_t op_first_invalid_action(const op_batch *b) {
    int64_t i, n = b->num_envs, count = n * b->action_dim;
    if (b->action_dim == 0) {
        if (!op_any_invalid_discrete(n, b->discrete_actions, b->num_actions)) return -1;
        for (i = 0; i < n; i++) {
            if (b->discrete_actions[i] < 0 || b->discrete_actions[i] >= b->num_actions) return i;
        }
    } else {
        if (!op_any_invalid_continuous(count, b->continuous_actions)) return -1;
        for (i = 0; i < count; i++) {
            if (!isfinite(b->continuous_actions[i])) return i / b->action_dim;
        }
    }
    return -1;
}

/* Start a new episode in every env; with `reseed`, env i's stream is first set from
 * (seed, index_offset + i).
 * Always inlined so the env functions, known constants at each call site, are inlined too. */
OP_ALWAYS_INLINE void op_batch_reset(op_batch *b, int reseed, uint64_t seed,
                                     op_reset_fn reset_one, op_obs_fn write_obs) {
    int64_t i;
    for (i = 0; i < b->num_envs; i++) {
        if (reseed) b->rng[i] = op_rng_seed(seed, (uint64_t)(b->index_offset + i));
        reset_one(b, i);
        write_obs(b, i);
        b->episode_return[i] = 0.0;
        b->episode_length[i] = 0;
        b->rewards[i] = 0.0f;
        b->terminated[i] = 0;
        b->truncated[i] = 0;
    }
}

OP_ALWAYS_INLINE void op_batch_write_obs(op_batch *b, op_obs_fn write_obs) {
    int64_t i;
    for (i = 0; i < b->num_envs; i++) write_obs(b, i);
}

/* Record env i's step: its reward and flags into the outputs, into its episode's return and
 * length, truncation at the time limit. Returns whether the episode ended. */
OP_ALWAYS_INLINE int op_record_step(op_batch *b, int64_t i, double reward, int terminated) {
    int truncated;
    b->rewards[i] = (float)reward;
    b->episode_return[i] += reward;
    b->episode_length[i] += 1;
    truncated = b->episode_length[i] >= b->max_episode_steps;
    b->terminated[i] = (uint8_t)(terminated != 0);
    b->truncated[i] = (uint8_t)truncated;
    return terminated || truncated;
}

/* Env i's episode ended on this step (its observation row is the terminal one): keep that in
 * final_obs, reduce the episode into the statistics, start the next one and observe it. */
OP_ALWAYS_INLINE void op_autoreset(op_batch *b, int64_t i, op_obs_fn write_obs,
                                   op_reset_fn reset_one) {
    int64_t k, row_bytes = b->obs_row_bytes;
    unsigned char *to = b->final_obs + i * row_bytes;
    const unsigned char *from = b->obs + i * row_bytes;
    /* A classic-control row is a few floats: 4-byte copies (a memcpy of a constant size is one
     * move, inlined) instead of a libc call per autoreset for a variable size, as the copy was
     * before rows became bytes. Large rows (frames) take memcpy. */
    if ((row_bytes & 3) == 0 && row_bytes <= 64) {
        for (k = 0; k < row_bytes; k += 4) memcpy(to + k, from + k, 4);
    } else {
        memcpy(to, from, (size_t)row_bytes);
    }
    op_episode_done(b->stats, b->recent_returns, b->recent_lengths, b->recent_head,
                    b->recent_capacity, b->episode_return[i], (double)b->episode_length[i]);
    b->episode_return[i] = 0.0;
    b->episode_length[i] = 0;
    reset_one(b, i);
    write_obs(b, i);
}

/* One step of every env, Gymnasium's SAME_STEP autoreset: an env that ends shows the ending's
 * reward and flags, its terminal observation in final_obs, and already the next episode's first
 * observation in obs. Returns -1, or the first env with an invalid action (then nothing moved). */
OP_ALWAYS_INLINE void op_batch_step_rows(op_batch *b, int64_t lo, int64_t hi, op_step_fn step_one,
                                         op_obs_fn write_obs, op_reset_fn reset_one) {
    int64_t i;
    for (i = lo; i < hi; i++) {
        int terminated = 0;
        double reward = step_one(b, i, &terminated);
        write_obs(b, i);
        if (op_record_step(b, i, reward, terminated)) op_autoreset(b, i, write_obs, reset_one);
    }
}

OP_ALWAYS_INLINE int64_t op_batch_step(op_batch *b, op_step_fn step_one, op_obs_fn write_obs,
                                       op_reset_fn reset_one) {
    int64_t bad = op_first_invalid_action(b);
    if (bad >= 0) return bad;
    op_batch_step_rows(b, 0, b->num_envs, step_one, write_obs, reset_one);
    return -1;
}

/* op_record_step for every env at once, as a loop that vectorises: the step's rewards and
 * terminated flags are in the outputs already. */
OP_VECTOR_CLONES static void op_record_steps(
        int64_t n, int64_t max_episode_steps, const float *__restrict__ rewards,
        const uint8_t *__restrict__ terminated, uint8_t *__restrict__ truncated,
        double *__restrict__ episode_return, int64_t *__restrict__ episode_length) {
    int64_t i;
    for (i = 0; i < n; i++) {
        episode_return[i] += (double)rewards[i];
        episode_length[i] += 1;
        truncated[i] = (uint8_t)(episode_length[i] >= max_episode_steps);
    }
}

/* The same step for envs whose dynamics vectorise (CartPole): `step_all` advances every env in
 * one loop, writing its state, observation, reward (exactly representable in float32: it is
 * read back from `rewards`) and terminated flag; the bookkeeping is op_batch_step's, run over
 * all envs at once, then the autoresets. */
typedef void (*op_step_all_fn)(op_batch *b);

OP_ALWAYS_INLINE int64_t op_batch_step_all(op_batch *b, op_step_all_fn step_all,
                                           op_obs_fn write_obs, op_reset_fn reset_one) {
    int64_t i;
    int64_t bad = op_first_invalid_action(b);
    if (bad >= 0) return bad;
    step_all(b);
    op_record_steps(b->num_envs, b->max_episode_steps, b->rewards, b->terminated, b->truncated,
                    b->episode_return, b->episode_length);
    /* The bounds and flag pointers are locals: op_autoreset's byte copies could alias `b` as
     * far as the compiler knows, which made it reload them for every env (three instructions
     * an env more than before rows became bytes, callgrind). */
    const uint8_t *terminated = b->terminated, *truncated = b->truncated;
    int64_t n = b->num_envs;
    for (i = 0; i < n; i++) {
        if (terminated[i] | truncated[i]) op_autoreset(b, i, write_obs, reset_one);
    }
    return -1;
}

#endif
