/* test_shm_truncate.c: a worker shrinks its ring object under the switch (PROTOCOL.md §5.9): the switch survives, a 4-rank job on rings beside it gets exact sums, the hostile job is refused or aborted; a dead switch fails a ring job with ECONNREFUSED. */
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "e2e/harness.h"
#include "lib/internal.h"

#define COUNT (3 * 2048 + 77)
#define LEGIT 4   /* ranks of the job that must not notice */
#define HOSTILE 2 /* attackers, each a job of one rank on its own dataplane thread */
#define MIN_OPS 20
#define OPS_AFTER 10 /* the legit job goes on this long after the last attack */

static struct sw_proc sw;

/* What the test's processes share (an anonymous shared mapping). */
struct shared {
    _Atomic int attacks_done;
    _Atomic int legit_ops[LEGIT];
    int legit_rings[LEGIT]; /* ina_info.shm of each legit rank */
    /* Per attacker: SHM_ACK reasons (1: no answer), errnos, return codes. */
    int32_t attach_reason[HOSTILE]; /* the POSIX shm object */
    int32_t after_rc[HOSTILE];      /* that job's all-reduce after the truncation */
    int32_t unsealed_reason[HOSTILE]; /* a memfd without seals */
    int32_t sealed_reason[HOSTILE];   /* a sealed memfd */
    int sealed_trunc_errno[HOSTILE];  /* ftruncate of the sealed one (0: it worked) */
    int32_t sealed_after_rc[HOSTILE]; /* that job's all-reduce afterwards */
    /* The dead-switch part: */
    _Atomic int joined;
    volatile int killed;
    int32_t dead_rc[2];
    double dead_s[2];
};
static struct shared *shared;

/* Per part: the switch's options and what the attack must come to. */
struct part {
    const char *name;
    int unsealed;        /* --shm-unsealed: the POSIX shm object is mapped, so a fault follows */
    char hostile[HOSTILE][32]; /* job names, hostile[i] on dataplane thread i */
};

static int join(const char *job, int rank, int n, int timeout_ms, ina_ctx **ctx)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.lanes = 1;
    cfg.timeout_ms = timeout_ms;
    int rc = ina_init(ctx, &cfg);
    if (rc)
        fprintf(stderr, "%s rank %d: ina_init: %s\n", job, rank, ina_strerror(rc));
    return rc;
}

/* The legit job: int32 and float32 sums over its rings, checked, until every attack is
 * done and OPS_AFTER more operations went through. The ranks agree on when
 * that is by a vote (a sum of what each has seen) before each operation. */
static int legit(int rank)
{
    ina_ctx *ctx;
    if (join("legit", rank, LEGIT, 10000, &ctx))
        return 1;
    ina_info info;
    shared->legit_rings[rank] = ina_get_info(ctx, &info) == 0 && info.shm;
    int32_t *a = malloc(4 * COUNT);
    float *x = malloc(4 * COUNT);
    int fails = !a || !x;
    uint64_t stop_at = 0;
    double t0 = ina__clock_s();
    for (uint64_t op = 0; !fails && (!stop_at || op < stop_at); op++) {
        int rc;
        if (op >= MIN_OPS && !stop_at) {
            int32_t seen = atomic_load(&shared->attacks_done) == HOSTILE;
            rc = ina_allreduce(ctx, &seen, &seen, 1, INA_INT32, INA_SUM);
            fails += rc != 0;
            if (rc == 0 && seen == LEGIT)
                stop_at = op + OPS_AFTER;
        }
        if (op % 2 == 0) {
            for (size_t i = 0; i < COUNT; i++)
                a[i] = h_i32(rank, op, i);
            rc = ina_allreduce(ctx, a, a, COUNT, INA_INT32, INA_SUM);
            fails += rc != 0 || h_check_sum(a, COUNT, 1, LEGIT, op, 0, 0) != 0;
        } else {
            for (size_t i = 0; i < COUNT; i++)
                x[i] = h_f32(rank, op, i);
            rc = ina_allreduce(ctx, x, x, COUNT, INA_FLOAT32, INA_SUM);
            fails += rc != 0 || h_check_sum(x, COUNT, 1, LEGIT, op, 1, 8.0) != 0;
        }
        if (fails)
            fprintf(stderr, "legit rank %d: op %llu: %s%s\n", rank, (unsigned long long)op,
                    ina_strerror(rc), rc ? "" : " but wrong sums");
        atomic_fetch_add(&shared->legit_ops[rank], 1);
        if (ina__clock_s() - t0 > 60) {
            fprintf(stderr, "legit rank %d: the attacks did not end in 60 s\n", rank);
            fails++;
        }
    }
    free(a);
    free(x);
    ina_finalize(ctx);
    return fails;
}

