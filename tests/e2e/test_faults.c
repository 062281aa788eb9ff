/* test_faults.c: N = 4, 1000 mixed-size ops per scenario under injected loss, duplication and reordering: every result exact or within bound. */
#include <math.h>

#include "check.h"
#include "e2e/harness.h"

#define K 256
#define NOPS 1000
static struct sw_proc sw;

/* Sizes cycle through awkward counts: partial packets, exact packets, multi-window. */
static size_t op_count(int i)
{
    static const size_t c[] = {1, 7, K - 1, K, K + 1, 1000, 4099, 20000, 3, 600};
    return c[i % 10];
}

static int verify(int n, int i, size_t count, const void *out, ina_dtype dt)
{
    int bad = 0;
    for (size_t j = 0; j < count; j++) {
        if (dt == INA_INT32) {
            uint32_t e = 0;
            for (int r = 0; r < n; r++)
                e += (uint32_t)h_i32(r, (uint64_t)i, j);
            bad += ((const uint32_t *)out)[j] != e;
        } else {
            double e = 0, amax = 0;
            size_t b0 = j / K * K;
            for (int r = 0; r < n; r++) {
                e += h_f32(r, (uint64_t)i, j);
                for (size_t q = b0; q < b0 + K && q < count; q++)
                    amax = fmax(amax, fabs(h_f32(r, (uint64_t)i, q)));
            }
            bad += !(fabs(((const float *)out)[j] - e) <= ina_float_error_bound(n, amax, e));
            j = j + 1 < count && (j + 1) % 64 ? j + 63 - j % 64 : j; /* sample floats: amax is costly */
        }
    }
    return bad;
}

static const char *scenario_name;

static int no_gso;    /* scenario without UDP GSO/GRO on either side */
static int multicast; /* scenario with the switch multicasting finished sums */

static int worker(int rank, int n, void *arg)
{
    const char *lib_fault = arg;
    if (lib_fault)
        setenv("INA_FAULT", lib_fault, 1);
    if (no_gso)
        setenv("INA_NO_GSO", "1", 1);
    char addr[64], job[32];
    snprintf(job, sizeof(job), "faults-%d", (int)getppid());
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = K;
    cfg.window = 16;
    cfg.timeout_ms = 30000;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "%s: rank %d: ina_init: %s\n", scenario_name, rank, ina_strerror(rc));
        return 1;
    }
    int fails = 0;
    void *in = malloc(20000 * 4), *out = malloc(20000 * 4);
    for (int i = 0; i < NOPS; i++) {
        size_t count = op_count(i);
        ina_dtype dt = i % 2 ? INA_FLOAT32 : INA_INT32;
        for (size_t j = 0; j < count; j++) {
            if (dt == INA_INT32)
                ((int32_t *)in)[j] = h_i32(rank, (uint64_t)i, j);
            else
                ((float *)in)[j] = h_f32(rank, (uint64_t)i, j);
        }
        rc = ina_allreduce(ctx, in, out, count, dt, INA_SUM);
        if (rc) {
            fprintf(stderr, "%s: rank %d op %d: %s\n", scenario_name, rank, i, ina_err_name(rc));
            fails++;
            break;
        }
        int bad = verify(n, i, count, out, dt);
        if (bad) {
            fprintf(stderr, "%s: rank %d op %d (%zu %s): %d wrong elements\n", scenario_name,
                    rank, i, count, dt == INA_INT32 ? "int32" : "float32", bad);
            fails++;
        }
    }
    ina_stats st;
    ina_get_stats(ctx, &st);
    /* Every retransmission is counted under exactly one cause. */
    if (st.retransmits != st.rtx_fast + st.rtx_probe + st.rtx_timeout) {
        fprintf(stderr, "%s: rank %d: retransmits %llu != fast %llu + probe %llu + timeout %llu\n",
                scenario_name, rank, (unsigned long long)st.retransmits,
                (unsigned long long)st.rtx_fast, (unsigned long long)st.rtx_probe,
                (unsigned long long)st.rtx_timeout);
        fails++;
    }
    /* Under loss, the gap detector must be doing real work. */
    if (lib_fault == NULL && strstr(scenario_name, "loss 5%") && st.rtx_fast == 0) {
        fprintf(stderr, "%s: rank %d: no fast retransmits under 5%% loss\n", scenario_name, rank);
        fails++;
    }
    if (rank == 0)
        printf("  %s: rank 0: %llu ops, %llu packets, %llu retransmits (fast %llu, probe %llu, "
               "timeout %llu), %llu stale results\n",
               scenario_name, (unsigned long long)st.ops, (unsigned long long)st.packets_sent,
               (unsigned long long)st.retransmits, (unsigned long long)st.rtx_fast,
               (unsigned long long)st.rtx_probe, (unsigned long long)st.rtx_timeout,
               (unsigned long long)st.stale_results);
    free(in);
    free(out);
    ina_finalize(ctx);
    return fails;
}

static void scenario(const char *name, const char *rx, const char *tx, const char *lib)
{
    const char *args[8] = {NULL};
    int a = 0;
    if (no_gso)
        args[a++] = "--no-gso";
    if (multicast)
        args[a++] = "--multicast";
    if (rx) {
        args[a++] = "--fault-rx";
        args[a++] = rx;
    }
    if (tx) {
        args[a++] = "--fault-tx";
        args[a++] = tx;
    }
    scenario_name = name;
    double t0 = ina__clock_s();
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    int failed = run_workers(4, worker, (void *)lib, 240);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    printf("%s: %d workers failed (%.1f s)\n", name, failed, ina__clock_s() - t0);
    CHECK_EQ_INT(failed, 0);
}

int main(void)
{
    scenario("loss 1% both ways", "drop=0.01,seed=11", "drop=0.01,seed=12", NULL);
    scenario("loss 5% both ways", "drop=0.05,seed=21", "drop=0.05,seed=22", NULL);
    scenario("duplication 1%", "dup=0.01,seed=31", "dup=0.01,seed=32", "dup=0.01,seed=33");
    scenario("reordering 5%", "reorder=0.05,seed=41", "reorder=0.05,seed=42",
             "reorder=0.05,seed=43");
    scenario("worker-side loss 2% + mixed", "dup=0.01,reorder=0.01,seed=51",
             "drop=0.01,reorder=0.02,seed=52", "drop=0.02,seed=53");
    multicast = 1; /* sums to a group; a lost multicast result is resent by unicast */
    scenario("multicast results, loss 1% both ways", "drop=0.01,seed=71", "drop=0.01,seed=72",
             NULL);
    multicast = 0;
    no_gso = 1; /* the fallback path: one datagram per system call */
    scenario("no GSO/GRO, loss 1% + reorder", "drop=0.01,reorder=0.02,seed=61",
             "drop=0.01,reorder=0.02,seed=62", NULL);
    return check_report("test_faults");
}
