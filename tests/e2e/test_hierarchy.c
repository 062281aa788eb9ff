/* test_hierarchy.c: a tree of switches on loopback (ina-switch --parent): every dtype x op through two children and a parent, and a sharded parent with lanes, under loss and duplication at every level; a dead child and a dead parent fail every rank within the deadline. */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

#include "check.h"
#include "e2e/verify.h"

#define K 64 /* elements per packet (VFY_SPAN) */
#define N 4  /* ranks 0, 1 at child 0; 2, 3 at child 1 */

/* Parents 0 and 1 (1: only for the sharded case), children 2 and 3. */
enum { P0, P1, C0, C1, NSW };
static struct sw_proc sw[NSW];
static char logs[NSW][64];

struct run {
    const char *job;
    int lanes;
    int kill; /* -1, or the switch killed after the join */
    int shm;  /* the children offer shared-memory rings: the workers must use them */
};

static struct h_kill *sh; /* shared with the workers */

static int worker(int rank, int n, void *arg)
{
    const struct run *p = arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw[rank < N / 2 ? C0 : C1], p->job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = K;
    cfg.window = 8;
    cfg.lanes = p->lanes;
    cfg.rto_ms = 20;
    cfg.timeout_ms = p->kill >= 0 ? 2500 : 20000;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "%s rank %d: ina_init: %s\n", p->job, rank, ina_strerror(rc));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    int fails = info.levels != 2 || info.path != INA_PATH_SWITCH || info.shards != 1 ||
                info.shm != p->shm;
    if (fails)
        fprintf(stderr, "%s rank %d: levels %d path %d shards %d shm %d\n", p->job, rank,
                info.levels, info.path, info.shards, info.shm);
    if (p->kill >= 0) {
        fails += h_fail_after_kill(ctx, sh, 10, p->job, rank);
        ina_finalize(ctx);
        return fails;
    }
    uint64_t opnum = 0;
    for (int rep = 0; rep < 2; rep++)
        for (int dt = 0; dt < 5; dt++)
            for (int op = 0; op < 4; op++) {
                if (dt == INA_FLOAT64 && (op == INA_MAX || op == INA_MIN))
                    continue;
                /* Small ops (one round per block), and ops of several windows
                 * (the exponents run a window ahead of the data). */
                size_t count = rep ? (size_t)K * 8 * 3 + 5 : (size_t)K * 3 + (size_t)op;
                size_t es = vfy_esize[dt];
                uint8_t *in = malloc(count * es), *out = malloc(count * es);
                ++opnum;
                for (size_t i = 0; i < count; i++)
                    vfy_gen((ina_dtype)dt, rank, opnum, i, 0, in + i * es);
                void *dst = op & 1 ? (void *)in : (void *)out;
                rc = ina_allreduce(ctx, in, dst, count, (ina_dtype)dt, (ina_op)op);
                int bad = rc ? 1
                             : vfy_check((ina_dtype)dt, n, (ina_op)op, opnum, count, 0, K,
                                         info.wire_bits == 16 ? VFY_W16 | VFY_W16_TREE : 0, dst);
                if (bad)
                    fprintf(stderr, "%s rank %d: %s %s count %zu: %s, %d wrong\n", p->job, rank,
                            vfy_dnames[dt], vfy_onames[op], count, ina_err_name(rc), bad);
                fails += bad != 0;
                free(in);
                free(out);
            }
    ina_finalize(ctx);
    return fails;
}

/* Parents, then children with --parent (and faults, and --shm). */
static void start_tree(int nparents, const char *fault, int shm)
{
    char parents[64];
    for (int i = 0; i < NSW; i++) {
        snprintf(logs[i], sizeof(logs[i]), "/tmp/ina-test-hier.%d.%d.log", (int)getpid(), i);
        sw[i].log_path = logs[i];
        sw[i].pid = 0;
    }
    const char *args[8];
    for (int i = 0; i < nparents; i++) {
        int a = 0;
        if (fault) {
            args[a++] = "--fault-rx";
            args[a++] = fault;
        }
        args[a] = NULL;
        CHECK_EQ_INT(switch_start(&sw[P0 + i], args), 0);
    }
    if (nparents == 1)
        snprintf(parents, sizeof(parents), "127.0.0.1:%d", sw[P0].port);
    else
        snprintf(parents, sizeof(parents), "127.0.0.1:%d,127.0.0.1:%d", sw[P0].port, sw[P1].port);
    for (int c = C0; c <= C1; c++) {
        int a = 0;
        args[a++] = "--parent";
        args[a++] = parents;
        /* A node's processes reach their child through rings (the default);
         * the other cases keep the children on UDP. */
        args[a++] = shm ? "--shm" : "--no-shm";
        if (fault) {
            args[a++] = "--fault-rx";
            args[a++] = fault;
        }
        args[a] = NULL;
        CHECK_EQ_INT(switch_start(&sw[c], args), 0);
    }
}

