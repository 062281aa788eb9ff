/* test_lanes.c: lanes (threads per worker) against a switch with several dataplane threads:
 * sums, async, lane-count mismatch, and a dead peer. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "e2e/harness.h"

#define ELEMS 256
static struct sw_proc sw;

struct params {
    const char *job;
    int lanes;
};

static int check_i32(const int32_t *out, size_t count, int n, uint64_t op)
{
    int bad = 0;
    for (size_t j = 0; j < count; j++) {
        uint32_t exact = 0;
        for (int r = 0; r < n; r++)
            exact += (uint32_t)h_i32(r, op, j);
        bad += (uint32_t)out[j] != exact;
    }
    return bad;
}

static int check_f32(const float *out, size_t count, int n, uint64_t op)
{
    int bad = 0;
    for (size_t b0 = 0; b0 < count; b0 += ELEMS) {
        size_t b1 = b0 + ELEMS < count ? b0 + ELEMS : count;
        double amax = 0;
        for (int r = 0; r < n; r++)
            for (size_t k = b0; k < b1; k++)
                amax = fmax(amax, fabs(h_f32(r, op, k)));
        for (size_t j = b0; j < b1; j++) {
            double exact = 0;
            for (int r = 0; r < n; r++)
                exact += h_f32(r, op, j);
            bad += !(fabs(out[j] - exact) <= ina_float_error_bound(n, amax, exact));
        }
    }
    return bad;
}

/* Blocking all-reduces of awkward sizes, both types, one in place; then 6 in flight. */
static int sums_worker(int rank, int n, void *arg)
{
    const struct params *p = arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, p->job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = ELEMS;
    cfg.window = 8;
    cfg.lanes = p->lanes;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg), fails = 0;
    if (rc) {
        fprintf(stderr, "rank %d lanes %d: ina_init: %s\n", rank, p->lanes, ina_strerror(rc));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    fails += info.lanes != p->lanes || info.elems_per_packet != ELEMS;

    const size_t counts[] = {0, 1, ELEMS - 1, ELEMS + 1, (size_t)p->lanes * ELEMS + 7, 100003};
    const size_t ncounts = sizeof(counts) / sizeof(counts[0]);
    uint64_t op = 0, ok_ops = 0;
    for (size_t c = 0; c < ncounts; c++) {
        size_t count = counts[c];
        int32_t *in = malloc(count * 4 + 4), *out = malloc(count * 4 + 4);
        for (int t = 0; t < 2; t++, op++) {
            for (size_t j = 0; j < count; j++) {
                if (t == 0)
                    in[j] = h_i32(rank, op, j);
                else
                    ((float *)in)[j] = h_f32(rank, op, j);
            }
            int inplace = c % 2;
            void *dst = inplace ? (void *)in : (void *)out;
            rc = ina_allreduce(ctx, in, dst, count, t ? INA_FLOAT32 : INA_INT32, INA_SUM);
            if (rc) {
                fprintf(stderr, "rank %d: count %zu: %s\n", rank, count, ina_strerror(rc));
                fails++;
                continue;
            }
            ok_ops++;
            fails += t ? check_f32(dst, count, n, op) : check_i32(dst, count, n, op);
        }
        free(in);
        free(out);
    }

    /* Several in flight: parts of different operations interleave on every lane. */
    enum { NASYNC = 6 };
    int32_t *ain[NASYNC], *aout[NASYNC];
    ina_req *req[NASYNC];
    for (int i = 0; i < NASYNC; i++) {
        size_t count = 5000 + (size_t)i * 3001;
        ain[i] = malloc(count * 4);
        aout[i] = malloc(count * 4);
        for (size_t j = 0; j < count; j++)
            ain[i][j] = h_i32(rank, 100 + (uint64_t)i, j);
        rc = ina_allreduce_start(ctx, ain[i], aout[i], count, INA_INT32, INA_SUM, &req[i]);
        fails += rc != 0;
        if (rc)
            req[i] = NULL;
    }
    for (int i = NASYNC - 1; i >= 0; i--) {
        int done = 0;
        if (req[i])
            ina_test(req[i], &done); /* may or may not be done: must not crash */
        rc = ina_wait(req[i]);
        fails += rc != 0;
        size_t count = 5000 + (size_t)i * 3001;
        if (req[i] && rc == 0)
            fails += check_i32(aout[i], count, n, 100 + (uint64_t)i);
        ok_ops += req[i] && rc == 0;
        free(ain[i]);
        free(aout[i]);
    }
    ina_stats st;
    ina_get_stats(ctx, &st);
    fails += st.ops != ok_ops || st.packets_received == 0;
    ina_finalize(ctx);
    if (fails)
        fprintf(stderr, "rank %d lanes %d: %d failures\n", rank, p->lanes, fails);
    return fails;
}

