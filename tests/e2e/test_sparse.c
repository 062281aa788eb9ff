/* test_sparse.c: block-sparse all-reduce end to end: densities 1..0, three patterns, N = 1..4 and 8, int32 exact and float32 within the bound, auto mode, lanes, shards (two switches x two lanes, and two switches of which one offers no sparse), a tree of switches (sparse goes dense there), float adds, in place and in flight, loss, and the bytes on the wire from the switch's counters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "common/wire.h"
#include "e2e/harness.h"

#define ELEMS 256  /* per packet: 7 places of 32-element blocks */
#define WINDOW 8
#define BLOCK 32
#define COUNT 40000 /* 1250 blocks: columns of 11 blocks (PROTOCOL.md §17.5) */

static struct sw_proc sw;
static struct sw_proc sw2; /* a second switch: a shard, or the parent of a tree */

enum { RANDOM, OVERLAP, DISJOINT };
static const char *const pattern_name[] = {"random", "overlap", "disjoint"};
static const double densities[] = {1, 0.5, 0.1, 0.01, 0.001, 0};
#define NDENS (sizeof(densities) / sizeof(densities[0]))

/* 1 if rank r of n keeps block b of operation op (else the whole block is 0). */
static int keep(int r, int n, uint64_t op, size_t b, double d, int pattern)
{
    uint64_t h = h_mix(op * 0x100000001ull ^ b ^ 0x5A5A000000000000ull);
    double u = (double)(h >> 11) * 0x1p-53;
    if (pattern == OVERLAP)
        return u < d;
    if (pattern == DISJOINT)
        return (int)(h_mix(h) % (uint64_t)n) == r && u < fmin(1.0, d * n);
    return (double)(h_mix(h ^ (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull) >> 11) * 0x1p-53 < d;
}

/* Element j of rank r's input of op: h_i32 / h_f32 where the block is kept, else 0. */
static int32_t in_i32(int r, int n, uint64_t op, size_t j, double d, int p)
{
    return keep(r, n, op, j / BLOCK, d, p) ? h_i32(r, op, j) : 0;
}
static float in_f32(int r, int n, uint64_t op, size_t j, double d, int p)
{
    return keep(r, n, op, j / BLOCK, d, p) ? h_f32(r, op, j) : 0.0f;
}

static void fill(void *x, int r, int n, uint64_t op, size_t count, double d, int p, int f)
{
    for (size_t j = 0; j < count; j++) {
        if (f)
            ((float *)x)[j] = in_f32(r, n, op, j, d, p);
        else
            ((int32_t *)x)[j] = in_i32(r, n, op, j, d, p);
    }
}

/*
 * Every element against the exact sum: int32 bit-exact; float32 within
 * ina_float_error_bound for the largest magnitude of its quantization block
 * over all ranks (qb elements: BLOCK sparse, ELEMS dense), or with float_add
 * within ina_float_add_error_bound. @return the elements out of bound.
 */
static int verify_qb(const void *out, int n, uint64_t op, size_t count, double d, int p, int f,
                     int float_add, size_t qb)
{
    int bad = 0;
    for (size_t b0 = 0; b0 < count; b0 += qb) {
        size_t b1 = b0 + qb < count ? b0 + qb : count;
        double amax = 0;
        if (f)
            for (int r = 0; r < n; r++)
                for (size_t j = b0; j < b1; j++)
                    amax = fmax(amax, fabs(in_f32(r, n, op, j, d, p)));
        for (size_t j = b0; j < b1; j++) {
            if (!f) {
                uint32_t e = 0;
                for (int r = 0; r < n; r++)
                    e += (uint32_t)in_i32(r, n, op, j, d, p);
                bad += ((const uint32_t *)out)[j] != e;
                continue;
            }
            double e = 0, abs_sum = 0;
            for (int r = 0; r < n; r++) {
                double x = in_f32(r, n, op, j, d, p);
                e += x;
                abs_sum += fabs(x);
            }
            double bound = float_add ? ina_float_add_error_bound(INA_FLOAT32, n, abs_sum, e)
                                     : ina_float_error_bound(n, amax, e);
            double got = ((const float *)out)[j];
            if (!(fabs(got - e) <= bound)) {
                if (bad < 3)
                    fprintf(stderr, "element %zu: got %.9g, exact %.9g, bound %.3g\n", j, got, e,
                            bound);
                bad++;
            }
        }
    }
    return bad;
}

static int verify(const void *out, int n, uint64_t op, size_t count, double d, int p, int f,
                  int float_add)
{
    return verify_qb(out, n, op, count, d, p, f, float_add, BLOCK);
}

/* Blocks rank r sends for op, and blocks some rank has (the union). */
static void block_counts(int n, uint64_t op, size_t count, double d, int p, uint64_t *sent,
                         uint64_t *uni)
{
    *sent = *uni = 0;
    for (size_t b = 0; b < (count + BLOCK - 1) / BLOCK; b++) {
        int any = 0;
        for (int r = 0; r < n; r++)
            if (keep(r, n, op, b, d, p)) {
                (*sent)++;
                any = 1;
            }
        *uni += (uint64_t)any;
    }
}

struct scenario {
    const char *job;
    int lanes, float_add;
    int matrix;  /* every density x pattern x dtype; else density 0.1 only */
    int extras;  /* auto mode, in place, operations in flight */
    int nops;    /* with matrix == 0: operations per pattern and dtype */
    int shards;  /* 2: the job spread over sw and sw2 (an INA_SWITCH list) */
};

static int open_ctx(ina_ctx **ctx, const struct scenario *sc, int rank, int n)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, sc->job, rank, n, addr, sizeof(addr));
    if (sc->shards == 2) {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d,127.0.0.1:%d", sw.port, sw2.port);
        cfg.switch_addr = addr;
    }
    cfg.elems_per_packet = ELEMS;
    cfg.window = WINDOW;
    cfg.lanes = sc->lanes;
    cfg.float_add = sc->float_add;
    cfg.sparse = INA_SPARSE_ON;
    cfg.sparse_block = BLOCK;
    cfg.sparse_min_bytes = 4096; /* auto: measure from 4 KiB on */
    cfg.timeout_ms = 20000;
    int rc = ina_init(ctx, &cfg);
    if (rc)
        fprintf(stderr, "%s rank %d: ina_init: %s (%s)\n", sc->job, rank, ina_strerror(rc),
                ina_last_error(NULL));
    return rc;
}

