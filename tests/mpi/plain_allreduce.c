/*
 * plain_allreduce.c: an MPI program that knows nothing of ina. It calls
 * MPI_Allreduce on MPI_COMM_WORLD, on a duplicate of it and on a split by
 * rank parity, and checks every result itself:
 *   SUM on MPI_FLOAT, MPI_INT, MPI_INT32_T and MPI_UNSIGNED, separate buffers
 *   and MPI_IN_PLACE, several packets' worth and a 3-element call, count 0,
 *   a float buffer at an odd address; and calls the interposer hands to MPI:
 *   MAX on MPI_INT (until libina implements it), SUM on MPI_DOUBLE, a user op.
 * tests/scripts/test_mpi.sh runs it with libina-mpi.so preloaded and without.
 *
 * Usage: plain_allreduce [--count N] [--rounds R] [--pause DIR] [--init-thread]
 *   --init-thread  start with MPI_Init_thread(MPI_THREAD_MULTIPLE), not MPI_Init
 *   --count N   elements of the large calls (default 5000)
 *   --rounds R  run the checks R times (default 2)
 *   --pause DIR then rank 0 creates DIR/ready and waits (at most 60 s) for DIR/go,
 *               and every rank checks in-place and separate-buffer SUMs on
 *               MPI_COMM_WORLD and the duplicate once more (the test stops the
 *               switch meanwhile, so these calls exercise the fallback)
 * Each rank prints "plain_allreduce: rank R of N: C checks, F failed" and exits 1
 * if any check failed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

static int g_checks, g_failed;

static void check(int ok, const char *comm, const char *what, long i, double got, double want)
{
    g_checks++;
    if (!ok) {
        g_failed++;
        if (g_failed <= 20)
            fprintf(stderr, "plain_allreduce: WRONG %s %s [%ld]: got %.9g want %.9g\n", comm,
                    what, i, got, want);
    }
}

/* Rank r's float at i: a multiple of 1/4 (exact in any float sum here), mixed signs. */
static float fval(int r, long i)
{
    return (float)((i % 2 ? -1.0 : 1.0) * ((r + 1) * 0.25 + (double)(i % 13)));
}

static double fsum(int n, long i)
{
    double s = 0;
    for (int r = 0; r < n; r++)
        s += fval(r, i);
    return s;
}

static int fclose_enough(float got, double want)
{
    return fabs((double)got - want) <= 1e-5 * (fabs(want) + 1.0);
}

static int ival(int r, long i)
{
    return r * 100000 + (int)i - 7 * r;
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

/* Rank r's input at i as a double, and the element i of buffer p. */
static double input(MPI_Datatype dt, int r, long i)
{
    return dt == MPI_FLOAT ? (double)fval(r, i) : (double)ival(r, i);
}

static double element(MPI_Datatype dt, const void *p, long i)
{
    return dt == MPI_FLOAT ? (double)((const float *)p)[i] : (double)((const int32_t *)p)[i];
}

/* SUM of count 4-byte elements (MPI_FLOAT, or an int type) in place or not, checked. */
static void check_sum(MPI_Comm comm, const char *name, long count, MPI_Datatype dt, int in_place)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int is_float = dt == MPI_FLOAT;
    void *a = malloc((size_t)count * 4), *b = malloc((size_t)count * 4);
    for (long i = 0; i < count; i++) {
        if (is_float)
            ((float *)a)[i] = fval(rank, i);
        else
            ((int32_t *)a)[i] = ival(rank, i);
    }
    int rc = in_place ? MPI_Allreduce(MPI_IN_PLACE, a, (int)count, dt, MPI_SUM, comm)
                      : MPI_Allreduce(a, b, (int)count, dt, MPI_SUM, comm);
    check(rc == MPI_SUCCESS, name, "rc", 0, rc, MPI_SUCCESS);
    const char *what = is_float ? (in_place ? "float SUM in place" : "float SUM")
                                : (in_place ? "int SUM in place" : "int SUM");
    const void *res = in_place ? a : b;
    for (long i = 0; i < count; i++) {
        double want = 0, got = element(dt, res, i);
        for (int r = 0; r < size; r++)
            want += input(dt, r, i);
        check(is_float ? fclose_enough((float)got, want) : got == want, name, what, i, got, want);
        if (!in_place)
            check(element(dt, a, i) == input(dt, rank, i), name, "sendbuf untouched", i,
                  element(dt, a, i), input(dt, rank, i));
    }
    free(a);
    free(b);
}

