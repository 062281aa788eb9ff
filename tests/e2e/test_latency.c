/* test_latency.c: the latency path (fixed point, busy polling, many small operations in flight) under 1% loss and duplication: every sum exact, none counted twice, no hang. */
#include <math.h>

#include "check.h"
#include "e2e/harness.h"

#define NOPS 1500
#define INFLIGHT 8 /* ina-glm's pipeline: several one-packet micro-batches out at once */
#define MAXC 256
#define BITS 23 /* P4SGD's Q8.23 */

static struct sw_proc sw;
static const char *scenario_name;
static int busy_poll_us;
static int lanes; /* 0: the library's choice */

/* P4SGD's sizes: 8 partial dots (32 B) mostly, and a few other small counts. */
static size_t op_count(int i)
{
    static const size_t c[] = {8, 8, 1, 8, 3, 64, 8, 256, 8, 7};
    return c[i % 10];
}

/*
 * The fixed-point sum is exact: sum over ranks of round(x 2^23) (ties to
 * even, as the library rounds), scaled back and rounded once to float. So
 * every element is compared for equality: a contribution counted twice (a
 * duplicate or a retransmission added again) or missing changes it by at
 * least 2^-23 unless that rank's value rounds to 0.
 */
static float expected(int n, int op, size_t j)
{
    int64_t s = 0;
    for (int r = 0; r < n; r++)
        s += (int64_t)nearbyint(ldexp(h_f32(r, (uint64_t)op, j), BITS));
    return (float)ldexp((double)s, -BITS);
}

static int worker(int rank, int n, void *arg)
{
    const char *lib_fault = arg;
    if (lib_fault)
        setenv("INA_FAULT", lib_fault, 1);
    char addr[64], job[32];
    snprintf(job, sizeof(job), "latency-%d", (int)getppid());
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.fixed_point_bits = BITS;
    cfg.busy_poll_us = busy_poll_us;
    cfg.lanes = lanes;
    cfg.timeout_ms = 30000;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "%s: rank %d: ina_init: %s\n", scenario_name, rank, ina_strerror(rc));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    int fails = 0;
    if (info.fixed_point_bits != BITS) {
        fprintf(stderr, "%s: rank %d: fixed_point_bits %d, want %d\n", scenario_name, rank,
                info.fixed_point_bits, BITS);
        fails++;
    }
    static float in[INFLIGHT][MAXC], out[INFLIGHT][MAXC];
    ina_req *req[INFLIGHT] = {NULL};
    int opof[INFLIGHT];
    /* op i goes in slot i % INFLIGHT; before reusing a slot, wait for and check its op */
    for (int i = 0; i < NOPS + INFLIGHT && !fails; i++) {
        int s = i % INFLIGHT;
        if (req[s]) {
            int k = opof[s];
            rc = ina_wait(req[s]);
            req[s] = NULL;
            if (rc) {
                fprintf(stderr, "%s: rank %d op %d: %s: %s\n", scenario_name, rank, k,
                        ina_err_name(rc), ina_last_error(ctx));
                fails++;
                break;
            }
            int bad = 0;
            for (size_t j = 0; j < op_count(k); j++)
                bad += out[s][j] != expected(n, k, j);
            if (bad) {
                fprintf(stderr, "%s: rank %d op %d (%zu floats): %d elements not the exact "
                        "fixed-point sum (e.g. %.9g, want %.9g)\n", scenario_name, rank, k,
                        op_count(k), bad, out[s][0], expected(n, k, 0));
                fails++;
            }
        }
        if (i >= NOPS)
            continue;
        for (size_t j = 0; j < op_count(i); j++)
            in[s][j] = h_f32(rank, (uint64_t)i, j);
        opof[s] = i;
        rc = ina_allreduce_start(ctx, in[s], out[s], op_count(i), INA_FLOAT32, INA_SUM, &req[s]);
        if (rc) {
            fprintf(stderr, "%s: rank %d start %d: %s\n", scenario_name, rank, i, ina_err_name(rc));
            fails++;
        }
    }
    ina_stats st;
    ina_get_stats(ctx, &st);
    if (st.fixed_invalid) {
        fprintf(stderr, "%s: rank %d: %llu elements out of range\n", scenario_name, rank,
                (unsigned long long)st.fixed_invalid);
        fails++;
    }
    if (rank == 0)
        printf("  %s: rank 0: %llu ops, %llu packets, %llu retransmits, %llu stale results, "
               "%llu busy-poll hits\n", scenario_name, (unsigned long long)st.ops,
               (unsigned long long)st.packets_sent, (unsigned long long)st.retransmits,
               (unsigned long long)st.stale_results, (unsigned long long)st.busy_poll_hits);
    /* with busy polling some wait must have ended in a spin (a lane thread's, with lanes) */
    if (rank == 0 && !fails && busy_poll_us && st.busy_poll_hits == 0) {
        fprintf(stderr, "%s: rank 0: busy polling on, but no spin found its input\n",
                scenario_name);
        fails++;
    }
    /* under loss the recovery must have done work, or the faults were not injected */
    if (rank == 0 && !fails && st.retransmits == 0) {
        fprintf(stderr, "%s: rank 0: no retransmits under 1%% loss\n", scenario_name);
        fails++;
    }
    ina_finalize(ctx);
    return fails;
}

static void scenario(const char *name, int busy_us, int nlanes, const char *rx, const char *tx,
                     const char *lib)
{
    lanes = nlanes;
    const char *args[8] = {"--fault-rx", rx, "--fault-tx", tx, NULL};
    char bp[16];
    if (busy_us) {
        snprintf(bp, sizeof(bp), "%d", busy_us);
        args[4] = "--busy-poll";
        args[5] = bp;
    }
    scenario_name = name;
    busy_poll_us = busy_us;
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-latency.%d.log", (int)getpid());
    sw.log_path = log;
    double t0 = ina__clock_s();
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    int failed = run_workers(4, worker, (void *)lib, 240);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    /* duplicates are dropped (while their round is open, or as stale after it), never added */
    long long dups = switch_counter(&sw, "drop_DUP_PENDING") + switch_counter(&sw, "drop_STALE");
    printf("%s: %d workers failed, switch dropped %lld duplicates or stale copies (%.1f s)\n",
           name, failed, dups, ina__clock_s() - t0);
    CHECK_EQ_INT(failed, 0);
    CHECK(dups > 0);
    CHECK_EQ_INT(switch_counter(&sw, "drop_MISMATCH"), 0);
    unlink(log);
}

int main(void)
{
    scenario("fixed point, loss and duplication 1%", 0, 0, "drop=0.01,dup=0.01,seed=81",
             "drop=0.01,dup=0.01,seed=82", "drop=0.01,dup=0.01,seed=83");
    /* Busy polling changes only when a process sleeps, never what it computes. */
    scenario("fixed point + busy polling, loss and duplication 1%", 20, 0,
             "drop=0.01,dup=0.01,seed=91", "drop=0.01,dup=0.01,seed=92",
             "drop=0.01,dup=0.01,seed=93");
    /* With lanes the lane threads and the caller spin instead (lanes.c). */
    scenario("fixed point + busy polling + 2 lanes, loss and duplication 1%", 20, 2,
             "drop=0.01,dup=0.01,seed=94", "drop=0.01,dup=0.01,seed=95",
             "drop=0.01,dup=0.01,seed=96");
    return check_report("test_latency");
}
