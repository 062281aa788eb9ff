/* test_integrity.c: per-packet integrity (ina-switch --integrity, INA_INTEGRITY; PROTOCOL.md §4.6): payload bits flipped on the way (the fault layer's corrupt, both directions) never change a sum over UDP, rings, multicast, lanes and rank 0's host aggregator, and are counted; without integrity the same flips give wrong sums; both sides must agree. */
#include <sys/mman.h>

#include "check.h"
#include "e2e/harness.h"
#include "lib/internal.h"

#define NOPS 40
#define FLIPS "corrupt=0.03,seed=11" /* on each side, each direction: 3% of datagrams */

struct params {
    const char *job;
    int integrity, lanes, expect_path, expect_shm;
};

struct shared {
    volatile int wrong, failed, bad_info;
    volatile unsigned long mac_rejected, retransmits, corrupted;
    /* the eviction run: */
    volatile unsigned job_id;
    volatile int ops_before, ops_after, stop, path;
};
static struct shared *sh;
static struct sw_proc sw;
static char secret_path[64];

static size_t op_count(int i) { return (size_t)(i % 5) * 1100 + 7; }

/* Rank r of n of job, with the secret: 256 elements a packet (multi-packet operations). */
static void config(ina_config *cfg, const char *job, int rank, int n, char *addr, size_t alen,
                   int lanes, int integrity)
{
    worker_config(cfg, &sw, job, rank, n, addr, alen);
    cfg->elems_per_packet = 256;
    cfg->window = 16;
    cfg->lanes = lanes;
    cfg->secret_file = secret_path;
    cfg->integrity = integrity;
}

static int worker(int rank, int n, void *arg)
{
    const struct params *p = arg;
    char addr[64];
    ina_config cfg;
    config(&cfg, p->job, rank, n, addr, sizeof(addr), p->lanes, p->integrity);
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "%s rank %d: ina_init: %s (%s)\n", p->job, rank, ina_err_name(rc),
                ina_last_error(NULL));
        __sync_fetch_and_add(&sh->failed, 1);
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    if (info.integrity != p->integrity || info.path != p->expect_path ||
        info.shm != p->expect_shm) {
        fprintf(stderr, "%s rank %d: info integrity %d path %d shm %d\n", p->job, rank,
                info.integrity, info.path, info.shm);
        __sync_fetch_and_add(&sh->bad_info, 1);
    }
    static int32_t in[5000], out[5000];
    static float fin[5000], fout[5000];
    for (int i = 0; i < NOPS; i++) {
        size_t count = op_count(i);
        int f = i % 2;
        for (size_t j = 0; j < count; j++) {
            in[j] = h_i32(rank, (uint64_t)i, j);
            fin[j] = h_f32(rank, (uint64_t)i, j);
        }
        rc = f ? ina_allreduce(ctx, fin, fout, count, INA_FLOAT32, INA_SUM)
               : ina_allreduce(ctx, in, out, count, INA_INT32, INA_SUM);
        if (rc) {
            fprintf(stderr, "%s rank %d op %d: %s\n", p->job, rank, i, ina_err_name(rc));
            __sync_fetch_and_add(&sh->failed, 1);
            break;
        }
        if (h_check_sum(f ? (void *)fout : (void *)out, count, 1, n, (uint64_t)i, f, 8.0))
            __sync_fetch_and_add(&sh->wrong, 1);
    }
    ina_stats st;
    ina_get_stats(ctx, &st);
    __sync_fetch_and_add(&sh->mac_rejected, (unsigned long)st.mac_rejected);
    __sync_fetch_and_add(&sh->retransmits, (unsigned long)st.retransmits);
    if (!ctx->lanes)
        __sync_fetch_and_add(&sh->corrupted, (unsigned long)ctx->fault.corrupted);
    ina_finalize(ctx);
    return 0;
}