/* SHM_ATTACH from this context's socket (PROTOCOL.md §5.9): nonce, nslots,
 * slot_size, name, and for a memfd (fd >= 0) this process's id and fd; a POSIX
 * shm name's body stops after the name. @return the SHM_ACK's reason, or 1 if
 * no answer came within 2 s. */
static int32_t attach_raw(ina_ctx *ctx, const char *name, int fd, uint32_t nslots,
                          uint32_t slot_size)
{
    uint8_t buf[INA_HDR_LEN + 88];
    size_t len = INA_HDR_LEN + (fd >= 0 ? 88 : 80);
    struct ina_hdr h;
    ina__hdr_session(&h, ctx, INA_K_SHM_ATTACH);
    ina__hdr_encode(buf, &h);
    uint8_t *b = buf + INA_HDR_LEN;
    memset(b, 0, 88);
    ina__put32(b + 80, (uint32_t)getpid());
    ina__put32(b + 84, (uint32_t)fd);
    uint64_t nonce = 0x7472756e63617465ull; /* "truncate" */
    ina__put32(b, (uint32_t)(nonce >> 32));
    ina__put32(b + 4, (uint32_t)nonce);
    ina__put32(b + 8, nslots);
    ina__put32(b + 12, slot_size);
    memcpy(b + 16, name, strlen(name));
    for (double t0 = ina__clock_s(), next = 0; ina__clock_s() - t0 < 2;) {
        if (ina__clock_s() >= next) {
            ina__net_send(ctx, buf, len);
            next = ina__clock_s() + 0.1;
        }
        struct pollfd pfd = {.fd = ctx->fd, .events = POLLIN};
        if (poll(&pfd, 1, 20) <= 0)
            continue;
        uint8_t in[512];
        ssize_t n;
        while ((n = recv(ctx->fd, in, sizeof(in), MSG_DONTWAIT)) >= 0) {
            struct ina_hdr ah;
            uint64_t got;
            int32_t reason;
            if (ina__hdr_decode(in, (size_t)n, &ah) == INA_PARSE_OK && ah.kind == INA_K_SHM_ACK &&
                ina__nak_decode(in + INA_HDR_LEN, (size_t)n - INA_HDR_LEN, &got, &reason) == 0 &&
                got == nonce)
                return reason;
        }
    }
    return 1;
}

static int32_t sum_1000(ina_ctx *ctx)
{
    int32_t v[1000];
    for (int k = 0; k < 1000; k++)
        v[k] = k;
    int rc = ina_allreduce(ctx, v, v, 1000, INA_INT32, INA_SUM);
    for (int k = 0; rc == 0 && k < 1000; k++)
        if (v[k] != k)
            rc = INA_ERR_MISMATCH; /* a wrong sum (a 1-rank job returns its input) */
    return rc;
}

/*
 * What is left to try against sealed memfds: one without seals (refused),
 * then a sealed one, attached, which its owner then cannot shrink. The job
 * goes on (over UDP: these rings are not libina's).
 */
