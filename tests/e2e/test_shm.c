/* test_shm.c: end to end with shared-memory rings (ina-switch --shm, PROTOCOL.md §5.9): verified sums in every mode, lanes, UDP by choice, a dead peer, and a worker that corrupts its ring. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "e2e/harness.h"
#include "lib/internal.h"

static struct sw_proc sw;

#define COUNT (5 * 2048 + 77) /* several packets, a ragged tail */

static int join(int rank, int n, const char *job, int lanes, int float_add, ina_ctx **ctx)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.lanes = lanes;
    cfg.float_add = float_add;
    cfg.timeout_ms = 4000;
    int rc = ina_init(ctx, &cfg);
    if (rc)
        fprintf(stderr, "rank %d: ina_init: %s\n", rank, ina_strerror(rc));
    return rc;
}

/* INA_SHM in the environment of this worker, from arg: "0" keeps it on UDP. */
struct mode {
    const char *name;
    int lanes, float_add, want_shm;
    const char *env_shm;
};

/* int32 and float32 sums, in place and not, 20 rounds; ina_info.shm as expected. */
static int worker_sums(int rank, int n, void *arg)
{
    const struct mode *m = arg;
    if (m->env_shm)
        setenv("INA_SHM", m->env_shm, 1);
    char job[32];
    snprintf(job, sizeof(job), "shm-%s-%d", m->name, n);
    ina_ctx *ctx;
    if (join(rank, n, job, m->lanes, m->float_add, &ctx))
        return 1;
    ina_info info;
    int fails = 0;
    if (ina_get_info(ctx, &info) != 0 || info.shm != m->want_shm) {
        fprintf(stderr, "rank %d (%s): ina_info.shm %d, want %d\n", rank, m->name, info.shm,
                m->want_shm);
        fails++;
    }
    int32_t *a = malloc(4 * COUNT), *b = malloc(4 * COUNT);
    float *x = malloc(4 * COUNT), *y = malloc(4 * COUNT);
    for (uint64_t op = 0; op < 20 && a && b && x && y; op++) {
        for (size_t i = 0; i < COUNT; i++) {
            a[i] = h_i32(rank, op, i);
            x[i] = h_f32(rank, 1000 + op, i);
        }
        int inplace = op & 1;
        int rc = ina_allreduce(ctx, a, inplace ? a : b, COUNT, INA_INT32, INA_SUM);
        if (rc || h_check_sum(inplace ? a : b, COUNT, 1, n, op, 0, 0)) {
            fprintf(stderr, "rank %d (%s): int32 op %llu: %s\n", rank, m->name,
                    (unsigned long long)op, ina_strerror(rc));
            fails++;
        }
        rc = ina_allreduce(ctx, x, inplace ? x : y, COUNT, INA_FLOAT32, INA_SUM);
        const float *out = inplace ? x : y;
        int bad = rc != 0;
        for (size_t i = 0; !rc && i < COUNT; i++) {
            double exact = 0, abs_sum = 0;
            for (int r = 0; r < n; r++) {
                exact += h_f32(r, 1000 + op, i);
                abs_sum += fabs(h_f32(r, 1000 + op, i));
            }
            double bound = m->float_add ? ina_float_add_error_bound(INA_FLOAT32, n, abs_sum, exact)
                                        : ina_float_error_bound(n, 16.0, exact);
            bad += !(fabs(out[i] - exact) <= bound);
        }
        if (bad) {
            fprintf(stderr, "rank %d (%s): float32 op %llu: %s, %d bad\n", rank, m->name,
                    (unsigned long long)op, ina_strerror(rc), bad);
            fails++;
        }
    }
    free(a);
    free(b);
    free(x);
    free(y);
    ina_finalize(ctx);
    return fails;
}

/* Rank 1 dies after one operation: the others fail within their deadline. */
static int worker_dies(int rank, int n, void *arg)
{
    (void)arg;
    ina_ctx *ctx;
    if (join(rank, n, "shm-dies", 1, 0, &ctx))
        return 1;
    int32_t v[4096] = {0};
    if (ina_allreduce(ctx, v, v, 4096, INA_INT32, INA_SUM) != 0)
        return 1;
    if (rank == 1)
        raise(SIGKILL);
    double t0 = ina__clock_s();
    int rc = ina_allreduce(ctx, v, v, 4096, INA_INT32, INA_SUM);
    double s = ina__clock_s() - t0;
    ina_finalize(ctx);
    if ((rc != INA_ERR_TIMEOUT && rc != INA_ERR_ABORTED) || s > 10) {
        fprintf(stderr, "rank %d: after a peer died: %s after %.1f s\n", rank, ina_strerror(rc), s);
        return 1;
    }
    return 0;
}

