/* test_inflight.c: many all-reduces in flight at once, of random dtypes, ops, sizes, buffers and block-sparse modes (off, on, auto: the probe, dense after it, blocks that do not divide the packet), on random sparse data, completed in a random order on each rank, every element checked, on every path: UDP, shared-memory rings, lanes with several switch threads, shards (without and with lanes), the host fallback, float adds, and across an eviction; FLOAT16 and BFLOAT16 on the 16-bit wire on each of them, and FLOAT32 on it too in bfloat16 and binary16, also with multicast results. */
#include <libgen.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "e2e/verify.h"
#include "lib/internal.h"

#define ELEMS 512   /* elements per packet: large ops span many windows */
#define WINDOW 32
#define MAX_INFLIGHT 8
#define MAX_COUNT 300000
/* Auto measures operations from 64 KiB (of the whole operation): most of the middle
 * sizes below, the large ones above, and parts of both sides of it. */
#define SPARSE_MIN_BYTES 65536

static struct sw_proc sw, sw2; /* sw2: the second shard */
static int metrics_port;
static uint64_t seed = 20261124;

/* What the parent and the workers share (an anonymous shared mapping). */
struct shared {
    volatile uint16_t job_id;
    volatile int batches_done; /* rank 0 */
    volatile int evict_now, evicted; /* rank 0 asks, with operations in flight; the parent answers */
    volatile int path, shm;    /* rank 0's ina_info at the end */
    volatile long long ops, elems; /* rank 0: verified */
    volatile long long sparse_ops, auto_dense; /* rank 0's ina_stats at the end */
    volatile int sparse_offered; /* rank 0's ina_info.sparse (not by the eBPF dataplane) */
    volatile int wire_bits;      /* rank 0's ina_info.wire_bits */
};
static struct shared *sh;

struct path {
    const char *name;
    const char *const *sw_args;
    int n, lanes, float_add;
    int shm;           /* 1: expect rings; 0: INA_SHM=0, or a switch without --shm */
    int expect_path;   /* INA_PATH_SWITCH or INA_PATH_HOST (fallback, eviction) */
    int evict;         /* the parent evicts the job in the middle of a batch */
    int blocker;       /* a job of the parent's holds the whole pool: NOSPACE, fallback */
    int spin;          /* complete only by polling ina_test(), never sleeping in libina:
                          a worker that never sleeps gets no DOORBELL (rings) */
    int batches;
    int block;         /* sparse_block: most do not divide ELEMS (parts start inside blocks) */
    int shards;        /* 2: INA_SWITCH lists sw and sw2 */
    int wire_bits, wire_half; /* ina_config's: 0 (FLOAT16, BFLOAT16 on the 16-bit wire),
                                 16 (FLOAT32 too, in wire_half's format), 32 (none) */
};

/* splitmix64 over a private state: the same op schedule on every rank. */
static uint64_t rnd(uint64_t *s) { return h_mix((*s)++); }

struct opdesc {
    ina_dtype dt;
    ina_op op;
    size_t count;
    int inplace;
    int mode;                /* INA_SPARSE_*: DEFAULT is the context's, AUTO */
    struct vfy_sparsity sp;  /* the inputs' zero granules */
};

/*
 * Op j of batch b: the same on every rank (a function of the seed only).
 * Block-sparse: every mode, on inputs from dense to all zero in granules of
 * the block, of 37 elements (blocks partly zero) or of 3 blocks, the same
 * granules on every rank or each rank its own; auto operations from
 * SPARSE_MIN_BYTES on measure, and go sparse or dense by the ranks' summed
 * density. The first two of batch 0 are an auto operation that goes sparse
 * and one that measures and goes dense, on every path and seed, each above
 * the floor but in parts (lanes, shards) below it.
 */
