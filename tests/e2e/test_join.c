/* test_join.c: joining goes wrong and says why: a rank that gave up joining takes its registration back (or the switch forgets it), a failed join does not bind the job's name, ranks that disagree on the world size all fail with MISMATCH, and a join that waits says what for. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
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
    double t0 = h_now();
    j.rc = ina_init(&ctx, &cfg);
    j.secs = h_now() - t0;
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
    double t0 = h_now();
    CHECK_EQ_INT(child_status(p0), 2); /* rank 0 (world 2): MISMATCH too */
    CHECK(h_now() - t0 < 5);
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

static int closed_port;

static void join_closed_port(void)
{
    ina_config cfg;
    ina_config_init(&cfg);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", closed_port);
    cfg.switch_addr = addr;
    cfg.join_timeout_ms = 4500;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    fprintf(stderr, "rc=%s msg=%s\n", ina_err_name(rc), ina_last_error(NULL));
}

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

/* A free UDP port on loopback (bound, then closed: nothing listens there). */
static int free_udp_port(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) != 0)
        return -1;
    close(fd);
    return ntohs(a.sin_port);
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
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK(switch_counter(&sw, "joins_withdrawn") >= 2);
    CHECK(switch_counter(&sw, "joins_expired") >= 1);
    /* The switch logged each refused JOIN with its reason. */
    FILE *f = fopen(log, "r");
    char line[512];
    int refused = 0, forgotten = 0;
    while (f && fgets(line, sizeof(line), f)) {
        refused += strstr(line, "event=join_refused") && strstr(line, "reason=world_size_mismatch");
        forgotten += strstr(line, "event=join_forgotten") != NULL;
    }
    if (f)
        fclose(f);
    CHECK(refused >= 1);
    CHECK(forgotten >= 3);
    unlink(log);
    return check_report("test_join");
}
