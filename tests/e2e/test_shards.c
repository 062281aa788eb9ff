/* test_shards.c: one job spread over several switches (an INA_SWITCH list): every dtype x op at M = 1..3 shards and N = 1..4, with lanes, in place and in flight, under loss and duplication; shards that multicast their results, two of them to the same group and port; a refusal by one shard (all ranks to rank 0's host, or all NOSPACE, the other shards' slots freed); a shard that dies. */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "e2e/verify.h"

#define K 64 /* elements per packet (VFY_SPAN) */
#define NSW 3

static struct sw_proc sw[NSW];
static char logs[NSW][64];
static const char *hosts[NSW] = {"127.0.0.1", "127.0.0.1", "127.0.0.1"}; /* shard i's address */

struct run {
    const char *job;
    int shards, lanes, window;
    int fallback;      /* INA_FALLBACK_* */
    int expect_init;   /* what ina_init must return */
    int expect_path;   /* then: INA_PATH_* */
    int expect_shards; /* then: ina_info.shards */
    int dead;          /* shard NSW-1 is killed after the join */
    const char *err0;  /* if set: rank 0's stderr goes to this file */
};

static struct h_kill *sh;          /* shared with the workers */
static unsigned long *stale_sum;   /* their group_rejected, summed (test_multicast) */

