# cython: language_level=3
"""CartPole-v1 as a batch kernel over N environments.

Layering: operant.envs.native.vector -> BatchKernel (kernel_common.pxi, included below) ->
`cartpole_step`, C code in the block below: the action check (kernel_common.h), one pass over
every env that steps the dynamics and does the bookkeeping (so that it vectorises: AVX-512 or
AVX2 where the CPU has it, chosen at load time), then one scan for the envs whose episode ended,
reset from their streams with kernel_common.h's episode reduction.

Dynamics are Gymnasium's CartPole-v1: Euler integrator, float64 state, float32 observations,
+-2.4 / +-12 degree termination, reward 1 on every step including the last, and truncation
after `max_episode_steps` (500), in Gymnasium's operation order. One exception to bit-for-bit
equality: for pole angles within +-0.3125 rad (every non-terminal state) the angle's sine and
cosine come from op_sincos_poly (within 1 ulp of libm, equal to it for 99.5% of angles), since
libm's sincos alone would cost more than the rest of the step and keep the kernel near
Gymnasium's own numpy-vectorised CartPole; other angles use libm.

Autoreset is Gymnasium's SAME_STEP mode: when an episode ends on a step, that step's
terminated/truncated flags and reward describe the ending, `final_obs` holds the terminal
observation, and `obs` already holds the first observation of the next episode.
"""

cimport cython
from libc.stdint cimport int64_t

from kernel_common cimport op_batch

