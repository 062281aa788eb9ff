/* test_multitenant.c: several jobs on one switch: three at once (N = 2, 3, 4; int32 and float32),
 * a full pool (fallback to rank 0's host aggregator, NOSPACE, waiting for slots), a dead worker
 * that must not disturb the other jobs, and cross-job forged packets that change no sum. */
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "e2e/harness.h"
#include "lib/internal.h"

#define SLOTS_PER_JOB 16
#define COUNT 20000
static struct sw_proc sw;
static char dir[64];

/* What workers tell the test (shared memory, written once each). */
struct shared {
    volatile uint16_t job_id[8];
    volatile uint32_t session[8], token[8];
    volatile int path[8];
    volatile int rc[8];
};
static struct shared *sh;

struct job {
    int idx;           /* 1..7 */
    const char *name;
    int world;
    int kill_rank;     /* after "go": this rank dies, the others must fail cleanly; -1 = none */
    int hold;          /* wait for "go.<idx>" after the first phase, keeping the slots */
    int fallback;      /* INA_FALLBACK_* */
    int wait_ms;       /* admission_wait_ms */
    double busy_s;     /* after "go": keep running verified all-reduces this long */
};

static void touch(const char *what, int idx)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s.%d", dir, what, idx);
    FILE *f = fopen(p, "w");
    if (f)
        fclose(f);
}

static int exists(const char *what, int idx)
{
    char p[128];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s.%d", dir, what, idx);
    return stat(p, &st) == 0;
}

/* One verified all-reduce: int32 on even ops, float32 on odd ones. */
static int one_op(ina_ctx *ctx, int rank, int n, uint64_t op, int *rc_out)
{
    static int32_t in[COUNT], out[COUNT];
    int f = op % 2;
    for (size_t j = 0; j < COUNT; j++) {
        if (f)
            ((float *)in)[j] = h_f32(rank, op, j);
        else
            in[j] = h_i32(rank, op, j);
    }
    int rc = ina_allreduce(ctx, in, out, COUNT, f ? INA_FLOAT32 : INA_INT32, INA_SUM);
    *rc_out = rc;
    if (rc) {
        fprintf(stderr, "rank %d op %llu: %s\n", rank, (unsigned long long)op, ina_err_name(rc));
        return 0;
    }
    /* h_f32 values are below 8: a safe block bound */
    int bad = h_check_sum(out, COUNT, 7, n, op, f, 4.0);
    if (bad)
        fprintf(stderr, "rank %d op %llu: %d wrong elements\n", rank, (unsigned long long)op, bad);
    return bad;
}

static int job_worker(int rank, int n, void *arg)
{
    const struct job *jb = arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, jb->name, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = 512;
    cfg.window = SLOTS_PER_JOB;
    cfg.fallback = jb->fallback;
    cfg.admission_wait_ms = jb->wait_ms;
    cfg.timeout_ms = 3000;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rank == 0)
        sh->rc[jb->idx] = rc;
    if (rc)
        return jb->fallback == INA_FALLBACK_NONE && rc == INA_ERR_NOSPACE ? 0 : 1;
    ina_info info;
    ina_get_info(ctx, &info);
    if (rank == 0) {
        sh->job_id[jb->idx] = ctx->job_id;
        sh->session[jb->idx] = ctx->session;
        sh->token[jb->idx] = ctx->token;
        sh->path[jb->idx] = info.path;
    }
    int bad = 0;
    uint64_t op = 0;
    for (; op < 6; op++)
        bad += one_op(ctx, rank, n, op, &rc) + (rc != 0);
    if (jb->hold) {
        if (rank == 0)
            touch("ready", jb->idx);
        for (double t0 = ina__clock_s(); !exists("go", jb->idx) && ina__clock_s() - t0 < 60;)
            usleep(5000);
        if (rank == jb->kill_rank)
            _exit(0); /* no LEAVE: a crashed worker */
        double t0 = ina__clock_s();
        do {
            int b = one_op(ctx, rank, n, op++, &rc);
            if (jb->kill_rank >= 0) {
                /* Our job lost a rank: this must fail cleanly, within the deadline. */
                ina_finalize(ctx);
                return !(rc == INA_ERR_TIMEOUT || rc == INA_ERR_ABORTED) + (ina__clock_s() - t0 > 20);
            }
            bad += b + (rc != 0);
            /* Rank 0's clock decides, for every rank, when the job stops. */
            int32_t more = rank == 0 && ina__clock_s() - t0 < jb->busy_s, sum = 0;
            if (rc == 0 && ina_allreduce(ctx, &more, &sum, 1, INA_INT32, INA_SUM) != 0)
                bad++, sum = 0;
            if (!sum)
                break;
        } while (rc == 0);
    }
    ina_finalize(ctx);
    if (bad)
        fprintf(stderr, "job %s rank %d: %d bad\n", jb->name, rank, bad);
    return bad;
}

/* Start a job's workers in the background. @return the launcher's pid. */
static pid_t launch(struct job *jb)
{
    fflush(NULL);
    pid_t p = fork();
    if (p == 0)
        _exit(run_workers(jb->world, job_worker, jb, 90) ? 1 : 0);
    return p;
}

