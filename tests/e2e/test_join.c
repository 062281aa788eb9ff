/* test_join.c: joining goes wrong and says why: a rank that gave up joining takes its registration back (or the switch forgets it), a failed join does not bind the job's name, ranks that disagree on the world size all fail with MISMATCH, a join that waits says what for, and a version skew is named on both sides. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "common/wire.h"
#include "e2e/harness.h"

static struct sw_proc sw;

/* ina_init of (job, rank, world) against the test switch; rc, its message and the time it took. */
struct joined {
    int rc;
    double secs;
    char msg[300];
};

static struct joined join_once(const char *job, int rank, int world, int join_timeout_ms,
                               int keep_ms)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, world, addr, sizeof(addr));
    cfg.join_timeout_ms = join_timeout_ms;
    struct joined j;
    ina_ctx *ctx = NULL;
    double t0 = ina__clock_s();
    j.rc = ina_init(&ctx, &cfg);
    j.secs = ina__clock_s() - t0;
    snprintf(j.msg, sizeof(j.msg), "%s", j.rc ? ina_last_error(NULL) : "");
    if (ctx) {
        if (keep_ms)
            usleep((useconds_t)keep_ms * 1000);
        ina_finalize(ctx);
    }
    return j;
}

/* A child that joins and reports rc (exit status 0: INA_OK, 1: TIMEOUT, 2: MISMATCH, 3: other). */
static pid_t join_child(const char *job, int rank, int world, int join_timeout_ms)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct joined j = join_once(job, rank, world, join_timeout_ms, 0);
        if (j.rc)
            fprintf(stderr, "child rank %d: %s: %s\n", rank, ina_err_name(j.rc), j.msg);
        _exit(j.rc == 0 ? 0 : j.rc == INA_ERR_TIMEOUT ? 1 : j.rc == INA_ERR_MISMATCH ? 2 : 3);
    }
    return pid;
}

static int child_status(pid_t pid)
{
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

/*
 * Issue 18, items 2 and 3: rank 0 of a world-2 job gives up joining (its
 * deadline) and exits; rank 1 comes 2 s later. It must not get a session
 * with the dead rank 0: it waits, and says for whom. The name is free: a
 * world-1 job of the same name starts at once.
 */
static void test_withdrawn(void)
{
    struct joined j0 = join_once("ghost", 0, 2, 1000, 0);
    CHECK_EQ_INT(j0.rc, INA_ERR_TIMEOUT);
    CHECK(strstr(j0.msg, "waiting for rank 1") != NULL);
    printf("rank 0 gave up: %s\n", j0.msg);
    usleep(1000 * 1000);
    struct joined j1 = join_once("ghost", 1, 2, 1200, 0);
    printf("rank 1, 1 s later: %s after %.2f s: %s\n", ina_err_name(j1.rc), j1.secs, j1.msg);
    CHECK_EQ_INT(j1.rc, INA_ERR_TIMEOUT);
    CHECK(j1.secs >= 1.1);
    CHECK(strstr(j1.msg, "waiting for rank 0") != NULL);
    /* A corrected job of the same name with another world size starts now. */
    struct joined one = join_once("ghost", 0, 1, 3000, 0);
    CHECK_EQ_INT(one.rc, 0);
    CHECK(one.secs < 1.0);
}

/*
 * The same when the withdrawal is lost: rank 0 is killed while joining (it
 * sends nothing more). The switch forgets it when the deadline its JOINs
 * stated passes (or once it has been silent for 3.5 s: test_switch covers
 * that), so rank 1 again gets no session with it, and the name is free.
 */
static void test_killed(void)
{
    pid_t p0 = join_child("killed", 0, 2, 1500);
    usleep(500 * 1000);
    kill(p0, SIGKILL);
    child_status(p0);
    usleep(1300 * 1000); /* past rank 0's stated deadline, and the switch's next tick */
    struct joined j1 = join_once("killed", 1, 2, 1200, 0);
    printf("rank 1 after rank 0 was killed: %s after %.2f s: %s\n", ina_err_name(j1.rc), j1.secs,
           j1.msg);
    CHECK_EQ_INT(j1.rc, INA_ERR_TIMEOUT);
    CHECK(strstr(j1.msg, "waiting for rank 0") != NULL);
    struct joined one = join_once("killed", 0, 3, 1000, 0);
    CHECK_EQ_INT(one.rc, INA_ERR_TIMEOUT); /* a world-3 job may take the name now... */
    CHECK(strstr(one.msg, "waiting for ranks 1, 2") != NULL); /* ...and waits for its own */
    /* Both joining, then both there: a normal job of that name works. */
    pid_t a = join_child("killed", 0, 2, 5000);
    struct joined b = join_once("killed", 1, 2, 5000, 0);
    CHECK_EQ_INT(b.rc, 0);
    CHECK_EQ_INT(child_status(a), 0);
}

/*
 * Issue 19: ranks that disagree on the world size. Every rank fails with
 * MISMATCH at once, and the message names both sizes; a third rank that
 * comes a moment later is told too.
 */
static void test_world_mismatch(void)
{
    pid_t p0 = join_child("disagree", 0, 2, 20000);
    usleep(300 * 1000);
    struct joined j1 = join_once("disagree", 1, 3, 20000, 0);
    printf("rank 1 (world 3): %s after %.2f s: %s\n", ina_err_name(j1.rc), j1.secs, j1.msg);
    CHECK_EQ_INT(j1.rc, INA_ERR_MISMATCH);
    CHECK(j1.secs < 5);
    CHECK(strstr(j1.msg, "has 3, another rank has 2") != NULL);
    double t0 = ina__clock_s();
    CHECK_EQ_INT(child_status(p0), 2); /* rank 0 (world 2): MISMATCH too */
    CHECK(ina__clock_s() - t0 < 5);
    struct joined j2 = join_once("disagree", 2, 3, 20000, 0);
    CHECK_EQ_INT(j2.rc, INA_ERR_MISMATCH);
    CHECK(j2.secs < 5);
}

/* A child running fn with its stderr going to a pipe; *fd is the pipe's read end. */
static pid_t spawn_captured(void (*fn)(void), int *fd)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        fn();
        _exit(0);
    }
    close(fds[1]);
    *fd = fds[0];
    return pid;
}

