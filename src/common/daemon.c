/* daemon.c: the frame of ina's three daemons; see daemon.h. */
#include "common/daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/version.h"
#include "common/wire.h"
#include "ina.h"

/* Set by the handlers, read by every thread: lock-free atomics are both
 * async-signal-safe and race-free. */
static _Atomic int stop_requested, drain_requested, drain_enabled;
static _Atomic unsigned hup_count;

static void on_stop_signal(int sig)
{
    if (sig == SIGTERM && drain_enabled && !drain_requested)
        drain_requested = 1;
    else
        stop_requested = 1;
}

static void on_hup(int sig)
{
    (void)sig;
    hup_count++;
}

void ina__daemon_signals(unsigned flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    drain_enabled = (flags & INA_DAEMON_DRAIN) != 0;
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: poll() must return */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (flags & INA_DAEMON_HUP) {
        sa.sa_handler = on_hup;
        sa.sa_flags = SA_RESTART; /* a reload need not wake anyone: the loops look each turn */
        sigaction(SIGHUP, &sa, NULL);
    }
    if (flags & INA_DAEMON_NOPIPE)
        signal(SIGPIPE, SIG_IGN);
}

int ina__daemon_stopping(void) { return stop_requested; }
void ina__daemon_stop(void) { stop_requested = 1; }
int ina__daemon_draining(void) { return drain_requested; }
unsigned ina__daemon_hups(void) { return hup_count; }

void ina__daemon_version(const char *name)
{
    printf("%s %s (protocol %d)\n", name, ina_version_string(), INA_WIRE_VERSION);
}

int ina__daemon_no_operands(const char *name, int argc, char **argv, int first)
{
    if (first >= argc)
        return 0;
    fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", name, argv[first]);
    return -1;
}

int ina__daemon_log_level(const char *name, const char *arg, enum ina_log_level *out)
{
    if (ina__log_level_parse(arg, out) == 0)
        return 0;
    fprintf(stderr, "%s: bad --log-level '%s' (want error|warn|info|debug)\n", name, arg);
    return -1;
}

int ina__daemon_fault_spec(const char *name, const char *which, const char *spec)
{
    struct ina_fault check;
    if (ina__fault_parse(&check, spec) == 0)
        return 0;
    fprintf(stderr, "%s: bad --fault-%s '%s' (want drop=P,dup=P,reorder=P,seed=N)\n", name, which,
            spec);
    return -1;
}

int ina__daemon_listen_addr(const char *name, const char *s, uint16_t default_port,
                            struct sockaddr_in *out)
{
    char hp[300];
    const char *hs = s;
    if (!strchr(s, ':')) {
        snprintf(hp, sizeof(hp), "%s:%u", s, (unsigned)default_port);
        hs = hp;
    }
    if (ina__parse_hostport(hs, 1, out) == 0)
        return 0;
    fprintf(stderr, "%s: cannot parse or resolve --listen '%s' (want ADDR[:PORT])\n", name, s);
    return -1;
}

int ina__daemon_metrics_addr(const char *name, const char *metrics, const char *port_file,
                             struct sockaddr_in *out, int *on)
{
    *on = 0;
    if (!metrics) {
        if (!port_file)
            return 0;
        fprintf(stderr, "%s: --metrics-port-file needs --metrics\n", name);
        return -1;
    }
    char hp[300];
    const char *ms = metrics;
    if (*metrics && strspn(metrics, "0123456789") == strlen(metrics)) {
        snprintf(hp, sizeof(hp), "127.0.0.1:%s", metrics);
        ms = hp;
    }
    if (!strchr(ms, ':') || ina__parse_hostport(ms, 1, out) != 0) {
        fprintf(stderr, "%s: cannot parse --metrics '%s' (want ADDR:PORT or PORT)\n", name,
                metrics);
        return -1;
    }
    *on = 1;
    return 0;
}

int ina__daemon_bind(const char *name, struct sockaddr_in *addr)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    socklen_t len = sizeof(*addr);
    if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof(*addr)) != 0 ||
        getsockname(fd, (struct sockaddr *)addr, &len) != 0) {
        int err = errno;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &addr->sin_addr, ip, sizeof(ip));
        fprintf(stderr, "%s: cannot bind %s:%u: %s\n", name, ip, ntohs(addr->sin_port),
                strerror(err));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

void ina__sock_buffers(int fd, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

int ina__port_file_write(const char *path, unsigned port)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -errno;
    errno = 0;
    int ok = fprintf(f, "%u\n", port) >= 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno ? errno : EIO;
        unlink(tmp);
        return -err;
    }
    return 0;
}

void ina__daemon_fault_report(FILE *f, const struct ina_fault *rx, const struct ina_fault *tx)
{
    fprintf(f,
            "  fault_rx        dropped %llu duplicated %llu reordered %llu corrupted %llu\n"
            "  fault_tx        dropped %llu duplicated %llu reordered %llu corrupted %llu\n",
            (unsigned long long)rx->dropped, (unsigned long long)rx->duplicated,
            (unsigned long long)rx->reordered, (unsigned long long)rx->corrupted,
            (unsigned long long)tx->dropped, (unsigned long long)tx->duplicated,
            (unsigned long long)tx->reordered, (unsigned long long)tx->corrupted);
}
