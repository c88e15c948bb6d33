/* The yardstick for the CartPole kernel: a plain C loop doing the kernel's whole job with the
 * same float64 arithmetic, written the way a compiler vectorises best, and compiled by
 * bench_kernel_vs_c.py with the shipped flags plus -march=native (so it gets this CPU's widest
 * vectors without dispatch; -ffp-contract=off stays, so no fused multiply-adds here either).
 *
 * Same arithmetic: the kernel's own helpers from cext/common/kernel_common.h (the polynomial sine and
 * cosine, the SplitMix64 streams), Gymnasium's operation order, libm for an angle outside the
 * polynomial's range. Same job: refuse invalid actions before any env moves, dynamics,
 * terminated / truncated, float32 observations, reward, the episode's return and length, and
 * SAME_STEP autoreset (terminal observation kept, the episode reduced into the same statistics
 * record and ring of recent episodes with the kernel's op_episode_done, the env redrawn). Unlike the
 * kernel, it fuses the bookkeeping into the one vectorised pass and leaves the rare envs to a
 * second pass: a layout the kernel is measured against, not one it must have.
 * It is a benchmark fixture, not shipped code. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../cext/common/kernel_common.h"

#define GRAVITY 9.8
#define MASSPOLE 0.1
#define TOTAL_MASS (MASSPOLE + 1.0)
#define LENGTH 0.5
#define POLEMASS_LENGTH (MASSPOLE * LENGTH)
#define FORCE_MAG 10.0
#define TAU 0.02
#define THETA_LIMIT (12 * 2 * 3.141592653589793 / 360)
#define X_LIMIT 2.4

/* One Euler step from (x, x_dot, theta, theta_dot) given the angle's sine and cosine,
 * Gymnasium's operation order. */
static inline void advance(double *x, double *x_dot, double *theta, double *theta_dot,
                           int64_t action, double s, double c) {
    double force = action == 1 ? FORCE_MAG : -FORCE_MAG;
    double temp = (force + POLEMASS_LENGTH * (*theta_dot * *theta_dot) * s) / TOTAL_MASS;
    double thetaacc =
        (GRAVITY * s - c * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * (c * c) / TOTAL_MASS));
    double xacc = temp - POLEMASS_LENGTH * thetaacc * c / TOTAL_MASS;
    double nx = *x + TAU * *x_dot, nth = *theta + TAU * *theta_dot;
    *x_dot = *x_dot + TAU * xacc;
    *theta_dot = *theta_dot + TAU * thetaacc;
    *x = nx;
    *theta = nth;
}

static inline uint8_t ended(double x, double theta) {
    return (x < -X_LIMIT) | (x > X_LIMIT) | (theta < -THETA_LIMIT) | (theta > THETA_LIMIT);
}

static inline void write_obs(float *obs, int64_t i, double x, double x_dot, double theta,
                             double theta_dot) {
    obs[4 * i + 0] = (float)x;
    obs[4 * i + 1] = (float)x_dot;
    obs[4 * i + 2] = (float)theta;
    obs[4 * i + 3] = (float)theta_dot;
}

/* `steps` steps of n envs; returns -1, or the first env with an invalid action. */
int64_t cartpole_c_loop(int64_t n, int64_t steps, int64_t max_episode_steps,
                        double *restrict x, double *restrict x_dot, double *restrict theta,
                        double *restrict theta_dot, const int64_t *restrict actions,
                        float *restrict obs, float *restrict final_obs,
                        float *restrict rewards, uint8_t *restrict terminated,
                        uint8_t *restrict truncated, double *restrict episode_return,
                        int64_t *restrict length, uint64_t *restrict rng,
                        op_episode_stats *restrict stats, double *restrict ring_returns,
                        double *restrict ring_lengths, uint64_t *restrict ring_head,
                        uint64_t ring_capacity) {
    for (int64_t step = 0; step < steps; step++) {
        int invalid = 0;
        for (int64_t i = 0; i < n; i++) invalid |= (actions[i] < 0) | (actions[i] >= 2);
        if (invalid) {
            for (int64_t i = 0; i < n; i++) {
                if (actions[i] < 0 || actions[i] >= 2) return i;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            double xi = x[i], xdi = x_dot[i], ti = theta[i], tdi = theta_dot[i], s, c;
            int64_t in_range = fabs(ti) <= OP_SINCOS_POLY_RANGE;
            op_sincos_poly(ti, &s, &c);
            advance(&xi, &xdi, &ti, &tdi, actions[i], s, c);
            /* An angle outside the polynomial's range keeps its state for the second pass. */
            x[i] = op_select(in_range, xi, x[i]);
            x_dot[i] = op_select(in_range, xdi, x_dot[i]);
            theta[i] = op_select(in_range, ti, theta[i]);
            theta_dot[i] = op_select(in_range, tdi, theta_dot[i]);
            write_obs(obs, i, xi, xdi, ti, tdi);
            terminated[i] = (uint8_t)(ended(xi, ti) | ((1 - in_range) << 1));
            rewards[i] = 1.0f;
            episode_return[i] += 1.0;
            length[i] += 1;
            truncated[i] = (uint8_t)(length[i] >= max_episode_steps);
        }
        for (int64_t i = 0; i < n; i++) {
            if (terminated[i] | truncated[i]) {
                if (terminated[i] >= 2) {
                    advance(&x[i], &x_dot[i], &theta[i], &theta_dot[i], actions[i],
                            sin(theta[i]), cos(theta[i]));
                    write_obs(obs, i, x[i], x_dot[i], theta[i], theta_dot[i]);
                    terminated[i] = ended(x[i], theta[i]);
                    if (!(terminated[i] | truncated[i])) continue;
                }
                memcpy(final_obs + 4 * i, obs + 4 * i, 4 * sizeof(float));
                op_episode_done(stats, ring_returns, ring_lengths, ring_head, ring_capacity,
                                episode_return[i], (double)length[i]);
                episode_return[i] = 0.0;
                length[i] = 0;
                x[i] = op_rng_uniform(&rng[i], -0.05, 0.05);
                x_dot[i] = op_rng_uniform(&rng[i], -0.05, 0.05);
                theta[i] = op_rng_uniform(&rng[i], -0.05, 0.05);
                theta_dot[i] = op_rng_uniform(&rng[i], -0.05, 0.05);
                write_obs(obs, i, x[i], x_dot[i], theta[i], theta_dot[i]);
            }
        }
    }
    return -1;
}
