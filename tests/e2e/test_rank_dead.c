/* test_rank_dead.c: a worker killed with -9 at N = 3: every survivor gets INA_ERR_ABORTED naming the dead rank (reason=rank_dead) within 5 s; a rank that is only slow (2 s between operations) is never declared dead; the kill again with a secret and per-packet integrity (a tagged ABORT). */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "e2e/harness.h"

#define N 3
#define VICTIM 2
#define BOUND_S 5.0 /* the bound; the workers' own deadline stays the default 30 s */

static struct sw_proc sw;
static char secret_path[64]; /* set: the switch and the ranks share a secret and tag every packet */

struct shared {
    volatile pid_t pid[N];
    volatile int ops[N]; /* operations done */
    int rc[N];
    double fail_at[N];
    char why[N][512];
};
static struct shared *sh;

static int join(ina_ctx **ctx, const char *job, int rank)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, N, addr, sizeof(addr));
    cfg.timeout_ms = 30000; /* the default: the survivors must not wait for it */
    if (secret_path[0]) { /* the ABORT that names the dead rank is tagged too (§4.6) */
        cfg.secret_file = secret_path;
        cfg.integrity = 1;
    }
    return ina_init(ctx, &cfg);
}

/* All-reduces of 64 Ki int32 until max_ops or a failure; the victim stops after 3 and
 * waits to be killed; with slow_s, the victim sleeps that long before each operation. */
static int worker(int rank, int n, void *arg)
{
    (void)n;
    const double slow_s = *(const double *)arg;
    const int max_ops = slow_s > 0 ? 4 : 100000;
    sh->pid[rank] = getpid();
    ina_ctx *ctx;
    int rc = join(&ctx, slow_s > 0 ? "slow-rank" : "dead-rank", rank);
    if (rc) {
        sh->rc[rank] = rc;
        return 1;
    }
    static int32_t in[65536], out[65536];
    for (int op = 0; rc == 0 && op < max_ops; op++) {
        if (rank == VICTIM && slow_s > 0)
            usleep((useconds_t)(slow_s * 1e6));
        if (rank == VICTIM && slow_s == 0 && op == 3)
            for (;;)
                pause(); /* mid-run: the others are already in their next operation */
        for (int i = 0; i < 65536; i++)
            in[i] = i + rank;
        rc = ina_allreduce(ctx, in, out, 65536, INA_INT32, INA_SUM);
        if (rc == 0)
            sh->ops[rank]++;
    }
    sh->rc[rank] = rc;
    sh->fail_at[rank] = ina__clock_s();
    snprintf(sh->why[rank], sizeof(sh->why[rank]), "%s", ina_last_error(ctx));
    ina_finalize(ctx);
    return 0;
}

static void test_killed(void)
{
    memset(sh, 0, sizeof(*sh));
    double slow_s = 0;
    fflush(NULL);
    pid_t workers = fork();
    if (workers == 0)
        _exit(run_workers(N, worker, &slow_s, 60) == 1 ? 0 : 1); /* the victim fails */
    while (sh->ops[VICTIM] < 3 || sh->ops[0] < 3 || sh->ops[1] < 3)
        usleep(1000);
    usleep(100000); /* the survivors wait in their fourth operation */
    double killed_at = ina__clock_s();
    CHECK_EQ_INT(kill(sh->pid[VICTIM], SIGKILL), 0);
    int st;
    waitpid(workers, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int r = 0; r < N; r++) {
        if (r == VICTIM)
            continue;
        double dt = sh->fail_at[r] - killed_at;
        printf("killed rank %d: rank %d got %s after %.2f s: %s\n", VICTIM, r,
               ina_err_name(sh->rc[r]), dt, sh->why[r]);
        CHECK_EQ_INT(sh->rc[r], INA_ERR_ABORTED); /* every survivor the same code */
        CHECK(strstr(sh->why[r], "rank 2 of job 'dead-rank'") != NULL);
        CHECK(strstr(sh->why[r], "reason=rank_dead") != NULL);
        CHECK_LE_DBL(dt, BOUND_S);
    }
}

/* Rank 2 sleeps 2 s before each operation: its peers wait on it (and are probed about
 * it) twice as long as the switch's suspicion, yet it is alive: every op succeeds. */
static void test_slow_not_dead(void)
{
    memset(sh, 0, sizeof(*sh));
    double slow_s = 2.0;
    CHECK_EQ_INT(run_workers(N, worker, &slow_s, 60), 0);
    for (int r = 0; r < N; r++) {
        printf("slow rank %d: rank %d did %d ops, then %s\n", VICTIM, r, sh->ops[r],
               ina_err_name(sh->rc[r]));
        CHECK_EQ_INT(sh->rc[r], 0);
        CHECK_EQ_INT(sh->ops[r], 4);
    }
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (h_ebpf()) { /* the eBPF dataplane keeps its rounds in the kernel: no probe there */
        printf("test_rank_dead: skipped with INA_TEST_DATAPLANE=ebpf\n");
        return 77;
    }
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    test_killed();
    test_slow_not_dead();
    CHECK_EQ_INT(switch_stop(&sw), 0);
    /* The same with a secret and per-packet integrity: the cause travels in a tagged ABORT. */
    snprintf(secret_path, sizeof(secret_path), "/tmp/ina-test-rank-dead.%d", (int)getpid());
    FILE *f = fopen(secret_path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("only the ranks and the switch\n", f);
        fclose(f);
    }
    const char *tagged[] = {"--secret-file", secret_path, "--integrity", NULL};
    CHECK_EQ_INT(switch_start(&sw, tagged), 0);
    test_killed();
    CHECK_EQ_INT(switch_stop(&sw), 0);
    unlink(secret_path);
    munmap(sh, sizeof(*sh));
    return check_report("test_rank_dead");
}
