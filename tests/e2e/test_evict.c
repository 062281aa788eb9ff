/* test_evict.c: a running job loses its slots (ina-ctl evict) and carries on at rank 0's host
 * aggregator with every sum verified; lanes; shared-memory rings left for UDP;
 * INA_FALLBACK=none failing cleanly; and a switch with a shared secret, whose ranks join the
 * aggregator with it. */
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "e2e/harness.h"
#include "lib/internal.h"

#define ELEMS 256
#define WINDOW 16
static struct sw_proc sw;
static int metrics_port;

struct shared {
    volatile uint16_t job_id[2]; /* lane 0, lane 1 */
    volatile int ops_before, ops_after, stop, path;
    volatile int shm_before, shm_after; /* rank 0's ina_info.shm before and after the move */
    volatile int err[8];
};
static struct shared *sh;

struct params {
    const char *job;
    int lanes, fallback;
    int shm; /* attach rings to the --shm switch (else INA_SHM=0: UDP) */
    const char *secret; /* the switch's --secret-file, or NULL */
};

/* Counts straddling several windows, and small ones in one round (op 3). */
static size_t op_count(uint64_t op) { return op % 3 == 0 ? 40000 + op % 997 : op % 3 == 1 ? 300 : 5000; }

/* Two operations in flight at a time (in place and not), verified, until rank 0 says stop. */
static int worker(int rank, int n, void *arg)
{
    const struct params *p = arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, p->job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = ELEMS;
    cfg.window = WINDOW;
    cfg.lanes = p->lanes;
    cfg.fallback = p->fallback;
    cfg.secret_file = p->secret;
    setenv("INA_SHM", p->shm ? "1" : "0", 1);
    cfg.timeout_ms = 5000;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init: %s\n", rank, ina_strerror(rc));
        return 1;
    }
    if (rank == 0) {
        const struct ina_ctx *l0 = p->lanes > 1 ? ina__lanes_ctx(ctx, 0) : ctx;
        sh->job_id[0] = l0->job_id;
        if (p->lanes > 1)
            sh->job_id[1] = ina__lanes_ctx(ctx, 1)->job_id;
    }
    static int32_t in[2][41000], out[2][41000];
    int bad = 0;
    uint64_t op = 0;
    for (int more = 1; more;) {
        ina_req *req[2];
        size_t count[2];
        int rcs[2];
        for (int k = 0; k < 2; k++, op++) {
            count[k] = op_count(op);
            for (size_t j = 0; j < count[k]; j++)
                in[k][j] = (op & 1) ? 0 : h_i32(rank, op, j);
            if (op & 1)
                for (size_t j = 0; j < count[k]; j++)
                    ((float *)in[k])[j] = h_f32(rank, op, j);
            int32_t *dst = k ? in[k] : out[k]; /* the second in place */
            rcs[k] = ina_allreduce_start(ctx, in[k], dst, count[k],
                                         (op & 1) ? INA_FLOAT32 : INA_INT32, INA_SUM, &req[k]);
        }
        for (int k = 0; k < 2; k++) {
            int st = rcs[k] ? rcs[k] : ina_wait(req[k]);
            if (st) {
                fprintf(stderr, "rank %d op %llu: %s\n", rank, (unsigned long long)(op - 2 + k),
                        ina_err_name(st));
                sh->err[rank] = st;
                ina_finalize(ctx);
                /* Without a fallback, eviction must fail cleanly with NOSPACE. */
                return p->fallback == INA_FALLBACK_NONE && st == INA_ERR_NOSPACE ? 0 : 1;
            }
            uint64_t o = op - 2 + (uint64_t)k;
            bad += h_check_sum(k ? in[k] : out[k], count[k], 3, n, o, (int)(o & 1), 8.0);
        }
        ina_info info;
        ina_get_info(ctx, &info);
        if (rank == 0) {
            if (info.path == INA_PATH_HOST) {
                sh->ops_after += 2;
                sh->shm_after = info.shm;
            } else {
                sh->ops_before += 2;
                sh->shm_before = info.shm;
            }
            sh->path = info.path;
        }
        /* Rank 0 decides, for every rank, when to stop. */
        int32_t flag = rank == 0 && !sh->stop, sum = 0;
        if ((rc = ina_allreduce(ctx, &flag, &sum, 1, INA_INT32, INA_SUM)) != 0) {
            sh->err[rank] = rc;
            ina_finalize(ctx);
            if (p->fallback == INA_FALLBACK_NONE && rc == INA_ERR_NOSPACE)
                return 0; /* the move reached this op first: the same clean failure */
            fprintf(stderr, "rank %d: stop flag: %s\n", rank, ina_err_name(rc));
            return 1;
        }
        more = sum > 0;
    }
    ina_finalize(ctx);
    if (bad)
        fprintf(stderr, "rank %d: %d wrong elements\n", rank, bad);
    return bad != 0;
}

/* ina-ctl CMD ID; the switch publishes its job list every 100 ms, so a job
 * just started may not be listed yet: retry for a while. */
static int ctl(const char *cmd, unsigned id)
{
    char bin[512], line[700];
    snprintf(bin, sizeof(bin), "%s", INA_SWITCH_BIN);
    snprintf(line, sizeof(line), "%s/ina-ctl --metrics 127.0.0.1:%d %s %u >/dev/null 2>&1",
             dirname(bin), metrics_port, cmd, id);
    int rc = -1;
    for (int i = 0; i < 30 && rc != 0; i++) {
        rc = system(line);
        if (rc != 0)
            usleep(100 * 1000);
    }
    return rc;
}