/* One all-reduce of op in mode, checked (as a dense one if dense is set). @return 0 or 1. */
static int one_op_as(ina_ctx *ctx, const struct scenario *sc, int rank, int n, uint64_t op,
                     size_t count, double d, int p, int f, int mode, void *in, void *out,
                     int dense)
{
    fill(in, rank, n, op, count, d, p, f);
    memset(out, 0xEE, count * 4); /* poison: a block never written shows */
    int rc = ina_allreduce_sparse(ctx, in, out, count, f ? INA_FLOAT32 : INA_INT32, INA_SUM, mode);
    int bad = rc ? -1 : verify_qb(out, n, op, count, d, p, f, sc->float_add, dense ? ELEMS : BLOCK);
    if (rc || bad)
        fprintf(stderr, "%s rank %d/%d op %llu (%s, density %g, %s): %s, %d elements wrong\n",
                sc->job, rank, n, (unsigned long long)op, f ? "float32" : "int32", d,
                pattern_name[p], rc ? ina_err_name(rc) : "ok", bad);
    return rc || bad;
}

static int one_op(ina_ctx *ctx, const struct scenario *sc, int rank, int n, uint64_t op,
                  size_t count, double d, int p, int f, int mode, void *in, void *out)
{
    return one_op_as(ctx, sc, rank, n, op, count, d, p, f, mode, in, out, 0);
}