/* Everything the child wrote, then its status. */
static int collect(pid_t pid, int fd, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(fd);
    return child_status(pid);
}

/* ina_init of rank 0 of a world-1 job (job NULL: the default) against 127.0.0.1:port;
 * its code and message on stderr. */
static void join_at_port(int port, const char *job, int join_timeout_ms)
{
    ina_config cfg;
    ina_config_init(&cfg);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    cfg.switch_addr = addr;
    if (job)
        cfg.job = job;
    cfg.join_timeout_ms = join_timeout_ms;
    ina_ctx *ctx = NULL;
    int rc = ina_init(&ctx, &cfg);
    fprintf(stderr, "rc=%s msg=%s\n", ina_err_name(rc), ina_last_error(NULL));
    ina_finalize(ctx);
}

static int closed_port;

static void join_closed_port(void) { join_at_port(closed_port, NULL, 4500); }

static void join_closed_port_quiet(void)
{
    setenv("INA_QUIET", "1", 1);
    join_closed_port();
}

static void join_waiting(void)
{
    struct joined j = join_once("lonely", 2, 3, 4500, 0);
    fprintf(stderr, "rc=%s msg=%s\n", ina_err_name(j.rc), j.msg);
}

/* A UDP socket on loopback, on a free port; *port set. */
static int udp_bound(int *port)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) != 0)
        return -1;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    *port = ntohs(a.sin_port);
    return fd;
}

/* A free UDP port on loopback (bound, then closed: nothing listens there). */
static int free_udp_port(void)
{
    int port, fd = udp_bound(&port);
    if (fd < 0)
        return -1;
    close(fd);
    return port;
}

/*
 * Issue 19: a join that waits says on stderr what it waits for within 5 s
 * (the first line comes after 3 s), and its error names the cause: no
 * switch at the address, or the ranks that are missing.
 */
