/* memcpy_rate.c: single-core memcpy rate (GB/s, bytes copied per second, 1e9) on buffers far
 * larger than the caches, the per-core copy rate the comparison benchmark uses for its
 * loopback copy-bound limit. Prints one JSON line:
 *   {"memcpy_gbps":BEST,"memcpy_median_gbps":MEDIAN,...}
 * The best copy is used for the limit (the most optimistic rate makes the limit a true bound).
 * Usage: memcpy_rate [MiB per buffer (default 64)] [seconds (default 1.0)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    double secs = argc > 2 ? atof(argv[2]) : 1.0;
    size_t n = (mib ? mib : 64) << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0, t_end, rates[4096];
    int reps = 0, nr = 0;

    if (!a || !b) {
        perror("malloc");
        return 1;
    }
    memset(a, 1, n); /* fault both buffers in before timing */
    memset(b, 2, n);
    t_end = ina__clock_s() + secs;
    /* Best of many single copies: the rate of one core, not of a scheduler hiccup. */
    while (ina__clock_s() < t_end || reps < 3) {
        double t0 = ina__clock_s(), r;
        memcpy(reps & 1 ? a : b, reps & 1 ? b : a, n);
        r = (double)n / (ina__clock_s() - t0) / 1e9;
        if (r > best)
            best = r;
        if (nr < 4096)
            rates[nr++] = r;
        reps++;
    }
    qsort(rates, (size_t)nr, sizeof *rates, cmp_double);
    printf("{\"memcpy_gbps\":%.3f,\"memcpy_median_gbps\":%.3f,\"buffer_bytes\":%zu,"
           "\"copies\":%d,\"check\":%d}\n",
           best, rates[nr / 2], n, reps, a[n / 2] + b[n / 3]);
    free(a);
    free(b);
    return 0;
}
