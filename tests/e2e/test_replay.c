/* test_replay.c: JOINs captured on the wire (by a proxy between the workers and ina-switch) and replayed after their job ended revive nothing, with and without --secret-file, and a later job gets the pool; a TREE_JOIN forged from another host cannot take over a joining job. */
#include <arpa/inet.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "e2e/harness.h"
#include "common/wire.h"

#define SLOTS 16
#define MAXREC 256
#define MAXUP 16
#define COUNT 3000

static struct sw_proc sw;

/* What the proxy and the test share (an anonymous shared mapping). */
struct shared {
    volatile int stop;
    volatile int replay, replayed;   /* replay requests, and those done */
    volatile int nrec, nsent;        /* JOINs captured; replayed datagrams sent */
    struct {
        int up;          /* the upstream socket it went out of */
        uint16_t len;
        uint8_t b[256];
    } rec[MAXREC];
    volatile int seen[32];           /* datagrams from the switch, by kind (< 32) */
    volatile int leaves;             /* LEAVEs forwarded */
    volatile int joined;             /* the last JOIN_WAIT's count of ranks joined */
    volatile int go;                 /* takeover: the last rank may join now */
};
static struct shared *sh;

/*
 * A UDP proxy on lfd: each worker address gets an upstream socket of its own
 * (so the switch sees one address:port per rank, as without the proxy); it
 * passes datagrams both ways and keeps a copy of every JOIN. On request it
 * sends every JOIN it kept again, three times, from the socket it first went
 * out of: an attacker on the path that captured them and spoofs their source.
 */
static void proxy(int lfd, int switch_port)
{
    int up[MAXUP], nup = 0;
    struct sockaddr_in who[MAXUP];
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)switch_port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint8_t buf[70000];
    while (!sh->stop) {
        struct pollfd p[MAXUP + 1];
        p[0].fd = lfd;
        p[0].events = POLLIN;
        for (int i = 0; i < nup; i++) {
            p[i + 1].fd = up[i];
            p[i + 1].events = POLLIN;
        }
        poll(p, (nfds_t)nup + 1, 20);
        if (p[0].revents & POLLIN) {
            struct sockaddr_in src;
            socklen_t sl = sizeof(src);
            ssize_t n = recvfrom(lfd, buf, sizeof(buf), 0, (struct sockaddr *)&src, &sl);
            int i = 0;
            while (n >= 4 && i < nup && (who[i].sin_addr.s_addr != src.sin_addr.s_addr ||
                                         who[i].sin_port != src.sin_port))
                i++;
            if (n >= 4 && i == nup && nup < MAXUP) {
                up[nup] = socket(AF_INET, SOCK_DGRAM, 0);
                connect(up[nup], (struct sockaddr *)&to, sizeof(to));
                who[nup++] = src;
            }
            if (n >= 4 && i < nup) {
                if (buf[3] == INA_K_JOIN && sh->nrec < MAXREC && n <= 256) {
                    sh->rec[sh->nrec].up = i;
                    sh->rec[sh->nrec].len = (uint16_t)n;
                    memcpy(sh->rec[sh->nrec].b, buf, (size_t)n);
                    sh->nrec++;
                }
                sh->leaves += buf[3] == INA_K_LEAVE;
                send(up[i], buf, (size_t)n, 0);
            }
        }
        for (int i = 0; i < nup; i++) {
            if (!(p[i + 1].revents & POLLIN))
                continue;
            ssize_t n = recv(up[i], buf, sizeof(buf), 0);
            if (n < 4)
                continue;
            if (buf[3] < 32)
                sh->seen[buf[3]]++;
            if (buf[3] == INA_K_JOIN_WAIT && n >= INA_HDR_LEN + INA_JOIN_WAIT_BODY_LEN)
                sh->joined = ina__get16(buf + INA_HDR_LEN + 10);
            sendto(lfd, buf, (size_t)n, 0, (struct sockaddr *)&who[i], sizeof(who[i]));
        }
        if (sh->replay != sh->replayed) {
            for (int round = 0; round < 3; round++) {
                for (int k = 0; k < sh->nrec; k++, sh->nsent++)
                    send(up[sh->rec[k].up], sh->rec[k].b, sh->rec[k].len, 0);
                usleep(100000);
            }
            sh->replayed = sh->replay;
        }
    }
}

/* Start the proxy in front of the switch. @return its pid; *port its port. */
static pid_t proxy_start(int *port)
{
    int lfd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
          getsockname(lfd, (struct sockaddr *)&a, &al) == 0);
    *port = ntohs(a.sin_port);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        proxy(lfd, sw.port);
        _exit(0);
    }
    close(lfd);
    return pid;
}

