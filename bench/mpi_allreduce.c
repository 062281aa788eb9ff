/* mpi_allreduce.c: MPI_Allreduce (SUM) benchmark and verifier, the OpenMPI peer of
 * bench/compare.sh. Same data as ina-bench (bench/benchdata.c), every result on every rank
 * checked against a double-precision reference; one JSON line per size from rank 0, with the
 * keys of ina-bench --json that apply.
 *
 * Timing: per iteration, MPI_Barrier (not timed), then MPI_Wtime around MPI_Allreduce on each
 * rank; the reported time is rank 0's median over the timed iterations (ina-bench times its
 * call the same way, without the barrier).
 *
 * --pair: every iteration also calls PMPI_Allreduce, MPI's own, timed the same way, the
 * two calls alternating which goes first; the JSON then has "pmpi_time_s" (its median) and
 * "pair_ratio" (the median over iterations of MPI_Allreduce's time over PMPI_Allreduce's).
 * With an interposer preloaded (libina-mpi.so), that compares it with plain MPI in the same
 * process, call by call, so that the machine's load weighs on both alike (bench/mpi_route.sh).
 *
 * float16 and bfloat16 (--dtype): MPI has no half types of its own. float16 is MPIX_C_FLOAT16
 * with MPI_SUM where the MPI library defines it (MPICH; Open MPI 5's mpi-ext.h), otherwise,
 * as bfloat16 always, MPI_SHORT (the same 2 bytes an element) with a commutative user-defined
 * op that adds the values in the type (bd_sum16): the usual workaround, e.g. Horovod's. The
 * JSON's "mpi_type" says which.
 *
 * Usage: mpi_allreduce [--sizes 4K,1M] [--dtype float32|int32|float16|bfloat16] [--iters N[,N...]]
 *                      [--warmup N[,N...]] [--system NAME] [--pair]
 *                      [--density D --pattern random|overlap|disjoint --sparse-block B]
 * --iters/--warmup: one count for all sizes, or one per size; --system: the "system" key of
 * the JSON (default "openmpi"). --density etc.: block-sparse inputs, as ina-bench's (dense
 * all-reduce of them; bench/sparse.sh). */
#include "benchdata.h"

#include <mpi.h>
#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI 5: MPIX_C_FLOAT16 */
#endif
#endif
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

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One timed all-reduce, after a barrier; PMPI_Allreduce if pmpi. Aborts on an MPI error. */
static double timed_allreduce(int pmpi, const void *send, void *recv, int count,
                              MPI_Datatype mt, MPI_Op op, const char *tag)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int rc = pmpi ? PMPI_Allreduce(send, recv, count, mt, op, MPI_COMM_WORLD)
                  : MPI_Allreduce(send, recv, count, mt, op, MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "%s: %s failed (%d)\n", tag, pmpi ? "PMPI_Allreduce" : "MPI_Allreduce",
                rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return t1 - t0;
}

static void usage_exit(int rank, const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "mpi_allreduce: %s\nusage: mpi_allreduce [--sizes LIST] "
                "[--dtype float32|int32|float16|bfloat16] [--iters N] [--warmup N] [--system NAME] [--pair]\n",
                msg);
    MPI_Finalize();
    exit(2);
}

static int g_sum16_dtype; /* BD_FLOAT16 or BD_BFLOAT16: what sum16_op adds */

static void sum16_op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    bd_sum16(g_sum16_dtype, in, inout, (size_t)*len);
}