static void stop_tree(void)
{
    /* Children first: a child's LEAVE to its parent follows its workers' by
     * a moment, and a parent stopped before it arrives would count the job
     * drained, not ended (a race that a loaded host showed). */
    for (int i = NSW - 1; i >= 0; i--)
        if (sw[i].pid > 0) {
            CHECK_EQ_INT(switch_stop(&sw[i]), 0);
            CHECK_EQ_INT(switch_counter(&sw[i], "drop_MISMATCH"), 0);
            CHECK_EQ_INT(switch_counter(&sw[i], "drop_TXQ"), 0);
            sw[i].pid = 0;
        }
}

/* POSIX shared memory with room for a ring pair of each worker (as test_shm). */
static int shm_usable(void)
{
    struct statvfs v;
    return statvfs("/dev/shm", &v) == 0 && (double)v.f_bavail * v.f_frsize >= 64.0 * 1024 * 1024;
}

static void test_sums(void)
{
    /* One parent; 1% of every datagram each switch receives dropped, 1%
     * duplicated, and the same on the workers' DATA. */
    start_tree(1, "drop=0.01,dup=0.01,seed=11", 0);
    setenv("INA_FAULT", "drop=0.01,dup=0.01", 1);
    struct run p = {"hier-sums", 1, -1, 0};
    CHECK_EQ_INT(run_workers(N, worker, &p, 120), 0);
    /* A sharded parent: lane 0 of the job to one parent, lane 1 to the other. */
    unsetenv("INA_FAULT");
    stop_tree();
    long long up = switch_counter(&sw[C0], "up_packets"), tj = switch_counter(&sw[P0], "tree_joins");
    printf("one parent: child 0 sent %lld partial sums (%lld again), parent %lld TREE_JOINs, "
           "%lld duplicates answered\n", up, switch_counter(&sw[C0], "up_resent"), tj,
           switch_counter(&sw[P0], "results_resent"));
    CHECK(up > 0);
    CHECK(tj >= 2);
    CHECK_EQ_INT(switch_counter(&sw[P0], "jobs_ended"), 1);

    /* ... with the children offering rings (the node case: PROTOCOL.md §5.9). */
    start_tree(2, NULL, shm_usable());
    struct run q = {"hier-sharded", 2, -1, shm_usable()};
    CHECK_EQ_INT(run_workers(N, worker, &q, 120), 0);
    stop_tree();
    CHECK_EQ_INT(switch_counter(&sw[P0], "jobs_ended"), 1); /* one lane each */
    CHECK_EQ_INT(switch_counter(&sw[P1], "jobs_ended"), 1);
    CHECK_EQ_INT(switch_counter(&sw[C0], "jobs_ended"), 2);
    if (shm_usable()) /* both ranks of child 0, both lanes, went through rings */
        CHECK_EQ_INT(switch_counter(&sw[C0], "shm_attached"), 4);
}

/* A switch of the tree dies after the join: every rank fails within its deadline. */
static void test_dead(int victim, const char *job)
{
    start_tree(1, NULL, 0);
    memset((void *)sh, 0, sizeof(*sh));
    struct run p = {job, 1, victim, 0};
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(run_workers(N, worker, &p, 60) ? 1 : 0);
    for (double t0 = ina__clock_s(); sh->joined < N && ina__clock_s() - t0 < 30;)
        usleep(1000);
    kill(sw[victim].pid, SIGKILL);
    waitpid(sw[victim].pid, NULL, 0);
    sw[victim].pid = 0;
    sh->killed = 1;
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("%s: every rank failed, the slowest after %.2f s\n", job, sh->worst_s);
    stop_tree();
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    test_sums();
    test_dead(C1, "hier-dead-child");
    CHECK_EQ_INT(switch_counter(&sw[P0], "jobs_aborted"), 1); /* a rank's failure reached it */
    CHECK_EQ_INT(switch_counter(&sw[C0], "jobs_aborted"), 1);
    test_dead(P0, "hier-dead-parent");
    for (int i = 0; i < NSW; i++)
        unlink(logs[i]);
    munmap((void *)sh, sizeof(*sh));
    return check_report("test_hierarchy");
}
