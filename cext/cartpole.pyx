# cython: language_level=3
"""CartPole-v1 as a batch kernel over N environments.

Layering: operant.envs.native -> BatchKernel (kernel_common.pxi, included below) ->
op_batch_step_all in kernel_common.h (action check, SAME_STEP autoreset, episode reduction, RNG)
-> `cartpole_step_all`, the dynamics of every env in one loop, C code in the block below so that
it vectorises (AVX2 where the CPU has it, chosen at load time), and `_reset_one`, `_write_obs`.

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
from libc.stdint cimport int64_t, uint64_t

from kernel_common cimport op_batch, op_batch_step_all, op_rng_uniform, op_write_state_obs

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

    /* Every env's step, branch-free so that it vectorises (restrict parameters, not locals:
       GCC trusts only those). IN: state, actions; OUT: state, obs, rewards, terminated. Uses the
       polynomial sine and cosine; an angle outside their range keeps its state here and is
       marked 2 (or 3) for cartpole_step_all to step with libm's. */
    OP_VECTOR_CLONES static void cartpole_advance_all(
            int64_t n, double *__restrict__ xs, double *__restrict__ x_dots,
            double *__restrict__ thetas, double *__restrict__ theta_dots,
            const int64_t *__restrict__ actions, uint8_t *__restrict__ terminated,
            float *__restrict__ rewards, float *__restrict__ obs) {
        int64_t i;
        for (i = 0; i < n; i++) {
            cartpole_state s = {xs[i], x_dots[i], thetas[i], theta_dots[i]}, next;
            double sintheta, costheta;
            int64_t in_range = fabs(s.theta) <= OP_SINCOS_POLY_RANGE;
            op_sincos_poly(s.theta, &sintheta, &costheta);
            next = cartpole_next(s, actions[i], sintheta, costheta);
            next.x = op_select(in_range, next.x, s.x);
            next.x_dot = op_select(in_range, next.x_dot, s.x_dot);
            next.theta = op_select(in_range, next.theta, s.theta);
            next.theta_dot = op_select(in_range, next.theta_dot, s.theta_dot);
            xs[i] = next.x;
            x_dots[i] = next.x_dot;
            thetas[i] = next.theta;
            theta_dots[i] = next.theta_dot;
            obs[4 * i] = (float)next.x;
            obs[4 * i + 1] = (float)next.x_dot;
            obs[4 * i + 2] = (float)next.theta;
            obs[4 * i + 3] = (float)next.theta_dot;
            terminated[i] = (uint8_t)(cartpole_terminated(next) | ((1 - in_range) << 1));
            rewards[i] = 1.0f;
        }
    }

    static void cartpole_step_all(op_batch *b) {
        int64_t i, n = b->num_envs;
        double *state = b->state;
        cartpole_advance_all(n, state, state + n, state + 2 * n, state + 3 * n,
                             b->discrete_actions, b->terminated, b->rewards, op_obs_f32(b));
        for (i = 0; i < n; i++) {
            if (b->terminated[i] >= 2) {
                cartpole_state s = {state[i], state[n + i], state[2 * n + i], state[3 * n + i]};
                cartpole_state next = cartpole_next(s, b->discrete_actions[i], sin(s.theta),
                                                    cos(s.theta));
                state[i] = next.x;
                state[n + i] = next.x_dot;
                state[2 * n + i] = next.theta;
                state[3 * n + i] = next.theta_dot;
                op_write_state_obs(b, i, 4);
                b->terminated[i] = (uint8_t)cartpole_terminated(next);
            }
        }
    }
    """
    void cartpole_step_all(op_batch *b) noexcept nogil

cdef double RESET_LOW = -0.05
cdef double RESET_HIGH = 0.05

STATE_DIM = 4
OBS_DTYPE = "float32"
OBS_SHAPE = (4,)
ACTION_DIM = 0
NUM_ACTIONS = 2
MAX_EPISODE_STEPS = 500


cdef void _reset_one(op_batch *b, int64_t i) noexcept nogil:
    cdef int64_t n = b.num_envs
    cdef uint64_t *rng = &b.rng[i]
    b.state[i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
    b.state[n + i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
    b.state[2 * n + i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)
    b.state[3 * n + i] = op_rng_uniform(rng, RESET_LOW, RESET_HIGH)


cdef void _write_obs(op_batch *b, int64_t i) noexcept nogil:
    op_write_state_obs(b, i, 4)


cdef int64_t _step(op_batch *b) noexcept nogil:
    return op_batch_step_all(b, cartpole_step_all, _write_obs, _reset_one)


include "kernel_common.pxi"


@cython.final
cdef class CartPoleKernel(BatchKernel):
    """N CartPole-v1 environments; `state` rows: x, x_dot, theta, theta_dot."""
