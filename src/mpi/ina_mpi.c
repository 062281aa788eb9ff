/*
 * ina_mpi.c: libina-mpi.so, a PMPI interposer. Preloaded into an MPI program
 * (LD_PRELOAD=libina-mpi.so mpirun -np N ./app), it sends the program's
 * MPI_Allreduce calls through ina-switch. Only MPI_Init, MPI_Init_thread,
 * MPI_Allreduce and MPI_Finalize are defined here; every other MPI call goes
 * straight to the MPI library. docs/MPI.md is the user's guide.
 *
 * Rules that keep every rank in step (MPI collectives must match on all ranks):
 *  - Whether a call goes through ina depends only on what MPI requires to be
 *    the same on every rank (datatype, op, count, communicator) and on the
 *    INA_MPI_* options, which rank 0 broadcasts at MPI_Init.
 *  - Setting up a communicator (an ina job per communicator) is collective:
 *    every rank joins, then all agree (PMPI_Allreduce) whether all joined.
 *  - Whether a call that ina could serve does go through ina depends on its size
 *    and on the communicator's route (MPI below one size, ina above, ...), which
 *    rank 0 of the communicator decides and broadcasts when the communicator is
 *    set up: from a table measured by bench/mpi_route.sh, from a short
 *    calibration that every rank runs together, or forced (INA_MPI_ROUTE).
 *  - After each ina all-reduce, the ranks agree (one 3-int PMPI_Allreduce)
 *    whether it succeeded everywhere. If not, the communicator's ina context is
 *    dropped on every rank and the call is completed by MPI: broadcast from
 *    the lowest rank that has the full sum, else PMPI_Allreduce of the original
 *    input (kept for in-place calls unless INA_MPI_INPLACE_COPY=0).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>
/* Open MPI declares its extensions' datatypes (MPIX_C_FLOAT16, from Open MPI 5 where the
 * compiler has _Float16) in mpi-ext.h, not mpi.h; MPICH declares MPIX_C_FLOAT16 in mpi.h. */
#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

#include <ina.h>

#define LOG_PREFIX "ina-mpi: "

/* Calls and bytes, by what happened to them. */
struct tally {
    atomic_ullong ina_calls, ina_bytes;   /* completed through ina */
    atomic_ullong route_calls, route_bytes; /* ina could serve them: routed to MPI, faster there */
    atomic_ullong pass_calls, pass_bytes; /* handed to MPI: ina cannot or may not serve them */
    atomic_ullong fb_calls, fb_bytes;     /* tried ina, failed, completed by MPI */
};

/* ---- Routing: which path is faster for a call of a given size ------------- */

#define ROUTE_POINTS 24 /* sizes per table entry */
#define ROUTE_KEYS 32   /* table entries: (placement, ranks), from the file or calibrated */

enum route_mode { ROUTE_AUTO, ROUTE_TABLE, ROUTE_CALIBRATE, ROUTE_INA, ROUTE_MPI };
static const char *const route_mode_names[] = {"auto", "table", "calibrate", "ina", "mpi"};

/* One measured size: the time of one MPI_Allreduce by each path (the slowest rank's). */
struct route_point {
    uint64_t bytes;
    double mpi_us, ina_us;
};

/* The measurements of one placement (all ranks on one host or not) and communicator size. */
struct route_entry {
    int one_host, ranks, n, calibrated;
    struct route_point pt[ROUTE_POINTS]; /* by ascending bytes */
};

struct route_table {
    int n;
    struct route_entry e[ROUTE_KEYS];
};

/* A communicator's route: calls of fewer bytes than flip[0] take the path first_ina
 * names, and the path changes at each flip. Integers, broadcast by rank 0: every rank
 * compares the same numbers. */
struct route {
    int first_ina, nflips;
    uint64_t flip[ROUTE_POINTS];
};

/* One communicator served by ina: its own ina job (context). */
struct comm_state {
    MPI_Comm comm;
    ina_ctx *ctx; /* NULL once an ina failure made the communicator pass through */
    int rank, size;
    char job[INA_JOB_NAME_MAX + 1];
    void *scratch; /* copy of an in-place input, or an aligned staging buffer */
    size_t scratch_cap;
    unsigned long long calls, bytes, fallbacks; /* this communicator's ina traffic */
    unsigned long long routed, routed_bytes;    /* its calls routed to MPI as faster */
    struct route route;                         /* by size: MPI or ina (rank 0's) */
    struct comm_state *prev, *next;             /* live sub-communicators (g_lock) */
};

/* Options that decide the route of a call: rank 0's values, broadcast at MPI_Init. */
struct route_opts {
    int floats;       /* INA_MPI_FLOAT (default 1): MPI_FLOAT through ina (block floating point) */
    int doubles;      /* INA_MPI_DOUBLE (default 0): MPI_DOUBLE through ina (quantized) */
    int inplace_copy; /* INA_MPI_INPLACE_COPY (default 1): keep a copy of in-place inputs */
    int min_bytes;    /* INA_MPI_MIN_BYTES (default 0): smaller calls go to MPI */
    int route_mode;   /* INA_MPI_ROUTE (default auto): enum route_mode */
};

