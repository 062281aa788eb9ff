/* mpi_allreduce.c: MPI_Allreduce (SUM) benchmark and verifier, the OpenMPI peer of
 * bench/compare.sh. Same data as ina-bench (bench/benchdata.c), every result on every rank
 * checked against a double-precision reference; one JSON line per size from rank 0, with the
 * keys of ina-bench --json that apply.
 *
 * Timing: per iteration, MPI_Barrier (not timed), then MPI_Wtime around MPI_Allreduce on each
 * rank; the reported time is rank 0's median over the timed iterations (ina-bench times its
 * call the same way, without the barrier).
 *
 * Usage: mpi_allreduce [--sizes 4K,1M] [--dtype float32|int32] [--iters N[,N...]]
 *                      [--warmup N[,N...]] [--system NAME]
 *                      [--density D --pattern random|overlap|disjoint --sparse-block B]
 * --iters/--warmup: one count for all sizes, or one per size; --system: the "system" key of
 * the JSON (default "openmpi"). --density etc.: block-sparse inputs, as ina-bench's (dense
 * all-reduce of them; bench/sparse.sh). */
#include "benchdata.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static int parse_sizes(const char *s, unsigned long long *out)
{
    int n = 0;
    while (*s && n < MAX_SIZES) {
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s)
            return -1;
        switch (*end) {
        case 'K': case 'k': v <<= 10; end++; break;
        case 'M': case 'm': v <<= 20; end++; break;
        case 'G': case 'g': v <<= 30; end++; break;
        default: break;
        }
        if (*end && *end != ',')
            return -1;
        if (v < 4)
            return -1;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    return n;
}

/* "N" or "N,N,..." (one per size) into out[0..nsizes); -1 on error. */
static int parse_counts(const char *s, int *out, int nsizes, int min)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < min || v > 1000000 || (*end && *end != ',') || n >= MAX_SIZES)
            return -1;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    if (n == 1)
        for (int i = 1; i < MAX_SIZES; i++)
            out[i] = out[0];
    else if (n != nsizes)
        return -1;
    return 0;
}

static void usage_exit(int rank, const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "mpi_allreduce: %s\nusage: mpi_allreduce [--sizes LIST] "
                "[--dtype float32|int32] [--iters N] [--warmup N] [--system NAME]\n", msg);
    MPI_Finalize();
    exit(2);
}

int main(int argc, char **argv)
{
    unsigned long long sizes[MAX_SIZES];
    int nsizes = 0, iters_v[MAX_SIZES], warmup_v[MAX_SIZES], dtype = BD_FLOAT32, rank, world;
    int any_fail = 0, max_iters = 0;
    const char *system = "openmpi", *iters_s = "10", *warmup_s = "2";
    double density = 1;
    int pattern = 0;
    size_t sblock = 256;
    char tag[64];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    nsizes = parse_sizes("4K,64K,1M,16M", sizes);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage_exit(rank, "missing value");
        if (!strcmp(a, "--sizes")) {
            if ((nsizes = parse_sizes(v, sizes)) <= 0)
                usage_exit(rank, "bad --sizes");
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "float32"))
                dtype = BD_FLOAT32;
            else if (!strcmp(v, "int32"))
                dtype = BD_INT32;
            else
                usage_exit(rank, "bad --dtype");
        } else if (!strcmp(a, "--iters")) {
            iters_s = v;
        } else if (!strcmp(a, "--warmup")) {
            warmup_s = v;
        } else if (!strcmp(a, "--system")) {
            system = v;
        } else if (!strcmp(a, "--density")) {
            density = atof(v);
        } else if (!strcmp(a, "--pattern")) {
            pattern = !strcmp(v, "overlap") ? 1 : !strcmp(v, "disjoint") ? 2 : 0;
        } else if (!strcmp(a, "--sparse-block")) {
            sblock = (size_t)atol(v);
        } else {
            usage_exit(rank, "unknown option");
        }
        i++;
    }
    if (parse_counts(iters_s, iters_v, nsizes, 1))
        usage_exit(rank, "bad --iters (one count >= 1, or one per size)");
    if (parse_counts(warmup_s, warmup_v, nsizes, 0))
        usage_exit(rank, "bad --warmup (one count >= 0, or one per size)");
    for (int s = 0; s < nsizes; s++)
        if (iters_v[s] > max_iters)
            max_iters = iters_v[s];
    snprintf(tag, sizeof tag, "mpi_allreduce: rank %d", rank);
    bd_set_sparse(density, pattern, sblock, world);

    double *times = malloc((size_t)max_iters * sizeof *times);
    for (int s = 0; s < nsizes; s++) {
        int iters = iters_v[s], warmup = warmup_v[s];
        size_t count = (size_t)(sizes[s] / 4);
        unsigned long long bytes = (unsigned long long)count * 4;
        void *send = malloc(count * 4), *recv = malloc(count * 4);
        double max_abs = 0, max_ratio = 0;
        long long failures = 0, fail_sum = 0;
        double err_max[2], err_max_all[2];
        MPI_Datatype mt = dtype == BD_INT32 ? MPI_INT : MPI_FLOAT;

        if (!send || !recv || !times) {
            fprintf(stderr, "%s: out of memory for %llu bytes\n", tag, bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int it = 0; it < warmup + iters; it++) {
            double t0, t1;
            bd_fill(dtype, send, count, rank, bytes, it);
            memset(recv, 0xff, count * 4); /* poison: stale results show up */
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            int rc = MPI_Allreduce(send, recv, (int)count, mt, MPI_SUM, MPI_COMM_WORLD);
            t1 = MPI_Wtime();
            if (rc != MPI_SUCCESS) {
                fprintf(stderr, "%s: MPI_Allreduce failed (%d)\n", tag, rc);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (it >= warmup)
                times[it - warmup] = t1 - t0;
            failures += bd_verify(dtype, recv, count, world, bytes, it, &max_abs, &max_ratio, tag);
        }
        MPI_Allreduce(&failures, &fail_sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        err_max[0] = max_abs;
        err_max[1] = max_ratio;
        MPI_Allreduce(err_max, err_max_all, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (fail_sum)
            any_fail = 1;
        if (rank == 0) {
            double med, algbw;
            qsort(times, (size_t)iters, sizeof *times, cmp_double);
            med = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
            algbw = med > 0 ? (double)bytes * 8 / med / 1e9 : 0;
            printf("{\"system\":\"%s\",\"workers\":%d,\"bytes\":%llu,\"count\":%zu,"
                   "\"dtype\":\"%s\",\"iters\":%d,\"warmup\":%d,\"time_s\":%.9g,"
                   "\"time_min_s\":%.9g,\"time_max_s\":%.9g,\"time_p99_s\":%.9g,"
                   "\"algbw_gbps\":%.6g,"
                   "\"busbw_gbps\":%.6g,\"max_abs_err\":%.6g,\"max_err_over_tol\":%.6g,"
                   "\"density\":%.9g,\"failures\":%lld,\"ok\":%s}\n",
                   system, world, bytes, count, dtype == BD_INT32 ? "int32" : "float32", iters,
                   warmup, med, times[0], times[iters - 1],
                   times[(99 * (size_t)iters + 99) / 100 - 1] /* p99, nearest rank */, algbw,
                   algbw * 2.0 * (world - 1) / world, err_max_all[0], err_max_all[1], density,
                   fail_sum,
                   fail_sum ? "false" : "true");
            fflush(stdout);
        }
        free(send);
        free(recv);
    }
    free(times);
    MPI_Finalize();
    return any_fail ? 3 : 0;
}
