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
#include "common/clock.h"
#include "common/daemon.h"
#include "common/fault.h"
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
            "that has waited --max-wait-ms goes first, so no rank starves. A grant is a\n"
            "lease: with the job's servers given (--ps, --replica; each started with\n"
            "ina-ps --sched naming this scheduler's --listen address), the stamp of a\n"
            "worker that died holding a grant is voided at the servers and the world\n"
            "shrinks; ranks may join and leave; the scheduler follows the replica when\n"
            "the primary dies, repairs a replica that lags, and, restarted, rebuilds its\n"
            "state from the servers while the workers wait for it (PROTOCOL.md §15.9).\n"
            "Runs until SIGINT or SIGTERM, then prints its counters.\n"
            "\n"
            "Options:\n"
            "  --job NAME            the job's name, as its workers' ina-ps JOIN (required)\n"
            "  --world N             ranks of the job, 1..%d (required); the most it has\n"
            "                        when ranks join it running (ina-mlf --start-ranks)\n"
            "  --max-delay D         the job's staleness bound D, 0..255 (default 2)\n"
            "  --window W            grants outstanding at most, 1..64 (default D + 1,\n"
            "                        the most the bound allows for fetch requests)\n"
            "  --grant-timeout MS    a grant's lease: with no DONE for MS ms it expires\n"
            "                        (default 2000); with --ps its stamp is then voided\n"
            "  --straggler-ratio R   a rank slower than R x the median rate is a\n"
            "                        straggler, 0..1 (default 0.6; 0 = none)\n"
            "  --max-wait-ms MS      a request waiting MS ms goes before the others\n"
            "                        (default 100; 0 = no limit)\n"
            "  --initial-rate MBPS   rate assumed before a rank's first transfer, in MB/s\n"
            "                        (default 100)\n"
            "  --rate-halflife-ms MS a rank's rate is an average of its transfers' rates,\n"
            "                        each weighing 0.3, or 1 - 2^(-t/MS) when more (t: the\n"
            "                        time since its last), so that a link that changes is\n"
            "                        followed in time, even for a rank granted rarely\n"
            "                        (default 50; 0: 0.3 for every transfer)\n"
            "  --aggregate K         opportunistic aggregation: grant fetch requests that\n"
            "                        wait together (of workers with an ina-switch, not\n"
            "                        stragglers) as one group of up to K members sharing\n"
            "                        one stamp; they sum their updates in the switch and\n"
            "                        one of them sends the sum (ina-mlf --switch), 1..N\n"
            "                        (default 1: no aggregation)\n"
            "  --agg-hold-ms MS      hold a group short of K members up to MS ms for the\n"
            "                        next groupable request, when it is predicted to come\n"
            "                        soon enough that the grant makes more gradients per\n"
            "                        second (its wait < the group's predicted time / its\n"
            "                        members); the exit report counts the holds and their\n"
            "                        measured and predicted waits (default 10; 0 = never)\n"
            "  --ps ADDR:PORT        the job's primary ina-ps (started with --sched naming\n"
            "                        this scheduler): probed every 100 ms, told to void\n"
            "                        the stamps of expired leases, asked for the job's\n"
            "                        state when this scheduler starts on a running job\n"
            "  --replica ADDR:PORT   the primary's replica: voids repeated there, checked\n"
            "                        against the primary (model digests), repaired when\n"
            "                        it lags; it becomes the authority if the primary dies\n"
            "  --failover-ms MS      a server silent MS ms is dead (default 1500)\n"
            "  --listen ADDR[:PORT]  address to listen on (default 127.0.0.1:%d); port 0\n"
            "                        = any (--port-file); with --ps, the address the\n"
            "                        servers' --sched names, so a restart must reuse it\n"
            "  --port-file PATH      write the bound port to PATH once listening\n"
            "  --fault-rx SPEC       inject faults into received datagrams (testing):\n"
            "                        drop=P,dup=P,reorder=P,seed=N\n"
            "  --fault-tx SPEC       the same for sent datagrams\n"
            "  --log-level L         error, warn, info (default) or debug\n"
            "  --version             print the version and exit\n"
            "  --help                this text\n",
            INA_MAX_WORKERS, INA_SCHED_DEFAULT_PORT);
}

static struct ina_fault fault_rx, fault_tx; /* --fault-rx, --fault-tx (testing) */

static void send_one(int fd, struct ina_sched *s, const uint8_t *b, size_t len,
                     const struct sockaddr_in *dst)
{
    unsigned order[2], n = 1;
    if (ina__fault_active(&fault_tx))
        n = ina__fault_plan(&fault_tx, 1, order); /* 0: dropped, 2: duplicated */
    for (unsigned i = 0; i < n; i++) {
        if (sendto(fd, b, len, 0, (const struct sockaddr *)dst, sizeof(*dst)) < 0)
            s->c.tx_errors++;
        else
            s->c.tx_packets++;
    }
}

