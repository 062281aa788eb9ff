/* test_drain.c: ina-switch's graceful stop (SIGTERM: refuse new jobs, finish running operations, then INA_ERR_SHUTDOWN; a deadline for the rest) and SIGHUP's secret reload. */
#include "check.h"
#include "e2e/harness.h"

static struct sw_proc sw;

#define DRAIN_COUNT 20000

/* Op k of rank r, checked against the sum over n ranks. @return 0 if right. */
static int sum_op(ina_ctx *ctx, int rank, int n, int k, int *rc_out)
{
    static int32_t in[DRAIN_COUNT], out[DRAIN_COUNT];
    for (int i = 0; i < DRAIN_COUNT; i++)
        in[i] = h_i32(rank, (uint64_t)k, (uint64_t)i);
    int rc = ina_allreduce(ctx, in, out, DRAIN_COUNT, INA_INT32, INA_SUM);
    *rc_out = rc;
    if (rc)
        return 0; /* the caller judges the code */
    for (int i = 0; i < DRAIN_COUNT; i++) {
        uint32_t e = 0;
        for (int r = 0; r < n; r++)
            e += (uint32_t)h_i32(r, (uint64_t)k, (uint64_t)i);
        if ((uint32_t)out[i] != e) {
            fprintf(stderr, "rank %d op %d: wrong sum at %d\n", rank, k, i);
            return 1;
        }
    }
    return 0;
}

/* A world-1 job joins: @return ina_init's code (the context is closed again). */
static int join_once(const char *job, const char *secret)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, 0, 1, addr, sizeof(addr));
    cfg.secret_file = secret;
    cfg.join_timeout_ms = 5000; /* a refusal is immediate; the deadline only bounds a bug */
    ina_ctx *ctx = NULL;
    int rc = ina_init(&ctx, &cfg);
    if (rc == 0)
        ina_finalize(ctx);
    return rc;
}

static ina_ctx *join_job(const char *job, int rank, int n, int lanes)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.lanes = lanes;
    ina_ctx *ctx = NULL;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init(%s): %s\n", rank, job, ina_err_name(rc));
        return NULL;
    }
    return ctx;
}

/*
 * Draining lets the running operation finish. Rank 1 sends the switch
 * SIGTERM after op 2, while rank 0 is already in op 3; a new job is refused
 * (SHUTDOWN) while the drain lasts; rank 1 joins op 3 a second later, and
 * op 3 must complete with the right sum on both ranks. After a pause (the
 * compute phase of a training step) the job is ended: op 4 fails with
 * INA_ERR_SHUTDOWN at once, and the context is closed.
 */
static int finish_worker(int rank, int n, void *arg)
{
    const int lanes = *(const int *)arg;
    ina_ctx *ctx = join_job(lanes > 1 ? "drain-lanes" : "drain-finish", rank, n, lanes);
    if (!ctx)
        return 1;
    int bad = 0, rc;
    for (int k = 0; k < 3 && !bad; k++) {
        bad |= sum_op(ctx, rank, n, k, &rc);
        bad |= rc != 0;
    }
    if (rank == 1 && !bad) {
        kill(sw.pid, SIGTERM);
        double t0 = ina__clock_s();
        rc = join_once("drain-late", NULL);
        if (rc != INA_ERR_SHUTDOWN || ina__clock_s() - t0 > 2) {
            fprintf(stderr, "a new job while draining: %s after %.2f s (want "
                            "INA_ERR_SHUTDOWN at once)\n", ina_err_name(rc), ina__clock_s() - t0);
            bad = 1;
        }
        while (ina__clock_s() - t0 < 1.0)
            usleep(10000); /* rank 0 waits in op 3 meanwhile: a round half received */
    }
    if (!bad) {
        bad |= sum_op(ctx, rank, n, 3, &rc);
        if (rc != 0) {
            fprintf(stderr, "rank %d: op 3, running when the drain began: %s (want 0)\n", rank,
                    ina_err_name(rc));
            bad = 1;
        }
    }
    usleep(600000); /* between steps: quiet, so the switch ends the job */
    if (!bad) {
        double t0 = ina__clock_s();
        sum_op(ctx, rank, n, 4, &rc);
        if (rc != INA_ERR_SHUTDOWN || ina__clock_s() - t0 > 2) {
            fprintf(stderr, "rank %d: op 4 after the drain: %s after %.2f s (want "
                            "INA_ERR_SHUTDOWN at once)\n", rank, ina_err_name(rc), ina__clock_s() - t0);
            bad = 1;
        }
        const char *why = ina_last_error(ctx);
        if (!why || !strstr(why, "shutting down")) {
            fprintf(stderr, "rank %d: ina_last_error says '%s'\n", rank, why ? why : "(null)");
            bad = 1;
        }
    }
    ina_finalize(ctx);
    return bad;
}