/* Auto mode, in place, and two sparse operations in flight around a dense one. */
static int extras(ina_ctx *ctx, const struct scenario *sc, int rank, int n, uint64_t *op,
                  int32_t *in, int32_t *out)
{
    int fails = 0;
    ina_stats s0, s1;
    ina_get_stats(ctx, &s0);
    fails += one_op(ctx, sc, rank, n, (*op)++, COUNT, 0.01, RANDOM, 0, INA_SPARSE_AUTO, in, out);
    fails += one_op_as(ctx, sc, rank, n, (*op)++, COUNT, 1, RANDOM, 1, INA_SPARSE_AUTO, in, out, 1);
    fails += one_op(ctx, sc, rank, n, (*op)++, 100, 0.01, RANDOM, 0, INA_SPARSE_AUTO, in, out);
    ina_get_stats(ctx, &s1);
    /* density 0.01: sparse; 1: measured and dense; 100 elements: below the floor, dense.
     * With lanes and shards, every part decides (and counts) for itself. */
    uint64_t parts = (uint64_t)sc->lanes * (sc->shards ? (uint64_t)sc->shards : 1);
    if (s1.sparse_ops - s0.sparse_ops != parts ||
        s1.sparse_auto_dense - s0.sparse_auto_dense != parts) {
        fprintf(stderr, "%s rank %d: auto mode: %llu sparse, %llu measured dense (want %llu each)\n",
                sc->job, rank, (unsigned long long)(s1.sparse_ops - s0.sparse_ops),
                (unsigned long long)(s1.sparse_auto_dense - s0.sparse_auto_dense),
                (unsigned long long)parts);
        fails++;
    }
    /* In place. */
    uint64_t o = (*op)++;
    fill(in, rank, n, o, COUNT, 0.1, OVERLAP, 1);
    int rc = ina_allreduce_sparse(ctx, in, in, COUNT, INA_FLOAT32, INA_SUM, INA_SPARSE_ON);
    if (rc || verify(in, n, o, COUNT, 0.1, OVERLAP, 1, sc->float_add)) {
        fprintf(stderr, "%s rank %d: in place: %s\n", sc->job, rank, ina_err_name(rc));
        fails++;
    }
    /* In flight: sparse, dense, sparse; started together, waited in reverse. */
    int32_t *bufs = malloc(6 * COUNT * sizeof(int32_t));
    ina_req *req[3];
    uint64_t ops[3];
    const int modes[3] = {INA_SPARSE_ON, INA_SPARSE_OFF, INA_SPARSE_ON};
    for (int k = 0; k < 3; k++) {
        ops[k] = (*op)++;
        fill(bufs + 2 * k * COUNT, rank, n, ops[k], COUNT, 0.05, RANDOM, k == 1);
        rc = ina_allreduce_sparse_start(ctx, bufs + 2 * k * COUNT, bufs + (2 * k + 1) * COUNT,
                                        COUNT, k == 1 ? INA_FLOAT32 : INA_INT32, INA_SUM,
                                        modes[k], &req[k]);
        if (rc) {
            fprintf(stderr, "%s rank %d: start: %s\n", sc->job, rank, ina_err_name(rc));
            free(bufs);
            return fails + 1;
        }
    }
    for (int k = 2; k >= 0; k--) {
        rc = ina_wait(req[k]);
        if (rc || verify_qb(bufs + (2 * k + 1) * COUNT, n, ops[k], COUNT, 0.05, RANDOM, k == 1,
                            sc->float_add, k == 1 ? ELEMS : BLOCK)) {
            fprintf(stderr, "%s rank %d: in flight %d: %s\n", sc->job, rank, k, ina_err_name(rc));
            fails++;
        }
    }
    free(bufs);
    return fails;
}

static int worker(int rank, int n, void *arg)
{
    const struct scenario *sc = arg;
    ina_ctx *ctx;
    if (open_ctx(&ctx, sc, rank, n))
        return 1;
    int32_t *in = malloc(COUNT * 4), *out = malloc(COUNT * 4);
    int fails = 0;
    uint64_t op = 1;
    for (int f = 0; f < 2; f++)
        for (int p = 0; p < 3; p++) {
            if (sc->matrix) {
                for (size_t di = 0; di < NDENS; di++)
                    fails += one_op(ctx, sc, rank, n, op++, COUNT, densities[di], p, f,
                                    INA_SPARSE_DEFAULT, in, out);
            } else {
                for (int k = 0; k < sc->nops; k++) /* sizes with a short last block */
                    fails += one_op(ctx, sc, rank, n, op++, COUNT - 7 * (size_t)k, 0.1, p, f,
                                    INA_SPARSE_DEFAULT, in, out);
            }
        }
    if (sc->extras)
        fails += extras(ctx, sc, rank, n, &op, in, out);
    ina_info info;
    ina_get_info(ctx, &info);
    if (!info.sparse) {
        fprintf(stderr, "%s rank %d: the switch does not offer sparse\n", sc->job, rank);
        fails++;
    }
    free(in);
    free(out);
    ina_finalize(ctx);
    return fails != 0;
}

/* The switch's exit report, from its log; the switch must have been started with log_path. */
static long long counter(const char *name) { return switch_counter(&sw, name); }

/*
 * Bytes on the wire: N = 4, one int32 operation of density 0.1 (random).
 * The switch's sparse counters must show exactly the blocks the ranks have
 * going up (each rank its own) and the union coming down (to each rank),
 * plus at most 32 + 4 + 12 C bytes per datagram (header, layout word,
 * place descriptors): density x dense + headers.
 */