static void flush_tx(int fd, struct ina_sched *s)
{
    for (unsigned i = 0; i < s->tx.n; i++)
        send_one(fd, s, s->tx.buf[i], s->tx.len[i], &s->tx.dst[i]);
    if (s->tx.relay) /* a PS_REPLAY passed on: it points into the receive buffer */
        send_one(fd, s, s->tx.relay, s->tx.relay_len, &s->tx.relay_dst);
    ina__sched_tx_reset(s);
}

/* Up to 64 datagrams a turn (4 bursts of INA_RX_MAX_MSGS), each answered at once, in the
 * order --fault-rx plans (testing); the tick every 5 ms. @return 0, or -ENOMEM. */
static int run(int fd, struct ina_sched *s)
{
    static struct ina_rx rx;
    static struct ina_rx_pkt pkts[INA_RX_MAX_MSGS]; /* no GRO: a message is a datagram */
    static unsigned order[2 * INA_RX_MAX_MSGS];
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
            unsigned norder = (unsigned)n;
            if (ina__fault_active(&fault_rx))
                norder = ina__fault_plan(&fault_rx, (unsigned)n, order);
            else
                for (unsigned i = 0; i < (unsigned)n; i++)
                    order[i] = i;
            for (unsigned o = 0; o < norder; o++) {
                const struct ina_rx_pkt *pk = &pkts[order[o]];
                ina__sched_input(s, pk->data, pk->len, pk->src, ina__clock_ns());
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
        {"ps", required_argument, 0, 'P'},           {"replica", required_argument, 0, 'R'},
        {"failover-ms", required_argument, 0, 'f'},  {"fault-rx", required_argument, 0, 'x'},
        {"fault-tx", required_argument, 0, 'y'},   {"rate-halflife-ms", required_argument, 0, 'H'},
        {"agg-hold-ms", required_argument, 0, 'O'},
        {"version", no_argument, 0, 'V'},            {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    struct ina_sched_params p = {.max_delay = 2, .window = 0, /* 0: D + 1, below */
                                 .grant_timeout_ns = 2000ull * 1000000ull,
                                 .failover_ns = 1500ull * 1000000ull,
                                 .max_wait_ns = 100ull * 1000000ull,
                                 .straggler_ratio = 0.6, .initial_rate = 100e6,
                                 .rate_halflife_ns = 50ull * 1000000ull,
                                 .aggregate = 1, .agg_hold_ns = 10ull * 1000000ull};
    const char *listen_s = "127.0.0.1", *port_file = NULL, *job = NULL, *servers[2] = {0};
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
        case 'H':
            bad = parse_num(optarg, 0, 3600000, &v);
            p.rate_halflife_ns = (uint64_t)(v * 1e6);
            break;
        case 'A': bad = parse_num(optarg, 1, INA_MAX_WORKERS, &v); p.aggregate = (unsigned)v; break;
        case 'O':
            bad = parse_num(optarg, 0, 60000, &v);
            p.agg_hold_ns = (uint64_t)(v * 1e6);
            break;
        case 'x':
        case 'y':
            if (ina__fault_parse(c == 'x' ? &fault_rx : &fault_tx, optarg) != 0) {
                fprintf(stderr, "ina-sched: bad --fault-%s '%s' (want drop=P,dup=P,reorder=P,"
                                "seed=N)\n", c == 'x' ? "rx" : "tx", optarg);
                return 2;
            }
            break;
        case 'P': servers[0] = optarg; break;
        case 'R': servers[1] = optarg; break;
        case 'f':
            bad = parse_num(optarg, 1, 3600000, &v);
            p.failover_ns = (uint64_t)v * 1000000ull;
            break;
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
    if (servers[1] && !servers[0]) {
        fprintf(stderr, "ina-sched: --replica needs --ps (the primary)\n");
        return 2;
    }
    for (int i = 0; i < 2 && servers[i]; i++) {
        if (!strchr(servers[i], ':') || ina__parse_hostport(servers[i], 1, &p.server[i]) != 0 ||
            p.server[i].sin_port == 0) {
            fprintf(stderr, "ina-sched: cannot parse or resolve --%s '%s' (want ADDR:PORT)\n",
                    i ? "replica" : "ps", servers[i]);
            return 2;
        }
        p.nservers++;
    }
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
            INA_KV_I("window", p.window), INA_KV_I("aggregate", p.aggregate),
            INA_KV_I("servers", p.nservers));
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
    if (ina__fault_active(&fault_rx) || ina__fault_active(&fault_tx))
        ina__daemon_fault_report(stderr, &fault_rx, &fault_tx);
    close(fd);
    return 0;
}