/*
 * A job still in an operation at the deadline is ended then: rank 1 sends
 * SIGTERM and stays away past the deadline, so rank 0's op 1 never
 * completes; it must fail with INA_ERR_SHUTDOWN near the deadline (1 s),
 * not at its own timeout (20 s).
 */
static int deadline_worker(int rank, int n, void *arg)
{
    (void)arg;
    ina_ctx *ctx = join_job("drain-deadline", rank, n, 1);
    if (!ctx)
        return 1;
    int bad = 0, rc;
    bad |= sum_op(ctx, rank, n, 0, &rc) | (rc != 0);
    double t0 = ina__clock_s();
    if (rank == 1) {
        kill(sw.pid, SIGTERM);
        usleep(1800000);
    }
    sum_op(ctx, rank, n, 1, &rc);
    double took = ina__clock_s() - t0;
    if (rc != INA_ERR_SHUTDOWN || (rank == 0 && (took < 0.8 || took > 4))) {
        fprintf(stderr, "rank %d: op 1 across the drain deadline: %s after %.2f s (want "
                        "INA_ERR_SHUTDOWN after about 1 s)\n", rank, ina_err_name(rc), took);
        bad = 1;
    }
    ina_finalize(ctx);
    return bad;
}

/* Rank 0 joins a job of 2 that rank 1 never joins; rank 1 sends SIGTERM. */
static int joining_worker(int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    if (rank == 1) {
        usleep(500000);
        kill(sw.pid, SIGTERM);
        return 0;
    }
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "drain-joining", 0, 2, addr, sizeof(addr));
    ina_ctx *ctx = NULL;
    double t0 = ina__clock_s();
    int rc = ina_init(&ctx, &cfg);
    if (rc == 0)
        ina_finalize(ctx);
    if (rc != INA_ERR_SHUTDOWN || ina__clock_s() - t0 > 3) {
        fprintf(stderr, "a job joining when the drain began: %s after %.2f s (want "
                        "INA_ERR_SHUTDOWN at once)\n", ina_err_name(rc), ina__clock_s() - t0);
        return 1;
    }
    return 0;
}

/* Wait up to limit_s for the switch to exit by itself. @return 1 if it did. */
static int switch_exited(double limit_s)
{
    for (double t0 = ina__clock_s(); ina__clock_s() - t0 < limit_s; usleep(10000)) {
        int st;
        pid_t p = waitpid(sw.pid, &st, WNOHANG);
        if (p == sw.pid)
            return WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (p < 0 && errno == ECHILD)
            return 1; /* reaped by run_workers' waitpid(-1): the log says how it ended */
    }
    return 0;
}

