/* Two builds of Seaquest's kernel (kernel.c compiled with PFX=A and PFX=B) stepped side by
 * side: first 300 steps of both with the same actions, their outputs compared after each
 * (a change meant to be exact must show 0 mismatched steps), then `rounds` rounds of `per`
 * steps of A then `per` steps of B. Prints each build's median ns per env step and the median
 * of the rounds' A/B ratios (B's speedup) with its quartiles.
 *     ab N ROUNDS PER   (defaults 1024 41 50) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void *A_make(int64_t);
void A_step(void *, const int64_t *);
uint64_t A_hash(void *);
void *B_make(int64_t);
void B_step(void *, const int64_t *);
uint64_t B_hash(void *);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 1024, rounds = argc > 2 ? atoll(argv[2]) : 41;
    int64_t per = argc > 3 ? atoll(argv[3]) : 50, t, r, i, sa = 0, sb = 0;
    int64_t *actions = malloc(n * 64 * sizeof(int64_t));
    double *ratio = malloc(rounds * sizeof(double)), *ta = malloc(rounds * sizeof(double));
    double *tb = malloc(rounds * sizeof(double));
    uint64_t s = 12345;
    int mismatched = 0;
    void *a, *b;
    for (i = 0; i < n * 64; i++) { /* SplitMix64: a table of random actions */
        uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        actions[i] = (int64_t)((z ^ (z >> 31)) % 6);
    }
    a = A_make(n);
    b = B_make(n);
    for (t = 0; t < 300; t++, sa++, sb++) {
        A_step(a, actions + (sa % 64) * n);
        B_step(b, actions + (sb % 64) * n);
        mismatched += A_hash(a) != B_hash(b);
    }
    for (r = 0; r < rounds; r++) {
        double t0 = now(), t1, t2;
        for (t = 0; t < per; t++, sa++) A_step(a, actions + (sa % 64) * n);
        t1 = now();
        for (t = 0; t < per; t++, sb++) B_step(b, actions + (sb % 64) * n);
        t2 = now();
        ta[r] = (t1 - t0) * 1e9 / (double)(per * n);
        tb[r] = (t2 - t1) * 1e9 / (double)(per * n);
        ratio[r] = ta[r] / tb[r];
    }
    qsort(ratio, rounds, sizeof(double), by_value);
    qsort(ta, rounds, sizeof(double), by_value);
    qsort(tb, rounds, sizeof(double), by_value);
    printf("A %.1f ns  B %.1f ns an env step; B's speedup %.3f [quartiles %.3f, %.3f]; "
           "mismatched steps in the first 300: %d\n",
           ta[rounds / 2], tb[rounds / 2], ratio[rounds / 2], ratio[rounds / 4],
           ratio[3 * rounds / 4], mismatched);
    return mismatched != 0;
}