static struct scenario bytes_sc = {"sp-bytes", 1, 0, 0, 0, 1, 0};
#define BYTES_OP 1

static int bytes_worker(int rank, int n, void *arg)
{
    (void)arg;
    ina_ctx *ctx;
    if (open_ctx(&ctx, &bytes_sc, rank, n))
        return 1;
    int32_t *in = malloc(COUNT * 4), *out = malloc(COUNT * 4);
    int fails = one_op(ctx, &bytes_sc, rank, n, BYTES_OP, COUNT, 0.1, RANDOM, 0, INA_SPARSE_ON,
                       in, out);
    free(in);
    free(out);
    ina_finalize(ctx);
    return fails;
}

static void test_bytes(void)
{
    const int n = 4;
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-sparse.%d.log", (int)getpid());
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    CHECK_EQ_INT(run_workers(n, bytes_worker, NULL, 60), 0);
    switch_stop(&sw);
    uint64_t sent, uni;
    block_counts(n, BYTES_OP, COUNT, 0.1, RANDOM, &sent, &uni);
    long long rxp = counter("sparse_rx_packets"), rxb = counter("sparse_rx_bytes");
    long long txp = counter("sparse_tx_packets"), txb = counter("sparse_tx_bytes");
    CHECK_EQ_INT(counter("sparse_rx_blocks"), sent);
    CHECK_EQ_INT(counter("sparse_tx_blocks"), (long long)uni * n);
    const double blk = 4.0 * BLOCK, per_pkt = INA_HDR_LEN + 4 + 12.0 * 7;
    double block_bytes = blk * ((double)sent + (double)uni * n);
    double dense = 2.0 * n * COUNT * 4; /* payload up and down, dense */
    double total = (double)(rxb + txb);
    printf("bytes on the wire: %.0f (%lld + %lld datagrams), blocks %.0f, dense payload %.0f: "
           "%.3f of dense, union density %.3f, own density %.3f\n", total, rxp, txp, block_bytes,
           dense, total / dense, (double)uni / (COUNT / BLOCK + 1.0),
           (double)sent / n / (COUNT / BLOCK + 1.0));
    CHECK(total >= block_bytes + (double)(rxp + txp) * (INA_HDR_LEN + 4));
    CHECK(total <= block_bytes + (double)(rxp + txp) * per_pkt);
    CHECK(rxp >= n && txp >= n);
    unlink(log);
    sw.log_path = NULL;
}

/*
 * Loss: 1% drop, 1% duplication and 5% reordering on the switch's input and
 * output and on every worker's sends. Every result still exact (int32) or
 * within bound: never added twice, never lost; no hang (the deadline).
 */
static void test_loss(void)
{
    const char *f = "drop=0.01,dup=0.01,reorder=0.05,seed=17";
    const char *const args[] = {"--fault-rx", f, "--fault-tx", f, NULL};
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-sparse-loss.%d.log", (int)getpid());
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    setenv("INA_FAULT", "drop=0.01,dup=0.01,reorder=0.05,seed=29", 1);
    struct scenario sc = {"sp-loss", 1, 0, 0, 0, 3, 0};
    CHECK_EQ_INT(run_workers(3, worker, &sc, 120), 0);
    unsetenv("INA_FAULT");
    switch_stop(&sw);
    /* The faults happened, and the switch saw copies it had to answer or drop. */
    long long resent = counter("results_resent"), dup = counter("drop_DUP_PENDING");
    printf("loss: %lld results resent, %lld duplicates dropped pending, %lld sparse datagrams in\n",
           resent, dup, counter("sparse_rx_packets"));
    CHECK(resent + dup > 0);
    CHECK_EQ_INT(counter("drop_MISMATCH"), 0);
    CHECK_EQ_INT(counter("drop_SPARSE"), 0);
    unlink(log);
    sw.log_path = NULL;
}

/*
 * Eviction (PROTOCOL.md §5.8) while sparse operations stream: the job moves
 * to rank 0's host aggregator at a stream position that may fall inside a
 * sparse operation, whose schedule then resumes there (migrate.c,
 * ina__sparse_rewind). Every result is verified, before and after the move.
 */
struct evict_shared {
    volatile uint16_t job_id;
    volatile int ops_before, ops_after, stop;
};
static struct evict_shared *esh;
static int metrics_port;