static int g_ready;   /* our MPI_Init setup ran and MPI_Finalize has not */
static int g_enabled; /* every rank had a usable INA_SWITCH configuration */
static int g_verbose, g_quiet;
static struct route_opts g_opt;
static int g_world_rank, g_world_size;
static ina_config g_cfg;                          /* INA_* tunables; job/rank/size set per comm */
static char g_base[INA_JOB_NAME_MAX + 1];         /* job name base, rank 0's, on every rank */
static struct comm_state *g_world;                /* MPI_COMM_WORLD's state, or &g_pass */
static struct comm_state g_pass;                  /* sentinel: this communicator passes through */
static int g_keyval = MPI_KEYVAL_INVALID;         /* caches a comm_state on a communicator */
static atomic_int g_next_job;                     /* this rank's next sub-communicator number */
static struct tally g_tally;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct comm_state *g_live; /* sub-communicator states, for MPI_Finalize */
/* Route measurements: the table file's (rank 0 of MPI_COMM_WORLD reads it and broadcasts it
 * at MPI_Init) and this process's calibrations (g_lock). */
static struct route_table g_table;
static char g_table_path[256];    /* for messages: the file rank 0 read, or "" */
/* Test hook (INA_MPI_TEST_FAIL_RANK=R): in the process of MPI_COMM_WORLD rank R, the
 * first ina all-reduce that succeeds (on any communicator) is reported as failed and
 * its result scribbled over, so that tests/scripts/test_mpi.sh can check the
 * broadcast fallback. -1: off. */
static atomic_int g_test_fail_rank = -1;

static int env_flag(const char *name, int dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    return strcmp(s, "0") != 0;
}

static int env_nonneg(const char *name, int dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0 || v > INT32_MAX) ? dflt : (int)v;
}

static void add(atomic_ullong *calls, atomic_ullong *bytes, unsigned long long nbytes)
{
    atomic_fetch_add(calls, 1);
    atomic_fetch_add(bytes, nbytes);
}

/* ---- Mapping MPI (datatype, op) to ina ------------------------------------ */

/* @return 1 and the ina dtype/op/element size if ina may serve (dt, op), else 0. */
static int map_call(MPI_Datatype dt, MPI_Op op, ina_dtype *idt, ina_op *iop, size_t *esize)
{
    int integer = 0, unsigned_sum_only = 0, float_extremes = 0;
    if (dt == MPI_FLOAT) {
        float_extremes = 1; /* exact in libina: order keys (PROTOCOL.md §8.9) */
        if (!g_opt.floats)
            return 0;
        *idt = INA_FLOAT32;
        *esize = 4;
    } else if ((dt == MPI_INT && sizeof(int) == 4) || dt == MPI_INT32_T) {
        *idt = INA_INT32;
        *esize = 4;
        integer = 1;
    } else if ((dt == MPI_UNSIGNED && sizeof(unsigned) == 4) || dt == MPI_UINT32_T) {
        /* A wrapping int32 sum is bit for bit the unsigned sum; MAX/MIN are not. */
        *idt = INA_INT32;
        *esize = 4;
        unsigned_sum_only = 1;
    } else if (dt == MPI_DOUBLE) {
        if (!g_opt.doubles) /* ina quantizes doubles: never by default */
            return 0;
        *idt = INA_FLOAT64;
        *esize = 8;
#if defined(MPIX_C_FLOAT16)
    } else if (dt == MPIX_C_FLOAT16) {
        float_extremes = 1;
        *idt = INA_FLOAT16;
        *esize = 2;
#endif
    } else {
        return 0;
    }
    if (op == MPI_SUM)
        *iop = INA_SUM;
    else if (((integer && !unsigned_sum_only) || float_extremes) && op == MPI_MAX)
        *iop = INA_MAX;
    else if (((integer && !unsigned_sum_only) || float_extremes) && op == MPI_MIN)
        *iop = INA_MIN;
    else
        return 0;
    return 1;
}

/* ---- Routing -------------------------------------------------------------- */

static int ina_path(struct comm_state *st, const void *sendbuf, void *recvbuf, int count,
                    MPI_Datatype dt, MPI_Op op, ina_dtype idt, ina_op iop, size_t esize,
                    int counted);

/* 1 if a call of `bytes` bytes goes through ina on a communicator with route r. */
static int route_ina(const struct route *r, uint64_t bytes)
{
    int ina = r->first_ina;
    for (int i = 0; i < r->nflips && bytes >= r->flip[i]; i++)
        ina = !ina;
    return ina;
}

/* ina is chosen only where it takes under this share of MPI's time: where the two are
 * within the noise of a measurement, MPI (never slower than MPI is the promise). On the
 * loaded 2-core test VM the same program's median moved by up to 1.6x between rounds;
 * at 0.9 a 16 KiB call on the emulated cluster measured 0.87 once and 1.3 the next time. */
#define ROUTE_MARGIN 0.8

/* The route of measured points: between two sizes each path's time is taken as linear in
 * the size (a latency plus bytes over a rate), so the path changes where the two lines
 * cross; below the smallest size the smallest's winner, above the largest the largest's. */
static void route_from_points(const struct route_entry *e, struct route *r)
{
    memset(r, 0, sizeof(*r));
    if (e->n == 0)
        return;
    r->first_ina = e->pt[0].ina_us < ROUTE_MARGIN * e->pt[0].mpi_us;
    for (int i = 0; i + 1 < e->n; i++) {
        const struct route_point *a = &e->pt[i], *b = &e->pt[i + 1];
        double da = a->ina_us - ROUTE_MARGIN * a->mpi_us;
        double db = b->ina_us - ROUTE_MARGIN * b->mpi_us;
        if ((da < 0) == (db < 0))
            continue;
        double x = (double)a->bytes + (double)(b->bytes - a->bytes) * (da / (da - db));
        uint64_t f = x >= (double)b->bytes ? b->bytes : (uint64_t)x + 1;
        r->flip[r->nflips++] = f > a->bytes ? f : a->bytes + 1;
    }
}

