/* main.c: ina-ps, the parameter-server shard daemon: command line, socket, receive/reply loop. */
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
#include "common/size.h"
#include "common/rx_burst.h"
#include "common/udp_gso.h"
#include "ps/chain.h"
#include "ps/member.h"
#include "ps/metrics.h"
#include "ps/ps.h"
#include "common/log.h"
#include "common/clock.h"

#define NAME "ina-ps"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-ps [options]\n"
            "\n"
            "One shard of ina's parameter server: it owns the keys that hash to it\n"
            "(PROTOCOL.md §14.1), sums each synchronous step's updates from all the\n"
            "workers of a job and applies them once with the job's optimizer (SGD or\n"
            "Adagrad); workers pull fresh values. Start one ina-ps per shard and give the\n"
            "workers the shards' addresses in order (ina_kv_config.ps_addrs, INA_PS).\n"
            "Runs until SIGINT or SIGTERM, then prints its counters to stderr.\n"
            "\n"
            "Options:\n"
            "  --listen ADDR[:PORT]  address to listen on (default 127.0.0.1:%d); use\n"
            "                        0.0.0.0 for workers on other hosts; port 0 = any\n"
            "  --shard I/S           this is shard I of S (default 0/1); every JOIN must\n"
            "                        say the same, else it is refused\n"
            "  --max-memory SIZE     bytes of all jobs together (default 1G, at least 4K; K,\n"
            "                        M, G suffixes): parameters, optimizer state, step sums,\n"
            "                        packet bitmaps, held UPDATEs, forwards to the replica.\n"
            "                        A key or bitmap past it aborts its job with\n"
            "                        INA_ERR_PS_FULL (PROTOCOL.md 14.2.8)\n"
            "  --initial-keys N      records preallocated per job (default 65536); the\n"
            "                        store doubles when full, within --max-memory\n"
            "  --step-timeout S      abort a job whose open step misses a rank's COMMIT for S\n"
            "                        seconds, naming that rank (default 60; 0 = never)\n"
            "  --idle-timeout S      abort an active job silent for S seconds (default 3600)\n"
            "  --join-timeout S      drop a job whose ranks did not all join in S seconds\n"
            "                        (default 120)\n"
            "  --chain-to ADDR:PORT  chain replication, primary (PROTOCOL.md §15.8): forward\n"
            "                        every stamped UPDATE taken (STALE jobs) to the replica\n"
            "                        there, and answer the worker only once it has it\n"
            "  --chain-from ADDR:PORT  chain replication, replica: take forwards from that\n"
            "                        primary only (its --listen address)\n"
            "  --chain-timeout-ms MS a forward unacknowledged this long breaks the job's\n"
            "                        chain: the primary answers alone (default 1000)\n"
            "  --sched ADDR:PORT     MLfabric's membership and failures (PROTOCOL.md §15.9):\n"
            "                        take PS_SYNC and PS_REPLAY from the ina-sched listening\n"
            "                        there (ina-sched --ps/--replica), which voids the stamps\n"
            "                        of workers that died holding a grant, rebuilds its state\n"
            "                        from this server after a restart and repairs a replica;\n"
            "                        off by default (those kinds are dropped)\n"
            "  --port-file PATH      write the bound port to PATH once listening\n"
            "  --fault-rx SPEC       inject faults into received datagrams (testing):\n"
            "                        drop=P,dup=P,reorder=P,seed=N\n"
            "  --fault-tx SPEC       the same for sent datagrams\n"
            "  --metrics ADDR:PORT   serve GET /metrics (Prometheus text) and GET /counters\n"
            "                        (JSON) over HTTP; a bare PORT means 127.0.0.1:PORT, port\n"
            "                        0 a free one (--metrics-port-file). Off by default, no\n"
            "                        authentication (ina-ps has no secret): keep it local.\n"
            "                        At most 64 clients at once, 2 s each\n"
            "  --metrics-port-file PATH  write the bound metrics port to PATH\n"
            "  --log-level L         error, warn, info (default) or debug\n"
            "  --quiet               --log-level error (counters are still printed on exit)\n"
            "  --version             print the version and exit\n"
            "  --help                this text\n",
            INA_PS_DEFAULT_PORT);
}

#define RX_MSGS 16

struct loop {
    int fd;
    struct ina_ps ps;
    struct ina_fault fault_rx, fault_tx;
    struct ina_gso_batch gso;
    struct ina_ps_pub *pub;
};