static int hostile_memfd(int i, const struct part *p)
{
    char job[40];
    snprintf(job, sizeof(job), "%s-m", p->hostile[i]);
    ina_ctx *ctx;
    if (join(job, 0, 1, 5000, &ctx))
        return 1;
    uint32_t nslots = 64, slot_size = ina__ring_slot_size(INA_HDR_LEN + 4 * (size_t)ctx->elems);
    struct ina_shm ring;
    char name[INA_SHM_NAME_MAX];
    int fd;
    if (ina__ring_create(&ring, name, &fd, nslots, slot_size) != 0)
        return 1;
    /* The same object unsealed: a memfd made for sealing, never sealed. */
    char uname[INA_SHM_NAME_MAX];
    snprintf(uname, sizeof(uname), "ina.%u.%016llx", (unsigned)geteuid(), 0x756e7365616c6564ull);
    int ufd = memfd_create(uname, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (ufd < 0 || ftruncate(ufd, (off_t)ring.map_len) != 0 ||
        pwrite(ufd, ring.hdr, INA_SHM_HDR_LEN, 0) != INA_SHM_HDR_LEN)
        return 1;
    shared->unsealed_reason[i] = attach_raw(ctx, uname, ufd, nslots, slot_size);
    close(ufd);
    shared->sealed_reason[i] = attach_raw(ctx, name, fd, nslots, slot_size);
    shared->sealed_trunc_errno[i] = ftruncate(fd, 0) == 0 ? 0 : errno;
    close(fd);
    usleep(300000);
    shared->sealed_after_rc[i] = sum_1000(ctx);
    ina__ring_unmap(&ring);
    ina_finalize(ctx);
    return 0;
}

/*
 * The attack of issue 30: a ring object in /dev/shm, as a worker of the first
 * version of §5.9 makes it, attached and then truncated to nothing while the
 * switch holds it mapped. A switch that maps it must survive and abort this
 * job; one that refuses it leaves the job on UDP.
 */
static int hostile(int i, const struct part *p)
{
    setenv("INA_SHM", "0", 1); /* libina stays on UDP: the rings here are our own */
    if (hostile_memfd(i, p))
        return 1;
    ina_ctx *ctx;
    if (join(p->hostile[i], 0, 1, 5000, &ctx))
        return 1;
    uint32_t nslots = 64, slot_size = ina__ring_slot_size(INA_HDR_LEN + 4 * (size_t)ctx->elems);
    size_t size = INA_SHM_HDR_LEN + 2 * (size_t)nslots * slot_size;
    char name[INA_SHM_NAME_MAX];
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        return 1;
    snprintf(name, sizeof(name), "/ina.%u.%016llx", (unsigned)geteuid(), (unsigned long long)r);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        perror("hostile: shm_open");
        return 1;
    }
    struct ina_shm_hdr *hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (hdr == MAP_FAILED)
        return 1;
    hdr->version = INA_SHM_VERSION;
    hdr->nslots = nslots;
    hdr->slot_size = slot_size;
    hdr->magic = INA_SHM_MAGIC;
    int32_t reason = attach_raw(ctx, name, -1, nslots, slot_size);
    shared->attach_reason[i] = reason;
    shm_unlink(name);
    munmap(hdr, size);
    if (ftruncate(fd, 0) != 0) /* the attack: every page the switch mapped is gone */
        perror("hostile: ftruncate");
    close(fd);
    /* A switch that mapped the object touches it within 200 ms (it reads every
     * ring at least that often): the job must then be aborted; until it
     * notices, sums still work. One that refused it leaves the job alone. */
    int rc = sum_1000(ctx);
    for (double t0 = ina__clock_s(); reason == 0 && rc == 0 && ina__clock_s() - t0 < 10;) {
        usleep(20000);
        rc = sum_1000(ctx);
    }
    shared->after_rc[i] = rc;
    atomic_fetch_add(&shared->attacks_done, 1);
    ina_finalize(ctx);
    return 0;
}

static int worker(int rank, int n, void *arg)
{
    (void)n;
    return rank < LEGIT ? legit(rank) : hostile(rank - LEGIT, arg);
}

/* Job names that the switch's 2 threads place one on each (wire.h: ina__lane_shard). */
static void name_hostiles(struct part *p)
{
    for (int k = 0, found = 0; found < HOSTILE; k++) {
        char name[32];
        snprintf(name, sizeof(name), "hostile-%s-%d", p->unsealed ? "u" : "d", k);
        unsigned t = ina__lane_shard(name, 0, HOSTILE);
        if (!p->hostile[t][0]) {
            snprintf(p->hostile[t], sizeof(p->hostile[t]), "%s", name);
            found++;
        }
    }
}

static void run_part(struct part *p)
{
    name_hostiles(p);
    memset(shared, 0, sizeof(*shared));
    const char *args[] = {"--shm", "--threads", "2", "--log-level", "info", NULL, NULL};
    if (p->unsealed)
        args[5] = "--shm-unsealed";
    char log[80];
    snprintf(log, sizeof(log), "/tmp/ina-test-shm-truncate.%d.%s.log", (int)getpid(), p->name);
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    int failed = run_workers(LEGIT + HOSTILE, worker, p, 120);
    /* (run_workers may have reaped a dead switch already: waitpid(-1).) */
    int alive = waitpid(sw.pid, NULL, WNOHANG) == 0;
    int status = alive ? switch_stop(&sw) : -1;
    if (!alive)
        unlink(sw.port_file);
    printf("%s: %d workers failed, switch %s (exit status %d), legit ops %d %d %d %d\n", p->name,
           failed, alive ? "alive" : "dead", status, shared->legit_ops[0], shared->legit_ops[1],
           shared->legit_ops[2], shared->legit_ops[3]);
    CHECK(alive);
    CHECK_EQ_INT(status, 0);
    CHECK_EQ_INT(failed, 0);
    for (int r = 0; r < LEGIT; r++)
        CHECK(shared->legit_rings[r]); /* the legit job ran on rings */
    for (int i = 0; i < HOSTILE; i++) {
        printf("%s: hostile %d (%s): unsealed memfd %d; sealed memfd %d, ftruncate %s, then %s; "
               "POSIX shm %d, then %s\n",
               p->name, i, p->hostile[i], shared->unsealed_reason[i], shared->sealed_reason[i],
               shared->sealed_trunc_errno[i] ? strerror(shared->sealed_trunc_errno[i]) : "worked",
               ina_err_name(shared->sealed_after_rc[i]), shared->attach_reason[i],
               ina_err_name(shared->after_rc[i]));
        /* Whatever the switch's options: memfds must be sealed, and sealed ones stay whole. */
        CHECK_EQ_INT(shared->unsealed_reason[i], -EPERM);
        CHECK_EQ_INT(shared->sealed_reason[i], 0);
        CHECK_EQ_INT(shared->sealed_trunc_errno[i], EPERM);
        CHECK_EQ_INT(shared->sealed_after_rc[i], 0);
        if (p->unsealed) {
            /* Mapped, faulted, aborted: ABORT reason PROTO, which a worker reports as ABORTED. */
            CHECK_EQ_INT(shared->attach_reason[i], 0);
            CHECK_EQ_INT(shared->after_rc[i], INA_ERR_ABORTED);
        } else {
            /* Refused (its size is not sealed): the job goes on over UDP. */
            CHECK_EQ_INT(shared->attach_reason[i], -EPERM);
            CHECK_EQ_INT(shared->after_rc[i], 0);
        }
    }
    long long faults = switch_counter(&sw, "shm_faults"), aborted = switch_counter(&sw, "jobs_aborted");
    long long want = p->unsealed ? HOSTILE : 0;
    printf("%s: shm_faults %lld, jobs_aborted %lld\n", p->name, faults, aborted);
    CHECK_EQ_INT(faults, want);
    CHECK_EQ_INT(aborted, want);
    if (p->unsealed) {
        FILE *f = fopen(log, "r");
        char line[512];
        int logged = 0;
        while (f && fgets(line, sizeof(line), f))
            logged += strstr(line, "event=job_aborted") && strstr(line, "reason=ring_fault");
        if (f)
            fclose(f);
        CHECK_EQ_INT(logged, HOSTILE);
    }
    unlink(log);
}