/* Rank 0 corrupts its up ring (a tail far ahead) and goes quiet: the switch
 * finds the ring corrupt, aborts the job (drop SHM), and rank 1 fails at
 * once with ABORTED instead of hanging or summing junk.
 *
 * Rank 1 starts its first operation and then makes no libina call for a
 * second, so that when it looks again its last RESULTs wait in its down ring
 * and the ABORT (sent after them) waits on its socket. It must take them in
 * the order the switch sent them: the first operation succeeds, with the
 * right sum, and only the second is ABORTED. */
static int worker_corrupts(int rank, int n, void *arg)
{
    (void)arg;
    ina_ctx *ctx;
    if (join(rank, n, "shm-corrupt", 1, 0, &ctx))
        return 1;
    int32_t v[4096];
    for (int i = 0; i < 4096; i++)
        v[i] = i * (rank + 1);
    if (rank == 0) {
        int rc = ina_allreduce(ctx, v, v, 4096, INA_INT32, INA_SUM);
        if (rc != 0 || !ctx->shm) {
            fprintf(stderr, "rank 0: first operation: %s, rings %s\n", ina_strerror(rc),
                    ctx->shm ? "attached" : "not attached");
            return 1;
        }
        atomic_store(&ctx->shm->hdr->up.tail, (uint64_t)1 << 50);
        usleep(3000000); /* no libina call: only the switch can notice */
        return 0;
    }
    ina_req *req;
    int rc = ina_allreduce_start(ctx, v, v, 4096, INA_INT32, INA_SUM, &req);
    if (rc == 0) {
        usleep(1000000); /* rank 0 finishes and corrupts; the switch aborts within 200 ms */
        rc = ina_wait(req);
    }
    int bad = 0;
    for (int i = 0; i < 4096; i++)
        bad += v[i] != i * 3;
    if (rc != 0 || bad) {
        fprintf(stderr, "rank 1: the operation finished before the abort: %s, %d wrong sums\n",
                ina_strerror(rc), bad);
        return 1;
    }
    double t0 = ina__clock_s();
    rc = ina_allreduce(ctx, v, v, 4096, INA_INT32, INA_SUM);
    double s = ina__clock_s() - t0;
    ina_finalize(ctx);
    if (rc != INA_ERR_ABORTED || s > 2) {
        fprintf(stderr, "rank %d: after a corrupt ring: %s after %.1f s, want ABORTED at once\n",
                rank, ina_strerror(rc), s);
        return 1;
    }
    return 0;
}

int main(void)
{
    struct ina_shm probe;
    char name[INA_SHM_NAME_MAX];
    int fd;
    int rc = ina__ring_create(&probe, name, &fd, 64, ina__ring_slot_size(INA_HDR_LEN + 4 * 2048));
    if (rc != 0) {
        printf("test_shm: SKIP: no sealed memfd here (%s)\n", strerror(-rc));
        return 77;
    }
    close(fd);
    ina__ring_unmap(&probe);
    const char *const args[] = {"--shm", "--threads", "2", NULL};
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-shm.%d.log", (int)getpid());
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    static const struct mode modes[] = {
        {"quantized", 1, INA_FLOAT_ADD_QUANTIZED, 1, NULL},
        {"floatadd", 1, INA_FLOAT_ADD_SWITCH, 1, NULL},
        {"lanes", 3, INA_FLOAT_ADD_QUANTIZED, 1, NULL},
        {"udp", 1, INA_FLOAT_ADD_QUANTIZED, 0, "0"}, /* INA_SHM=0 */
    };
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        for (int n = 1; n <= 3; n += 2) {
            int failed = run_workers(n, worker_sums, (void *)&modes[i], 120);
            printf("%s, N=%d: %d workers failed\n", modes[i].name, n, failed);
            CHECK_EQ_INT(failed, 0);
        }
    }
    int failed = run_workers(3, worker_dies, NULL, 60);
    printf("a peer dies: %d workers failed (1 expected: the one killed)\n", failed);
    CHECK_EQ_INT(failed, 1);
    failed = run_workers(2, worker_corrupts, NULL, 60);
    printf("a worker corrupts its ring: %d workers failed\n", failed);
    CHECK_EQ_INT(failed, 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    long long attached = switch_counter(&sw, "shm_attached");
    long long rx = switch_counter(&sw, "shm_rx_packets"), tx = switch_counter(&sw, "shm_tx_packets");
    long long drops = switch_counter(&sw, "drop_SHM");
    printf("switch: shm_attached %lld, shm_rx_packets %lld, shm_tx_packets %lld, drop_SHM %lld\n",
           attached, rx, tx, drops);
    /* quantized, floatadd: 1 + 3 ranks each; lanes: 3 + 9; dies 3; corrupt 2 */
    CHECK_EQ_INT(attached, 4 + 4 + 12 + 3 + 2);
    CHECK(rx > 1000 && tx > 1000);
    CHECK(drops >= 1); /* the corrupt ring */
    unlink(log);
    return check_report("test_shm");
}
