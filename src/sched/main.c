/* main.c: ina-sched, MLfabric's transfer scheduler daemon: command line, socket, receive/reply loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/daemon.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/rx_burst.h"
#include "sched/sched.h"

#define NAME "ina-sched"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-sched --job NAME --world N [options]\n"
            "\n"
            "MLfabric's transfer scheduler for one bounded-staleness job on ina-ps\n"
            "(docs/MLFABRIC.md). Workers ask before fetching the model (or before sending\n"
            "an update); a grant gives the update its stamp in the one order the primary\n"
            "and the replica apply. Grants keep every update's delay within --max-delay,\n"
            "prefer the transfer predicted to finish first (rates learned from completed\n"
            "transfers), and let stragglers' requests wait behind the others'; a request\n"
            "that has waited --max-wait-ms goes first, so no rank starves. Workers that\n"
            "lose the scheduler send unscheduled. Runs until SIGINT or SIGTERM, then\n"
            "prints its counters.\n"
            "\n"
            "Options:\n"
            "  --job NAME            the job's name, as its workers' ina-ps JOIN (required)\n"
            "  --world N             ranks of the job, 1..%d (required)\n"
            "  --max-delay D         the job's staleness bound D, 0..255 (default 2)\n"
            "  --window W            grants outstanding at most, 1..64 (default D + 1,\n"
            "                        the most the bound allows for fetch requests)\n"
            "  --grant-timeout MS    a grant with no DONE for MS ms expires (default 5000)\n"
            "  --straggler-ratio R   a rank slower than R x the median rate is a\n"
            "                        straggler, 0..1 (default 0.6; 0 = none)\n"
            "  --max-wait-ms MS      a request waiting MS ms goes before the others\n"
            "                        (default 100; 0 = no limit)\n"
            "  --initial-rate MBPS   rate assumed before a rank's first transfer, in MB/s\n"
            "                        (default 100)\n"
            "  --aggregate K         opportunistic aggregation: grant fetch requests that\n"
            "                        wait together (of workers with an ina-switch, not\n"
            "                        stragglers) as one group of up to K members sharing\n"
            "                        one stamp; they sum their updates in the switch and\n"
            "                        one of them sends the sum (ina-mlf --switch), 1..N\n"
            "                        (default 1: no aggregation)\n"
            "  --listen ADDR[:PORT]  address to listen on (default 127.0.0.1:%d); port 0\n"
            "                        = any (--port-file)\n"
            "  --port-file PATH      write the bound port to PATH once listening\n"
            "  --log-level L         error, warn, info (default) or debug\n"
            "  --version             print the version and exit\n"
            "  --help                this text\n",
            INA_MAX_WORKERS, INA_SCHED_DEFAULT_PORT);
}

static void flush_tx(int fd, struct ina_sched *s)
{
    for (unsigned i = 0; i < s->tx.n; i++) {
        if (sendto(fd, s->tx.buf[i], sizeof(s->tx.buf[i]), 0, (struct sockaddr *)&s->tx.dst[i],
                   sizeof(s->tx.dst[i])) < 0)
            s->c.tx_errors++;
        else
            s->c.tx_packets++;
    }
    ina__sched_tx_reset(s);
}

/* Up to 64 datagrams a turn (4 bursts of INA_RX_MAX_MSGS), each answered at once; the tick
 * every 5 ms. @return 0, or -ENOMEM. */
static int run(int fd, struct ina_sched *s)
{
    static struct ina_rx rx;
    static struct ina_rx_pkt pkts[INA_RX_MAX_MSGS]; /* no GRO: a message is a datagram */
    if (ina__rx_init(&rx, INA_RX_MAX_MSGS, 65536) != 0)
        return -ENOMEM;
    uint64_t last_tick = ina__clock_ns();
    while (!ina__daemon_stopping()) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        poll(&pfd, 1, 5);
        for (int burst = 0; burst < 64 / INA_RX_MAX_MSGS; burst++) {
            int n = ina__rx_burst(&rx, fd, pkts, INA_RX_MAX_MSGS);
            if (n < 0 || rx.got == 0)
                break;
            for (int i = 0; i < n; i++) {
                ina__sched_input(s, pkts[i].data, pkts[i].len, pkts[i].src, ina__clock_ns());
                flush_tx(fd, s);
            }
        }
        uint64_t now = ina__clock_ns();
        if (ina__daemon_due(&last_tick, now, 5000000ull)) {
            ina__sched_tick(s, now);
            flush_tx(fd, s);
        }
    }
    ina__rx_free(&rx);
    return 0;
}

