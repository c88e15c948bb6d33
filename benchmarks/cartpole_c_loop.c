/* The yardstick for the CartPole kernel: a plain C loop over the same structure-of-arrays
 * data, written the way a compiler vectorises best (one pass of pure arithmetic, then a pass
 * for the rare autoresets), built with the same flags as the shipped kernels (see
 * bench_kernel_vs_c.py). It does the kernel's whole job: dynamics, termination, truncation,
 * float32 observations, episode bookkeeping, SAME_STEP autoreset from a per-env SplitMix64.
 * It is a benchmark fixture, not shipped code. */
#include <math.h>
#include <stdint.h>

static inline uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline double uniform(uint64_t *s) {
    return -0.05 + (double)(next(s) >> 11) * 0x1.0p-53 * 0.1;
}

void cartpole_c_loop(int64_t n, int64_t steps, double *restrict x, double *restrict x_dot,
                     double *restrict theta, double *restrict theta_dot,
                     const int64_t *restrict actions, float *restrict obs,
                     float *restrict rewards, uint8_t *restrict terminated,
                     uint8_t *restrict truncated, int64_t *restrict length,
                     uint64_t *restrict rng, double *restrict episodes) {
    const double gravity = 9.8, masspole = 0.1, total_mass = 1.1, length_pole = 0.5;
    const double polemass_length = 0.05, force_mag = 10.0, tau = 0.02;
    const double theta_limit = 12 * 2 * 3.141592653589793 / 360, x_limit = 2.4;
    for (int64_t step = 0; step < steps; step++) {
        for (int64_t i = 0; i < n; i++) {
            double force = actions[i] == 1 ? force_mag : -force_mag;
            double c = cos(theta[i]), s = sin(theta[i]);
            double temp = (force + polemass_length * theta_dot[i] * theta_dot[i] * s) / total_mass;
            double thetaacc = (gravity * s - c * temp) /
                              (length_pole * (4.0 / 3.0 - masspole * c * c / total_mass));
            double xacc = temp - polemass_length * thetaacc * c / total_mass;
            double nx = x[i] + tau * x_dot[i];
            double nth = theta[i] + tau * theta_dot[i];
            x_dot[i] += tau * xacc;
            theta_dot[i] += tau * thetaacc;
            x[i] = nx;
            theta[i] = nth;
            terminated[i] = (nx < -x_limit) | (nx > x_limit) | (nth < -theta_limit) | (nth > theta_limit);
            length[i] += 1;
            truncated[i] = length[i] >= 500;
            rewards[i] = 1.0f;
            obs[4 * i + 0] = (float)nx;
            obs[4 * i + 1] = (float)x_dot[i];
            obs[4 * i + 2] = (float)nth;
            obs[4 * i + 3] = (float)theta_dot[i];
        }
        for (int64_t i = 0; i < n; i++) {
            if (terminated[i] | truncated[i]) {
                episodes[0] += 1.0;
                episodes[1] += (double)length[i];
                length[i] = 0;
                x[i] = uniform(&rng[i]);
                x_dot[i] = uniform(&rng[i]);
                theta[i] = uniform(&rng[i]);
                theta_dot[i] = uniform(&rng[i]);
                obs[4 * i + 0] = (float)x[i];
                obs[4 * i + 1] = (float)x_dot[i];
                obs[4 * i + 2] = (float)theta[i];
                obs[4 * i + 3] = (float)theta_dot[i];
            }
        }
    }
}