/* Send what the engine queued (with --fault-tx), then empty the queue. */
static void flush_tx(struct loop *l)
{
    struct ina_ps *ps = &l->ps;
    unsigned order[2 * INA_PS_TX_MSGS], n = ps->tx.n;
    if (ina__fault_active(&l->fault_tx))
        n = ina__fault_plan(&l->fault_tx, ps->tx.n, order);
    else
        for (unsigned i = 0; i < n; i++)
            order[i] = i;
    for (unsigned i = 0; i < n; i++) {
        unsigned e = order[i];
        if (!ina__gso_batch_room(&l->gso))
            ps->c.tx_packets += ina__gso_batch_send(&l->gso, l->fd, &ps->c.tx_errors);
        ina__gso_batch_add(&l->gso, ps->tx.iov[e].iov_base, ps->tx.iov[e].iov_len, &ps->tx.dst[e]);
        ps->c.tx_bytes += ps->tx.iov[e].iov_len;
    }
    ps->c.tx_packets += ina__gso_batch_send(&l->gso, l->fd, &ps->c.tx_errors);
    ina__ps_tx_reset(ps);
}

static void run(struct loop *l)
{
    /* Static: about 100 KiB of descriptors, and there is one loop per process. */
    static struct ina_rx rx;
    static struct ina_rx_pkt pkts[INA_RX_MAX_PKTS];
    static unsigned order[2 * INA_RX_MAX_PKTS];
    uint64_t last_tick = ina__clock_ns(), last_pub = last_tick;
    if (ina__rx_init(&rx, RX_MSGS, INA_GRO_BUF) != 0) {
        ina__log(INA_LOG_ERROR, "out_of_memory", INA_KV_S("reason", "receive buffers"));
        return;
    }
    while (!ina__daemon_stopping()) {
        struct pollfd pfd = {.fd = l->fd, .events = POLLIN};
        poll(&pfd, 1, ina__ps_chain_poll_ms(&l->ps, ina__clock_ns())); /* forwards' resend timers */
        uint64_t now = ina__clock_ns();
        ina__ps_chain_tick(&l->ps, now); /* chain replication: resends, the deadline */
        int n = ina__rx_burst(&rx, l->fd, pkts, INA_RX_MAX_PKTS);
        unsigned npkts = n > 0 ? (unsigned)n : 0, norder = npkts;
        if (ina__fault_active(&l->fault_rx))
            norder = ina__fault_plan(&l->fault_rx, npkts, order);
        else
            for (unsigned i = 0; i < npkts; i++)
                order[i] = i;
        for (unsigned o = 0; o < norder; o++) {
            const struct ina_rx_pkt *pk = &pkts[order[o]];
            if (ina__ps_tx_full(&l->ps))
                flush_tx(l);
            ina__ps_input(&l->ps, pk->data, pk->len, pk->src, now);
        }
        if (ina__daemon_due(&last_tick, now, 100000000ull)) {
            if (ina__ps_tx_full(&l->ps))
                flush_tx(l);
            ina__ps_tick(&l->ps, now);
        }
        if (l->ps.tx.n)
            flush_tx(l);
        if (l->pub && ina__daemon_due(&last_pub, now, INA_PS_PUBLISH_NS))
            ina__ps_pub_publish(l->pub, &l->ps);
    }
    ina__rx_free(&rx);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'},       {"shard", required_argument, 0, 's'},
        {"max-memory", required_argument, 0, 'm'},   {"initial-keys", required_argument, 0, 'k'},
        {"step-timeout", required_argument, 0, 'S'}, {"idle-timeout", required_argument, 0, 'i'},
        {"join-timeout", required_argument, 0, 'j'}, {"port-file", required_argument, 0, 'p'},
        {"fault-rx", required_argument, 0, 'R'},     {"fault-tx", required_argument, 0, 'T'},
        {"metrics", required_argument, 0, 'M'},      {"metrics-port-file", required_argument, 0, 'P'},
        {"log-level", required_argument, 0, 'L'},    {"quiet", no_argument, 0, 'q'},
        {"version", no_argument, 0, 'V'},            {"help", no_argument, 0, 'h'},
        {"chain-to", required_argument, 0, 'C'},     {"chain-from", required_argument, 0, 'F'},
        {"chain-timeout-ms", required_argument, 0, 'O'}, {"sched", required_argument, 0, 'D'},
        {0, 0, 0, 0}};
    struct ina_ps_params p = {.shard = 0, .nshards = 1, .max_memory = (size_t)1 << 30,
                              .initial_keys = 65536,
                              .join_timeout_ns = 120ull * 1000000000ull,
                              .idle_timeout_ns = 3600ull * 1000000000ull,
                              .step_timeout_ns = 60ull * 1000000000ull};
    const char *listen_s = "127.0.0.1", *port_file = NULL, *metrics_s = NULL,
               *metrics_port_file = NULL, *frx = NULL, *ftx = NULL, *chain_to = NULL,
               *chain_from = NULL, *sched_s = NULL;
    uint64_t chain_timeout_ns = INA_PS_CHAIN_DEFAULT_TIMEOUT_NS;
    enum ina_log_level level = INA_LOG_INFO;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        long v = 0;
        if (c == 'k' || c == 'S' || c == 'i' || c == 'j') {
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > (1L << 30) || (c == 'k' && v < 16)) {
                fprintf(stderr, "ina-ps: bad number '%s' for --%s\n", optarg,
                        c == 'k' ? "initial-keys (at least 16)" : c == 'S' ? "step-timeout"
                        : c == 'i' ? "idle-timeout" : "join-timeout");
                return 2;
            }
        }
        switch (c) {
        case 'l': listen_s = optarg; break;
        case 's': {
            unsigned a, b;
            char tail;
            if (sscanf(optarg, "%u/%u%c", &a, &b, &tail) != 2 || b == 0 || b > 4096 || a >= b) {
                fprintf(stderr, "ina-ps: --shard wants I/S with I < S <= 4096, got '%s'\n", optarg);
                return 2;
            }
            p.shard = a;
            p.nshards = b;
            break;
        }
        case 'm':
            if (ina__parse_size(optarg, 4096, &p.max_memory) != 0) {
                fprintf(stderr, "ina-ps: bad --max-memory '%s' (e.g. 512M, 4G; at least 4K)\n",
                        optarg);
                return 2;
            }
            break;
        case 'k': p.initial_keys = (uint32_t)v; break;
        case 'S': p.step_timeout_ns = (uint64_t)v * 1000000000ull; break;
        case 'i': p.idle_timeout_ns = (uint64_t)v * 1000000000ull; break;
        case 'j': p.join_timeout_ns = (uint64_t)v * 1000000000ull; break;
        case 'p': port_file = optarg; break;
        case 'R':
        case 'T':
            if (ina__daemon_fault_spec(NAME, c == 'R' ? "rx" : "tx", optarg) != 0)
                return 2;
            *(c == 'R' ? &frx : &ftx) = optarg;
            break;
        case 'M': metrics_s = optarg; break;
        case 'C': chain_to = optarg; break;
        case 'D': sched_s = optarg; break;
        case 'F': chain_from = optarg; break;
        case 'O': {
            char *mend;
            long ms = strtol(optarg, &mend, 10);
            if (*mend || mend == optarg || ms < 1 || ms > 3600000) {
                fprintf(stderr, "ina-ps: bad --chain-timeout-ms '%s' (1..3600000)\n", optarg);
                return 2;
            }
            chain_timeout_ns = (uint64_t)ms * 1000000ull;
            break;
        }
        case 'P': metrics_port_file = optarg; break;
        case 'L':
            if (ina__daemon_log_level(NAME, optarg, &level) != 0)
                return 2;
            break;
        case 'q': level = INA_LOG_ERROR; break;
        case 'V': ina__daemon_version(NAME); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    struct sockaddr_in addr, maddr;
    int metrics_on;
    if (ina__daemon_no_operands(NAME, argc, argv, optind) != 0 ||
        ina__daemon_listen_addr(NAME, listen_s, INA_PS_DEFAULT_PORT, &addr) != 0 ||
        ina__daemon_metrics_addr(NAME, metrics_s, metrics_port_file, &maddr, &metrics_on) != 0)
        return 2;
    struct sockaddr_in chain_addr;
    if (chain_to && chain_from) {
        fprintf(stderr, "ina-ps: --chain-to and --chain-from together: a server is a chain's "
                        "primary or its replica, not both\n");
        return 2;
    }
    if ((chain_to || chain_from) &&
        (!strchr(chain_to ? chain_to : chain_from, ':') ||
         ina__parse_hostport(chain_to ? chain_to : chain_from, 1, &chain_addr) != 0 ||
         chain_addr.sin_port == 0)) {
        fprintf(stderr, "ina-ps: cannot parse or resolve --chain-%s '%s' (want ADDR:PORT)\n",
                chain_to ? "to" : "from", chain_to ? chain_to : chain_from);
        return 2;
    }
    struct sockaddr_in sched_addr;
    if (sched_s && (!strchr(sched_s, ':') || ina__parse_hostport(sched_s, 1, &sched_addr) != 0 ||
                    sched_addr.sin_port == 0)) {
        fprintf(stderr, "ina-ps: cannot parse or resolve --sched '%s' (want ADDR:PORT)\n", sched_s);
        return 2;
    }
    ina__log_setup(level, INA_LOG_TEXT);

    static struct loop l; /* large: the job table */
    if ((l.fd = ina__daemon_bind(NAME, &addr)) < 0)
        return 1;
    ina__sock_buffers(l.fd, 16 << 20);
    ina__udp_enable_gro(l.fd);
    int rc = ina__ps_init(&l.ps, &p);
    if (rc == 0 && ina__gso_batch_init(&l.gso, 2 * INA_PS_TX_MSGS, 2 * INA_PS_TX_MSGS) != 0)
        rc = -ENOMEM;
    if (rc != 0) {
        fprintf(stderr, "ina-ps: cannot start: %s\n", strerror(-rc));
        return 1;
    }
    static struct ina_ps_chain chain;
    if ((chain_to || chain_from) &&
        ina__ps_chain_init(&chain, &l.ps, chain_to ? &chain_addr : NULL,
                          chain_from ? &chain_addr : NULL, chain_timeout_ns) != 0) {
        fprintf(stderr, "ina-ps: cannot set up chain replication\n");
        return 1;
    }
    static struct ina_ps_sched sched;
    if (sched_s && ina__ps_sched_init(&sched, &l.ps, &sched_addr) != 0) {
        fprintf(stderr, "ina-ps: cannot set up the link to ina-sched\n");
        return 1;
    }
    if (frx)
        ina__fault_parse(&l.fault_rx, frx);
    if (ftx)
        ina__fault_parse(&l.fault_tx, ftx);
    struct ina_ps_pub pub;
    struct ina_ps_metrics *metrics = NULL;
    if (metrics_on) {
        if (ina__ps_pub_init(&pub) != 0)
            return 1;
        l.pub = &pub;
        ina__ps_pub_publish(&pub, &l.ps);
        metrics = ina__ps_metrics_start(&maddr, metrics_port_file, &pub);
        if (!metrics)
            return 1;
    }
    ina__daemon_signals(INA_DAEMON_NOPIPE); /* SIGINT, SIGTERM: stop */
    char ip[INET_ADDRSTRLEN], mem[32];
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    snprintf(mem, sizeof(mem), "%.0f", (double)p.max_memory / 1048576.0);
    ina__log(INA_LOG_INFO, "listening", INA_KV_S("version", ina_version_string()),
            INA_KV_S("addr", ip), INA_KV_I("port", ntohs(addr.sin_port)),
            INA_KV_I("shard", p.shard), INA_KV_I("nshards", p.nshards),
            INA_KV_S("max_memory_mib", mem));
    if (chain_to || chain_from) {
        char cip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &chain_addr.sin_addr, cip, sizeof(cip));
        ina__log(INA_LOG_INFO, "chain_replication", INA_KV_S("role", chain_to ? "primary" : "replica"),
                INA_KV_S(chain_to ? "to" : "from", cip), INA_KV_I("port", ntohs(chain_addr.sin_port)),
                INA_KV_I("timeout_ms", chain_timeout_ns / 1000000));
    }
    if (port_file && (rc = ina__port_file_write(port_file, ntohs(addr.sin_port))) != 0) {
        fprintf(stderr, NAME ": cannot write --port-file %s: %s\n", port_file, strerror(-rc));
        return 1;
    }
    run(&l);
    ina__ps_metrics_stop(metrics);
    if (l.pub)
        ina__ps_pub_destroy(&pub);
    ina__ps_counters_print(&l.ps.c, stderr);
    ina__ps_jobs_print(&l.ps, stderr);
    if (ina__fault_active(&l.fault_rx) || ina__fault_active(&l.fault_tx))
        ina__daemon_fault_report(stderr, &l.fault_rx, &l.fault_tx);
    ina__gso_batch_free(&l.gso);
    ina__ps_chain_free(&l.ps);
    ina__ps_sched_free(&l.ps);
    ina__ps_free(&l.ps);
    close(l.fd);
    return 0;
}