/* Ranks of a job on rings whose switch is then killed (SIGKILL): each one's
 * next all-reduce must fail by itself with -ECONNREFUSED, as on UDP (the
 * retransmission also rings the switch over UDP, which the host answers with
 * "port unreachable"), long before its 20 s deadline. */
static int dead_rank(int rank, int n, void *arg)
{
    (void)arg;
    ina_ctx *ctx;
    if (join("dead", rank, n, 20000, &ctx))
        return 1;
    ina_info info;
    int32_t v[4096] = {0};
    if (ina_get_info(ctx, &info) != 0 || !info.shm ||
        ina_allreduce(ctx, v, v, 4096, INA_INT32, INA_SUM) != 0) {
        fprintf(stderr, "dead rank %d: no rings or no first sum\n", rank);
        return 1;
    }
    atomic_fetch_add(&shared->joined, 1);
    for (double t0 = ina__clock_s(); !shared->killed && ina__clock_s() - t0 < 30;)
        usleep(1000);
    /* As if it died awake (the SIGBUS): no doorbell is asked for. */
    atomic_store(&ctx->shm->hdr->up.sleeping, 0);
    double t0 = ina__clock_s();
    shared->dead_rc[rank] = ina_allreduce(ctx, v, v, 4096, INA_INT32, INA_SUM);
    shared->dead_s[rank] = ina__clock_s() - t0;
    ina_finalize(ctx);
    return 0;
}

static void run_dead_switch(void)
{
    memset(shared, 0, sizeof(*shared));
    const char *args[] = {"--shm", NULL};
    sw.log_path = NULL;
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(run_workers(2, dead_rank, NULL, 60) ? 1 : 0);
    for (double t0 = ina__clock_s(); atomic_load(&shared->joined) < 2 && ina__clock_s() - t0 < 30;)
        usleep(1000);
    kill(sw.pid, SIGKILL);
    waitpid(sw.pid, NULL, 0);
    unlink(sw.port_file);
    shared->killed = 1;
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int r = 0; r < 2; r++) {
        printf("dead switch: rank %d: %s after %.2f s\n", r, ina_err_name(shared->dead_rc[r]),
               shared->dead_s[r]);
        CHECK_EQ_INT(shared->dead_rc[r], -ECONNREFUSED);
        CHECK_LE_DBL(shared->dead_s[r], 5.0);
    }
}

int main(void)
{
    if (access("/dev/shm", W_OK) != 0) {
        printf("test_shm_truncate: SKIP: no writable /dev/shm\n");
        return 77;
    }
    if (h_ebpf()) {
        printf("test_shm_truncate: SKIP: the eBPF dataplane has no rings\n");
        return 77;
    }
    shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared != MAP_FAILED);
    if (shared == MAP_FAILED)
        return check_report("test_shm_truncate");
    struct part parts[] = {{.name = "default"}, {.name = "unsealed", .unsealed = 1}};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        run_part(&parts[i]);
    run_dead_switch();
    return check_report("test_shm_truncate");
}