static struct opdesc describe(uint64_t b, int j, int block)
{
    uint64_t s = seed ^ (b << 20) ^ ((uint64_t)j << 8);
    struct opdesc d;
    d.dt = (ina_dtype)(rnd(&s) % 5);
    d.op = (ina_op)(rnd(&s) % 4);
    if (d.dt == INA_FLOAT64 && (d.op == INA_MAX || d.op == INA_MIN))
        d.op = INA_SUM; /* refused (NOTSUP), test_types covers that */
    uint64_t c = rnd(&s) % 100;
    size_t big = d.dt == INA_INT32 || d.dt == INA_FLOAT32 ? MAX_COUNT : MAX_COUNT / 4;
    d.count = c < 55   ? 1 + rnd(&s) % 700             /* one round, a few packets */
              : c < 85 ? 1000 + rnd(&s) % 20000        /* about a window */
                       : big / 4 + rnd(&s) % (big * 3 / 4); /* many windows */
    d.inplace = (int)(rnd(&s) & 1);
    static const int modes[] = {INA_SPARSE_DEFAULT, INA_SPARSE_OFF, INA_SPARSE_ON, INA_SPARSE_AUTO};
    static const double density[] = {0, 0.01, 0.05, 0.15, 0.5, 1};
    d.mode = modes[rnd(&s) % 4];
    d.sp.density = density[rnd(&s) % 6];
    uint64_t g = rnd(&s) % 3;
    d.sp.granule = g == 0 ? (size_t)block : g == 1 ? 37 : 3 * (size_t)block;
    d.sp.same = (int)(rnd(&s) & 1);
    if (b == 0 && j < 2) {
        d.dt = INA_FLOAT32;
        d.op = INA_SUM;
        d.count = 20000 + (size_t)j * 1111; /* 80 KB: two parts of 40 KB */
        d.mode = INA_SPARSE_AUTO;
        d.sp.density = j == 0 ? 0.02 : 1; /* summed over N <= 3 ranks: below 0.4, above */
        d.sp.granule = (size_t)block;
    }
    return d;
}

static int batch_size(uint64_t b)
{
    uint64_t s = seed ^ (b * 0x1000193u) ^ 0xB47C;
    int n = 1 + (int)(rnd(&s) % MAX_INFLIGHT);
    return b == 0 && n < 2 ? 2 : n; /* describe's two auto operations */
}

/*
 * How part [e0, e1) of an operation must stream, by PROTOCOL.md §17.6 on every
 * rank's inputs: 1 sparse, 0 dense; *probed: an auto part that measured. The
 * context's mode is auto; every path's switch offers block-sparse (but the
 * eBPF dataplane: offered 0), and ELEMS holds a block of every size used.
 */
static int part_sparse(const struct opdesc *d, int n, uint64_t opnum, size_t e0, size_t e1,
                       int block, int offered, int *probed)
{
    int mode = d->mode == INA_SPARSE_DEFAULT ? INA_SPARSE_AUTO : d->mode;
    *probed = 0;
    if (mode == INA_SPARSE_OFF || !offered || (d->op != INA_SUM && d->op != INA_AVG))
        return 0;
    if (mode == INA_SPARSE_ON)
        return 1;
    if (d->count * vfy_esize[d->dt] < SPARSE_MIN_BYTES) /* the whole operation's size */
        return 0;
    *probed = 1;
    /* The probe: each rank's density of non-zero blocks in units of 2^-20, summed.
     * Blocks lie on the operation's grid: the part's first may be short. */
    size_t phase = e0 % (size_t)block;
    uint64_t nblocks = (phase + (e1 - e0) + (size_t)block - 1) / (size_t)block, sum = 0;
    for (int r = 0; r < n; r++) {
        uint64_t nnz = 0;
        for (uint64_t b = 0; b < nblocks; b++) {
            size_t s0 = b ? e0 + b * (size_t)block - phase : e0;
            size_t s1 = e0 + (b + 1) * (size_t)block - phase < e1 ? e0 + (b + 1) * (size_t)block - phase
                                                                 : e1;
            int nz = 0;
            for (size_t i = s0; i < s1 && !nz; i++)
                nz = vfy_value_sparse(d->dt, r, opnum, i, 0, &d->sp) != 0;
            nnz += (uint64_t)nz;
        }
        sum += nnz * (1u << 20) / nblocks;
    }
    return (double)sum < 0.4 * (1 << 20); /* the default crossover */
}

/*
 * Check every part of an operation with the quantization blocks it must have
 * used (verify.h: packets of k elements, or blocks of the operation), and
 * count what rank 0's ina_stats must say: parts streamed sparse, auto parts
 * that measured and went dense. Parts as lanes.c cuts them: blocks of k (2k
 * for an operation on the 16-bit wire), split evenly over shards x lanes (the
 * paths that end on rank 0's host have one part there and before). float_add:
 * the context's float path (verify.h: VFY_FADD, VFY_W16, ...). @return the
 * elements that are wrong.
 */