static void proxy_stop(pid_t pid)
{
    sh->stop = 1;
    waitpid(pid, NULL, 0);
}

struct job {
    const char *name, *secret;
    int via_port;  /* the proxy's port (0: straight to the switch) */
    int world, window, fallback;
    int wait_rank; /* this rank joins only once sh->go is set (-1: none) */
    int path;      /* the path every rank must report */
};

/* A rank: join, five verified all-reduces, leave. */
static int worker(int rank, int n, void *arg)
{
    const struct job *jb = arg;
    struct sw_proc via = sw;
    if (jb->via_port)
        via.port = jb->via_port;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &via, jb->name, rank, n, addr, sizeof(addr));
    cfg.secret_file = jb->secret;
    cfg.window = jb->window;
    cfg.fallback = jb->fallback;
    for (double t0 = ina__clock_s(); rank == jb->wait_rank && !sh->go && ina__clock_s() - t0 < 30;)
        usleep(2000);
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "%s rank %d: ina_init: %s: %s\n", jb->name, rank, ina_err_name(rc),
                ina_last_error(NULL));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    int bad = info.path != jb->path;
    static int32_t in[COUNT], out[COUNT];
    for (uint64_t op = 0; op < 5 && !bad; op++) {
        for (size_t j = 0; j < COUNT; j++)
            in[j] = h_i32(rank, op, j);
        rc = ina_allreduce(ctx, in, out, COUNT, INA_INT32, INA_SUM);
        bad += rc != 0 || h_check_sum(out, COUNT, 1, n, op, 0, 0) != 0;
    }
    if (bad)
        fprintf(stderr, "%s rank %d: path %d, %s\n", jb->name, rank, info.path, ina_err_name(rc));
    ina_finalize(ctx);
    return bad;
}

/* Wait (at most 10 s) until cond holds. */
#define WAIT_FOR(cond)                                                      \
    for (double t0_ = ina__clock_s(); !(cond) && ina__clock_s() - t0_ < 10;)               \
        usleep(2000)

/* Replay every captured JOIN (three times each) and wait until it went out. */
static void replay(void)
{
    int want = sh->replay + 1;
    sh->replay = want;
    WAIT_FOR(sh->replayed == want);
    CHECK_EQ_INT(sh->replayed, want);
}

/*
 * Issue 30, item 4: a job of three ranks runs through the proxy and ends;
 * its JOINs, replayed, must not start it again (before, the replay started
 * a session that held the whole pool until the idle timeout, and the next
 * job was refused NOSPACE). With the secret: at once (fresh cookies) the
 * switch refuses them as a finished session's, later it only challenges.
 */
static void finished_job(const char *secret)
{
    const char *plain[] = {"--slots", "16", "--max-job-slots", "16", "--min-job-slots", "16",
                           NULL};
    const char *with[] = {"--slots", "16", "--max-job-slots", "16", "--min-job-slots", "16",
                          "--secret-file", secret, NULL};
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-replay.%d.log", (int)getpid());
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, secret ? with : plain), 0);
    memset(sh, 0, sizeof(*sh));
    int port;
    pid_t px = proxy_start(&port);
    struct job j = {"replayed", secret, port, 3, SLOTS, INA_FALLBACK_NONE, -1, INA_PATH_SWITCH};
    CHECK_EQ_INT(run_workers(3, worker, &j, 60), 0);
    CHECK(sh->nrec >= 3);
    WAIT_FOR(sh->leaves >= 6); /* every rank's LEAVEs went through (each sends two) */
    int naks = sh->seen[INA_K_JOIN_NAK], acks = sh->seen[INA_K_JOIN_ACK],
        waits = sh->seen[INA_K_JOIN_WAIT], cookies = sh->seen[INA_K_JOIN_COOKIE];
    replay();
    /* Every replayed JOIN is refused: a session ends once. (With the secret,
     * a rank's first JOIN had no cookie yet: that one is challenged.) */