/* Everything the interposer may route, and some it must hand to MPI. */
static void check_all(MPI_Comm comm, const char *name, long count)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    check_sum(comm, name, count, MPI_FLOAT, 0);
    check_sum(comm, name, count, MPI_FLOAT, 1);
    check_sum(comm, name, 3, MPI_FLOAT, 1);
    check_sum(comm, name, count, MPI_INT, 0);
    check_sum(comm, name, count, MPI_INT, 1);
    check_sum(comm, name, 3, MPI_INT32_T, 0);

    /* MPI_UNSIGNED SUM wraps modulo 2^32 */
    unsigned u[2] = {0xFFFFFFF0u + (unsigned)rank, (unsigned)rank}, ur[2];
    MPI_Allreduce(u, ur, 2, MPI_UNSIGNED, MPI_SUM, comm);
    unsigned uw0 = 0, uw1 = 0;
    for (int r = 0; r < size; r++)
        uw0 += 0xFFFFFFF0u + (unsigned)r, uw1 += (unsigned)r;
    check(ur[0] == uw0 && ur[1] == uw1, name, "unsigned SUM", 0, ur[0], uw0);

    /* count 0 */
    float z = 42.0f, zr = 7.0f;
    int rc = MPI_Allreduce(&z, &zr, 0, MPI_FLOAT, MPI_SUM, comm);
    check(rc == MPI_SUCCESS && zr == 7.0f, name, "count 0", 0, zr, 7.0);

    /* floats at an odd address, in place */
    enum { NU = 777 };
    unsigned char *raw = malloc(NU * sizeof(float) + 1);
    for (long i = 0; i < NU; i++) {
        float v = fval(rank, i);
        memcpy(raw + 1 + i * sizeof(float), &v, sizeof(v));
    }
    MPI_Allreduce(MPI_IN_PLACE, raw + 1, NU, MPI_FLOAT, MPI_SUM, comm);
    for (long i = 0; i < NU; i++) {
        float v;
        memcpy(&v, raw + 1 + i * sizeof(float), sizeof(v));
        check(fclose_enough(v, fsum(size, i)), name, "unaligned float SUM", i, v, fsum(size, i));
    }
    free(raw);

    /* MAX on MPI_INT */
    int m = (rank * 37) % 11, mr, mw = 0;
    MPI_Allreduce(&m, &mr, 1, MPI_INT, MPI_MAX, comm);
    for (int r = 0; r < size; r++)
        mw = (r * 37) % 11 > mw ? (r * 37) % 11 : mw;
    check(mr == mw, name, "int MAX", 0, mr, mw);

    /* MIN on MPI_FLOAT: exact (one of the inputs), -0 below +0 */
    float fm[3] = {fval(rank, 0), -fval(rank, 1) * (float)(rank + 1), rank == 0 ? -0.0f : 0.0f};
    float fmr[3], fmw[3];
    MPI_Allreduce(fm, fmr, 3, MPI_FLOAT, MPI_MIN, comm);
    for (int j = 0; j < 3; j++)
        for (int r = 0; r < size; r++) {
            float v = j == 0 ? fval(r, 0) : j == 1 ? -fval(r, 1) * (float)(r + 1)
                                                  : r == 0 ? -0.0f : 0.0f;
            fmw[j] = r == 0 || v < fmw[j] ? v : fmw[j];
        }
    for (int j = 0; j < 3; j++)
        check(fmr[j] == fmw[j] && signbit(fmr[j]) == signbit(fmw[j]), name, "float MIN", j,
              fmr[j], fmw[j]);

    /* SUM on MPI_DOUBLE: must stay exact in double precision */
    double d[2] = {1.0 + 1e-12 * (rank + 1), -3.0 * rank}, dr[2], dw0 = 0, dw1 = 0;
    MPI_Allreduce(d, dr, 2, MPI_DOUBLE, MPI_SUM, comm);
    for (int r = 0; r < size; r++)
        dw0 += 1.0 + 1e-12 * (r + 1), dw1 += -3.0 * r;
    check(fabs(dr[0] - dw0) <= 1e-15 * size && dr[1] == dw1, name, "double SUM", 0, dr[0], dw0);

    /* a user-defined op */
    MPI_Op op;
    MPI_Op_create(user_sum, 1, &op);
    int s = rank + 1, sr = 0;
    MPI_Allreduce(&s, &sr, 1, MPI_INT, op, comm);
    MPI_Op_free(&op);
    check(sr == size * (size + 1) / 2, name, "user op", 0, sr, size * (size + 1) / 2);
}

/* Rank 0 signals DIR/ready and waits for DIR/go (at most 60 s); the others wait in a barrier. */
static void pause_for(const char *dir, int rank)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/ready", dir);
        FILE *f = fopen(path, "w");
        if (f)
            fclose(f);
        snprintf(path, sizeof(path), "%s/go", dir);
        for (int i = 0; i < 600 && access(path, F_OK) != 0; i++)
            nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int init_thread = 0;
    for (int i = 1; i < argc; i++)
        init_thread |= !strcmp(argv[i], "--init-thread");
    if (init_thread) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    long count = 5000;
    int rounds = 2;
    const char *pause_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--count") && i + 1 < argc)
            count = atol(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pause") && i + 1 < argc)
            pause_dir = argv[++i];
        else if (strcmp(argv[i], "--init-thread") != 0) {
            fprintf(stderr, "usage: plain_allreduce [--count N] [--rounds R] [--pause DIR] "
                    "[--init-thread]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (count < 1)
        count = 1;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    MPI_Comm dup, split;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &split);
    for (int r = 0; r < rounds; r++) {
        check_all(MPI_COMM_WORLD, "world", count);
        check_all(dup, "dup", count);
        check_all(split, "split", count);
    }
    if (pause_dir) {
        pause_for(pause_dir, rank);
        /* In place first: with the switch gone, this call needs the kept input. */
        check_sum(MPI_COMM_WORLD, "world after pause", count, MPI_FLOAT, 1);
        check_sum(MPI_COMM_WORLD, "world after pause", count, MPI_INT, 0);
        check_sum(dup, "dup after pause", count, MPI_FLOAT, 0);
        check_sum(dup, "dup after pause", count, MPI_INT, 1);
    }
    MPI_Comm_free(&split); /* dup is left to MPI_Finalize on purpose */
    printf("plain_allreduce: rank %d of %d: %d checks, %d failed\n", rank, size, g_checks,
           g_failed);
    fflush(stdout);
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