static void run(const struct params *p, int n)
{
    memset(sh, 0, sizeof(*sh));
    int failed = run_workers(n, worker, (void *)p, 120);
    printf("%s: %d wrong operations, %d failed; the ranks flipped %lu bits and dropped %lu "
           "datagrams (mac_rejected), %lu retransmits\n",
           p->job, sh->wrong, sh->failed, sh->corrupted, sh->mac_rejected, sh->retransmits);
    CHECK_EQ_INT(sh->bad_info, 0);
    if (!p->integrity) { /* the control: the flips are real, and change sums */
        CHECK(sh->wrong > 0);
        return;
    }
    CHECK_EQ_INT(failed, 0);
    CHECK_EQ_INT(sh->failed, 0);
    CHECK_EQ_INT(sh->wrong, 0);
    CHECK(sh->mac_rejected > 0); /* flipped results, dropped by the ranks */
    CHECK(sh->retransmits > 0);  /* ... and recovered */
}

/*
 * Operations until rank 0 says stop (a 1-element all-reduce of its flag), for
 * the eviction: the switch's MIGRATE is tagged, the job moves to rank 0's host
 * aggregator and keeps integrity there (PROTOCOL.md §4.6, §5.8).
 */
static int evict_worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    config(&cfg, "integrity-evict", rank, n, addr, sizeof(addr), 1, 1);
    ina_ctx *ctx;
    if (ina_init(&ctx, &cfg)) {
        __sync_fetch_and_add(&sh->failed, 1);
        return 1;
    }
    if (rank == 0)
        sh->job_id = ctx->job_id;
    static int32_t in[5000], out[5000];
    int rc = 0;
    for (uint64_t op = 0, more = 1; more && !rc; op++) {
        size_t count = op_count((int)op);
        for (size_t j = 0; j < count; j++)
            in[j] = h_i32(rank, op, j);
        rc = ina_allreduce(ctx, in, out, count, INA_INT32, INA_SUM);
        if (!rc && h_check_sum(out, count, 1, n, op, 0, 0))
            __sync_fetch_and_add(&sh->wrong, 1);
        ina_info info;
        ina_get_info(ctx, &info);
        if (rank == 0 && !rc) {
            if (info.path == INA_PATH_HOST)
                sh->ops_after++;
            else
                sh->ops_before++;
            sh->path = info.path;
            if (!info.integrity)
                sh->bad_info++;
        }
        int32_t flag = rank == 0 && !sh->stop, sum = 0;
        if (!rc)
            rc = ina_allreduce(ctx, &flag, &sum, 1, INA_INT32, INA_SUM);
        more = sum > 0;
    }
    if (rc) {
        fprintf(stderr, "integrity-evict rank %d: %s\n", rank, ina_err_name(rc));
        __sync_fetch_and_add(&sh->failed, 1);
    }
    ina_stats st;
    ina_get_stats(ctx, &st);
    __sync_fetch_and_add(&sh->mac_rejected, (unsigned long)st.mac_rejected);
    ina_finalize(ctx);
    return rc != 0;
}

/* ina-switch with args (after --listen 127.0.0.1:0) must exit with status 2. */
static int switch_refuses(const char *const *args)
{
    const char *argv[16] = {INA_SWITCH_BIN, "--listen", "127.0.0.1:0", "--quiet"};
    int a = 4;
    for (int i = 0; args[i]; i++)
        argv[a++] = args[i];
    argv[a] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr))
            _exit(127);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    for (double t0 = ina__clock_s(); waitpid(pid, &st, WNOHANG) == 0;) {
        if (ina__clock_s() - t0 > 10) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return 0;
        }
        usleep(10000);
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 2;
}

/* One rank joins alone; @return ina_init's status. */
static int join_once(const char *job, int integrity, const char *secret)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, 0, 1, addr, sizeof(addr));
    cfg.join_timeout_ms = 5000;
    cfg.integrity = integrity;
    cfg.secret_file = secret;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc == 0)
        ina_finalize(ctx);
    return rc;
}