#define REFUSED (sh->seen[INA_K_JOIN_NAK] - naks + sh->seen[INA_K_JOIN_COOKIE] - cookies)
    WAIT_FOR(REFUSED >= sh->nsent);
    CHECK_EQ_INT(REFUSED, sh->nsent);
    CHECK(sh->seen[INA_K_JOIN_NAK] - naks >= 3 * 3);
    CHECK_EQ_INT(sh->seen[INA_K_JOIN_ACK], acks);
    CHECK_EQ_INT(sh->seen[INA_K_JOIN_WAIT], waits);
    if (secret) {
        /* Past the cookies' life: the switch asks for a new one, which a replay cannot make. */
        cookies = sh->seen[INA_K_JOIN_COOKIE];
        usleep(4500 * 1000);
        int sent = sh->nsent;
        replay();
        WAIT_FOR(sh->seen[INA_K_JOIN_COOKIE] - cookies >= sh->nsent - sent);
        CHECK_EQ_INT(sh->seen[INA_K_JOIN_COOKIE] - cookies, sh->nsent - sent);
        CHECK_EQ_INT(sh->seen[INA_K_JOIN_ACK], acks);
        CHECK_EQ_INT(sh->seen[INA_K_JOIN_WAIT], waits);
    }
    proxy_stop(px);
    /* Nothing holds the pool: a job that needs all of it starts on the switch. */
    struct job later = {"later", secret, 0, 1, SLOTS, INA_FALLBACK_NONE, -1, INA_PATH_SWITCH};
    CHECK_EQ_INT(run_workers(1, worker, &later, 60), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_started"), 2);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_refused"), 0);
    CHECK(switch_counter(&sw, "joins_replayed") >= 9);
    if (secret)
        CHECK(switch_counter(&sw, "join_challenges") >= 4 + 9);
    unlink(log);
}

/*
 * Issue 30, item 6: ranks 0 and 1 of a world of 3 have joined; a TREE_JOIN
 * from another host (127.0.0.2) claims {0, 1, 2}. It must not start the job
 * with itself and lock the real ranks out (REJECTED, rank_running_elsewhere):
 * it is refused, and the job runs with its ranks when rank 2 joins.
 */
static void forged_tree_join(void)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-replay-t.%d.log", (int)getpid());
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    memset(sh, 0, sizeof(*sh));
    int port;
    pid_t px = proxy_start(&port); /* to see the JOIN_WAITs: when ranks 0 and 1 are in */
    struct job j = {"takeover", NULL, port, 3, SLOTS, INA_FALLBACK_NONE, 2, INA_PATH_SWITCH};
    fflush(NULL);
    pid_t ranks = fork();
    if (ranks == 0)
        _exit(run_workers(3, worker, &j, 60) ? 1 : 0);
    WAIT_FOR(sh->joined == 2);
    CHECK_EQ_INT(sh->joined, 2);

    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    me.sin_addr.s_addr = htonl(0x7F000002);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons((uint16_t)sw.port);
    CHECK(bind(fd, (struct sockaddr *)&me, sizeof(me)) == 0);
    uint8_t b[INA_HDR_LEN + INA_TREE_JOIN_LEN], ans[512];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_TREE_JOIN);
    ina__hdr_encode(b, &h);
    struct ina_join jb = {.nonce = 0xF0F0, .world_size = 3, .elems = 256, .window = SLOTS,
                          .nlanes = 1};
    snprintf(jb.name, sizeof(jb.name), "takeover");
    ina__join_encode(b + INA_HDR_LEN, &jb);
    memset(b + INA_HDR_LEN + INA_JOIN_BODY_LEN, 0, INA_TREE_SET_LEN);
    b[INA_HDR_LEN + INA_JOIN_BODY_LEN] = 0x7; /* {0, 1, 2} */
    int naks = 0, others = 0;
    for (int k = 0; k < 5; k++) { /* as a child re-sends it */
        sendto(fd, b, sizeof(b), 0, (struct sockaddr *)&to, sizeof(to));
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (poll(&p, 1, 200) > 0) {
            ssize_t n = recv(fd, ans, sizeof(ans), 0);
            uint64_t nonce;
            int32_t reason = 0;
            if (n >= INA_HDR_LEN + INA_NAK_BODY_LEN && ans[3] == INA_K_JOIN_NAK &&
                ina__nak_decode(ans + INA_HDR_LEN, (size_t)n - INA_HDR_LEN, &nonce, &reason) == 0 &&
                reason == INA_ERR_REJECTED)
                naks++;
            else
                others++;
        }
    }
    close(fd);
    CHECK_EQ_INT(naks, 5);
    CHECK_EQ_INT(others, 0);
    sh->go = 1; /* now rank 2: the job starts with its three ranks */
    int st = 1;
    waitpid(ranks, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    proxy_stop(px);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_counter(&sw, "joins_refused_taken"), 5);
    CHECK_EQ_INT(switch_counter(&sw, "tree_joins"), 0);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_started"), 1);
    unlink(log);
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    if (sh == MAP_FAILED)
        return 1;
    char secret[64];
    snprintf(secret, sizeof(secret), "/tmp/ina-test-replay-secret.%d", (int)getpid());
    CHECK_EQ_INT(h_write_file(secret, "replay me if you can\n"), 0);
    finished_job(NULL);
    finished_job(secret);
    forged_tree_join();
    unlink(secret);
    munmap(sh, sizeof(*sh));
    return check_report("test_replay");
}