static int evict_worker(int rank, int n, void *arg)
{
    (void)arg;
    struct scenario sc = {"sp-evict", 1, 0, 0, 0, 0, 0};
    ina_ctx *ctx;
    if (open_ctx(&ctx, &sc, rank, n))
        return 1;
    if (rank == 0) {
        ina_info info;
        ina_get_info(ctx, &info);
        esh->job_id = (uint16_t)info.job_id;
    }
    const size_t cnt = 4 * COUNT;
    int32_t *buf = malloc(4 * cnt * sizeof(int32_t));
    int fails = 0;
    uint64_t op = 1;
    for (int more = 1; more && !fails;) {
        ina_req *req[2];
        uint64_t o[2];
        /* The last rank starts late: meanwhile the others stand a window deep
         * inside the first operation, so the eviction's bound most likely
         * falls inside a sparse operation. */
        if (rank == n - 1)
            usleep(30000);
        for (int k = 0; k < 2; k++) {
            o[k] = op++;
            int32_t *in = buf + 2 * k * cnt, *out = k ? in : in + cnt; /* the second in place */
            fill(in, rank, n, o[k], cnt, 0.05, RANDOM, (int)(o[k] & 1));
            int rc = ina_allreduce_sparse_start(ctx, in, out, cnt,
                                                (o[k] & 1) ? INA_FLOAT32 : INA_INT32, INA_SUM,
                                                INA_SPARSE_ON, &req[k]);
            if (rc) {
                fprintf(stderr, "sp-evict rank %d: start: %s\n", rank, ina_err_name(rc));
                return 1;
            }
        }
        for (int k = 0; k < 2; k++) {
            int32_t *res = buf + 2 * k * cnt + (k ? 0 : cnt);
            int rc = ina_wait(req[k]);
            int bad = rc ? 0 : verify(res, n, o[k], cnt, 0.05, RANDOM, (int)(o[k] & 1), 0);
            if (rc || bad) {
                fprintf(stderr, "sp-evict rank %d op %llu: %s, %d wrong\n", rank,
                        (unsigned long long)o[k], ina_err_name(rc), bad);
                fails++;
            }
        }
        ina_info info;
        ina_get_info(ctx, &info);
        if (rank == 0) {
            if (info.path == INA_PATH_HOST)
                esh->ops_after += 2;
            else
                esh->ops_before += 2;
        }
        int32_t flag = rank == 0 && !esh->stop, sum = 0;
        if (ina_allreduce_sparse(ctx, &flag, &sum, 1, INA_INT32, INA_SUM, INA_SPARSE_OFF) != 0)
            fails++;
        more = sum > 0;
    }
    free(buf);
    ina_finalize(ctx);
    return fails != 0;
}

