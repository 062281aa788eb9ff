/* test_idle.c: the idle timeout (PROTOCOL.md §5.4): a job whose DATA keeps flowing is never reclaimed, a silent one is aborted with TIMEOUT. */

/*
 * With --idle-timeout 1, two ranks run 100 all-reduces, one every 25 ms,
 * for 2.5 s (the switch
 * must see their DATA refresh the job's timer all along: with the eBPF
 * dataplane, that DATA never reaches the switch process, which learns of it
 * from the program's counters), then stay silent for 2.5 s (the job is
 * aborted: ABORT TIMEOUT, which fails each rank's next operation with
 * INA_ERR_TIMEOUT). About 5 s.
 */

#include "check.h"
#include "e2e/harness.h"

#define COUNT 512
static struct sw_proc sw;

static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "e2e-idle", rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = 128;
    ina_ctx *ctx;
    if (ina_init(&ctx, &cfg))
        return 1;
    int32_t in[COUNT], out[COUNT];
    int bad = 0;
    uint64_t op = 0;
    /* The same number of operations on both ranks (a rank that stopped by
     * the clock would leave the other one retransmitting its last). */
    for (; op < 100 && !bad; op++) {
        usleep(25000); /* 100 x 25 ms: 2.5 s of a busy job */
        for (int i = 0; i < COUNT; i++)
            in[i] = h_i32(rank, op, (uint64_t)i);
        int rc = ina_allreduce(ctx, in, out, COUNT, INA_INT32, INA_SUM);
        if (rc != 0) {
            fprintf(stderr, "rank %d: operation %llu failed while the job was busy: %s (%s)\n",
                    rank, (unsigned long long)op, ina_strerror(rc), ina_last_error(ctx));
            bad = 2;
        } else if (h_check_sum(out, COUNT, 1, n, op, 0, 0) != 0) {
            bad = 3;
        }
    }
    if (!bad) {
        usleep(2500000); /* silent: more than twice the idle timeout */
        int rc = ina_allreduce(ctx, in, out, COUNT, INA_INT32, INA_SUM);
        if (rc != INA_ERR_TIMEOUT) {
            fprintf(stderr, "rank %d: after the silence: %d, want INA_ERR_TIMEOUT\n", rank, rc);
            bad = 4;
        }
    }
    ina_finalize(ctx);
    return bad;
}

int main(void)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-idle.%d.log", (int)getpid());
    sw.log_path = log;
    const char *const args[] = {"--idle-timeout", "1", NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    CHECK_EQ_INT(run_workers(2, worker, NULL, 60), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_aborted"), 1);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_started"), 1);
    CHECK(switch_counter(&sw, "completions") >= 100);
    if (check_failures) { /* the switch's log and counters */
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "cat %s >&2", log);
        if (system(cmd) != 0)
            fprintf(stderr, "(no switch log)\n");
    }
    unlink(log);
    return check_report(h_ebpf() ? "test_idle (eBPF dataplane)" : "test_idle");
}
