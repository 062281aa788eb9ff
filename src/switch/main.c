/* main.c: ina-switch, the software aggregation switch: command line, socket, receive/send loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/fault.h"
#include "switch/switch.h"

static volatile sig_atomic_t stop_requested;

/* Fault injection on each direction (--fault-rx / --fault-tx); off by default. */
static struct ina_fault fault_rx, fault_tx;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-switch [options]\n"
            "\n"
            "The ina software switch: aggregates (sums) the packets of the workers of\n"
            "each job in a fixed pool of slots and multicasts the finished sums.\n"
            "Runs until SIGINT or SIGTERM, then prints its counters to stderr.\n"
            "\n"
            "Options:\n"
            "  --listen ADDR[:PORT]  address to listen on (default 127.0.0.1:%d);\n"
            "                        use 0.0.0.0 to accept workers on other hosts;\n"
            "                        port 0 picks a free port (see --port-file)\n"
            "  --slots N             slots in the pool, shared by all jobs (default 1024)\n"
            "  --max-elems K         int32 values per slot, the largest packet a job\n"
            "                        may use (default 2048, at most %d)\n"
            "  --join-timeout S      drop a job whose ranks did not all join in S seconds\n"
            "                        (default 120; 0 = never)\n"
            "  --idle-timeout S      abort an active job silent for S seconds, freeing its\n"
            "                        slots (default 3600; 0 = never)\n"
            "  --port-file PATH      write the bound port number to PATH once listening\n"
            "  --fault-rx SPEC       inject faults into received datagrams, for testing:\n"
            "                        SPEC is drop=P,dup=P,reorder=P,seed=N (P in 0..1)\n"
            "  --fault-tx SPEC       the same for sent datagrams\n"
            "  --quiet               print nothing but errors (counters still on exit)\n"
            "  --verbose             log job events\n"
            "  --version             print the version and exit\n"
            "  --help                this text\n"
            "\n"
            "Memory: slots x 2 x max-elems x 4 bytes (default 16 MiB).\n"
            "Example: ina-switch --listen 0.0.0.0:48864 --slots 4096\n",
            INA_DEFAULT_PORT, INA_MAX_ELEMS);
}