/* "MPI below 1281 B, ina from 1281 B" (or "... for every size") into out. */
static void route_describe(const struct route *r, char *out, size_t n)
{
    const char *name[2] = {"MPI", "ina"};
    int ina = r->first_ina;
    if (r->nflips == 0) {
        snprintf(out, n, "%s for every size", name[ina]);
        return;
    }
    size_t len = (size_t)snprintf(out, n, "%s below %llu B", name[ina],
                                  (unsigned long long)r->flip[0]);
    for (int i = 0; i < r->nflips && len < n; i++) {
        ina = !ina;
        len += (size_t)snprintf(out + len, n - len, ", %s from %llu B", name[ina],
                                (unsigned long long)r->flip[i]);
    }
}

/* The entry for (one_host, ranks) of the kind asked (calibrated or from the file) copied
 * into *out. @return 1 if found. */
static int table_find(int one_host, int ranks, int calibrated, struct route_entry *out)
{
    int found = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_table.n && !found; i++) {
        const struct route_entry *e = &g_table.e[i];
        if (e->one_host == one_host && e->ranks == ranks && e->calibrated == calibrated) {
            *out = *e;
            found = 1;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

/* Keep a calibration for later communicators of the same placement and size (the table
 * full: not kept, they calibrate again). */
static void table_keep(const struct route_entry *e)
{
    pthread_mutex_lock(&g_lock);
    int i = 0;
    while (i < g_table.n && !(g_table.e[i].calibrated && g_table.e[i].one_host == e->one_host &&
                              g_table.e[i].ranks == e->ranks))
        i++;
    if (i < ROUTE_KEYS) {
        g_table.e[i] = *e;
        if (i == g_table.n)
            g_table.n++;
    }
    pthread_mutex_unlock(&g_lock);
}

/* Add one point to t, keeping each entry's points sorted. @return 0, or -1 (a size given
 * twice, or no room). */
static int table_add(struct route_table *t, int one_host, int ranks, const struct route_point *p)
{
    struct route_entry *e = NULL;
    for (int i = 0; i < t->n && !e; i++)
        if (t->e[i].one_host == one_host && t->e[i].ranks == ranks)
            e = &t->e[i];
    if (!e) {
        if (t->n == ROUTE_KEYS)
            return -1;
        e = &t->e[t->n++];
        memset(e, 0, sizeof(*e));
        e->one_host = one_host;
        e->ranks = ranks;
    }
    if (e->n == ROUTE_POINTS)
        return -1;
    int j = e->n;
    while (j > 0 && e->pt[j - 1].bytes > p->bytes) {
        e->pt[j] = e->pt[j - 1];
        j--;
    }
    if (j > 0 && e->pt[j - 1].bytes == p->bytes)
        return -1;
    e->pt[j] = *p;
    e->n++;
    return 0;
}

/*
 * Read a route table (docs/MPI.md#routing): lines "PLACEMENT RANKS BYTES MPI_US INA_US",
 * PLACEMENT one of onehost and hosts; '#' starts a comment. @return 0 (t filled), -1 if
 * the file cannot be opened (errno), or the number of the first bad line (t then empty:
 * a table that is wrong in one place is not trusted in the others).
 */
static int table_read(const char *path, struct route_table *t)
{
    memset(t, 0, sizeof(*t));
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    int lineno = 0, bad = 0;
    while (!bad && fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char place[16], extra[2];
        int ranks;
        unsigned long long bytes;
        double mpi_us, ina_us;
        int got = sscanf(line, "%15s %d %llu %lf %lf %1s", place, &ranks, &bytes, &mpi_us,
                         &ina_us, extra);
        if (got <= 0)
            continue; /* blank or comment */
        int one_host = !strcmp(place, "onehost") ? 1 : !strcmp(place, "hosts") ? 0 : -1;
        struct route_point p = {.bytes = bytes, .mpi_us = mpi_us, .ina_us = ina_us};
        if (got != 5 || one_host < 0 || ranks < 2 || ranks > INA_MAX_WORKERS || bytes == 0 ||
            !isfinite(mpi_us) || !isfinite(ina_us) || mpi_us < 0 || ina_us < 0 ||
            table_add(t, one_host, ranks, &p) != 0)
            bad = lineno;
    }
    if (!bad && ferror(f))
        bad = lineno + 1;
    fclose(f);
    if (bad)
        memset(t, 0, sizeof(*t));
    return bad;
}

/* The table file: INA_MPI_ROUTE_FILE, else ${XDG_CACHE_HOME:-$HOME/.cache}/ina/mpi-route.txt.
 * @return 1 if the variable named it. */
static int table_path(char *out, size_t n)
{
    const char *env = getenv("INA_MPI_ROUTE_FILE"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    out[0] = 0;
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return 1;
    }
    if (xdg && *xdg)
        snprintf(out, n, "%s/ina/mpi-route.txt", xdg);
    else if (home && *home)
        snprintf(out, n, "%s/.cache/ina/mpi-route.txt", home);
    return 0;
}

/* Rank 0 of MPI_COMM_WORLD: read the table file into g_table, saying what went wrong. */
static void table_load(void)
{
    char path[sizeof(g_table_path)];
    int named = table_path(path, sizeof(path));
    if (!path[0])
        return;
    int rc = table_read(path, &g_table);
    if (rc == 0) {
        snprintf(g_table_path, sizeof(g_table_path), "%s", path);
        if (g_verbose)
            fprintf(stderr, LOG_PREFIX "route table '%s': %d entries\n", path, g_table.n);
    } else if (rc > 0 && !g_quiet) {
        fprintf(stderr, LOG_PREFIX "route table '%s': line %d is not \"onehost|hosts RANKS "
                "BYTES MPI_US INA_US\" (or repeats a size): the table is ignored\n", path, rc);
    } else if (rc < 0 && ((named && !g_quiet) || g_verbose)) {
        fprintf(stderr, LOG_PREFIX "route table '%s': %s%s\n", path, strerror(errno),
                named ? " (INA_MPI_ROUTE_FILE)" : "");
    }
}

/* An identity of the host as MPI's shared memory sees it: the boot, the host name and the
 * network namespace (ranks in different namespaces of one machine, like the emulated
 * cluster of scripts/netns.sh, count as different hosts). FNV-1a. */
static uint64_t host_id(void)
{
    char buf[512] = "";
    size_t len = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        len = fread(buf, 1, 64, f);
        fclose(f);
    }
    gethostname(buf + len, sizeof(buf) - len - 32);
    len += strlen(buf + len);
    struct stat ns;
    if (stat("/proc/self/ns/net", &ns) == 0)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, ":%llu",
                                (unsigned long long)ns.st_ino);
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
    return h;
}