static void test_join_messages(void)
{
    char out[4096];
    closed_port = free_udp_port();
    CHECK(closed_port > 0);
    int fd[3];
    pid_t pid[3] = {spawn_captured(join_closed_port, &fd[0]), spawn_captured(join_waiting, &fd[1]),
                    spawn_captured(join_closed_port_quiet, &fd[2])};
    CHECK_EQ_INT(collect(pid[0], fd[0], out, sizeof(out)), 0);
    printf("no switch:\n%s", out);
    CHECK(strstr(out, "port unreachable (is ina-switch running there?)") != NULL);
    CHECK(strstr(out, "[3 s of 5 s]") != NULL); /* the progress line, before the deadline */
    CHECK(strstr(out, "rc=INA_ERR_TIMEOUT") != NULL);

    CHECK_EQ_INT(collect(pid[1], fd[1], out, sizeof(out)), 0);
    printf("missing ranks:\n%s", out);
    CHECK(strstr(out, "waiting for ranks 0, 1 to join (1 of 3 joined") != NULL);
    CHECK(strstr(out, "[3 s of 5 s]") != NULL);
    CHECK(strstr(out, "rc=INA_ERR_TIMEOUT") != NULL);

    /* INA_QUIET=1: the same error, no progress line. */
    CHECK_EQ_INT(collect(pid[2], fd[2], out, sizeof(out)), 0);
    CHECK(strstr(out, "[3 s of") == NULL);
    CHECK(strstr(out, "port unreachable") != NULL);
}

/* ---- Versions: the JOIN says the worker's, the switch names a stale one ------------------ */


/* Send a JOIN of (name, rank, world, window) saying sw_version to the test switch. */
static void raw_join(int fd, const char *name, int rank, int world, uint32_t window,
                     uint64_t nonce, uint32_t sw_version)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)rank;
    ina__hdr_encode(b, &h);
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world_size = (uint16_t)world;
    j.elems = 4;
    j.window = window;
    j.sw_version = sw_version;
    j.nlanes = 1;
    snprintf(j.name, sizeof(j.name), "%s", name);
    ina__join_encode(b + INA_HDR_LEN, &j);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sw.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    sendto(fd, b, sizeof(b), 0, (struct sockaddr *)&to, sizeof(to));
}

/* The next datagram of one of the kinds in `want` (others skipped), or 0 bytes. */
static ssize_t recv_kind(int fd, uint8_t *b, size_t len, uint8_t want1, uint8_t want2)
{
    for (int i = 0; i < 16; i++) {
        ssize_t n = recv(fd, b, len, 0);
        if (n < (ssize_t)INA_HDR_LEN)
            return 0;
        if (b[3] == want1 || b[3] == want2)
            return n;
    }
    return 0;
}

/*
 * Issue 31: JOINs that say version 0.5.0 at a switch of another version. The
 * switch warns once per job naming the worker (version_skew: rank, address,
 * version), however many JOINs; a JOIN it refuses is answered with a JOIN_NAK
 * that carries the switch's version (PROTOCOL.md §4.2), and its join_refused
 * line names the worker's version. (The lines are checked in main, from the
 * switch's log.)
 */