/* Rank 0 wants 2 lanes, the others 1: some rank must hear INA_ERR_MISMATCH,
 * and every rank must return within its join deadline. */
static int mismatch_worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "lanes-mismatch", rank, n, addr, sizeof(addr));
    cfg.lanes = rank == 0 ? 2 : 1;
    cfg.join_timeout_ms = 3000;
    if (rank == 1)
        usleep(200 * 1000); /* rank 0 registers first: rank 1 is the one refused */
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc == 0)
        ina_finalize(ctx);
    if (rank == 1)
        return rc != INA_ERR_MISMATCH;
    return rc != INA_ERR_TIMEOUT && rc != INA_ERR_MISMATCH;
}

/* Rank 2 dies after joining: the others fail within their operation deadline, not hang. */
static int dead_peer_worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "lanes-dead", rank, n, addr, sizeof(addr));
    cfg.lanes = 2;
    cfg.timeout_ms = 1500;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc)
        return 1;
    if (rank == 2)
        _exit(0); /* no LEAVE: looks like a crash */
    static int32_t buf[50000];
    double t0 = ina__clock_s();
    rc = ina_allreduce(ctx, buf, buf, 50000, INA_INT32, INA_SUM);
    double dt = ina__clock_s() - t0;
    int rc2 = ina_allreduce(ctx, buf, buf, 10, INA_INT32, INA_SUM);
    ina_finalize(ctx);
    if (rc != INA_ERR_TIMEOUT && rc != INA_ERR_ABORTED) {
        fprintf(stderr, "rank %d: dead peer gave %s\n", rank, ina_err_name(rc));
        return 1;
    }
    return (rc2 != INA_ERR_CLOSED) + (dt > 20);
}

int main(void)
{
    const char *const args[] = {"--threads", "3", NULL};
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-lanes.%d.log", (int)getpid());
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    struct params p1 = {"lanes-1", 1}, p2 = {"lanes-2", 2}, p3 = {"lanes-3", 3},
                  p4 = {"lanes-4", 4};
    CHECK_EQ_INT(run_workers(3, sums_worker, &p1, 120), 0);
    CHECK_EQ_INT(run_workers(3, sums_worker, &p2, 120), 0);
    CHECK_EQ_INT(run_workers(2, sums_worker, &p3, 120), 0);
    CHECK_EQ_INT(run_workers(4, sums_worker, &p4, 120), 0);
    CHECK_EQ_INT(run_workers(2, mismatch_worker, NULL, 30), 0);
    CHECK_EQ_INT(run_workers(3, dead_peer_worker, NULL, 60), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    /* With 3 dataplane threads, most lanes were sent to another thread at join (the eBPF
     * dataplane has no threads: every lane's job is the program's). */
    if (!h_ebpf())
        CHECK(switch_counter(&sw, "join_redirects") > 0);
    CHECK(switch_counter(&sw, "completions") > 0);
    CHECK_EQ_INT(switch_counter(&sw, "drop_MISMATCH"), 0);
    unlink(log);
    return check_report("test_lanes");
}
