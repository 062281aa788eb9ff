/* test_kv_fail.c: dead peers and limits of the key-value store: a shard killed, a rank gone, --max-memory reached: every rank gets the documented error within the deadline. */
#include "check.h"
#include "kv_harness.h"

#define TIMEOUT_MS 3000

static char addrs[256];
static struct sw_proc ps[2];

struct scenario {
    const char *job;
    int kill_shard_at; /* rank 0 kills shard 1 before this step (-1: no) */
    int rank_exits_at; /* rank 2 exits without a word before this step (-1: no) */
    int many_keys;     /* push fresh keys until a shard is full */
};

static int worker(int rank, int n, void *arg)
{
    const struct scenario *sc = arg;
    ina_kv_config c;
    kv_config(&c, addrs, sc->job, rank, n);
    c.timeout_ms = TIMEOUT_MS;
    ina_kv *kv;
    int rc = ina_kv_open(&kv, &c);
    if (rc) {
        fprintf(stderr, "%s rank %d: open: %s (%s)\n", sc->job, rank, ina_err_name(rc),
                ina_last_error(NULL));
        return 1;
    }
    uint64_t keys[500];
    float vals[500], out[500];
    double t_fail = 0;
    for (int t = 0; t < 40; t++) {
        if (t == sc->kill_shard_at && rank == 0) {
            kill(ps[1].pid, SIGKILL);
            waitpid(ps[1].pid, NULL, 0);
        }
        if (t == sc->rank_exits_at && rank == 2)
            _exit(0); /* dies: no close, no LEAVE */
        for (int j = 0; j < 500; j++) {
            keys[j] = sc->many_keys ? (uint64_t)t * 500 + (uint64_t)j : (uint64_t)(j * 7 + t) % 300;
            vals[j] = 1.0f;
        }
        double t0 = ina__clock_s();
        rc = ina_kv_push(kv, keys, vals, 500);
        if (!rc)
            rc = ina_kv_pull(kv, keys, out, 500);
        if (rc) {
            t_fail = ina__clock_s() - t0;
            break;
        }
    }
    int ok;
    const char *why = ina_kv_last_error(kv);
    if (sc->many_keys)
        ok = rc == INA_ERR_PS_FULL;
    else if (sc->kill_shard_at >= 0)
        ok = rc == -ECONNREFUSED || rc == INA_ERR_TIMEOUT || rc == INA_ERR_ABORTED;
    else
        ok = rc == INA_ERR_TIMEOUT || (rc == INA_ERR_ABORTED && strstr(why, "rank 2") != NULL);
    /* within the deadline: timeout_ms plus scheduling slack */
    ok &= t_fail < TIMEOUT_MS / 1000.0 + 3.0;
    printf("%s rank %d: %s after %.2f s: %s\n", sc->job, rank, ina_err_name(rc), t_fail, why);
    /* After a failure the handle only closes. */
    ok &= ina_kv_push(kv, keys, vals, 1) == INA_ERR_CLOSED;
    ina_kv_close(kv);
    return !ok;
}

static int run(const struct scenario *sc, const char *const *ps_extra)
{
    memset(ps, 0, sizeof(ps));
    for (int i = 0; i < 2; i++)
        if (ps_start(&ps[i], i, 2, ps_extra) != 0)
            return 1;
    ps_addrs(ps, 2, addrs, sizeof(addrs));
    int bad = run_workers(3, worker, (void *)sc, 60) != 0;
    for (int i = 0; i < 2; i++)
        if (kill(ps[i].pid, 0) == 0)
            switch_stop(&ps[i]);
    return bad;
}

int main(void)
{
    struct scenario shard = {"shard-killed", 3, -1, 0};
    struct scenario rank = {"rank-gone", -1, 3, 0};
    struct scenario full = {"full", -1, -1, 1};
    const char *small[] = {"--max-memory", "64K", "--initial-keys", "16", NULL};
    CHECK_EQ_INT(run(&shard, NULL), 0);
    CHECK_EQ_INT(run(&rank, NULL), 0);
    CHECK_EQ_INT(run(&full, small), 0);
    return check_report("test_kv_fail");
}