static int reap(pid_t p)
{
    int st;
    if (waitpid(p, &st, 0) != p)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Forge DATA for job b from a socket of ours: b's id with a's token; b's id
 * and token from a stranger's address; a's old session. All must be dropped. */
static void forge(int a, int b)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to;
    memset(&to, 0, sizeof(to));
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons((uint16_t)sw.port);
    uint8_t pkt[INA_HDR_LEN + 4 * 4];
    memset(pkt, 0x7f, sizeof(pkt));
    for (int kind = 0; kind < 3; kind++)
        for (uint32_t slot = 0; slot < SLOTS_PER_JOB; slot++) {
            struct ina_hdr h;
            ina__hdr_init(&h, INA_K_DATA);
            h.job = sh->job_id[b];
            h.session = kind == 2 ? sh->session[a] - 1 : sh->session[b];
            h.token = kind == 0 ? sh->token[a] : sh->token[b];
            if (kind == 2) {
                h.job = sh->job_id[a];
                h.token = sh->token[a];
            }
            h.rank = 0;
            h.slot = slot;
            h.seq = 2 + (slot & 1);
            h.slot |= (h.seq & 1) ? INA_SLOT_SET_BIT : 0;
            h.count = 4;
            h.op = INA_OP_ADD_I32;
            ina__hdr_encode(pkt, &h);
            sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to));
        }
    close(fd);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/ina-mt.%d", (int)getpid());
    mkdir(dir, 0700);
    char log[96];
    snprintf(log, sizeof(log), "%s/switch.log", dir);
    sw.log_path = log;
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    if (sh == MAP_FAILED)
        return 1;
    /* Room for exactly three jobs of 16 slots; no shrinking. */
    const char *const args[] = {"--slots", "48", "--max-job-slots", "16", "--min-job-slots", "16",
                                NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);

    struct job j1 = {1, "mt-a", 2, -1, 1, INA_FALLBACK_HOST, 0, 3.0},
               j2 = {2, "mt-b", 3, -1, 1, INA_FALLBACK_HOST, 0, 3.0},
               j3 = {3, "mt-c", 4, 3, 1, INA_FALLBACK_HOST, 0, 0},
               j4 = {4, "mt-d", 2, -1, 0, INA_FALLBACK_HOST, 0, 0},
               j5 = {5, "mt-e", 2, -1, 0, INA_FALLBACK_NONE, 0, 0},
               j6 = {6, "mt-f", 2, -1, 0, INA_FALLBACK_NONE, 30000, 0};
    pid_t p1 = launch(&j1), p2 = launch(&j2), p3 = launch(&j3);
    for (double t0 = ina__clock_s(); !(exists("ready", 1) && exists("ready", 2) && exists("ready", 3)) &&
                              ina__clock_s() - t0 < 60;)
        usleep(10000);
    CHECK(exists("ready", 1) && exists("ready", 2) && exists("ready", 3));
    CHECK_EQ_INT(sh->path[1], INA_PATH_SWITCH);
    CHECK_EQ_INT(sh->path[2], INA_PATH_SWITCH);
    CHECK_EQ_INT(sh->path[3], INA_PATH_SWITCH);

    /* The pool is full. A fourth job runs on rank 0's host, with verified sums... */
    CHECK_EQ_INT(run_workers(2, job_worker, &j4, 60), 0);
    CHECK_EQ_INT(sh->path[4], INA_PATH_HOST);
    /* ...or, without fallback, is told NOSPACE at once. */
    CHECK_EQ_INT(run_workers(2, job_worker, &j5, 60), 0);
    CHECK_EQ_INT(sh->rc[5], INA_ERR_NOSPACE);
    /* A job that asked to wait is held until slots are freed (below). */
    pid_t p6 = launch(&j6);

    /* Forged packets against the running jobs: none may change a sum. */
    forge(1, 2);
    forge(2, 1);

    /* Kill a worker of job 3 while jobs 1 and 2 keep running verified sums. */
    touch("go", 3);
    touch("go", 1);
    touch("go", 2);
    CHECK_EQ_INT(reap(p3), 0); /* its survivors failed cleanly */
    CHECK_EQ_INT(reap(p1), 0); /* undisturbed */
    CHECK_EQ_INT(reap(p2), 0);
    CHECK_EQ_INT(reap(p6), 0); /* got job 3's slots once they were freed */
    CHECK_EQ_INT(sh->rc[6], 0);
    CHECK_EQ_INT(sh->path[6], INA_PATH_SWITCH);

    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK(switch_counter(&sw, "jobs_refused") >= 2);
    CHECK(switch_counter(&sw, "jobs_waited") >= 1);
    CHECK(switch_counter(&sw, "drop_TOKEN") >= SLOTS_PER_JOB * 2);
    CHECK(switch_counter(&sw, "drop_SESSION") + switch_counter(&sw, "drop_SOURCE") >= 1);
    CHECK_EQ_INT(switch_counter(&sw, "drop_MISMATCH"), 0);
    for (int i = 1; i <= 3; i++) {
        char p[128];
        snprintf(p, sizeof(p), "%s/ready.%d", dir, i);
        unlink(p);
        snprintf(p, sizeof(p), "%s/go.%d", dir, i);
        unlink(p);
    }
    unlink(log);
    rmdir(dir);
    return check_report("test_multitenant");
}
