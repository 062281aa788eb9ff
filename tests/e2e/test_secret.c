/* test_secret.c: ina-switch --secret-file: the right secret joins and sums; a missing or wrong one is refused (INA_ERR_REJECTED, counted AUTH); a switch without the secret is refused by the worker; a job refused NOSPACE runs at rank 0's host aggregator with the secret. */
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "e2e/harness.h"

static struct sw_proc sw;
static char secret_path[64], wrong_path[64];

struct wcfg {
    const char *job, *secret;
    int lanes;
    int path; /* the path rank 0 must report (INA_PATH_*), or -1: any */
};

/* What the workers tell the test (an anonymous shared mapping). */
struct shared {
    volatile int hog_joined, hog_release, path;
};
static struct shared *sh;

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
    ina_info info;
    ina_get_info(ctx, &info);
    if (rank == 0)
        sh->path = info.path;
    if (w->path >= 0 && info.path != w->path) {
        fprintf(stderr, "rank %d: path %d, not %d\n", rank, info.path, w->path);
        fails++;
    }
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

/* A world-1 job that holds every slot of the pool until the test releases it. */
static int hog_worker(int rank, int n, void *arg)
{
    const char *secret = arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "secret-hog", rank, n, addr, sizeof(addr));
    cfg.secret_file = secret;
    cfg.window = 16;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "hog: ina_init: %s\n", ina_err_name(rc));
        return 1;
    }
    sh->hog_joined = 1;
    for (double t0 = ina__clock_s(); !sh->hog_release && ina__clock_s() - t0 < 60;)
        usleep(5000);
    ina_finalize(ctx);
    return 0;
}

/*
 * A job refused NOSPACE by a switch with a secret runs at rank 0's host
 * aggregator (PROTOCOL.md §5.7), which must prove the secret to the ranks
 * as the switch does: the job runs there, every sum right.
 */
static void fallback_with_secret(const char *log)
{
    const char *extra[] = {"--secret-file", secret_path, "--slots", "16", "--max-job-slots", "16",
                           "--min-job-slots", "16", NULL};
    CHECK_EQ_INT(switch_start(&sw, extra), 0);
    fflush(NULL);
    pid_t hog = fork();
    if (hog == 0)
        _exit(run_workers(1, hog_worker, secret_path, 90) ? 1 : 0);
    for (double t0 = ina__clock_s(); !sh->hog_joined && ina__clock_s() - t0 < 30;)
        usleep(5000);
    CHECK(sh->hog_joined);
    struct wcfg host = {"secret-fallback", secret_path, 0, INA_PATH_HOST};
    CHECK_EQ_INT(run_workers(3, sum_worker, &host, 60), 0);
    CHECK_EQ_INT(sh->path, INA_PATH_HOST);
    sh->hog_release = 1;
    int st = 1;
    waitpid(hog, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_refused"), 1);
    CHECK_EQ_INT(switch_counter(&sw, "drop_AUTH"), 0);
    unlink(log);
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    if (sh == MAP_FAILED)
        return 1;
    snprintf(secret_path, sizeof(secret_path), "/tmp/ina-test-secret.%d", (int)getpid());
    snprintf(wrong_path, sizeof(wrong_path), "/tmp/ina-test-wrong.%d", (int)getpid());
    CHECK_EQ_INT(h_write_file(secret_path, "correct horse battery staple\n"), 0);
    CHECK_EQ_INT(h_write_file(wrong_path, "correct horse battery stapler\n"), 0);
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-secret-log.%d", (int)getpid());

    /* A switch with the secret. */
    const char *extra[] = {"--secret-file", secret_path, NULL};
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, extra), 0);
    struct wcfg right = {"secret-ok", secret_path, 0, -1},
                lanes = {"secret-lanes", secret_path, 2, -1};
    CHECK_EQ_INT(run_workers(3, sum_worker, &right, 60), 0);
    CHECK_EQ_INT(run_workers(2, sum_worker, &lanes, 60), 0); /* every lane proves the secret */
    double t0 = ina__clock_s();
    CHECK_EQ_INT(join_once("no-secret", NULL), INA_ERR_REJECTED);
    /* The switch says which cause it saw (JOIN_NAK byte 16, PROTOCOL.md §4.2). */
    CHECK(strstr(ina_last_error(NULL), "reason=auth") != NULL);
    CHECK_EQ_INT(join_once("wrong-secret", wrong_path), INA_ERR_REJECTED);
    CHECK(strstr(ina_last_error(NULL), "reason=auth") != NULL);
    printf("wrong secret: %s\n", ina_last_error(NULL));
    CHECK_LE_DBL(ina__clock_s() - t0, 4.5); /* refused, not timed out (each deadline is 5 s) */
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

    fallback_with_secret(log);
    unlink(secret_path);
    unlink(wrong_path);
    unlink(log);
    return check_report("test_secret");
}
