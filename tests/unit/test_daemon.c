/* test_daemon.c: the daemons' frame (common/daemon.h): SIGTERM drains then stops, SIGINT stops, SIGHUP counts; --listen, --metrics and their defaults and errors; --port-file written whole; the bound socket; the exit report's fault lines. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/daemon.h"

/* In a child of its own (its flags start as this process's, clear): install flags, raise
 * sig, and exit 0 if the daemon then is stopping and draining as expected. */
static int signal_child(unsigned flags, int sig, int stopping, int draining)
{
    pid_t pid = fork();
    if (pid == 0) {
        ina__daemon_signals(flags);
        if (sig)
            raise(sig);
        else
            ina__daemon_stop(); /* the daemon's own decision */
        _exit(ina__daemon_stopping() == stopping && ina__daemon_draining() == draining ? 0 : 1);
    }
    int st;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void test_signals(void)
{
    CHECK(signal_child(0, SIGTERM, 1, 0));                /* without DRAIN: SIGTERM stops */
    CHECK(signal_child(INA_DAEMON_DRAIN, SIGINT, 1, 0));  /* SIGINT never drains */
    CHECK(signal_child(INA_DAEMON_DRAIN, SIGTERM, 0, 1)); /* the first SIGTERM drains */
    CHECK(signal_child(0, 0, 1, 0));

    /* Here: SIGHUP counted, SIGPIPE ignored, SIGTERM drains, a second one stops. */
    ina__daemon_signals(INA_DAEMON_DRAIN | INA_DAEMON_HUP | INA_DAEMON_NOPIPE);
    CHECK(!ina__daemon_stopping() && !ina__daemon_draining());
    CHECK_EQ_INT(ina__daemon_hups(), 0);
    raise(SIGHUP);
    raise(SIGHUP);
    CHECK_EQ_INT(ina__daemon_hups(), 2);
    raise(SIGPIPE);
    raise(SIGTERM);
    CHECK(ina__daemon_draining() && !ina__daemon_stopping());
    raise(SIGTERM);
    CHECK(ina__daemon_stopping());
}

static void test_due(void)
{
    uint64_t last = 1000;
    CHECK(!ina__daemon_due(&last, 1000, 100));
    CHECK(!ina__daemon_due(&last, 1100, 100)); /* more than the period, not as much */
    CHECK(ina__daemon_due(&last, 1101, 100));
    CHECK_EQ_INT(last, 1101);
    CHECK(!ina__daemon_due(&last, 1150, 100));
}

static int port_of(const struct sockaddr_in *a) { return ntohs(a->sin_port); }

static void test_addresses(void)
{
    struct sockaddr_in a;
    CHECK_EQ_INT(ina__daemon_listen_addr("t", "127.0.0.1", 4242, &a), 0);
    CHECK(a.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && port_of(&a) == 4242);
    CHECK_EQ_INT(ina__daemon_listen_addr("t", "127.0.0.1:0", 4242, &a), 0);
    CHECK_EQ_INT(port_of(&a), 0);
    CHECK_EQ_INT(ina__daemon_listen_addr("t", "0.0.0.0:7", 4242, &a), 0);
    CHECK(a.sin_addr.s_addr == htonl(INADDR_ANY) && port_of(&a) == 7);
    CHECK_EQ_INT(ina__daemon_listen_addr("t", "127.0.0.1:99999", 4242, &a), -1);
    CHECK_EQ_INT(ina__daemon_listen_addr("t", "", 4242, &a), -1);

    int on = 7;
    CHECK_EQ_INT(ina__daemon_metrics_addr("t", NULL, NULL, &a, &on), 0);
    CHECK_EQ_INT(on, 0);
    CHECK_EQ_INT(ina__daemon_metrics_addr("t", NULL, "/tmp/x", &a, &on), -1); /* needs --metrics */
    CHECK_EQ_INT(ina__daemon_metrics_addr("t", "9100", NULL, &a, &on), 0); /* bare: loopback */
    CHECK(on == 1 && a.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && port_of(&a) == 9100);
    CHECK_EQ_INT(ina__daemon_metrics_addr("t", "0.0.0.0:0", "/tmp/x", &a, &on), 0);
    CHECK(on == 1 && a.sin_addr.s_addr == htonl(INADDR_ANY) && port_of(&a) == 0);
    CHECK_EQ_INT(ina__daemon_metrics_addr("t", "localhost", NULL, &a, &on), -1); /* no port */
    CHECK_EQ_INT(ina__daemon_metrics_addr("t", "", NULL, &a, &on), -1);

    enum ina_log_level level = INA_LOG_INFO;
    CHECK_EQ_INT(ina__daemon_log_level("t", "debug", &level), 0);
    CHECK_EQ_INT(level, INA_LOG_DEBUG);
    CHECK_EQ_INT(ina__daemon_log_level("t", "loud", &level), -1);
    CHECK_EQ_INT(ina__daemon_fault_spec("t", "rx", "drop=0.1,seed=3"), 0);
    CHECK_EQ_INT(ina__daemon_fault_spec("t", "tx", "drop=2"), -1);
    char a0[] = "t", a1[] = "--x", a2[] = "extra";
    char *argv[] = {a0, a1, a2, NULL};
    CHECK_EQ_INT(ina__daemon_no_operands("t", 3, argv, 3), 0);
    CHECK_EQ_INT(ina__daemon_no_operands("t", 3, argv, 2), -1);
}

static void test_files_and_sockets(void)
{
    char dir[] = "/tmp/ina_test_daemon.XXXXXX", path[64], tmp[80], buf[32];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/port", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK_EQ_INT(ina__port_file_write(path, 48864), 0);
    FILE *f = fopen(path, "r");
    CHECK(f && fgets(buf, sizeof(buf), f) && strcmp(buf, "48864\n") == 0);
    if (f)
        fclose(f);
    CHECK(access(tmp, F_OK) != 0); /* renamed into place: no temporary left */
    CHECK_EQ_INT(ina__port_file_write(path, 1), 0); /* replaced whole */
    f = fopen(path, "r");
    CHECK(f && fgets(buf, sizeof(buf), f) && strcmp(buf, "1\n") == 0);
    if (f)
        fclose(f);
    char missing[96];
    snprintf(missing, sizeof(missing), "%s/no/such/dir/port", dir);
    CHECK_EQ_INT(ina__port_file_write(missing, 1), -ENOENT);
    unlink(path);
    rmdir(dir);

    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = ina__daemon_bind("t", &a);
    CHECK(fd >= 0 && port_of(&a) != 0); /* the kernel's port, read back */
    struct sockaddr_in b = a;
    CHECK_EQ_INT(ina__daemon_bind("t", &b), -1); /* taken: said, no socket left */
    ina__sock_buffers(fd, 1 << 20);
    int got = 0;
    socklen_t len = sizeof(got);
    CHECK(getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 && got > 0);
    close(fd);
}

static void test_fault_report(void)
{
    struct ina_fault rx = {.dropped = 1, .duplicated = 2, .reordered = 3, .corrupted = 4};
    struct ina_fault tx = {.dropped = 5, .duplicated = 6, .reordered = 7, .corrupted = 8};
    char out[512] = "";
    FILE *f = fmemopen(out, sizeof(out) - 1, "w");
    ina__daemon_fault_report(f, &rx, &tx);
    fclose(f);
    CHECK(strcmp(out, "  fault_rx        dropped 1 duplicated 2 reordered 3 corrupted 4\n"
                      "  fault_tx        dropped 5 duplicated 6 reordered 7 corrupted 8\n") == 0);
}

int main(void)
{
    test_due();
    test_addresses();
    test_files_and_sockets();
    test_fault_report();
    test_signals(); /* last: it leaves this process's stop flag set */
    return check_report("test_daemon");
}
