/* How many of Seaquest's env steps do more than move things one cell and count timers down:
 * the kernel built with SQ_EVENT marking the env (cext/envs/minatar/minatar_seaquest_lists.h), N envs under
 * random actions with MinAtar's defaults (sticky actions 0.1, ramping), each step's marks and
 * terminations counted. A design that steps the plain steps of many envs in SIMD lanes and
 * falls back to the scalar step for the rest pays the scalar step on this fraction
 * (docs/journal/issue-16-minatar-kernels.md, "Seaquest: what a SIMD-lane design could reach").
 *     gcc -O2 -I cext/envs/minatar -I cext/envs/face -I cext/common benchmarks/seaquest_ab/events.c -o /tmp/events -lm && /tmp/events [N STEPS] */
#include <stdio.h>
#include <stdlib.h>

static unsigned char *marks;
#define SQ_EVENT(i, kind) (marks[(i)] |= (unsigned char)(1u << (kind)))
#define PFX X
#include "../../benchmarks/seaquest_ab/kernel.c"

int main(int argc, char **argv) {
    static const char *names[SQ_EVENTS] = {"a spawn timer ran out", "the player fired",
                                           "a sub fired", "an entry left a list",
                                           "the sub surfaced"};
    int64_t n = argc > 1 ? atoll(argv[1]) : 1024, steps = argc > 2 ? atoll(argv[2]) : 2000;
    int64_t *actions = malloc(n * sizeof(int64_t)), t, i, any = 0, ended = 0;
    int64_t by_kind[SQ_EVENTS] = {0};
    uint64_t s = 12345;
    ma_batch *m;
    int k;
    marks = calloc(n, 1);
    m = X_make(n);
    for (t = 0; t < steps; t++) {
        for (i = 0; i < n; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            actions[i] = (int64_t)((s >> 33) % 6);
        }
        X_step(m, actions);
        for (i = 0; i < n; i++) {
            for (k = 0; k < SQ_EVENTS; k++) by_kind[k] += (marks[i] >> k) & 1;
            any += marks[i] != 0 || m->base.terminated[i];
            ended += m->base.terminated[i];
            marks[i] = 0;
        }
    }
    printf("%lld env steps (N = %lld): %.1f%% did more than move and count down\n",
           (long long)(n * steps), (long long)n, 100.0 * any / (double)(n * steps));
    for (k = 0; k < SQ_EVENTS; k++)
        printf("  %5.1f%% %s\n", 100.0 * by_kind[k] / (double)(n * steps), names[k]);
    printf("  %5.1f%% the episode ended\n", 100.0 * ended / (double)(n * steps));
    return 0;
}