static int check_op(const struct path *p, const struct opdesc *d, int n, uint64_t opnum, size_t k,
                    int offered, int float_add, const void *out, long long *sparse,
                    long long *auto_dense)
{
    const size_t cut = vfy_on_w16(d->dt, d->op, float_add) ? 2 * k : k;
    size_t nparts = (size_t)p->lanes * (size_t)p->shards, nb = (d->count + cut - 1) / cut;
    int bad = 0;
    for (size_t i = 0; i < nparts; i++) {
        size_t e0 = nb * i / nparts * cut, e1 = nb * (i + 1) / nparts * cut;
        e1 = e1 < d->count ? e1 : d->count;
        if (e1 <= e0)
            continue;
        int probed, sp = part_sparse(d, n, opnum, e0, e1, p->block, offered, &probed);
        *sparse += sp;
        *auto_dense += probed && !sp;
        bad += vfy_check_sparse(d->dt, n, d->op, opnum, d->count, e0, e1, k, (size_t)p->block,
                                sp ? VFY_SPARSE : VFY_DENSE, float_add, &d->sp, out);
    }
    return bad;
}

struct slot {
    struct opdesc d;
    uint64_t opnum; /* for the generator: unique per op of the run */
    uint8_t *in, *out;
    ina_req *req;
};