/* Collective: 1 on every rank if all ranks of comm are on one host. */
static int comm_one_host(MPI_Comm comm)
{
    uint64_t id = host_id(), v[2] = {id, ~id};
    PMPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, comm);
    return v[0] == ~v[1]; /* the largest id is the smallest */
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

#define CAL_SIZES 8
#define CAL_ITERS 5
static const uint64_t cal_bytes[CAL_SIZES] = {4, 64, 1024, 8192, 65536, 262144, 1 << 20,
                                              4 << 20};

/* Tries per size: 5, but 3 at the largest, where one try of each path takes 40-100 ms on a
 * 1 Gbit/s link. */
static int cal_tries(uint64_t bytes)
{
    return bytes < cal_bytes[CAL_SIZES - 1] ? CAL_ITERS : 3;
}

/*
 * Collective over st's communicator: time MPI_Allreduce through MPI and through ina (the
 * agreement included, as a call pays it) at each calibration size, the paths alternating;
 * the slowest rank's time of each try counts, and its median over the tries. @return 0
 * and e filled (the same on every rank), or -1: no buffer on some rank, or ina failed (the
 * communicator's context is then gone on every rank, as after any ina failure).
 */
static int calibrate(struct comm_state *st, struct route_entry *e, double *seconds)
{
    double t0 = PMPI_Wtime();
    size_t max = cal_bytes[CAL_SIZES - 1];
    float *in = malloc(max), *out = malloc(max);
    int ok = in && out;
    PMPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, st->comm);
    if (!ok) {
        free(in);
        free(out);
        return -1;
    }
    int floats = g_opt.floats;
    MPI_Datatype dt = floats ? MPI_FLOAT : MPI_INT;
    ina_dtype idt = floats ? INA_FLOAT32 : INA_INT32;
    for (size_t i = 0; i < max / 4; i++) {
        if (floats)
            in[i] = (float)(i % 7) - 3.0f;
        else
            ((int32_t *)in)[i] = (int32_t)(i % 7) - 3;
    }
    /* On the stack: calibrations of different communicators may run at once on threads
     * of one process (MPI_THREAD_MULTIPLE), and a lock shared by them could deadlock two
     * processes that took them in a different order. */
    double t[CAL_SIZES][2][CAL_ITERS];
    memset(t, 0, sizeof(t));
    int failed = 0;
    /* Untimed calls of each path first, at the largest size: the first calls pay for what
     * is set up once (ina's lanes, MPI's large-message buffers, the output's pages), which
     * made MPI look slower than ina at 1-4 MiB on one host in 6 of 8 calibrations (0 of 8
     * with these calls). */
    memset(out, 0, max);
    for (int k = 0; k < 2 && !failed; k++) {
        PMPI_Allreduce(in, out, (int)(max / 4), dt, MPI_SUM, st->comm);
        ina_path(st, in, out, (int)(max / 4), dt, MPI_SUM, idt, INA_SUM, 4, 0);
        failed = !st->ctx;
    }
    for (int s = 0; s < CAL_SIZES && !failed; s++) {
        int count = (int)(cal_bytes[s] / 4), iters = cal_tries(cal_bytes[s]);
        for (int it = 0; it < iters && !failed; it++)
            for (int k = 0; k < 2 && !failed; k++) {
                int path = (it + k) % 2; /* MPI first on even tries, ina on odd */
                PMPI_Barrier(st->comm);
                double a = PMPI_Wtime();
                if (path == 0)
                    PMPI_Allreduce(in, out, count, dt, MPI_SUM, st->comm);
                else
                    ina_path(st, in, out, count, dt, MPI_SUM, idt, INA_SUM, 4, 0);
                t[s][path][it] = PMPI_Wtime() - a;
                failed = !st->ctx; /* the agreement: the same on every rank */
            }
    }
    if (!failed) {
        PMPI_Allreduce(MPI_IN_PLACE, t, CAL_SIZES * 2 * CAL_ITERS, MPI_DOUBLE, MPI_MAX,
                       st->comm);
        e->n = CAL_SIZES;
        for (int s = 0; s < CAL_SIZES; s++) {
            int iters = cal_tries(cal_bytes[s]);
            e->pt[s].bytes = cal_bytes[s];
            for (int path = 0; path < 2; path++) {
                qsort(t[s][path], (size_t)iters, sizeof(double), cmp_double);
                double us = t[s][path][iters / 2] * 1e6;
                if (path == 0)
                    e->pt[s].mpi_us = us;
                else
                    e->pt[s].ina_us = us;
            }
        }
    }
    free(in);
    free(out);
    *seconds = PMPI_Wtime() - t0;
    return failed ? -1 : 0;
}