cdef extern from *:
    """
    #define CARTPOLE_GRAVITY 9.8
    #define CARTPOLE_MASSCART 1.0
    #define CARTPOLE_MASSPOLE 0.1
    #define CARTPOLE_TOTAL_MASS (CARTPOLE_MASSPOLE + CARTPOLE_MASSCART)
    #define CARTPOLE_LENGTH 0.5
    #define CARTPOLE_POLEMASS_LENGTH (CARTPOLE_MASSPOLE * CARTPOLE_LENGTH)
    #define CARTPOLE_FORCE_MAG 10.0
    #define CARTPOLE_TAU 0.02
    #define CARTPOLE_THETA_THRESHOLD (12 * 2 * 3.141592653589793 / 360)
    #define CARTPOLE_X_THRESHOLD 2.4

    typedef struct { double x, x_dot, theta, theta_dot; } cartpole_state;

    /* One Euler step of Gymnasium's CartPole-v1, in its operation order, given the pole
       angle's sine and cosine. */
    static inline cartpole_state cartpole_next(cartpole_state s, int64_t action,
                                               double sintheta, double costheta) {
        double force = action == 1 ? CARTPOLE_FORCE_MAG : -CARTPOLE_FORCE_MAG;
        double temp = (force + CARTPOLE_POLEMASS_LENGTH * (s.theta_dot * s.theta_dot) * sintheta)
                      / CARTPOLE_TOTAL_MASS;
        double thetaacc = (CARTPOLE_GRAVITY * sintheta - costheta * temp) / (
            CARTPOLE_LENGTH * (4.0 / 3.0 - CARTPOLE_MASSPOLE * (costheta * costheta)
                               / CARTPOLE_TOTAL_MASS));
        double xacc = temp - CARTPOLE_POLEMASS_LENGTH * thetaacc * costheta / CARTPOLE_TOTAL_MASS;
        cartpole_state next;
        next.x = s.x + CARTPOLE_TAU * s.x_dot;
        next.x_dot = s.x_dot + CARTPOLE_TAU * xacc;
        next.theta = s.theta + CARTPOLE_TAU * s.theta_dot;
        next.theta_dot = s.theta_dot + CARTPOLE_TAU * thetaacc;
        return next;
    }

    static inline int cartpole_terminated(cartpole_state s) {
        return (s.x < -CARTPOLE_X_THRESHOLD) | (s.x > CARTPOLE_X_THRESHOLD)
               | (s.theta < -CARTPOLE_THETA_THRESHOLD) | (s.theta > CARTPOLE_THETA_THRESHOLD);
    }

    /* Env i's first state, drawn from its stream; its observation row from its state. */
    static inline void cartpole_reset_one(op_batch *b, int64_t i) {
        int64_t k, n = b->num_envs;
        for (k = 0; k < 4; k++) b->state[k * n + i] = op_rng_uniform(&b->rng[i], -0.05, 0.05);
    }

    static inline void cartpole_write_obs(op_batch *b, int64_t i) {
        op_write_state_obs(b, i, 4);
    }

    /* Every env's step and its bookkeeping in one branch-free pass that vectorises (restrict
       parameters, not locals: GCC trusts only those). IN: state, actions; OUT: state, obs,
       rewards, terminated, truncated, the episodes' returns and lengths. Uses the polynomial
       sine and cosine; an angle outside their range keeps its state here and is marked 2 (or
       3) in `terminated` for cartpole_step to step with libm's. The reward is 1 on every step,
       so the return adds 1.0, as op_record_step would add (double)1.0f. */
    OP_VECTOR_CLONES static void cartpole_advance_all(
            int64_t n, double *__restrict__ xs, double *__restrict__ x_dots,
            double *__restrict__ thetas, double *__restrict__ theta_dots,
            const int64_t *__restrict__ actions, uint8_t *__restrict__ terminated,
            uint8_t *__restrict__ truncated, float *__restrict__ rewards,
            float *__restrict__ obs, double *__restrict__ episode_return,
            int64_t *__restrict__ episode_length, int64_t max_episode_steps) {
        int64_t i;
        for (i = 0; i < n; i++) {
            cartpole_state s = {xs[i], x_dots[i], thetas[i], theta_dots[i]}, next;
            double sintheta, costheta;
            int64_t in_range = fabs(s.theta) <= OP_SINCOS_POLY_RANGE;
            op_sincos_poly(s.theta, &sintheta, &costheta);
            next = cartpole_next(s, actions[i], sintheta, costheta);
            /* The observation and flags from the polynomial's step whatever the range: an
               out-of-range env's are rewritten by cartpole_step (fewer dependencies on the
               selects below). */
            obs[4 * i] = (float)next.x;
            obs[4 * i + 1] = (float)next.x_dot;
            obs[4 * i + 2] = (float)next.theta;
            obs[4 * i + 3] = (float)next.theta_dot;
            terminated[i] = (uint8_t)(cartpole_terminated(next) | ((1 - in_range) << 1));
            xs[i] = op_select(in_range, next.x, s.x);
            x_dots[i] = op_select(in_range, next.x_dot, s.x_dot);
            thetas[i] = op_select(in_range, next.theta, s.theta);
            theta_dots[i] = op_select(in_range, next.theta_dot, s.theta_dot);
            rewards[i] = 1.0f;
            episode_return[i] += 1.0;
            episode_length[i] += 1;
            truncated[i] = (uint8_t)(episode_length[i] >= max_episode_steps);
        }
    }

    /* The step (op_batch_step_all's contract: -1, or the first env with an invalid action and
       nothing moved): the action check, the fused pass, then one byte-wise scan for the envs
       left: out-of-range angles stepped with libm, ended episodes reset (reading the flags
       eight a word was slower: with ~10% of the envs ending each step under the benchmark's
       fixed random actions, most words hold one; bench_kernel_vs_c.py 0.93 -> 0.96). The
       autoreset is op_autoreset's, written out over restrict locals: through `b` the compiler
       must assume every store may change b's fields and reloads them (about 10% of the step
       at 4,096 envs, bench_kernel_vs_c.py). */
    static int64_t cartpole_step(op_batch *b) {
        int64_t i, k, n = b->num_envs;
        double *__restrict__ state = b->state;
        uint8_t *__restrict__ terminated = b->terminated;
        const uint8_t *__restrict__ truncated = b->truncated;
        const int64_t *__restrict__ actions = b->discrete_actions;
        float *__restrict__ obs = op_obs_f32(b);
        float *__restrict__ final_obs = (float *)b->final_obs;
        double *__restrict__ episode_return = b->episode_return;
        int64_t *__restrict__ episode_length = b->episode_length;
        uint64_t *__restrict__ rng = b->rng;
        op_episode_stats *__restrict__ stats = b->stats;
        double *__restrict__ recent_returns = b->recent_returns;
        double *__restrict__ recent_lengths = b->recent_lengths;
        uint64_t *__restrict__ recent_head = b->recent_head;
        uint64_t recent_capacity = b->recent_capacity;
        int64_t bad = op_first_invalid_action(b);
        if (bad >= 0) return bad;
        cartpole_advance_all(n, state, state + n, state + 2 * n, state + 3 * n, actions,
                             terminated, b->truncated, b->rewards, obs, episode_return,
                             episode_length, b->max_episode_steps);
        for (i = 0; i < n; i++) {
            if (!(terminated[i] | truncated[i])) continue;
            if (terminated[i] >= 2) {
                cartpole_state s = {state[i], state[n + i], state[2 * n + i],
                                    state[3 * n + i]};
                cartpole_state next = cartpole_next(s, actions[i], sin(s.theta),
                                                    cos(s.theta));
                state[i] = next.x;
                state[n + i] = next.x_dot;
                state[2 * n + i] = next.theta;
                state[3 * n + i] = next.theta_dot;
                for (k = 0; k < 4; k++) obs[4 * i + k] = (float)state[k * n + i];
                terminated[i] = (uint8_t)cartpole_terminated(next);
                if (!(terminated[i] | truncated[i])) continue;
            }
            for (k = 0; k < 4; k++) final_obs[4 * i + k] = obs[4 * i + k];
            op_episode_done(stats, recent_returns, recent_lengths, recent_head,
                            recent_capacity, episode_return[i], (double)episode_length[i]);
            episode_return[i] = 0.0;
            episode_length[i] = 0;
            for (k = 0; k < 4; k++) {
                state[k * n + i] = op_rng_uniform(&rng[i], -0.05, 0.05);
                obs[4 * i + k] = (float)state[k * n + i];
            }
        }
        return -1;
    }
    """
    int64_t cartpole_step(op_batch *b) noexcept nogil
    void cartpole_reset_one(op_batch *b, int64_t i) noexcept nogil
    void cartpole_write_obs(op_batch *b, int64_t i) noexcept nogil

STATE_DIM = 4
OBS_DTYPE = "float32"
OBS_SHAPE = (4,)
ACTION_DIM = 0
NUM_ACTIONS = 2
MAX_EPISODE_STEPS = 500


cdef void _reset_one(op_batch *b, int64_t i) noexcept nogil:
    cartpole_reset_one(b, i)


cdef void _write_obs(op_batch *b, int64_t i) noexcept nogil:
    cartpole_write_obs(b, i)


cdef int64_t _step(op_batch *b) noexcept nogil:
    return cartpole_step(b)


include "kernel_common.pxi"


@cython.final
cdef class CartPoleKernel(BatchKernel):
    """N CartPole-v1 environments; `state` rows: x, x_dot, theta, theta_dot."""