int main(int argc, char **argv)
{
    unsigned long long sizes[MAX_SIZES];
    int nsizes = 0, iters_v[MAX_SIZES], warmup_v[MAX_SIZES], dtype = BD_FLOAT32, rank, world;
    int any_fail = 0, max_iters = 0, pair = 0;
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
        if (!strcmp(a, "--pair")) {
            pair = 1;
            continue;
        }
        if (!v)
            usage_exit(rank, "missing value");
        if (!strcmp(a, "--sizes")) {
            if ((nsizes = parse_sizes(v, sizes)) <= 0)
                usage_exit(rank, "bad --sizes");
        } else if (!strcmp(a, "--dtype")) {
            if ((dtype = bd_dtype(v)) < 0)
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
    const size_t es = bd_esize(dtype);
    MPI_Datatype mt = dtype == BD_INT32 ? MPI_INT : MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    const char *mpi_type = dtype == BD_INT32 ? "MPI_INT" : "MPI_FLOAT";
    if (dtype == BD_FLOAT16 || dtype == BD_BFLOAT16) {
        mt = MPI_SHORT;
        mpi_type = "MPI_SHORT+user op";
        g_sum16_dtype = dtype;
        MPI_Op_create(sum16_op, 1, &op);
#if defined(MPIX_C_FLOAT16)
        if (dtype == BD_FLOAT16) {
            mt = MPIX_C_FLOAT16;
            mpi_type = "MPIX_C_FLOAT16";
            MPI_Op_free(&op);
            op = MPI_SUM;
        }
#endif
    }

    double *times = malloc((size_t)max_iters * sizeof *times);
    double *ptimes = malloc((size_t)max_iters * sizeof *ptimes);
    double *ratios = malloc((size_t)max_iters * sizeof *ratios);
    for (int s = 0; s < nsizes; s++) {
        int iters = iters_v[s], warmup = warmup_v[s];
        size_t count = (size_t)(sizes[s] / es);
        unsigned long long bytes = (unsigned long long)(count * es);
        void *send = malloc(count * es), *recv = malloc(count * es);
        double max_abs = 0, max_ratio = 0;
        long long failures = 0, fail_sum = 0;
        double err_max[2], err_max_all[2];

        if (!send || !recv || !times || !ptimes || !ratios) {
            fprintf(stderr, "%s: out of memory for %llu bytes\n", tag, bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int it = 0; it < warmup + iters; it++) {
            double t[2] = {0, 0}; /* MPI_Allreduce, PMPI_Allreduce */
            bd_fill(dtype, send, count, rank, bytes, it);
            for (int k = 0; k < 1 + pair; k++) {
                int pmpi = pair && (it + k) % 2; /* alternate which goes first */
                memset(recv, 0xff, count * es);  /* poison: stale results show up */
                t[pmpi] = timed_allreduce(pmpi, send, recv, (int)count, mt, op, tag);
                failures += bd_verify(dtype, recv, count, world, bytes, it, &max_abs, &max_ratio,
                                      tag);
            }
            if (it >= warmup) {
                times[it - warmup] = t[0];
                ptimes[it - warmup] = t[1];
                ratios[it - warmup] = t[1] > 0 ? t[0] / t[1] : 0;
            }
        }
        MPI_Allreduce(&failures, &fail_sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        err_max[0] = max_abs;
        err_max[1] = max_ratio;
        MPI_Allreduce(err_max, err_max_all, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (fail_sum)
            any_fail = 1;
        if (rank == 0) {
            double med, algbw;
            char paired[96] = "";
            if (pair)
                snprintf(paired, sizeof paired, "\"pmpi_time_s\":%.9g,\"pair_ratio\":%.6g,",
                         median_of(ptimes, iters), median_of(ratios, iters));
            med = median_of(times, iters);
            algbw = med > 0 ? (double)bytes * 8 / med / 1e9 : 0;
            printf("{\"system\":\"%s\",\"workers\":%d,\"bytes\":%llu,\"count\":%zu,"
                   "\"dtype\":\"%s\",\"mpi_type\":\"%s\",\"iters\":%d,\"warmup\":%d,\"time_s\":%.9g,"
                   "\"time_min_s\":%.9g,\"time_max_s\":%.9g,\"time_p99_s\":%.9g,"
                   "\"algbw_gbps\":%.6g,"
                   "\"busbw_gbps\":%.6g,%s\"max_abs_err\":%.6g,\"max_err_over_tol\":%.6g,"
                   "\"density\":%.9g,\"failures\":%lld,\"ok\":%s}\n",
                   system, world, bytes, count, bd_name(dtype), mpi_type, iters,
                   warmup, med, times[0], times[iters - 1],
                   times[(99 * (size_t)iters + 99) / 100 - 1] /* p99, nearest rank */, algbw,
                   algbw * 2.0 * (world - 1) / world, paired, err_max_all[0], err_max_all[1], density,
                   fail_sum,
                   fail_sum ? "false" : "true");
            fflush(stdout);
        }
        free(send);
        free(recv);
    }
    free(times);
    free(ptimes);
    free(ratios);
    if (op != MPI_SUM)
        MPI_Op_free(&op);
    MPI_Finalize();
    return any_fail ? 3 : 0;
}