/*
 * Collective over st's communicator, once its ina job is up: decide its route (rank 0
 * decides, every rank gets rank 0's), and say which with INA_MPI_VERBOSE.
 */
static void state_route(struct comm_state *st)
{
    enum { FROM_FORCED, FROM_FILE, FROM_CACHE, FROM_CALIBRATION, FROM_NOTHING };
    int one_host = comm_one_host(st->comm), mode = g_opt.route_mode, from = FROM_FORCED;
    struct route_entry e;
    memset(&e, 0, sizeof(e));
    if (st->rank == 0 && mode != ROUTE_INA && mode != ROUTE_MPI) {
        if (mode != ROUTE_CALIBRATE && table_find(one_host, st->size, 0, &e))
            from = FROM_FILE;
        else if (mode == ROUTE_TABLE)
            from = FROM_NOTHING;
        else if (table_find(one_host, st->size, 1, &e))
            from = FROM_CACHE;
        else
            from = FROM_CALIBRATION;
    }
    PMPI_Bcast(&from, 1, MPI_INT, 0, st->comm);
    double seconds = 0;
    int cal_failed = 0;
    if (from == FROM_CALIBRATION) {
        e.one_host = one_host;
        e.ranks = st->size;
        e.calibrated = 1;
        cal_failed = calibrate(st, &e, &seconds) != 0;
        if (!cal_failed)
            table_keep(&e);
    }
    if (st->rank == 0) {
        if (from == FROM_FORCED) {
            memset(&st->route, 0, sizeof(st->route));
            st->route.first_ina = mode == ROUTE_INA;
        } else {
            route_from_points(&e, &st->route); /* no points: MPI for every size */
        }
    }
    PMPI_Bcast(&st->route, (int)sizeof(st->route), MPI_BYTE, 0, st->comm);
    if (!g_verbose || st->rank != 0)
        return;
    char how[384], what[256];
    route_describe(&st->route, what, sizeof(what));
    switch (from) {
    case FROM_FORCED:
        snprintf(how, sizeof(how), "forced by INA_MPI_ROUTE=%s", route_mode_names[mode]);
        break;
    case FROM_FILE:
        snprintf(how, sizeof(how), "from the table '%s'", g_table_path);
        break;
    case FROM_CACHE:
        snprintf(how, sizeof(how), "from this run's calibration of an earlier communicator");
        break;
    case FROM_CALIBRATION:
        if (cal_failed)
            snprintf(how, sizeof(how), "calibration failed");
        else
            snprintf(how, sizeof(how), "calibrated in %.0f ms (%d sizes, %llu B to %llu B)",
                     seconds * 1e3, CAL_SIZES, (unsigned long long)cal_bytes[0],
                     (unsigned long long)cal_bytes[CAL_SIZES - 1]);
        break;
    default:
        snprintf(how, sizeof(how), "no table entry and INA_MPI_ROUTE=table");
        break;
    }
    fprintf(stderr, LOG_PREFIX "job '%s' (communicator of %d, %s): route %s: %s\n", st->job,
            st->size, one_host ? "one host" : "several hosts", how, what);
}

/* ---- Communicator states ------------------------------------------------- */

/* Free a state and leave its ina job. Not for &g_pass. */
static void state_destroy(struct comm_state *st)
{
    if (g_verbose && st->rank == 0)
        fprintf(stderr, LOG_PREFIX "job '%s' (communicator of %d): %llu calls (%llu bytes) "
                "through ina, %llu calls (%llu bytes) routed to MPI, %llu fell back to MPI\n",
                st->job, st->size, st->calls, st->bytes, st->routed, st->routed_bytes,
                st->fallbacks);
    if (st->ctx)
        ina_finalize(st->ctx);
    free(st->scratch);
    free(st);
}

static void live_insert(struct comm_state *st)
{
    pthread_mutex_lock(&g_lock);
    st->next = g_live;
    if (g_live)
        g_live->prev = st;
    g_live = st;
    pthread_mutex_unlock(&g_lock);
}

static void live_remove(struct comm_state *st)
{
    pthread_mutex_lock(&g_lock);
    if (st->prev)
        st->prev->next = st->next;
    else if (g_live == st)
        g_live = st->next;
    if (st->next)
        st->next->prev = st->prev;
    st->prev = st->next = NULL;
    pthread_mutex_unlock(&g_lock);
}

/* MPI calls this when a communicator carrying our attribute is freed (or at MPI_Finalize). */
static int delete_attr(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm, (void)keyval, (void)extra;
    struct comm_state *st = value;
    if (st && st != &g_pass) {
        live_remove(st);
        state_destroy(st);
    }
    return MPI_SUCCESS;
}

/*
 * Collective over comm: every rank joins ina job `job`, then all agree
 * whether all joined. @return the new state, or &g_pass (on every rank) if
 * any rank failed; rank 0 of comm then prints one warning.
 */