static void test_version_skew(void)
{
    int p0, p1;
    int a = udp_bound(&p0), b = udp_bound(&p1);
    CHECK(a >= 0 && b >= 0);
    uint8_t buf[512];
    for (int i = 0; i < 3; i++) /* retransmissions: still one warning */
        raw_join(a, "skew", 0, 2, 2, 0x5111, 500);
    raw_join(b, "skew", 1, 2, 2, 0x5112, 500);
    ssize_t n = recv_kind(b, buf, sizeof(buf), INA_K_JOIN_ACK, INA_K_JOIN_NAK);
    CHECK(n >= (ssize_t)(INA_HDR_LEN + INA_JOIN_BODY_LEN) && buf[3] == INA_K_JOIN_ACK);
    struct ina_join j = {0};
    if (n > 0)
        CHECK_EQ_INT(ina__join_decode(buf + INA_HDR_LEN, (size_t)n - INA_HDR_LEN, &j), 0);
    CHECK_EQ_INT(j.sw_version, INA_VERSION_NUMBER); /* the ACK says the switch's */
    struct ina_hdr h;
    if (n > 0 && ina__hdr_decode(buf, (size_t)n, &h) == INA_PARSE_OK) {
        struct ina_hdr lh;
        ina__hdr_init(&lh, INA_K_LEAVE);
        lh.job = h.job;
        lh.session = h.session;
        lh.token = h.token;
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sw.port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        for (int r = 0; r < 2; r++) {
            lh.rank = (uint16_t)r;
            ina__hdr_encode(buf, &lh);
            sendto(r ? b : a, buf, INA_HDR_LEN, 0, (struct sockaddr *)&to, sizeof(to));
        }
    }
    /* A window that is not a power of 2: JOIN_NAK REJECTED, bytes 12..15 the version. */
    raw_join(a, "skew_bad", 0, 2, 3, 0x5113, 500);
    n = recv_kind(a, buf, sizeof(buf), INA_K_JOIN_NAK, INA_K_JOIN_NAK);
    CHECK(n >= (ssize_t)(INA_HDR_LEN + INA_NAK_BODY_LEN));
    if (n > 0) {
        CHECK_EQ_INT((int32_t)ina__get32(buf + INA_HDR_LEN + 8), INA_ERR_REJECTED);
        CHECK_EQ_INT(ina__get32(buf + INA_HDR_LEN + INA_NAK_VERSION), INA_VERSION_NUMBER);
        /* ...and byte 16 the cause the switch saw (since 0.6). */
        CHECK(n >= (ssize_t)(INA_HDR_LEN + INA_NAK_REJECTED_LEN));
        CHECK_EQ_INT(buf[INA_HDR_LEN + INA_NAK_CAUSE], INA_REJECT_PARAMETERS);
    }
    close(a);
    close(b);
}

/* A stand-in switch on its own port answers one JOIN of libina as told. */
static int fake_port;
static void join_fake(void)
{
    setenv("INA_QUIET", "1", 1);
    join_at_port(fake_port, "stale", 3000);
}

/* Run join_fake against a stand-in that answers its first JOIN with a datagram
 * of `kind` in wire version `wire`: a NAK body (reason, bytes 12..15 nak_version)
 * or a JOIN_ACK body (window 3: impossible; sw_version nak_version). */
