/* test_secret.c: ina-switch --secret-file: the right secret joins and sums; a missing or wrong one is refused (INA_ERR_REJECTED, counted AUTH); a switch without the secret is refused by the worker. */
#include "check.h"
#include "e2e/harness.h"

static struct sw_proc sw;
static char secret_path[64], wrong_path[64];

struct wcfg {
    const char *job, *secret;
    int lanes;
};

static int sum_worker(int rank, int n, void *arg)
{
    const struct wcfg *w = arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, w->job, rank, n, addr, sizeof(addr));
    cfg.secret_file = w->secret;
    cfg.lanes = w->lanes;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init: %s\n", rank, ina_err_name(rc));
        return 1;
    }
    int fails = 0;
    int32_t in[3000], out[3000];
    for (int op = 0; op < 5 && !fails; op++) {
        for (int i = 0; i < 3000; i++)
            in[i] = h_i32(rank, (uint64_t)op, (uint64_t)i);
        rc = ina_allreduce(ctx, in, out, 3000, INA_INT32, INA_SUM);
        for (int i = 0; i < 3000 && !rc; i++) {
            uint32_t e = 0;
            for (int r = 0; r < n; r++)
                e += (uint32_t)h_i32(r, (uint64_t)op, (uint64_t)i);
            if ((uint32_t)out[i] != e) {
                fprintf(stderr, "rank %d op %d: wrong sum at %d\n", rank, op, i);
                fails++;
                break;
            }
        }
        if (rc)
            fails++;
    }
    ina_finalize(ctx);
    return fails;
}

/* One rank of a world-1 job: @return ina_init's code (the context is closed again). */
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
    snprintf(secret_path, sizeof(secret_path), "/tmp/ina-test-secret.%d", (int)getpid());
    snprintf(wrong_path, sizeof(wrong_path), "/tmp/ina-test-wrong.%d", (int)getpid());
    write_file(secret_path, "correct horse battery staple\n");
    write_file(wrong_path, "correct horse battery stapler\n");
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-secret-log.%d", (int)getpid());

    /* A switch with the secret. */
    const char *extra[] = {"--secret-file", secret_path, NULL};
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, extra), 0);
    struct wcfg right = {"secret-ok", secret_path, 0}, lanes = {"secret-lanes", secret_path, 2};
    CHECK_EQ_INT(run_workers(3, sum_worker, &right, 60), 0);
    CHECK_EQ_INT(run_workers(2, sum_worker, &lanes, 60), 0); /* every lane proves the secret */
    double t0 = h_now();
    CHECK_EQ_INT(join_once("no-secret", NULL), INA_ERR_REJECTED);
    CHECK_EQ_INT(join_once("wrong-secret", wrong_path), INA_ERR_REJECTED);
    CHECK_LE_DBL(h_now() - t0, 4.5); /* refused, not timed out (each deadline is 5 s) */
    CHECK_EQ_INT(join_once("no-file", "/nonexistent/ina-secret"), INA_ERR_CONFIG);
    CHECK_EQ_INT(join_once("right-again", secret_path), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "drop_AUTH"), 2);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_started"), 4); /* secret-ok, 2 lanes, right-again */
    CHECK_EQ_INT(switch_counter(&sw, "jobs_ended"), 4);

    /* A switch without the secret: it accepts the JOIN (extra bytes are
     * ignored by v1), but its ACK proves nothing, so the worker refuses it. */
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    CHECK_EQ_INT(join_once("no-proof", secret_path), INA_ERR_REJECTED);
    CHECK_EQ_INT(join_once("plain", NULL), 0); /* and a worker without one still joins */
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "drop_AUTH"), 0);

    unlink(secret_path);
    unlink(wrong_path);
    unlink(log);
    return check_report("test_secret");
}