static struct comm_state *state_setup(MPI_Comm comm, int rank, int size, const char *job)
{
    struct comm_state *st = calloc(1, sizeof(*st));
    int rc = -ENOMEM;
    if (st) {
        st->comm = comm;
        st->rank = rank;
        st->size = size;
        snprintf(st->job, sizeof(st->job), "%s", job);
        ina_config cfg = g_cfg;
        cfg.job = st->job;
        cfg.rank = rank;
        cfg.world_size = size;
        rc = ina_init(&st->ctx, &cfg);
    }
    int worst = rc;
    PMPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, comm);
    if (worst == 0) {
        if (g_verbose && rank == 0)
            fprintf(stderr, LOG_PREFIX "communicator of %d ranks served by ina job '%s'\n", size,
                    job);
        state_route(st);
        return st;
    }
    if (rank == 0 && !g_quiet)
        fprintf(stderr, LOG_PREFIX "ina_init of job '%s' (%d ranks, switch %s) failed on at "
                "least one rank (%s: %s): MPI_Allreduce on %s goes to MPI\n", job, size,
                g_cfg.switch_addr, ina_err_name(worst), ina_strerror(worst),
                comm == MPI_COMM_WORLD ? "every communicator" : "this communicator");
    if (st) {
        ina_finalize(st->ctx); /* accepts NULL */
        free(st);
    }
    return &g_pass;
}

/* The state of a communicator other than MPI_COMM_WORLD; sets it up (collectively) on first use. */
static struct comm_state *sub_state(MPI_Comm comm)
{
    void *value = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, g_keyval, &value, &found) != MPI_SUCCESS)
        return &g_pass;
    if (found)
        return value;
    /* First eligible all-reduce on comm: every rank of comm is here now, and each
     * test below gives the same answer on all of them. */
    int inter = 0, size = 0, rank = 0;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    struct comm_state *st = &g_pass;
    if (!inter && size > 1 && size <= INA_MAX_WORKERS) {
        /* Job name: "<base>-r<W>c<K>" where W is the MPI_COMM_WORLD rank of
         * comm's rank 0 and K a counter of that process: unique for every
         * communicator of the run, and the same string on every rank. */
        int id[2] = {g_world_rank, 0};
        if (rank == 0)
            id[1] = atomic_fetch_add(&g_next_job, 1);
        PMPI_Bcast(id, 2, MPI_INT, 0, comm);
        char suffix[32], job[INA_JOB_NAME_MAX + 1];
        size_t slen = (size_t)snprintf(suffix, sizeof(suffix), "-r%dc%d", id[0], id[1]);
        size_t blen = strlen(g_base); /* cut so that the name fits in 31 bytes */
        if (blen > INA_JOB_NAME_MAX - slen)
            blen = INA_JOB_NAME_MAX - slen;
        memcpy(job, g_base, blen);
        memcpy(job + blen, suffix, slen + 1);
        st = state_setup(comm, rank, size, job);
        if (st != &g_pass)
            live_insert(st);
    }
    /* On failure (not with a valid keyval) the state stays in g_live for MPI_Finalize. */
    PMPI_Comm_set_attr(comm, g_keyval, st);
    return st;
}

static void *scratch_get(struct comm_state *st, size_t bytes)
{
    if (st->scratch_cap < bytes) {
        void *p = malloc(bytes);
        if (!p)
            return NULL;
        free(st->scratch);
        st->scratch = p;
        st->scratch_cap = bytes;
    }
    return st->scratch;
}

/* ---- All-reduce ---------------------------------------------------------- */

static int pass_through(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt,
                        MPI_Op op, MPI_Comm comm)
{
    int rc = PMPI_Allreduce(sendbuf, recvbuf, count, dt, op, comm);
    int tsize = 0;
    if (rc == MPI_SUCCESS && PMPI_Type_size(dt, &tsize) == MPI_SUCCESS)
        add(&g_tally.pass_calls, &g_tally.pass_bytes,
            (unsigned long long)count * (unsigned long long)tsize);
    return rc;
}

/* An ina failure on some rank: drop the context everywhere and let MPI complete the call. */
static int fall_back(struct comm_state *st, const int agreed[3], const void *orig, void *recvbuf,
                     const void *result, int count, MPI_Datatype dt, MPI_Op op, size_t bytes)
{
    int first_ok = -agreed[1], code = -agreed[2];
    ina_finalize(st->ctx);
    st->ctx = NULL;
    if (first_ok >= st->size && !orig) {
        /* In place without a copy (INA_MPI_INPLACE_COPY=0), and no rank finished: the
         * input is overwritten on every rank. Never return a wrong sum: raise an error.
         * Every rank says why before it raises it: with MPI_ERRORS_ARE_FATAL the first
         * rank to raise it ends the job, and rank 0 may not have printed yet. */
        fprintf(stderr, LOG_PREFIX "rank %d: ina all-reduce on job '%s' failed on every rank "
                "(%s: %s); its in-place input was overwritten and not kept "
                "(INA_MPI_INPLACE_COPY=0): raising MPI_ERR_OTHER\n", st->rank, st->job,
                ina_err_name(code), ina_strerror(code));
        PMPI_Comm_call_errhandler(st->comm, MPI_ERR_OTHER);
        return MPI_ERR_OTHER;
    }
    if (st->rank == 0 && !g_quiet) {
        char how[64];
        if (first_ok < st->size)
            snprintf(how, sizeof(how), "broadcast from rank %d, which has the sum", first_ok);
        else
            snprintf(how, sizeof(how), "MPI_Allreduce of the original input");
        fprintf(stderr, LOG_PREFIX "ina all-reduce on job '%s' failed (%s: %s); MPI completes "
                "the call (%s); later calls on this communicator go to MPI\n", st->job,
                ina_err_name(code), ina_strerror(code), how);
    }
    st->fallbacks++;
    add(&g_tally.fb_calls, &g_tally.fb_bytes, bytes);
    if (first_ok < st->size) {
        /* That rank's ina call succeeded: its buffer holds the complete sum. */
        if (st->rank == first_ok && result != recvbuf)
            memcpy(recvbuf, result, bytes);
        return PMPI_Bcast(recvbuf, count, dt, first_ok, st->comm);
    }
    return PMPI_Allreduce(orig, recvbuf, count, dt, op, st->comm);
}