static void fake_answer(uint8_t kind, uint8_t wire, int reason, uint32_t nak_version,
                        char *out, size_t outlen)
{
    int fd = udp_bound(&fake_port);
    CHECK(fd >= 0);
    int pfd;
    pid_t pid = spawn_captured(join_fake, &pfd);
    uint8_t b[512];
    struct sockaddr_in from;
    socklen_t fl = sizeof(from);
    ssize_t n = recvfrom(fd, b, sizeof(b), 0, (struct sockaddr *)&from, &fl);
    CHECK(n >= (ssize_t)(INA_HDR_LEN + INA_JOIN_BODY_LEN));
    struct ina_join j = {0};
    if (n > 0)
        ina__join_decode(b + INA_HDR_LEN, (size_t)n - INA_HDR_LEN, &j);
    CHECK_EQ_INT(j.sw_version, INA_VERSION_NUMBER); /* libina says its real version */
    struct ina_hdr h;
    ina__hdr_init(&h, kind);
    h.rank = INA_RANK_SWITCH;
    if (kind == INA_K_JOIN_ACK) {
        h.job = 1;
        h.session = h.token = 7;
    }
    uint8_t reply[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    ina__hdr_encode(reply, &h);
    reply[2] = wire;
    size_t len = INA_HDR_LEN;
    if (kind == INA_K_JOIN_NAK) {
        ina__nak_encode(reply + len, j.nonce, reason);
        ina__put32(reply + len + INA_NAK_VERSION, nak_version);
        len += INA_NAK_BODY_LEN;
    } else {
        j.window = 3;
        j.sw_version = nak_version;
        ina__join_encode(reply + len, &j);
        len += INA_JOIN_BODY_LEN;
    }
    sendto(fd, reply, len, 0, (struct sockaddr *)&from, fl);
    CHECK_EQ_INT(collect(pid, pfd, out, outlen), 0);
    close(fd);
}

/*
 * Issue 31: a join that fails for a reason a version skew could explain
 * (REJECTED, PROTO) names both versions in ina_last_error(): libina's, and
 * the switch's from its JOIN_NAK or JOIN_ACK.
 */
static void test_version_named(void)
{
    char out[1024], want[96];
    const char *mine = ina_version_string();
    fake_answer(INA_K_JOIN_NAK, INA_WIRE_VERSION, INA_ERR_REJECTED, 500, out, sizeof(out));
    printf("REJECTED by a 0.5.0 switch:\n%s", out);
    snprintf(want, sizeof(want), "libina %s, switch 0.5.0 (the versions differ)", mine);
    CHECK(strstr(out, "rc=INA_ERR_REJECTED") && strstr(out, want));

    fake_answer(INA_K_JOIN_NAK, INA_WIRE_VERSION, INA_ERR_REJECTED, 0, out, sizeof(out));
    printf("REJECTED by a switch that does not say:\n%s", out);
    snprintf(want, sizeof(want), "libina %s, the switch does not say its version", mine);
    CHECK(strstr(out, "rc=INA_ERR_REJECTED") && strstr(out, want));

    fake_answer(INA_K_JOIN_NAK, INA_WIRE_VERSION, INA_ERR_PROTO, 70000, out, sizeof(out));
    printf("PROTO from a 7.0.0 switch:\n%s", out);
    snprintf(want, sizeof(want), "libina %s, switch 7.0.0 (the versions differ)", mine);
    CHECK(strstr(out, "rc=INA_ERR_PROTO") && strstr(out, want));

    fake_answer(INA_K_JOIN_ACK, INA_WIRE_VERSION, 0, 500, out, sizeof(out));
    printf("impossible JOIN_ACK of a 0.5.0 switch:\n%s", out);
    snprintf(want, sizeof(want), "window 3; libina %s, switch 0.5.0 (the versions differ)", mine);
    CHECK(strstr(out, "rc=INA_ERR_PROTO") && strstr(out, want));

    fake_answer(INA_K_JOIN_NAK, 2, INA_ERR_REJECTED, 0, out, sizeof(out));
    printf("a JOIN_NAK of wire version 2:\n%s", out);
    snprintf(want, sizeof(want), "answered in protocol version 2, this rank speaks 1 (libina %s)",
             mine);
    CHECK(strstr(out, "rc=INA_ERR_PROTO") && strstr(out, want));
}

int main(void)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-join.%d.log", (int)getpid());
    sw.log_path = log;
    const char *const args[] = {"--log-level", "info", NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    test_withdrawn();
    test_killed();
    test_world_mismatch();
    test_join_messages();
    test_version_skew();
    test_version_named();
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK(switch_counter(&sw, "joins_withdrawn") >= 2);
    CHECK(switch_counter(&sw, "joins_expired") >= 1);
    /* The switch logged each refused JOIN with its reason. */
    FILE *f = fopen(log, "r");
    char line[512];
    int refused = 0, forgotten = 0, skew = 0, skew_refused = 0;
    char skew_want[128];
    snprintf(skew_want, sizeof(skew_want), "version=0.5.0 switch_version=%s",
             ina_version_string());
    while (f && fgets(line, sizeof(line), f)) {
        refused += strstr(line, "event=join_refused") && strstr(line, "reason=world_size_mismatch");
        forgotten += strstr(line, "event=join_forgotten") != NULL;
        if (strstr(line, "event=version_skew")) {
            printf("%s", line);
            skew += strstr(line, "name=skew ") && strstr(line, "rank=0 from=127.0.0.1:") &&
                    strstr(line, skew_want);
            skew += 100 * (strstr(line, "name=skew ") == NULL); /* no other job skewed */
        }
        skew_refused += strstr(line, "event=join_refused") && strstr(line, "name=skew_bad") &&
                        strstr(line, "version=0.5.0") && strstr(line, "reason=bad_parameters");
    }
    if (f)
        fclose(f);
    CHECK(refused >= 1);
    CHECK(forgotten >= 3);
    CHECK_EQ_INT(skew, 1); /* once per job, naming rank 0, its address and both versions */
    CHECK_EQ_INT(skew_refused, 1);
    unlink(log);
    return check_report("test_join");
}