/* Run a job in the background; once it has done some operations, evict
 * (lane 0's job); let it run on; stop it. @return the workers' failures. */
static int evict_run(struct params *p, int n)
{
    memset(sh, 0, sizeof(*sh));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(run_workers(n, worker, p, 90) ? 1 : 0);
    for (double t0 = ina__clock_s(); (sh->ops_before < 10 || !sh->job_id[0]) && ina__clock_s() - t0 < 30;)
        usleep(5000);
    CHECK_EQ_INT(ctl("evict", sh->job_id[0]), 0);
    for (double t0 = ina__clock_s(); sh->ops_after < 20 && ina__clock_s() - t0 < 30;) {
        if (sh->err[0])
            break;
        usleep(5000);
    }
    sh->stop = 1;
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* Start the switch with the operator view (and extra args), and read its port. */
static void start(const char *mport, const char *extra0, const char *extra1)
{
    const char *const args[] = {"--metrics", "127.0.0.1:0", "--metrics-port-file", mport,
                                extra0, extra1, NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    FILE *f = fopen(mport, "r");
    CHECK(f && fscanf(f, "%d", &metrics_port) == 1);
    if (f)
        fclose(f);
}

/*
 * A switch with a shared secret: the evicted job's ranks join rank 0's host
 * aggregator with the secret too, and the aggregator must prove it as the
 * switch does (PROTOCOL.md §4.4, §5.8): the job goes on, every sum verified.
 */
static void evict_with_secret(const char *log, const char *mport)
{
    char secret[64];
    snprintf(secret, sizeof(secret), "/tmp/ina-test-evict-secret.%d", (int)getpid());
    CHECK_EQ_INT(h_write_file(secret, "evict me gently\n"), 0);
    start(mport, "--secret-file", secret);
    /* (For ina-ctl: an operator view that asks for proof of the secret takes it from there.) */
    setenv("INA_SECRET_FILE", secret, 1);
    struct params p5 = {"evict-5", 1, INA_FALLBACK_HOST, 0, secret};
    CHECK_EQ_INT(evict_run(&p5, 3), 0);
    unsetenv("INA_SECRET_FILE");
    CHECK(sh->ops_after >= 20);
    CHECK_EQ_INT(sh->path, INA_PATH_HOST);
    CHECK_EQ_INT(sh->err[0], 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_evicted"), 1);
    CHECK_EQ_INT(switch_counter(&sw, "drop_AUTH"), 0);
    unlink(log);
    unlink(mport);
    unlink(secret);
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char log[64], mport[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-evict.%d.log", (int)getpid());
    snprintf(mport, sizeof(mport), "/tmp/ina-test-evict-m.%d", (int)getpid());
    sw.log_path = log;
    start(mport, "--shm", NULL);

    /* One lane, N = 3: sums stay right across the move, which really happened. */
    struct params p1 = {"evict-1", 1, INA_FALLBACK_HOST, 0, NULL};
    CHECK_EQ_INT(evict_run(&p1, 3), 0);
    CHECK(sh->ops_before >= 10);
    CHECK(sh->ops_after >= 20);
    CHECK_EQ_INT(sh->path, INA_PATH_HOST);

    /* Two lanes: only lane 0's job is evicted; lane 1 stays on the switch. */
    struct params p2 = {"evict-2", 2, INA_FALLBACK_HOST, 0, NULL};
    CHECK_EQ_INT(evict_run(&p2, 2), 0);
    CHECK(sh->ops_after >= 20);
    CHECK_EQ_INT(sh->path, INA_PATH_HOST);

    /* Rings: the job leaves them for UDP to the aggregator, sums still right.
     * (Not with the eBPF dataplane: it has no rings.) */
    struct params p4 = {"evict-4", 1, INA_FALLBACK_HOST, 1, NULL};
    if (!h_ebpf()) {
        CHECK_EQ_INT(evict_run(&p4, 3), 0);
        CHECK(sh->ops_after >= 20);
        CHECK_EQ_INT(sh->path, INA_PATH_HOST);
        CHECK_EQ_INT(sh->shm_before, 1);
        CHECK_EQ_INT(sh->shm_after, 0);
    }

    /* No fallback: the operations past the move fail with NOSPACE, none hangs. */
    struct params p3 = {"evict-3", 1, INA_FALLBACK_NONE, 0, NULL};
    CHECK_EQ_INT(evict_run(&p3, 2), 0);
    CHECK_EQ_INT(sh->err[0], INA_ERR_NOSPACE);

    CHECK_EQ_INT(switch_stop(&sw), 0);
    int evicted = h_ebpf() ? 3 : 4;
    CHECK_EQ_INT(switch_counter(&sw, "jobs_evicted"), evicted);
    CHECK_EQ_INT(switch_counter(&sw, "drop_MISMATCH"), 0);
    CHECK_EQ_INT(switch_counter(&sw, "drop_DATAPLANE"), 0);
    /* Every evicted job's ranks left it: its slots were freed. */
    CHECK(switch_counter(&sw, "jobs_ended") >= evicted);
    CHECK_EQ_INT(switch_counter(&sw, "shm_attached"), h_ebpf() ? 0 : 3); /* only evict-4's ranks */
    unlink(log);
    unlink(mport);
    evict_with_secret(log, mport);
    munmap(sh, sizeof(*sh));
    return check_report("test_evict");
}