static int worker(int rank, int n, void *arg)
{
    const struct path *p = arg;
    setenv("INA_SHM", p->shm ? "1" : "0", 1);
    char addr[64], job[32];
    snprintf(job, sizeof(job), "inflight-%s", p->name);
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    if (p->shards == 2) {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d,127.0.0.1:%d", sw.port, sw2.port);
        cfg.switch_addr = addr;
    }
    cfg.elems_per_packet = ELEMS;
    cfg.window = WINDOW;
    cfg.lanes = p->lanes;
    cfg.float_add = p->float_add;
    cfg.timeout_ms = 15000;
    cfg.sparse = INA_SPARSE_AUTO;
    cfg.sparse_block = p->block;
    cfg.sparse_min_bytes = SPARSE_MIN_BYTES;
    cfg.wire_bits = p->wire_bits;
    cfg.wire_half = p->wire_half;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "%s rank %d: ina_init: %s\n", p->name, rank, ina_strerror(rc));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    if (rank == 0)
        sh->job_id = (p->lanes > 1 ? ina__lanes_ctx(ctx, 0) : ctx)->job_id;
    int float_add = vfy_float_path(&info, &cfg);
    size_t k = (size_t)info.elems_per_packet;
    if (rank == 0)
        sh->wire_bits = info.wire_bits;

    struct slot s[MAX_INFLIGHT];
    for (int j = 0; j < MAX_INFLIGHT; j++) {
        s[j].in = malloc(8 * (size_t)MAX_COUNT);
        s[j].out = malloc(8 * (size_t)MAX_COUNT);
        if (!s[j].in || !s[j].out)
            return 1;
    }
    uint64_t order_state = seed ^ 0xC0FFEEull ^ ((uint64_t)rank << 32); /* differs per rank */
    int fails = 0;
    long long ops = 0, elems = 0, want_sparse = 0, want_auto_dense = 0;
    uint64_t opnum = 0;
    for (int b = 0; b < p->batches && !fails; b++) {
        int nb = batch_size((uint64_t)b);
        for (int j = 0; j < nb; j++) {
            s[j].d = describe((uint64_t)b, j, p->block);
            s[j].opnum = ++opnum;
            size_t es = vfy_esize[s[j].d.dt];
            for (size_t i = 0; i < s[j].d.count; i++)
                vfy_gen_sparse(s[j].d.dt, rank, s[j].opnum, i, &s[j].d.sp, s[j].in + i * es);
            memset(s[j].out, 0xA5, s[j].d.count * es);
            void *dst = s[j].d.inplace ? s[j].in : s[j].out;
            rc = ina_allreduce_sparse_start(ctx, s[j].in, dst, s[j].d.count, s[j].d.dt, s[j].d.op,
                                            s[j].d.mode, &s[j].req);
            if (rc) {
                fprintf(stderr, "%s rank %d: start: %s\n", p->name, rank, ina_strerror(rc));
                return 1;
            }
        }
        if (p->evict && rank == 0 && b == p->batches / 3) {
            /* The eviction comes while this batch is in flight. */
            sh->evict_now = 1;
            for (double t0 = ina__clock_s(); !sh->evicted && ina__clock_s() - t0 < 30;)
                usleep(1000);
        }
        /* Complete them in a random order: poll a random one, wait for it
         * when it is done (or sometimes at once). */
        for (int left = nb; left > 0;) {
            int j = (int)(rnd(&order_state) % (uint64_t)nb);
            if (!s[j].req)
                continue;
            int done = 0;
            if (!p->spin && rnd(&order_state) % 4 == 0)
                done = 1;
            else
                rc = ina_test(s[j].req, &done);
            if (!done)
                continue;
            rc = ina_wait(s[j].req);
            s[j].req = NULL;
            left--;
            const struct opdesc *d = &s[j].d;
            const void *dst = d->inplace ? s[j].in : s[j].out;
            int bad = rc ? 1
                         : check_op(p, d, n, s[j].opnum, k, info.sparse, float_add, dst,
                                    &want_sparse, &want_auto_dense);
            if (bad) {
                fprintf(stderr, "%s rank %d batch %d op %d (%s %s count %zu%s, sparse mode %d, "
                        "density %g in granules of %zu%s): %s, %d wrong\n", p->name, rank, b, j,
                        vfy_dnames[d->dt], vfy_onames[d->op], d->count,
                        d->inplace ? " in place" : "", d->mode, d->sp.density, d->sp.granule,
                        d->sp.same ? " alike" : "", ina_err_name(rc), bad);
                fails++;
            }
            ops++;
            elems += (long long)d->count;
        }
        if (rank == 0)
            sh->batches_done = b + 1;
    }
    ina_get_info(ctx, &info);
    ina_stats st;
    ina_get_stats(ctx, &st);
    if (rank == 0) {
        sh->path = info.path;
        sh->shm = info.shm;
        sh->ops = ops;
        sh->elems = elems;
        sh->sparse_ops = (long long)st.sparse_ops;
        sh->auto_dense = (long long)st.sparse_auto_dense;
        sh->sparse_offered = info.sparse;
    }
    /* Every part streamed as the rule says (the data checks could pass either way
     * where a block's bound is the packet's). */
    if (!fails && ((long long)st.sparse_ops != want_sparse ||
                   (long long)st.sparse_auto_dense != want_auto_dense)) {
        fprintf(stderr, "%s rank %d: %llu parts sparse, %llu measured dense; the rule says %lld "
                "and %lld\n", p->name, rank, (unsigned long long)st.sparse_ops,
                (unsigned long long)st.sparse_auto_dense, want_sparse, want_auto_dense);
        fails++;
    }
    for (int j = 0; j < MAX_INFLIGHT; j++) {
        free(s[j].in);
        free(s[j].out);
    }
    rc = ina_finalize(ctx);
    return fails || rc;
}

/* ina-ctl evict ID through the switch's metrics port (the job list is
 * published every 100 ms: retry while it is not listed yet). */
static int evict(unsigned id)
{
    char bin[512], line[700];
    snprintf(bin, sizeof(bin), "%s", INA_SWITCH_BIN);
    snprintf(line, sizeof(line), "%s/ina-ctl --metrics 127.0.0.1:%d evict %u >/dev/null 2>&1",
             dirname(bin), metrics_port, id);
    int rc = -1;
    for (int i = 0; i < 30 && rc != 0; i++) {
        rc = system(line);
        if (rc != 0)
            usleep(100 * 1000);
    }
    return rc;
}