/* The call through ina, completed by MPI if ina fails on any rank. counted: 0 for the
 * calibration's calls, which the totals leave out. */
static int ina_path(struct comm_state *st, const void *sendbuf, void *recvbuf, int count,
                    MPI_Datatype dt, MPI_Op op, ina_dtype idt, ina_op iop, size_t esize,
                    int counted)
{
    size_t bytes = (size_t)count * esize;
    int in_place = sendbuf == MPI_IN_PLACE;
    const void *input = in_place ? recvbuf : sendbuf;
    size_t align = esize < 4 ? 4 : esize;
    int aligned = (((uintptr_t)input | (uintptr_t)recvbuf) & (align - 1)) == 0;

    /* src/dst: what ina reads and writes. orig: the untouched input for a
     * fallback PMPI_Allreduce (MPI_IN_PLACE: recvbuf still holds it), or NULL. */
    const void *src = sendbuf, *orig = sendbuf;
    void *dst = recvbuf;
    int status = 0;
    if (!aligned || (in_place && g_opt.inplace_copy)) {
        void *tmp = scratch_get(st, bytes);
        if (!tmp) {
            status = -ENOMEM; /* the others' calls will time out; then all fall back */
        } else {
            memcpy(tmp, input, bytes);
            src = tmp;
            if (!aligned) { /* ina works on tmp only; recvbuf keeps the input */
                dst = tmp;
                orig = in_place ? MPI_IN_PLACE : sendbuf;
            } else { /* aligned, in place: ina reads the copy, writes recvbuf */
                orig = tmp;
            }
        }
    } else if (in_place) {
        src = recvbuf;
        orig = NULL; /* INA_MPI_INPLACE_COPY=0: the input is not kept */
    }

    if (status == 0) {
        ina_req *req;
        status = ina_allreduce_start(st->ctx, src, dst, (size_t)count, idt, iop, &req);
        if (status == INA_ERR_NOTSUP || status == -EINVAL || status == -EOVERFLOW)
            /* Refused before anything was sent, for reasons that depend only on
             * dtype, op and count: every rank refuses alike, so no agreement. */
            return pass_through(sendbuf, recvbuf, count, dt, op, st->comm);
        if (status == 0)
            status = ina_wait(req);
    }
    if (status == 0 && atomic_load(&g_test_fail_rank) == g_world_rank &&
        atomic_exchange(&g_test_fail_rank, -1) == g_world_rank) {
        memset(dst, 0xA5, bytes);
        status = INA_ERR_ABORTED;
    }

    /* Agree: {any rank failed, -(lowest rank that succeeded, else size), -(lowest code)}. */
    int agreed[3] = {status != 0, status == 0 ? -st->rank : -st->size, -status};
    PMPI_Allreduce(MPI_IN_PLACE, agreed, 3, MPI_INT, MPI_MAX, st->comm);
    if (agreed[0])
        return fall_back(st, agreed, orig, recvbuf, dst, count, dt, op, bytes);
    if (dst != recvbuf)
        memcpy(recvbuf, dst, bytes);
    if (counted) {
        st->calls++;
        st->bytes += bytes;
        add(&g_tally.ina_calls, &g_tally.ina_bytes, bytes);
    }
    return MPI_SUCCESS;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm)
{
    ina_dtype idt;
    ina_op iop;
    size_t esize;
    /* Count 0, aliased buffers (an MPI error) and anything ina cannot serve go to MPI. */
    if (!g_ready || !g_enabled || count <= 0 || comm == MPI_COMM_NULL ||
        (sendbuf == recvbuf && sendbuf != MPI_IN_PLACE) ||
        !map_call(datatype, op, &idt, &iop, &esize) ||
        (size_t)count * esize < (size_t)g_opt.min_bytes)
        return pass_through(sendbuf, recvbuf, count, datatype, op, comm);
    struct comm_state *st = comm == MPI_COMM_WORLD ? g_world : sub_state(comm);
    if (st == &g_pass || !st->ctx)
        return pass_through(sendbuf, recvbuf, count, datatype, op, comm);
    uint64_t bytes = (uint64_t)count * esize;
    if (!route_ina(&st->route, bytes)) { /* MPI is faster for this size */
        int rc = PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
        if (rc == MPI_SUCCESS) {
            st->routed++;
            st->routed_bytes += bytes;
            add(&g_tally.route_calls, &g_tally.route_bytes, bytes);
        }
        return rc;
    }
    return ina_path(st, sendbuf, recvbuf, count, datatype, op, idt, iop, esize, 1);
}

/* ---- Init and finalize --------------------------------------------------- */