static void test_evict(void)
{
    char mport[64];
    snprintf(mport, sizeof(mport), "/tmp/ina-test-sparse-m.%d", (int)getpid());
    unlink(mport);
    const char *const args[] = {"--metrics", "127.0.0.1:0", "--metrics-port-file", mport, NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    FILE *f = NULL;
    for (int i = 0; i < 100 && !(f = fopen(mport, "r")); i++)
        usleep(20000);
    CHECK(f && fscanf(f, "%d", &metrics_port) == 1);
    if (f)
        fclose(f);
    esh = mmap(NULL, sizeof(*esh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(esh != MAP_FAILED);
    memset((void *)esh, 0, sizeof(*esh));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(run_workers(3, evict_worker, NULL, 90) ? 1 : 0);
    for (double t0 = ina__clock_s(); (esh->ops_before < 6 || !esh->job_id) && ina__clock_s() - t0 < 30;)
        usleep(2000);
    CHECK_EQ_INT(ctl_job(metrics_port, "evict", esh->job_id), 0);
    for (double t0 = ina__clock_s(); esh->ops_after < 6 && ina__clock_s() - t0 < 30;)
        usleep(2000);
    esh->stop = 1;
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(esh->ops_after >= 6);
    switch_stop(&sw);
    munmap((void *)esh, sizeof(*esh));
    unlink(mport);
}

/*
 * Where some switch does not offer sparse, sparse requests go dense there
 * with the dense result, and ina_info.sparse is 0:
 * - a tree (sw2 the parent, sw a child with --parent; shards 0): the child
 *   offers no sparse (PROTOCOL.md §17.1), so no part goes sparse;
 * - shards whose switches differ (shards 2, sw2 --int-ops-only): the part at
 *   sw runs sparse, the part at sw2 dense (which is part 0 depends on their
 *   ports: PROTOCOL.md §12.1's shard order).
 * Int32 sums exact, and in the tree a float32 sum within the dense bound.
 */
static int partly_dense_worker(int rank, int n, void *arg)
{
    const struct scenario *sc = arg;
    ina_ctx *ctx;
    if (open_ctx(&ctx, sc, rank, n))
        return 1;
    int32_t *in = malloc(COUNT * 4), *out = malloc(COUNT * 4);
    int fails = 0;
    const uint64_t nops = 3;
    for (uint64_t k = 0; k < nops; k++)
        fails += one_op(ctx, sc, rank, n, 1 + k, COUNT, 0.05, (int)k, 0, INA_SPARSE_ON, in, out);
    if (!sc->shards)
        fails += one_op_as(ctx, sc, rank, n, 1 + nops, COUNT, 0.01, RANDOM, 1, INA_SPARSE_ON, in,
                           out, 1);
    ina_stats st;
    ina_info info;
    ina_get_stats(ctx, &st);
    ina_get_info(ctx, &info);
    const uint64_t want_sparse = sc->shards ? nops : 0;
    const int want_levels = sc->shards ? 1 : 2, want_shards = sc->shards ? 2 : 1;
    if (info.sparse || st.sparse_ops != want_sparse || info.levels != want_levels ||
        info.shards != want_shards) {
        fprintf(stderr, "%s rank %d: sparse %d, %llu sparse parts, levels %d, shards %d "
                "(want 0, %llu, %d, %d)\n", sc->job, rank, info.sparse,
                (unsigned long long)st.sparse_ops, info.levels, info.shards,
                (unsigned long long)want_sparse, want_levels, want_shards);
        fails++;
    }
    free(in);
    free(out);
    ina_finalize(ctx);
    return fails != 0;
}

static void test_mixed_shards(void)
{
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    const char *args[] = {"--int-ops-only", NULL};
    CHECK_EQ_INT(switch_start(&sw2, args), 0);
    struct scenario mixed = {"sp-mixed", 1, 0, 0, 0, 0, 2};
    CHECK_EQ_INT(run_workers(3, partly_dense_worker, &mixed, 120), 0);
    CHECK_EQ_INT(switch_stop(&sw2), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
}

static void test_tree(void)
{
    CHECK_EQ_INT(switch_start(&sw2, NULL), 0);
    char parent[32];
    snprintf(parent, sizeof(parent), "127.0.0.1:%d", sw2.port);
    const char *args[] = {"--parent", parent, NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    struct scenario tree = {"sp-tree", 1, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(run_workers(2, partly_dense_worker, &tree, 120), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_stop(&sw2), 0);
}

int main(void)
{
    test_bytes();
    test_evict();

    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    char job[4][32];
    for (int n = 1; n <= 4; n++) {
        snprintf(job[n - 1], sizeof(job[0]), "sp-matrix-%d", n);
        struct scenario sc = {job[n - 1], 1, 0, 1, n == 3, 0, 0};
        int failed = run_workers(n, worker, &sc, 120);
        if (failed)
            fprintf(stderr, "N = %d: %d workers failed\n", n, failed);
        CHECK_EQ_INT(failed, 0);
    }
    struct scenario big = {"sp-n8", 1, 0, 0, 0, 1, 0};
    CHECK_EQ_INT(run_workers(8, worker, &big, 120), 0);
    struct scenario lanes = {"sp-lanes", 2, 0, 0, 1, 2, 0};
    CHECK_EQ_INT(run_workers(2, worker, &lanes, 120), 0);
    struct scenario fadd = {"sp-fadd", 1, INA_FLOAT_ADD_SWITCH, 0, 0, 2, 0};
    CHECK_EQ_INT(run_workers(3, worker, &fadd, 120), 0);
    /* Shards: parts (shard i, lane j), each its own sparse operation at its switch. */
    CHECK_EQ_INT(switch_start(&sw2, NULL), 0);
    struct scenario shards = {"sp-shards", 2, 0, 0, 1, 1, 2};
    CHECK_EQ_INT(run_workers(3, worker, &shards, 120), 0);
    CHECK_EQ_INT(switch_stop(&sw2), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);

    test_mixed_shards();
    test_tree();

    test_loss();
    return check_report("test_sparse");
}