static void run_path(const struct path *p)
{
    char log[64], log2[64], mport[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-inflight.%d.log", (int)getpid());
    snprintf(log2, sizeof(log2), "/tmp/ina-test-inflight.%d.2.log", (int)getpid());
    sw2.log_path = log2;
    snprintf(mport, sizeof(mport), "/tmp/ina-test-inflight-m.%d", (int)getpid());
    sw.log_path = log;
    const char *args[16];
    int na = 0;
    for (int i = 0; p->sw_args && p->sw_args[i]; i++)
        args[na++] = p->sw_args[i];
    if (p->evict) {
        args[na++] = "--metrics";
        args[na++] = "127.0.0.1:0";
        args[na++] = "--metrics-port-file";
        args[na++] = mport;
    }
    args[na] = NULL;
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    if (p->shards == 2)
        CHECK_EQ_INT(switch_start(&sw2, p->sw_args), 0);
    if (p->evict) {
        FILE *f = fopen(mport, "r");
        CHECK(f && fscanf(f, "%d", &metrics_port) == 1);
        if (f)
            fclose(f);
    }
    memset((void *)sh, 0, sizeof(*sh));
    ina_ctx *blocker = NULL;
    if (p->blocker) { /* one rank, the whole pool */
        char addr[64];
        ina_config cfg;
        worker_config(&cfg, &sw, "inflight-blocker", 0, 1, addr, sizeof(addr));
        cfg.window = 16;
        CHECK_EQ_INT(ina_init(&blocker, &cfg), 0);
    }
    double t0 = ina__clock_s();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(run_workers(p->n, worker, (void *)p, 120) ? 1 : 0);
    if (p->evict) {
        while (!sh->evict_now && ina__clock_s() - t0 < 60)
            usleep(1000);
        CHECK_EQ_INT(evict(sh->job_id), 0);
        usleep(200 * 1000); /* the switch's MIGRATE is out before rank 0 goes on */
        sh->evicted = 1;
    }
    int st;
    waitpid(pid, &st, 0);
    int failed = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    printf("%-18s N=%d lanes=%d shards=%d block=%d: %lld ops, %lld elements verified per rank, "
           "path %s%s, %lld parts sparse, %lld measured dense, %.2f s%s\n", p->name, p->n,
           p->lanes, p->shards, p->block, sh->ops, sh->elems,
           sh->path == INA_PATH_HOST ? "host" : "switch", sh->shm ? " (rings)" : "",
           sh->sparse_ops, sh->auto_dense, ina__clock_s() - t0, failed ? "  FAILED" : "");
    CHECK_EQ_INT(failed, 0);
    if (sh->sparse_offered) /* auto went both ways (batch 0) */
        CHECK(sh->sparse_ops > 0 && sh->auto_dense > 0);
    else
        CHECK(h_ebpf()); /* every other dataplane offers block-sparse */
    CHECK_EQ_INT(sh->path, p->expect_path);
    /* Every path but the eBPF dataplane offers the 16-bit wire (the host fallback
     * too); an evicted job keeps its first switch's offer (PROTOCOL.md §8.10.7). */
    const int ebpf_first = h_ebpf() && (p->expect_path == INA_PATH_SWITCH || p->evict);
    CHECK_EQ_INT(sh->wire_bits, p->wire_bits == 32 || ebpf_first ? 32 : 16);
    CHECK_EQ_INT(sh->shm, p->shm && p->expect_path == INA_PATH_SWITCH);
    if (blocker)
        CHECK_EQ_INT(ina_finalize(blocker), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "drop_MISMATCH"), 0);
    CHECK_EQ_INT(switch_counter(&sw, "drop_TXQ"), 0);
    if (p->shards == 2) {
        CHECK_EQ_INT(switch_stop(&sw2), 0);
        CHECK_EQ_INT(switch_counter(&sw2, "drop_MISMATCH"), 0);
        CHECK_EQ_INT(switch_counter(&sw2, "drop_TXQ"), 0);
    }
    if (p->evict)
        CHECK_EQ_INT(switch_counter(&sw, "jobs_evicted"), 1);
    unlink(log);
    unlink(log2);
    unlink(mport);
}