static int log_has(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-drain-log.%d", (int)getpid());
    sw.log_path = log;

    /* 1. Finish the running operation, refuse a new job, end the job between steps. */
    int one = 1;
    const char *drain5[] = {"--drain-timeout", "5000", NULL};
    CHECK_EQ_INT(switch_start(&sw, drain5), 0);
    CHECK_EQ_INT(run_workers(2, finish_worker, &one, 30), 0);
    CHECK(switch_exited(3)); /* every job ended: it stops without waiting for the deadline */
    CHECK_EQ_INT(switch_counter(&sw, "jobs_drained"), 1);
    CHECK_EQ_INT(switch_counter(&sw, "joins_refused_draining"), 1);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_aborted"), 0);

    /* 1'. The same with two lanes on two dataplane threads: each drains its part. */
    if (!h_ebpf()) {
        int two = 2;
        const char *drain5t[] = {"--drain-timeout", "5000", "--threads", "2", NULL};
        CHECK_EQ_INT(switch_start(&sw, drain5t), 0);
        CHECK_EQ_INT(run_workers(2, finish_worker, &two, 30), 0);
        CHECK(switch_exited(3));
        CHECK_EQ_INT(switch_counter(&sw, "jobs_drained"), 2); /* one job per lane */
    }

    /* 2. A job stuck in an operation is ended at the deadline. */
    const char *drain1[] = {"--drain-timeout", "1000", NULL};
    CHECK_EQ_INT(switch_start(&sw, drain1), 0);
    CHECK_EQ_INT(run_workers(2, deadline_worker, NULL, 30), 0);
    CHECK(switch_exited(3));
    CHECK_EQ_INT(switch_counter(&sw, "jobs_drained"), 1);

    /* 3. --drain-timeout 0: SIGTERM stops at once, a joined job or not. */
    const char *drain0[] = {"--drain-timeout", "0", NULL};
    CHECK_EQ_INT(switch_start(&sw, drain0), 0);
    ina_ctx *held = join_job("drain-none", 0, 1, 1);
    CHECK(held != NULL);
    double t0 = ina__clock_s();
    kill(sw.pid, SIGTERM);
    CHECK(switch_exited(2));
    CHECK_LE_DBL(ina__clock_s() - t0, 1.5);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_drained"), 0);
    if (held)
        ina_finalize(held);

    /* 4. A job still joining when the drain begins is refused (SHUTDOWN) at once. */
    CHECK_EQ_INT(switch_start(&sw, drain5), 0);
    CHECK_EQ_INT(run_workers(2, joining_worker, NULL, 30), 0);
    CHECK(switch_exited(3));
    CHECK_EQ_INT(switch_counter(&sw, "jobs_drained"), 1);

    /* 5. SIGHUP: the secret is read again; an unreadable file keeps the old one. */
    char sa[64], sb[64];
    snprintf(sa, sizeof(sa), "/tmp/ina-test-drain-a.%d", (int)getpid());
    snprintf(sb, sizeof(sb), "/tmp/ina-test-drain-b.%d", (int)getpid());
    write_file(sa, "first secret\n");
    write_file(sb, "second secret\n");
    char live[64];
    snprintf(live, sizeof(live), "/tmp/ina-test-drain-live.%d", (int)getpid());
    write_file(live, "first secret\n");
    const char *hup[] = {"--secret-file", live, NULL};
    CHECK_EQ_INT(switch_start(&sw, hup), 0);
    CHECK_EQ_INT(join_once("hup-a", sa), 0);
    CHECK_EQ_INT(join_once("hup-b", sb), INA_ERR_REJECTED);
    write_file(live, "second secret\n");
    kill(sw.pid, SIGHUP);
    usleep(400000); /* each thread looks at least every poll timeout (200 ms) */
    CHECK_EQ_INT(join_once("hup-a2", sa), INA_ERR_REJECTED);
    CHECK_EQ_INT(join_once("hup-b2", sb), 0);
    unlink(live);
    kill(sw.pid, SIGHUP); /* unreadable now: the second secret stays */
    usleep(400000);
    CHECK_EQ_INT(join_once("hup-b3", sb), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "secret_reloads"), 1);
    CHECK(log_has(log, "secret_reload_failed")); /* an error: logged even with --quiet */

    unlink(sa);
    unlink(sb);
    unlink(log);
    return check_report("test_drain");
}