int main(void)
{
    if (h_ebpf()) {
        printf("test_integrity: skipped (--dataplane ebpf refuses --integrity)\n");
        return 77;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    snprintf(secret_path, sizeof(secret_path), "/tmp/ina-test-integrity.%d", (int)getpid());
    FILE *s = fopen(secret_path, "w");
    CHECK(s != NULL);
    if (s) {
        fputs("only the ranks and the switch\n", s);
        fclose(s);
    }
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-integrity-log.%d", (int)getpid());
    sw.log_path = log;
    setenv("INA_FAULT", FLIPS, 1); /* every worker flips bits of what it sends and receives */

    /* Control: the same flips without integrity change sums (what the issue's
     * on-path attacker does). */
    const char *plain[] = {"--secret-file", secret_path, "--fault-rx", FLIPS, "--fault-tx", FLIPS,
                           NULL};
    CHECK_EQ_INT(switch_start(&sw, plain), 0);
    struct params ctl = {"integrity-off", 0, 1, INA_PATH_SWITCH, 0};
    run(&ctl, 3);
    switch_stop(&sw);

    /* UDP, flips at the switch too, in both directions; then lanes. */
    const char *udp[] = {"--secret-file", secret_path, "--integrity", "--fault-rx", FLIPS,
                         "--fault-tx", FLIPS, NULL};
    CHECK_EQ_INT(switch_start(&sw, udp), 0);
    struct params u = {"integrity-udp", 1, 1, INA_PATH_SWITCH, 0};
    run(&u, 3);
    struct params l = {"integrity-lanes", 1, 2, INA_PATH_SWITCH, 0};
    run(&l, 3);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK(switch_counter(&sw, "drop_MAC") > 0);

    /* Shared-memory rings: DATA up and RESULTs down the rings (the workers flip). */
    const char *rings[] = {"--secret-file", secret_path, "--integrity", "--shm", NULL};
    CHECK_EQ_INT(switch_start(&sw, rings), 0);
    struct params r = {"integrity-shm", 1, 1, INA_PATH_SWITCH, 1};
    run(&r, 3);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK(switch_counter(&sw, "drop_MAC") > 0);
    CHECK(switch_counter(&sw, "shm_rx_packets") > 0);

    /* Multicast results, flipped at the switch's sending side too. */
    const char *mc[] = {"--secret-file", secret_path, "--integrity", "--multicast", "--fault-tx",
                        FLIPS, NULL};
    CHECK_EQ_INT(switch_start(&sw, mc), 0);
    struct params m = {"integrity-mcast", 1, 1, INA_PATH_SWITCH, 0};
    run(&m, 3);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK(switch_counter(&sw, "drop_MAC") > 0);

    /* Rank 0's host aggregator: a one-rank job holds the only slot, so the
     * job is refused and runs at rank 0's host, with integrity there too. */
    const char *one[] = {"--secret-file", secret_path, "--integrity", "--slots", "1", NULL};
    CHECK_EQ_INT(switch_start(&sw, one), 0);
    unsetenv("INA_FAULT");
    char haddr[64];
    ina_config hc;
    worker_config(&hc, &sw, "integrity-holder", 0, 1, haddr, sizeof(haddr));
    hc.window = 1;
    hc.lanes = 1;
    hc.fallback = INA_FALLBACK_NONE;
    hc.secret_file = secret_path;
    hc.integrity = 1;
    ina_ctx *holder = NULL;
    CHECK_EQ_INT(ina_init(&holder, &hc), 0);
    setenv("INA_FAULT", FLIPS, 1);
    struct params fb = {"integrity-host", 1, 1, INA_PATH_HOST, 0};
    run(&fb, 3);
    unsetenv("INA_FAULT");
    CHECK_EQ_INT(ina_finalize(holder), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);

    /* An operator eviction: a tagged MIGRATE (itself subject to the flips:
     * a lost one is sent again for the next DATA past the bound), then rank 0's
     * host aggregator, with integrity. */
    char mport[64];
    snprintf(mport, sizeof(mport), "/tmp/ina-test-integrity-m.%d", (int)getpid());
    const char *ev[] = {"--secret-file", secret_path, "--integrity", "--metrics", "127.0.0.1:0",
                        "--metrics-port-file", mport, NULL};
    CHECK_EQ_INT(switch_start(&sw, ev), 0);
    int metrics_port = 0;
    FILE *mp = fopen(mport, "r");
    CHECK(mp && fscanf(mp, "%d", &metrics_port) == 1);
    if (mp)
        fclose(mp);
    memset(sh, 0, sizeof(*sh));
    setenv("INA_FAULT", FLIPS, 1);
    fflush(NULL);
    pid_t ev_pid = fork();
    if (ev_pid == 0)
        _exit(run_workers(3, evict_worker, NULL, 90) ? 1 : 0);
    unsetenv("INA_FAULT");
    for (double t1 = ina__clock_s(); (sh->ops_before < 10 || !sh->job_id) && ina__clock_s() - t1 < 30;)
        usleep(5000);
    setenv("INA_SECRET_FILE", secret_path, 1); /* ina-ctl proves the secret to the view */
    CHECK_EQ_INT(ctl_job(metrics_port, "evict", sh->job_id), 0);
    unsetenv("INA_SECRET_FILE");
    for (double t1 = ina__clock_s(); sh->ops_after < 20 && !sh->failed && ina__clock_s() - t1 < 30;)
        usleep(5000);
    sh->stop = 1;
    int ev_st;
    waitpid(ev_pid, &ev_st, 0);
    printf("integrity-evict: %d operations on the switch, %d at rank 0's host; %d wrong, %d "
           "failed; %lu datagrams dropped (mac_rejected)\n", sh->ops_before, sh->ops_after,
           sh->wrong, sh->failed, sh->mac_rejected);
    CHECK(WIFEXITED(ev_st) && WEXITSTATUS(ev_st) == 0);
    CHECK_EQ_INT(sh->failed, 0);
    CHECK_EQ_INT(sh->wrong, 0);
    CHECK_EQ_INT(sh->bad_info, 0);
    CHECK_EQ_INT(sh->path, INA_PATH_HOST);
    CHECK(sh->ops_after >= 20);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_evicted"), 1);
    unlink(mport);

    /* Both sides must agree, and integrity needs the secret. */
    CHECK_EQ_INT(switch_start(&sw, one), 0);
    double t0 = ina__clock_s();
    CHECK_EQ_INT(join_once("integrity-not-asked", 0, secret_path), INA_ERR_NOTSUP);
    CHECK_EQ_INT(join_once("integrity-no-secret", 1, NULL), INA_ERR_CONFIG);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    const char *secret_only[] = {"--secret-file", secret_path, NULL};
    CHECK_EQ_INT(switch_start(&sw, secret_only), 0);
    CHECK_EQ_INT(join_once("integrity-not-offered", 1, secret_path), INA_ERR_NOTSUP);
    CHECK_EQ_INT(join_once("integrity-off-both", 0, secret_path), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_LE_DBL(ina__clock_s() - t0, 8); /* refused at once, not at the 5 s join deadlines */

    /* Where the switch cannot keep the promise, it does not start. */
    const char *no_secret[] = {"--integrity", NULL};
    const char *bpf[] = {"--integrity", "--secret-file", secret_path, "--dataplane", "ebpf",
                         "--iface", "lo", NULL};
    const char *child[] = {"--integrity", "--secret-file", secret_path, "--parent",
                           "127.0.0.1:9", NULL};
    const char *bpf_mc[] = {"--secret-file", secret_path, "--multicast", "--dataplane", "ebpf",
                            "--iface", "eth0", NULL};
    CHECK(switch_refuses(no_secret));
    CHECK(switch_refuses(bpf));
    CHECK(switch_refuses(child));
    CHECK(switch_refuses(bpf_mc));
    const char *rec[] = {"--integrity", "--secret-file", secret_path, "--record",
                         "/tmp/ina-test-integrity.trace", NULL};
    CHECK(switch_refuses(rec));
    unlink("/tmp/ina-test-integrity.trace");

    unlink(secret_path);
    unlink(log);
    return check_report("test_integrity");
}