int main(void)
{
    /* Two schedules: a fixed one, and a new one each run (printed, so that
     * a failure can be repeated with INA_TEST_SEED). */
    const char *env = getenv("INA_TEST_SEED");
    uint64_t seeds[2] = {seed, (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32)};
    int nseeds = 2;
    if (env) {
        seeds[0] = strtoull(env, NULL, 0);
        nseeds = 1;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);

    static const char *const none[] = {NULL};
    static const char *const shm[] = {"--shm", NULL};
    static const char *const threads[] = {"--threads", "3", NULL};
    static const char *const shm_threads[] = {"--shm", "--threads", "2", NULL};
    static const char *const mcast[] = {"--multicast", NULL};
    /* Room for the blocker's 16 slots only: the test's job gets NOSPACE, so rank 0 aggregates. */
    static const char *const tiny[] = {"--slots", "16", "--max-job-slots", "16", "--min-job-slots",
                                       "16", NULL};
    /* name, switch, N, lanes, float adds, rings, path, evict, blocker, spin, batches,
     * sparse block (100, 96, 48, 160: parts cut at multiples of ELEMS start inside a
     * block; 256 divides ELEMS), shards */
    const struct path paths[] = {
        {"udp", none, 3, 1, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_SWITCH, 0, 0, 0, 12, 100, 1, 0, 0},
        {"rings", shm, 3, 1, INA_FLOAT_ADD_QUANTIZED, 1, INA_PATH_SWITCH, 0, 0, 0, 20, 96, 1, 0, 0},
        {"rings-spin", shm, 2, 1, INA_FLOAT_ADD_QUANTIZED, 1, INA_PATH_SWITCH, 0, 0, 1, 20, 256, 1, 0, 0},
        {"lanes-threads", threads, 3, 3, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_SWITCH, 0, 0, 0, 10, 100, 1, 0, 0},
        {"lanes-rings", shm_threads, 2, 2, INA_FLOAT_ADD_QUANTIZED, 1, INA_PATH_SWITCH, 0, 0, 1, 10, 160, 1, 0, 0},
        {"shards", none, 3, 1, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_SWITCH, 0, 0, 0, 10, 100, 2, 0, 0},
        {"shards-lanes-rings", shm_threads, 2, 2, INA_FLOAT_ADD_QUANTIZED, 1, INA_PATH_SWITCH, 0, 0, 1, 8, 48, 2, 0, 0},
        {"float-add", shm, 3, 1, INA_FLOAT_ADD_SWITCH, 1, INA_PATH_SWITCH, 0, 0, 1, 10, 100, 1, 0, 0},
        {"fallback", tiny, 3, 1, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_HOST, 0, 1, 0, 8, 96, 1, 0, 0},
        {"evicted", shm, 3, 1, INA_FLOAT_ADD_QUANTIZED, 1, INA_PATH_HOST, 1, 0, 0, 12, 100, 1, 0, 0},
        /* FLOAT32 on the 16-bit wire too (FLOAT16 and BFLOAT16 are on it on every path
         * above): bfloat16 through lanes and switch threads, binary16 over shards and
         * rings, across an eviction, and with multicast results; and everything at 32 bits. */
        {"wire16-lanes", threads, 3, 2, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_SWITCH, 0, 0, 0, 8, 100, 1,
         16, INA_WIRE_HALF_BF16},
        {"wire16-fp16-shards", shm, 2, 1, INA_FLOAT_ADD_SWITCH, 1, INA_PATH_SWITCH, 0, 0, 1, 8, 96, 2,
         16, INA_WIRE_HALF_FP16},
        {"wire16-evicted", none, 3, 1, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_HOST, 1, 0, 0, 10, 100, 1,
         16, INA_WIRE_HALF_BF16},
        {"wire16-multicast", mcast, 3, 1, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_SWITCH, 0, 0, 0, 8, 100, 1,
         16, INA_WIRE_HALF_FP16},
        {"wire32", none, 3, 1, INA_FLOAT_ADD_QUANTIZED, 0, INA_PATH_SWITCH, 0, 0, 0, 6, 100, 1, 32, 0},
    };
    const char *only = getenv("INA_TEST_PATH");
    for (int k = 0; k < nseeds; k++) {
        seed = seeds[k];
        printf("seed %llu (INA_TEST_SEED=%llu to repeat)\n", (unsigned long long)seed,
               (unsigned long long)seed);
        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
            /* The eBPF dataplane has no rings, threads or float adds. */
            int needs_userspace = paths[i].sw_args != none && paths[i].sw_args != tiny;
            if ((!only || strcmp(only, paths[i].name) == 0) && !(h_ebpf() && needs_userspace))
                run_path(&paths[i]);
        }
    }
    munmap((void *)sh, sizeof(*sh));
    return check_report("test_inflight");
}