static int parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"job", required_argument, 0, 'j'},          {"world", required_argument, 0, 'w'},
        {"max-delay", required_argument, 0, 'D'},    {"window", required_argument, 0, 'W'},
        {"grant-timeout", required_argument, 0, 'g'}, {"straggler-ratio", required_argument, 0, 'r'},
        {"initial-rate", required_argument, 0, 'i'}, {"listen", required_argument, 0, 'l'},
        {"port-file", required_argument, 0, 'p'},    {"log-level", required_argument, 0, 'L'},
        {"max-wait-ms", required_argument, 0, 'a'}, {"aggregate", required_argument, 0, 'A'},
        {"version", no_argument, 0, 'V'},            {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    struct ina_sched_params p = {.max_delay = 2, .window = 0, /* 0: D + 1, below */
                                 .grant_timeout_ns = 5000ull * 1000000ull,
                                 .max_wait_ns = 100ull * 1000000ull,
                                 .straggler_ratio = 0.6, .initial_rate = 100e6,
                                 .aggregate = 1};
    const char *listen_s = "127.0.0.1", *port_file = NULL, *job = NULL;
    enum ina_log_level level = INA_LOG_INFO;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        double v = 0;
        int bad = 0;
        switch (c) {
        case 'j': job = optarg; break;
        case 'w': bad = parse_num(optarg, 1, INA_MAX_WORKERS, &v); p.world = (unsigned)v; break;
        case 'D': bad = parse_num(optarg, 0, 255, &v); p.max_delay = (uint32_t)v; break;
        case 'W': bad = parse_num(optarg, 1, 64, &v); p.window = (unsigned)v; break;
        case 'g':
            bad = parse_num(optarg, 1, 3600000, &v);
            p.grant_timeout_ns = (uint64_t)v * 1000000ull;
            break;
        case 'r': bad = parse_num(optarg, 0, 0.999, &v); p.straggler_ratio = v; break;
        case 'a':
            bad = parse_num(optarg, 0, 3600000, &v);
            p.max_wait_ns = (uint64_t)(v * 1e6);
            break;
        case 'i': bad = parse_num(optarg, 0.001, 1e6, &v); p.initial_rate = v * 1e6; break;
        case 'A': bad = parse_num(optarg, 1, INA_MAX_WORKERS, &v); p.aggregate = (unsigned)v; break;
        case 'l': listen_s = optarg; break;
        case 'p': port_file = optarg; break;
        case 'L':
            bad = ina__log_level_parse(optarg, &level);
            break;
        case 'V': ina__daemon_version(NAME); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad) {
            const char *name = "?";
            for (const struct option *o = opts; o->name; o++)
                if (o->val == c)
                    name = o->name;
            fprintf(stderr, "ina-sched: bad value '%s' for --%s (see --help for its range)\n",
                    optarg, name);
            return 2;
        }
    }
    if (ina__daemon_no_operands(NAME, argc, argv, optind) != 0)
        return 2;
    if (!job || !*job || strlen(job) >= sizeof(p.job) || p.world == 0) {
        fprintf(stderr, "ina-sched: --job NAME (1..31 characters) and --world N are required "
                        "(see --help)\n");
        return 2;
    }
    if (p.aggregate > p.world) {
        fprintf(stderr, "ina-sched: --aggregate %u is more than --world %u\n", p.aggregate, p.world);
        return 2;
    }
    snprintf(p.job, sizeof(p.job), "%s", job);
    if (p.window == 0)
        p.window = p.max_delay + 1 > 64 ? 64 : p.max_delay + 1;
    struct sockaddr_in addr;
    if (ina__daemon_listen_addr(NAME, listen_s, INA_SCHED_DEFAULT_PORT, &addr) != 0)
        return 2;
    ina__log_setup(level, INA_LOG_TEXT);
    static struct ina_sched s;
    if (ina__sched_init(&s, &p) != 0) {
        fprintf(stderr, "ina-sched: invalid parameters\n");
        return 2;
    }
    int fd = ina__daemon_bind(NAME, &addr);
    if (fd < 0)
        return 1;
    ina__daemon_signals(0); /* SIGINT, SIGTERM: stop */
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    ina__log(INA_LOG_INFO, "listening", INA_KV_S("version", ina_version_string()),
            INA_KV_S("addr", ip), INA_KV_I("port", ntohs(addr.sin_port)), INA_KV_S("job", p.job),
            INA_KV_I("world", p.world), INA_KV_I("max_delay", p.max_delay),
            INA_KV_I("window", p.window), INA_KV_I("aggregate", p.aggregate));
    int rc;
    if (port_file && (rc = ina__port_file_write(port_file, ntohs(addr.sin_port))) != 0) {
        fprintf(stderr, NAME ": cannot write --port-file %s: %s\n", port_file, strerror(-rc));
        return 1;
    }
    if (run(fd, &s) != 0) {
        fprintf(stderr, NAME ": cannot start: %s\n", strerror(ENOMEM));
        return 1;
    }
    ina__sched_counters_print(&s, stderr);
    close(fd);
    return 0;
}