static int parse_listen(const char *s, struct sockaddr_in *out)
{
    char host[256];
    const char *colon = strrchr(s, ':');
    long port = INA_DEFAULT_PORT;
    size_t hl = colon ? (size_t)(colon - s) : strlen(s);
    if (hl == 0 || hl >= sizeof(host))
        return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
    if (colon) {
        char *end;
        port = strtol(colon + 1, &end, 10);
        if (*end || end == colon + 1 || port < 0 || port > 65535)
            return -1;
    }
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return -1;
    memset(out, 0, sizeof(*out));
    *out = *(struct sockaddr_in *)res->ai_addr;
    out->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

/* Large buffers: a burst of N windows arriving at once must not overflow the
 * socket, or it looks like network loss. Root may exceed rmem_max. */
static void set_buffers(int fd, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

/* Reorder, drop or duplicate the queued datagrams as --fault-tx says. */
static void fault_tx_apply(struct ina_txq *q, struct mmsghdr *scratch, unsigned *order)
{
    unsigned n = ina_fault_plan(&fault_tx, q->nmsg, order);
    for (unsigned i = 0; i < n; i++)
        scratch[i] = q->msgs[order[i]];
    q->nmsg = n; /* msgs now come from scratch; see flush_tx */
}

static void flush_tx(int fd, struct ina_switch *sw)
{
    struct ina_txq *q = &sw->txq;
    static struct mmsghdr *scratch; /* 2 * maxmsg, only with --fault-tx */
    static unsigned *order;
    struct mmsghdr *msgs = q->msgs;
    if (ina_fault_active(&fault_tx) && q->nmsg) {
        if (!scratch) {
            scratch = calloc(2 * (size_t)q->maxmsg, sizeof(*scratch));
            order = calloc(2 * (size_t)q->maxmsg, sizeof(*order));
            if (!scratch || !order) {
                fprintf(stderr, "ina-switch: out of memory for --fault-tx\n");
                exit(1);
            }
        }
        fault_tx_apply(q, scratch, order);
        msgs = scratch;
    }
    unsigned done = 0;
    while (done < q->nmsg) {
        int n = sendmmsg(fd, msgs + done, q->nmsg - done, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            /* Unreachable destination (ECONNREFUSED from an earlier ICMP)
             * or a full buffer: count it and skip that datagram; the
             * worker's retransmission recovers. */
            sw->c.tx_errors++;
            done++;
            continue;
        }
        for (int i = 0; i < n; i++)
            sw->c.tx_bytes += msgs[done + i].msg_hdr.msg_iov->iov_len;
        sw->c.tx_packets += (uint64_t)n;
        done += (unsigned)n;
    }
    ina_txq_reset(q);
}

struct rx_batch {
    struct mmsghdr msgs[INA_SW_TX_BATCH];
    struct iovec iovs[INA_SW_TX_BATCH];
    struct sockaddr_in addrs[INA_SW_TX_BATCH];
    uint8_t *mem;
};

static int run(int fd, struct ina_switch *sw)
{
    struct rx_batch *rx = calloc(1, sizeof(*rx));
    if (!rx)
        return -ENOMEM;
    rx->mem = malloc((size_t)INA_SW_TX_BATCH * INA_MAX_DATAGRAM);
    if (!rx->mem) {
        free(rx);
        return -ENOMEM;
    }
    uint64_t next_tick = now_ns() + 1000000000ull;
    while (!stop_requested) {
        for (int i = 0; i < INA_SW_TX_BATCH; i++) {
            rx->iovs[i].iov_base = rx->mem + (size_t)i * INA_MAX_DATAGRAM;
            rx->iovs[i].iov_len = INA_MAX_DATAGRAM;
            rx->msgs[i].msg_hdr.msg_name = &rx->addrs[i];
            rx->msgs[i].msg_hdr.msg_namelen = sizeof(rx->addrs[i]);
            rx->msgs[i].msg_hdr.msg_iov = &rx->iovs[i];
            rx->msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int n = recvmmsg(fd, rx->msgs, INA_SW_TX_BATCH, MSG_DONTWAIT, NULL);
        uint64_t now = now_ns();
        if (n > 0) {
            unsigned order[3 * INA_SW_TX_BATCH], norder = (unsigned)n;
            if (ina_fault_active(&fault_rx))
                norder = ina_fault_plan(&fault_rx, (unsigned)n, order);
            else
                for (int i = 0; i < n; i++)
                    order[i] = (unsigned)i;
            for (unsigned o = 0; o < norder; o++) {
                unsigned i = order[o];
                if (ina_switch_tx_full(sw))
                    flush_tx(fd, sw);
                if (rx->msgs[i].msg_hdr.msg_namelen != sizeof(struct sockaddr_in))
                    continue; /* not IPv4: cannot be a member */
                ina_switch_input(sw, rx->iovs[i].iov_base, rx->msgs[i].msg_len, &rx->addrs[i],
                                 now);
            }
            flush_tx(fd, sw);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                   errno != ECONNREFUSED) {
            fprintf(stderr, "ina-switch: recvmmsg: %s\n", strerror(errno));
        }
        if (now >= next_tick) {
            ina_switch_tick(sw, now);
            flush_tx(fd, sw);
            next_tick = now + 1000000000ull;
        }
        if (n <= 0) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            poll(&pfd, 1, 200);
        }
    }
    free(rx->mem);
    free(rx);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'},   {"slots", required_argument, 0, 's'},
        {"max-elems", required_argument, 0, 'k'}, {"port-file", required_argument, 0, 'p'},
        {"join-timeout", required_argument, 0, 'j'},
        {"idle-timeout", required_argument, 0, 'i'},
        {"fault-rx", required_argument, 0, 'R'}, {"fault-tx", required_argument, 0, 'T'},
        {"quiet", no_argument, 0, 'q'},           {"verbose", no_argument, 0, 'v'},
        {"version", no_argument, 0, 'V'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *listen_s = "127.0.0.1", *port_file = NULL;
    struct ina_switch_params p = {.nslots = 1024,
                                  .max_elems = 2048,
                                  .join_timeout_ns = 120ull * 1000000000ull,
                                  .idle_timeout_ns = 3600ull * 1000000000ull};
    int quiet = 0, c;
    char *end;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long v = 0;
        if (c == 's' || c == 'k' || c == 'j' || c == 'i') {
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > (1L << 24)) {
                fprintf(stderr, "ina-switch: bad number for --%s: '%s'\n",
                        c == 's' ? "slots" : c == 'k' ? "max-elems" : c == 'j' ? "join-timeout"
                                                                               : "idle-timeout",
                        optarg);
                return 2;
            }
        }
        switch (c) {
        case 'l': listen_s = optarg; break;
        case 's': p.nslots = (uint32_t)v; break;
        case 'k': p.max_elems = (uint32_t)v; break;
        case 'j': p.join_timeout_ns = (uint64_t)v * 1000000000ull; break;
        case 'i': p.idle_timeout_ns = (uint64_t)v * 1000000000ull; break;
        case 'p': port_file = optarg; break;
        case 'R':
        case 'T':
            if (ina_fault_parse(c == 'R' ? &fault_rx : &fault_tx, optarg) != 0) {
                fprintf(stderr, "ina-switch: bad --fault-%s '%s' (want drop=P,dup=P,reorder=P,seed=N)\n",
                        c == 'R' ? "rx" : "tx", optarg);
                return 2;
            }
            break;
        case 'q': quiet = 1; break;
        case 'v': p.verbose = 1; break;
        case 'V': printf("ina-switch %s (protocol %d)\n", ina_version_string(), INA_WIRE_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ina-switch: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (p.nslots == 0 || p.max_elems == 0 || p.max_elems > INA_MAX_ELEMS) {
        fprintf(stderr, "ina-switch: --slots must be >= 1 and --max-elems 1..%d\n", INA_MAX_ELEMS);
        return 2;
    }
    struct sockaddr_in addr;
    if (parse_listen(listen_s, &addr) != 0) {
        fprintf(stderr, "ina-switch: cannot parse or resolve --listen '%s' (want ADDR[:PORT])\n",
                listen_s);
        return 2;
    }

    static struct ina_switch sw;
    int rc = ina_switch_init(&sw, &p);
    if (rc != 0) {
        fprintf(stderr, "ina-switch: cannot allocate a pool of %u slots x %u elements: %s\n",
                p.nslots, p.max_elems, strerror(-rc));
        return 1;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        fprintf(stderr, "ina-switch: cannot listen on %s: %s\n", listen_s, strerror(errno));
        ina_switch_free(&sw);
        return 1;
    }
    set_buffers(fd, 32 << 20);
    socklen_t alen = sizeof(addr);
    getsockname(fd, (struct sockaddr *)&addr, &alen);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: poll() must return */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    if (!quiet)
        fprintf(stderr, "ina-switch %s: listening on %s:%u, %u slots x %u elements (%.1f MiB)\n",
                ina_version_string(), ip, ntohs(addr.sin_port), p.nslots, p.max_elems,
                (double)p.nslots * 2 * p.max_elems * 4 / (1 << 20));
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        /* Write then rename, so a reader never sees a half-written file. */
        if (!f || fprintf(f, "%u\n", ntohs(addr.sin_port)) < 0 || fclose(f) != 0 ||
            rename(tmp, port_file) != 0) {
            fprintf(stderr, "ina-switch: cannot write --port-file %s: %s\n", port_file,
                    strerror(errno));
            close(fd);
            ina_switch_free(&sw);
            return 1;
        }
    }
    rc = run(fd, &sw);
    ina_sw_counters_print(&sw.c, stderr);
    if (ina_fault_active(&fault_rx) || ina_fault_active(&fault_tx))
        fprintf(stderr,
                "  fault_rx        dropped %llu duplicated %llu reordered %llu\n"
                "  fault_tx        dropped %llu duplicated %llu reordered %llu\n",
                (unsigned long long)fault_rx.dropped, (unsigned long long)fault_rx.duplicated,
                (unsigned long long)fault_rx.reordered, (unsigned long long)fault_tx.dropped,
                (unsigned long long)fault_tx.duplicated, (unsigned long long)fault_tx.reordered);
    close(fd);
    ina_switch_free(&sw);
    return rc == 0 ? 0 : 1;
}