/* "HOST0:P0,HOST1:P1,..." for the first m switches. */
static void switch_list(char *buf, size_t len, int m)
{
    size_t off = 0;
    for (int i = 0; i < m; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s:%d", i ? "," : "", hosts[i], sw[i].port);
}

static int open_ctx(const struct run *p, int rank, int n, ina_ctx **ctx, char *addrs, size_t len)
{
    ina_config cfg;
    worker_config(&cfg, &sw[0], p->job, rank, n, addrs, len);
    switch_list(addrs, len, p->shards);
    cfg.switch_addr = addrs;
    cfg.elems_per_packet = K;
    cfg.window = p->window;
    cfg.lanes = p->lanes;
    cfg.fallback = p->fallback;
    cfg.rto_ms = 20;
    cfg.timeout_ms = p->dead ? 2500 : 20000;
    return ina_init(ctx, &cfg);
}

/* Every dtype x op: blocking (half of them in place), then a few in flight. */
static int all_ops(ina_ctx *ctx, int rank, int n, int parts)
{
    enum { NASYNC = 3 };
    int fails = 0;
    uint64_t opnum = 0;
    ina_info info; /* FLOAT16 and BFLOAT16 on the 16-bit wire where every part offers it */
    ina_get_info(ctx, &info);
    const int fpath = info.wire_bits == 16 ? VFY_W16 : 0;
    for (int dt = 0; dt < 5; dt++)
        for (int op = 0; op < 4; op++) {
            if (dt == INA_FLOAT64 && (op == INA_MAX || op == INA_MIN))
                continue;
            /* One element (one part has data, the others none), and enough
             * for every part to have a few packets and a short last one. */
            size_t count = (op & 1) ? 1 : (size_t)parts * K * 2 + 7 + (size_t)dt;
            size_t es = vfy_esize[dt];
            uint8_t *in = malloc(count * es), *out = malloc(count * es);
            ++opnum;
            for (size_t i = 0; i < count; i++)
                vfy_gen((ina_dtype)dt, rank, opnum, i, 0, in + i * es);
            void *dst = (dt + op) & 1 ? (void *)in : (void *)out;
            int rc = ina_allreduce(ctx, in, dst, count, (ina_dtype)dt, (ina_op)op);
            int bad = rc ? 1 : vfy_check((ina_dtype)dt, n, (ina_op)op, opnum, count, 0, K, fpath, dst);
            if (bad)
                fprintf(stderr, "rank %d: %s %s count %zu: %s, %d wrong\n", rank, vfy_dnames[dt],
                        vfy_onames[op], count, ina_err_name(rc), bad);
            fails += bad != 0;
            free(in);
            free(out);
        }
    /* In flight: their parts interleave on every part's stream. */
    uint8_t *in[NASYNC], *out[NASYNC];
    ina_req *req[NASYNC];
    size_t count[NASYNC];
    for (int j = 0; j < NASYNC; j++) {
        count[j] = (size_t)parts * K * (size_t)(3 + j) + 11;
        in[j] = malloc(count[j] * 4);
        out[j] = malloc(count[j] * 4);
        for (size_t i = 0; i < count[j]; i++)
            vfy_gen(INA_FLOAT32, rank, 100 + (uint64_t)j, i, 0, in[j] + 4 * i);
        if (ina_allreduce_start(ctx, in[j], out[j], count[j], INA_FLOAT32, INA_SUM, &req[j]) != 0) {
            fails++;
            req[j] = NULL;
        }
    }
    for (int j = NASYNC - 1; j >= 0; j--) {
        int rc = ina_wait(req[j]);
        if (req[j])
            fails += rc != 0 ||
                     vfy_check(INA_FLOAT32, n, INA_SUM, 100 + (uint64_t)j, count[j], 0, K, 0, out[j]);
        free(in[j]);
        free(out[j]);
    }
    return fails;
}

static int worker(int rank, int n, void *arg)
{
    const struct run *p = arg;
    char addrs[256];
    ina_ctx *ctx;
    if (p->err0 && rank == 0 && !freopen(p->err0, "w", stderr))
        return 1;
    int rc = open_ctx(p, rank, n, &ctx, addrs, sizeof(addrs));
    if (rc != p->expect_init) {
        fprintf(stderr, "%s rank %d: ina_init: %s, want %s\n", p->job, rank, ina_err_name(rc),
                ina_err_name(p->expect_init));
        if (rc == 0)
            ina_finalize(ctx);
        return 1;
    }
    if (rc != 0)
        return 0;
    ina_info info;
    ina_get_info(ctx, &info);
    int fails = info.shards != p->expect_shards || info.path != p->expect_path ||
                info.lanes != (p->lanes > 1 ? p->lanes : 1) || info.levels != 1;
    if (fails)
        fprintf(stderr, "%s rank %d: info shards %d path %d lanes %d levels %d\n", p->job, rank,
                info.shards, info.path, info.lanes, info.levels);
    if (p->dead) {
        /* The parent kills the last shard: the operation must fail on every
         * rank, within the deadline, and break the context. */
        fails += h_fail_after_kill(ctx, sh, 10, p->job, rank);
    } else {
        fails += all_ops(ctx, rank, n, info.shards * info.lanes);
        ina_stats st;
        if (ina_get_stats(ctx, &st) == 0)
            __atomic_fetch_add(stale_sum, (unsigned long)st.group_rejected, __ATOMIC_RELAXED);
    }
    ina_finalize(ctx);
    return fails;
}

static void start_all(const char *const *extra0)
{
    for (int i = 0; i < NSW; i++) {
        snprintf(logs[i], sizeof(logs[i]), "/tmp/ina-test-shards.%d.%d.log", (int)getpid(), i);
        sw[i].log_path = logs[i];
        CHECK_EQ_INT(switch_start(&sw[i], i == 0 && extra0 ? extra0 : NULL), 0);
    }
}

static void stop_all(void)
{
    for (int i = 0; i < NSW; i++)
        if (sw[i].pid > 0) {
            CHECK_EQ_INT(switch_stop(&sw[i]), 0);
            CHECK_EQ_INT(switch_counter(&sw[i], "drop_MISMATCH"), 0);
            CHECK_EQ_INT(switch_counter(&sw[i], "drop_TXQ"), 0);
        }
}

/* M = 1..3, N = 1..4, every dtype and op, under 1% loss and duplication
 * both ways (the workers' DATA, and everything the switches receive). */
static void test_matrix(void)
{
    static const char *const faults[] = {"--fault-rx", "drop=0.01,dup=0.01,seed=7", NULL};
    for (int i = 0; i < NSW; i++) {
        snprintf(logs[i], sizeof(logs[i]), "/tmp/ina-test-shards.%d.%d.log", (int)getpid(), i);
        sw[i].log_path = logs[i];
        CHECK_EQ_INT(switch_start(&sw[i], faults), 0);
    }
    setenv("INA_FAULT", "drop=0.01,dup=0.01", 1);
    double t0 = ina__clock_s();
    for (int m = 1; m <= NSW; m++)
        for (int n = 1; n <= 4; n++) {
            static char job[32];
            struct run p = {job, m, (m + n) % 3 == 0 ? 2 : 1, 8, INA_FALLBACK_HOST, 0,
                            INA_PATH_SWITCH, m, 0, NULL};
            snprintf(job, sizeof(job), "shards-%d-%d", m, n);
            int failed = run_workers(n, worker, &p, 120);
            printf("M=%d N=%d lanes=%d: %s (%.1f s so far)\n", m, n, p.lanes,
                   failed ? "FAILED" : "ok", ina__clock_s() - t0);
            CHECK_EQ_INT(failed, 0);
        }
    unsetenv("INA_FAULT");
    stop_all();
    long long retx = 0;
    for (int i = 0; i < NSW; i++)
        retx += switch_counter(&sw[i], "drop_DUP_PENDING") + switch_counter(&sw[i], "results_resent");
    CHECK(retx > 0); /* the loss and duplication were real */
}

/*
 * Every shard multicasts its results (ina-switch --multicast). Shards 0 and 1
 * listen on one port at two addresses with the default base, so their jobs'
 * groups coincide, as they would for shards on several hosts on one port: each
 * worker's group sockets then receive both shards' results, and must use only
 * their own shard's (the others come from another address: group_rejected,
 * PROTOCOL.md §7.5).
 * Shard 2 has a base of its own. Under loss and duplication, with lanes.
 */
static void test_multicast(void)
{
    if (h_ebpf()) {
        printf("multicast: skipped (the eBPF dataplane refuses --multicast on lo)\n");
        return;
    }
    static const char *const f[] = {"--multicast", "--fault-rx", "drop=0.01,dup=0.01,seed=9", NULL};
    static const char *const f2[] = {"--multicast=239.255.90.0", "--fault-rx", "drop=0.01,dup=0.01,seed=9", NULL};
    char listen1[32];
    const char *const *extra[NSW] = {f, NULL, f2};
    const char *x1[] = {"--listen", listen1, "--multicast", "--fault-rx", "drop=0.01,dup=0.01,seed=9", NULL};
    hosts[1] = "127.0.0.2";
    for (int i = 0; i < NSW; i++) {
        snprintf(logs[i], sizeof(logs[i]), "/tmp/ina-test-shards.%d.%d.log", (int)getpid(), i);
        sw[i].log_path = logs[i];
        if (i == 1) /* shard 0's port, at another address: a later --listen wins */
            snprintf(listen1, sizeof(listen1), "127.0.0.2:%d", sw[0].port);
        CHECK_EQ_INT(switch_start(&sw[i], i == 1 ? x1 : extra[i]), 0);
    }
    CHECK_EQ_INT(sw[1].port, sw[0].port);
    *stale_sum = 0;
    char err0[64];
    snprintf(err0, sizeof(err0), "/tmp/ina-test-shards.%d.err0", (int)getpid());
    setenv("INA_FAULT", "drop=0.01,dup=0.01", 1);
    for (int n = 2; n <= 3; n++) {
        static char job[32];
        struct run p = {job, NSW, n - 1, 8, INA_FALLBACK_HOST, 0, INA_PATH_SWITCH, NSW, 0, err0};
        snprintf(job, sizeof(job), "shards-mc-%d", n);
        int failed = run_workers(n, worker, &p, 120);
        printf("multicast M=%d N=%d lanes=%d: %s\n", NSW, n, p.lanes, failed ? "FAILED" : "ok");
        CHECK_EQ_INT(failed, 0);
    }
    unsetenv("INA_FAULT");
    stop_all();
    hosts[1] = "127.0.0.1";
    for (int i = 0; i < NSW; i++) {
        /* One datagram per finished sum, plus the unicast resends; unicast
         * results would take N >= 2 per sum. */
        long long tx = switch_counter(&sw[i], "tx_packets"), done = switch_counter(&sw[i], "completions"),
                  resent = switch_counter(&sw[i], "results_resent");
        printf("multicast shard %d: %lld datagrams sent, %lld sums, %lld resent\n", i, tx, done, resent);
        CHECK(done > 0);
        CHECK(tx - resent < done + done / 2);
    }
    CHECK(*stale_sum > 0); /* the two shards' results did meet on the workers' sockets */
    /* ... and rank 0 said so, naming the two shards (of the last run). */
    char line[512] = "", want[64];
    FILE *said = fopen(err0, "r");
    CHECK(said != NULL);
    if (said) {
        while (fgets(line, sizeof(line), said) && !strstr(line, "multicast results to one group"))
            line[0] = 0;
        fclose(said);
    }
    printf("multicast: rank 0 said: %s", line[0] ? line : "(nothing)\n");
    snprintf(want, sizeof(want), "shards 127.0.0.1:%d and 127.0.0.2:%d", sw[0].port, sw[1].port);
    CHECK(strstr(line, want) != NULL);
    CHECK(strstr(line, "--multicast=BASE") != NULL);
    unlink(err0);
}

/*
 * Shard 1 has no room (another job holds its whole pool), shard 0 has room
 * for exactly one window. Every rank must take the same path: all to rank 0's
 * host, or all INA_ERR_NOSPACE; and shard 0's window must be free again (a
 * job needing all of it is then admitted there). Parts join in the order of
 * the shards' addresses and ports (PROTOCOL.md §12.1): the switches, alike,
 * are numbered in that order.
 */
static void test_refused(void)
{
    static const char *const tiny[] = {"--slots", "16", "--max-job-slots", "16",
                                       "--min-job-slots", "16", NULL};
    for (int i = 0; i < NSW; i++) {
        snprintf(logs[i], sizeof(logs[i]), "/tmp/ina-test-shards.%d.%d.log", (int)getpid(), i);
        sw[i].log_path = logs[i];
        CHECK_EQ_INT(switch_start(&sw[i], tiny), 0);
    }
    for (int i = 1; i < NSW; i++) /* all on 127.0.0.1: by port */
        for (int j = i; j > 0 && sw[j - 1].port > sw[j].port; j--) {
            struct sw_proc t = sw[j];
            sw[j] = sw[j - 1];
            sw[j - 1] = t;
        }
    char addr[64];
    ina_config cfg;
    ina_ctx *hog, *check;
    worker_config(&cfg, &sw[1], "shards-hog", 0, 1, addr, sizeof(addr));
    cfg.window = 16;
    CHECK_EQ_INT(ina_init(&hog, &cfg), 0);

    struct run fb = {"shards-fallback", 3, 1, 16, INA_FALLBACK_HOST, 0, INA_PATH_HOST, 1, 0, NULL};
    CHECK_EQ_INT(run_workers(3, worker, &fb, 60), 0);
    struct run fb2 = {"shards-fallback2", 2, 2, 8, INA_FALLBACK_HOST, 0, INA_PATH_HOST, 1, 0, NULL};
    CHECK_EQ_INT(run_workers(2, worker, &fb2, 60), 0);
    struct run none = {"shards-none", 3, 1, 16, INA_FALLBACK_NONE, INA_ERR_NOSPACE, 0, 0, 0, NULL};
    CHECK_EQ_INT(run_workers(3, worker, &none, 60), 0);

    /* Shard 0 took a whole window for each of those jobs, and gave it back. */
    worker_config(&cfg, &sw[0], "shards-check", 0, 1, addr, sizeof(addr));
    cfg.window = 16;
    cfg.fallback = INA_FALLBACK_NONE;
    CHECK_EQ_INT(ina_init(&check, &cfg), 0);
    ina_finalize(check);
    ina_finalize(hog);
    stop_all();
    CHECK(switch_counter(&sw[0], "jobs_aborted") >= 3);  /* the admitted parts, left with abort */
    CHECK_EQ_INT(switch_counter(&sw[1], "jobs_refused"), 3);
    CHECK_EQ_INT(switch_counter(&sw[2], "jobs_started"), 0); /* never reached */
}

/* The last shard dies after the join: every rank fails within its deadline. */
static void test_dead_shard(void)
{
    start_all(NULL);
    memset((void *)sh, 0, sizeof(*sh));
    struct run p = {"shards-dead", 3, 1, 8, INA_FALLBACK_HOST, 0, INA_PATH_SWITCH, 3, 1, NULL};
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(run_workers(3, worker, &p, 60) ? 1 : 0);
    for (double t0 = ina__clock_s(); sh->joined < 3 && ina__clock_s() - t0 < 30;)
        usleep(1000);
    kill(sw[NSW - 1].pid, SIGKILL);
    waitpid(sw[NSW - 1].pid, NULL, 0);
    sw[NSW - 1].pid = 0;
    sh->killed = 1;
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("dead shard: every rank failed, the slowest after %.2f s\n", sh->worst_s);
    stop_all();
    /* The live shards ended the job when a rank's failure reached them. */
    CHECK_EQ_INT(switch_counter(&sw[0], "jobs_aborted"), 1);
    CHECK_EQ_INT(switch_counter(&sw[1], "jobs_aborted"), 1);
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    stale_sum = mmap(NULL, sizeof(*stale_sum), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(stale_sum != MAP_FAILED);
    test_matrix();
    test_multicast();
    test_refused();
    test_dead_shard();
    for (int i = 0; i < NSW; i++)
        unlink(logs[i]);
    munmap((void *)sh, sizeof(*sh));
    munmap(stale_sum, sizeof(*stale_sum));
    return check_report("test_shards");
}
