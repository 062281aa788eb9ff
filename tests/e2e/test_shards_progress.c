/* test_shards_progress.c: a context over several switches with one lane runs in the caller's thread only (no thread of libina's) and advances its operations only inside libina calls, so a rank that finalizes with operations in flight ends them for the others (INA_ERR_ABORTED), as ina.h says; with lanes, too, whatever part the finalizing rank had reached. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "e2e/harness.h"

#define COUNT 200000 /* floats: many windows of every part (below) */

static struct sw_proc sw[2];

struct shared {
    volatile int started;    /* rank 0 started its operation */
    volatile int finalizing; /* rank 0 calls ina_finalize with it in flight */
    volatile int finalized;  /* ... and it returned */
};
static struct shared *sh;

struct scenario {
    const char *job;
    int lanes;
    double idle_s; /* rank 0: seconds outside libina between its start and its finalize */
};

/* Threads of this process (entries of /proc/self/task). */
static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int open_ctx(const struct scenario *sc, int rank, int n, ina_ctx **ctx)
{
    static char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw[0], sc->job, rank, n, addr, sizeof(addr));
    snprintf(addr, sizeof(addr), "127.0.0.1:%d,127.0.0.1:%d", sw[0].port, sw[1].port);
    cfg.switch_addr = addr;
    cfg.lanes = sc->lanes;
    cfg.elems_per_packet = 256;
    cfg.window = 8; /* 2048 floats in flight per part: COUNT needs rank 0's calls */
    int rc = ina_init(ctx, &cfg);
    if (rc)
        fprintf(stderr, "%s rank %d: ina_init: %s (%s)\n", sc->job, rank, ina_err_name(rc),
                ina_last_error(NULL));
    return rc;
}

/*
 * Rank 0 starts an operation and finalizes with it in flight: at once, or
 * after idle_s outside libina. Rank 1 runs the same operation: it must fail
 * with INA_ERR_ABORTED once rank 0 finalized, not before (nothing advances
 * rank 0's operation while it is outside libina), and not complete.
 */
static int worker(int rank, int n, void *arg)
{
    const struct scenario *sc = arg;
    static float x[COUNT];
    int before = threads();
    ina_ctx *ctx;
    if (open_ctx(sc, rank, n, &ctx))
        return 1;
    ina_info info;
    ina_get_info(ctx, &info);
    int fails = 0;
    /* One lane: no thread of libina's (rank 0's host aggregator would be one,
     * but the job runs on the switches). */
    if (sc->lanes == 1 && (threads() != before || info.lanes != 1 || info.shards != 2)) {
        fprintf(stderr, "%s rank %d: %d threads after ina_init (%d before), lanes %d, shards %d\n",
                sc->job, rank, threads(), before, info.lanes, info.shards);
        fails++;
    }
    for (size_t i = 0; i < COUNT; i++)
        x[i] = (float)(rank + 1) * 0.5f;
    if (rank == 0) {
        ina_req *req;
        fails += ina_allreduce_start(ctx, x, x, COUNT, INA_FLOAT32, INA_SUM, &req) != 0;
        if (sc->lanes == 1 && threads() != before) {
            fprintf(stderr, "%s rank 0: %d threads with an operation in flight\n", sc->job,
                    threads());
            fails++;
        }
        sh->started = 1;
        usleep((useconds_t)(sc->idle_s * 1e6));
        sh->finalizing = 1;
        fails += ina_finalize(ctx) != 0;
        sh->finalized = 1;
        return fails;
    }
    for (double t0 = ina__clock_s(); !sh->started && ina__clock_s() - t0 < 30;)
        usleep(1000);
    if (sc->idle_s == 0) /* the operation starts after rank 0 left: its ABORT is waiting */
        for (double t0 = ina__clock_s(); !sh->finalized && ina__clock_s() - t0 < 30;)
            usleep(1000);
    int rc = ina_allreduce(ctx, x, x, COUNT, INA_FLOAT32, INA_SUM);
    int early = !sh->finalizing;
    ina_req *req = NULL;
    int rc2 = ina_allreduce_start(ctx, x, x, 10, INA_FLOAT32, INA_SUM, &req);
    if (rc != INA_ERR_ABORTED || early || rc2 != INA_ERR_CLOSED || req) {
        fprintf(stderr, "%s rank %d: %s%s (want INA_ERR_ABORTED after rank 0 finalized), then "
                "the start returned %s (want INA_ERR_CLOSED)\n", sc->job, rank, ina_err_name(rc),
                early ? " before rank 0 finalized" : "", ina_err_name(rc2));
        fails++;
    }
    fails += ina_finalize(ctx) != 0;
    return fails;
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(switch_start(&sw[i], NULL), 0);
    const struct scenario sc[] = {
        {"progress-1lane-idle", 1, 1.5}, /* a helper thread would finish it meanwhile */
        {"progress-1lane", 1, 0},
        {"progress-2lanes", 2, 0},
    };
    for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++) {
        memset((void *)sh, 0, sizeof(*sh));
        int failed = run_workers(2, worker, (void *)&sc[i], 60);
        printf("%-20s 2 shards x %d lane%s: %s\n", sc[i].job, sc[i].lanes,
               sc[i].lanes > 1 ? "s" : "", failed ? "FAILED" : "ok");
        CHECK_EQ_INT(failed, 0);
    }
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(switch_stop(&sw[i]), 0);
    munmap((void *)sh, sizeof(*sh));
    return check_report("test_shards_progress");
}