/* A job name base unique to this run: "mpi-" and a hash of rank 0's host, pid and clock. */
static void default_base(char *out, size_t n)
{
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = host; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h ^= (uint32_t)getpid() * 2654435761u ^ (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec;
    snprintf(out, n, "mpi-%08x", (unsigned)h);
}

/* INA_MPI_ROUTE on this rank (rank 0's is broadcast); an unknown value is auto, said once. */
static int route_mode_from_env(void)
{
    const char *s = getenv("INA_MPI_ROUTE");
    if (!s || !*s)
        return ROUTE_AUTO;
    for (int m = 0; m < (int)(sizeof(route_mode_names) / sizeof(route_mode_names[0])); m++)
        if (!strcmp(s, route_mode_names[m]))
            return m;
    if (!g_quiet)
        fprintf(stderr, LOG_PREFIX "INA_MPI_ROUTE=%s is not auto, table, calibrate, ina or mpi: "
                "auto\n", s);
    return ROUTE_AUTO;
}

/* After PMPI_Init: decide, identically on every rank, whether ina serves this run. */
static void setup(void)
{
    PMPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
    g_verbose = env_flag("INA_MPI_VERBOSE", 0);
    g_quiet = env_flag("INA_MPI_QUIET", 0);
    atomic_store(&g_test_fail_rank, env_nonneg("INA_MPI_TEST_FAIL_RANK", -1));
    g_world = &g_pass;
    g_ready = 1;

    /* Why ina cannot serve, worst over ranks: 0 it can, 1 INA_SWITCH unset,
     * 2 a malformed INA_* variable, 3 no attribute key. */
    int why = 0;
    const char *sw = getenv("INA_SWITCH");
    if (!sw || !*sw)
        why = 1;
    else if (ina_config_from_env(&g_cfg) != 0)
        why = 2;
    else if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_attr, &g_keyval, NULL) !=
             MPI_SUCCESS)
        why = 3;
    int worst = why;
    PMPI_Allreduce(&why, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst != 0) {
        static const char *const reason[] = {"", "INA_SWITCH is not set",
                                             "an INA_* variable is malformed",
                                             "MPI_Comm_create_keyval failed"};
        if (g_world_rank == 0 && !g_quiet)
            fprintf(stderr, LOG_PREFIX "%s (on at least one rank): every MPI_Allreduce goes to "
                    "MPI (INA_MPI_QUIET=1 silences this)\n", reason[worst]);
        return;
    }

    /* Rank 0's routing options, route table and job name base, for every rank. */
    int opt[5] = {env_flag("INA_MPI_FLOAT", 1), env_flag("INA_MPI_DOUBLE", 0),
                  env_flag("INA_MPI_INPLACE_COPY", 1), env_nonneg("INA_MPI_MIN_BYTES", 0),
                  g_world_rank == 0 ? route_mode_from_env() : ROUTE_AUTO};
    PMPI_Bcast(opt, 5, MPI_INT, 0, MPI_COMM_WORLD);
    g_opt = (struct route_opts){.floats = opt[0], .doubles = opt[1], .inplace_copy = opt[2],
                                .min_bytes = opt[3], .route_mode = opt[4]};
    if (g_world_rank == 0 && (g_opt.route_mode == ROUTE_AUTO || g_opt.route_mode == ROUTE_TABLE))
        table_load();
    PMPI_Bcast(&g_table, (int)sizeof(g_table), MPI_BYTE, 0, MPI_COMM_WORLD);
    PMPI_Bcast(g_table_path, (int)sizeof(g_table_path), MPI_CHAR, 0, MPI_COMM_WORLD);
    g_table_path[sizeof(g_table_path) - 1] = 0;
    if (g_world_rank == 0) {
        const char *job = getenv("INA_JOB");
        if (job && *job)
            snprintf(g_base, sizeof(g_base), "%s", job);
        else
            default_base(g_base, sizeof(g_base));
    }
    PMPI_Bcast(g_base, sizeof(g_base), MPI_CHAR, 0, MPI_COMM_WORLD);
    g_base[sizeof(g_base) - 1] = 0;
    g_enabled = 1;
    if (g_world_size > 1 && g_world_size <= INA_MAX_WORKERS) {
        g_world = state_setup(MPI_COMM_WORLD, g_world_rank, g_world_size, g_base);
        /* The switch did not take MPI_COMM_WORLD's job: no communicator will try (each
         * try could wait INA_JOIN_TIMEOUT_MS). Every rank saw the same outcome. */
        if (g_world == &g_pass)
            g_enabled = 0;
    }
}

/* Before PMPI_Finalize: leave every ina job, report. */
static void teardown(void)
{
    if (!g_ready)
        return;
    for (;;) {
        pthread_mutex_lock(&g_lock);
        struct comm_state *st = g_live;
        pthread_mutex_unlock(&g_lock);
        if (!st)
            break;
        /* Communicators the program did not free: deleting our attribute runs
         * delete_attr(), which frees the state; do it by hand if that fails. */
        if (PMPI_Comm_delete_attr(st->comm, g_keyval) != MPI_SUCCESS) {
            live_remove(st);
            state_destroy(st);
        }
    }
    if (g_world != &g_pass)
        state_destroy(g_world);
    g_world = &g_pass;
    if (g_keyval != MPI_KEYVAL_INVALID)
        PMPI_Comm_free_keyval(&g_keyval);
    if (g_verbose)
        fprintf(stderr, LOG_PREFIX "rank %d of %d: %llu calls (%llu bytes) through ina, "
                "%llu calls (%llu bytes) routed to MPI (faster there), %llu calls (%llu bytes) "
                "passed to MPI, %llu calls (%llu bytes) fell back to MPI after an ina "
                "failure\n", g_world_rank, g_world_size,
                (unsigned long long)g_tally.ina_calls, (unsigned long long)g_tally.ina_bytes,
                (unsigned long long)g_tally.route_calls, (unsigned long long)g_tally.route_bytes,
                (unsigned long long)g_tally.pass_calls, (unsigned long long)g_tally.pass_bytes,
                (unsigned long long)g_tally.fb_calls, (unsigned long long)g_tally.fb_bytes);
    g_ready = 0;
    g_enabled = 0;
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS)
        setup();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        setup();
    return rc;
}

int MPI_Finalize(void)
{
    teardown();
    return PMPI_Finalize();
}
