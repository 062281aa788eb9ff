/* pktrate.c: switch packet rate at N workers vs a plain UDP echo: load generator and echo server. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/udp_gso.h"
#include "common/wire.h"
#include "common/clock.h"
#include "ina.h"

/*
 * Two roles in one binary:
 *
 *  pktrate --echo [--listen ADDR:PORT] [--port-file F] [--gso] [--batch B]
 *      A trivial UDP echo: recvmmsg up to B messages, sendmmsg each back to
 *      its sender unchanged. With --gso it sets UDP_GRO and answers each
 *      received train with one UDP_SEGMENT (GSO) message of the same segment
 *      size, the batching the switch uses. Prints its counters on SIGTERM.
 *
 *  pktrate --target ADDR:PORT --mode switch|echo [--workers N] [--elems E]
 *          [--window W] [--gso] [--duration S] [--warmup S] [--server-pid P]
 *      The load generator: one thread emulates N workers, each with its own
 *      UDP socket (its own source port, as ranks must have). In switch mode
 *      the workers JOIN as ranks 0..N-1 of one job with the real wire format
 *      (common/wire.h); in echo mode there is no join. Each worker keeps
 *      `window` slots in flight: when the answer for (slot, seq) arrives
 *      (a RESULT from the switch, or the echoed DATA packet) it sends
 *      (slot, seq + 1). Each answer received counts as one server packet:
 *      for the switch, a finished round is N contributions in and N results
 *      out, i.e. N aggregated packets; for the echo, one packet in and one
 *      out. With --gso each worker sends its ready packets as GSO trains and
 *      receives with UDP_GRO; without, sendmmsg/recvmmsg of single datagrams.
 *      Lost packets are retransmitted after --rto ms (counted; expect 0).
 *      The server's CPU time (utime + stime from /proc/PID/stat, and the
 *      scheduler's runtime from /proc/PID/schedstat) over the measured
 *      interval turns the rate into packets per second per server core.
 *
 * Output: a human-readable summary on stderr and one line on stdout:
 *   RESULT mode=... elems=... pkts=... wall_s=... pps=... srv_cpu_s=...
 *          srv_pps_per_core=... gen_cpu_s=... retrans=...
 */


#define MAX_WORKERS 64
#define GSO_MAX_SEGS 64
#define GSO_MAX_BYTES 65000
#define RXBUF 65536
#define CTRL_LEN 64

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void die(const char *what)
{
    fprintf(stderr, "pktrate: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* "host:port": the parser ina-switch and libina use. */
static int parse_addr(const char *s, struct sockaddr_in *out)
{
    return ina__parse_hostport(s, 1, out);
}

static void set_buffers(int fd, int bytes)
{
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

static void pin_cpu(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        fprintf(stderr, "pktrate: cannot pin to CPU %d: %s\n", cpu, strerror(errno));
}

/* Segment size of a received message: the UDP_GRO cmsg, else its length. */
static size_t gro_seg(struct msghdr *mh, size_t len)
{
    if (mh->msg_controllen == 0)
        return len;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int seg;
            memcpy(&seg, CMSG_DATA(c), sizeof(seg));
            return seg > 0 ? (size_t)seg : len;
        }
    return len;
}

/* Attach a UDP_SEGMENT cmsg of `seg` bytes to mh, using ctrl (CTRL_LEN bytes). */
static void set_gso(struct msghdr *mh, char *ctrl, uint16_t seg)
{
    memset(ctrl, 0, CMSG_SPACE(sizeof(uint16_t)));
    mh->msg_control = ctrl;
    mh->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
    struct cmsghdr *c = CMSG_FIRSTHDR(mh);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    memcpy(CMSG_DATA(c), &seg, sizeof(seg));
}

/* ==== Echo server ============================================================== */

static int run_echo(const char *listen_s, const char *port_file, int gso, int batch)
{
    struct sockaddr_in addr;
    if (parse_addr(listen_s, &addr) != 0) {
        fprintf(stderr, "pktrate: bad --listen '%s'\n", listen_s);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
        die("echo: bind");
    set_buffers(fd, 32 << 20);
    int one = 1;
    if (gso && setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0)
        die("echo: UDP_GRO");
    socklen_t alen = sizeof(addr);
    getsockname(fd, (struct sockaddr *)&addr, &alen);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%u\n", ntohs(addr.sin_port)) < 0 || fclose(f) != 0 ||
            rename(tmp, port_file) != 0)
            die("echo: port file");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    size_t bufsz = gso ? RXBUF : INA_MAX_DATAGRAM + 1;
    uint8_t *mem = malloc((size_t)batch * bufsz);
    struct mmsghdr *rx = calloc((size_t)batch, sizeof(*rx));
    struct mmsghdr *tx = calloc((size_t)batch, sizeof(*tx));
    struct iovec *riov = calloc((size_t)batch, sizeof(*riov));
    struct iovec *tiov = calloc((size_t)batch, sizeof(*tiov));
    struct sockaddr_in *from = calloc((size_t)batch, sizeof(*from));
    char(*rctl)[CTRL_LEN] = calloc((size_t)batch, CTRL_LEN);
    char(*tctl)[CTRL_LEN] = calloc((size_t)batch, CTRL_LEN);
    if (!mem || !rx || !tx || !riov || !tiov || !from || !rctl || !tctl)
        die("echo: malloc");
    uint64_t pkts = 0, msgs_in = 0, msgs_out = 0, calls = 0, errs = 0;
    while (!stop) {
        for (int i = 0; i < batch; i++) {
            riov[i].iov_base = mem + (size_t)i * bufsz;
            riov[i].iov_len = bufsz;
            rx[i].msg_hdr = (struct msghdr){.msg_name = &from[i],
                                            .msg_namelen = sizeof(from[i]),
                                            .msg_iov = &riov[i],
                                            .msg_iovlen = 1,
                                            .msg_control = gso ? rctl[i] : NULL,
                                            .msg_controllen = gso ? CTRL_LEN : 0};
        }
        int n = recvmmsg(fd, rx, (unsigned)batch, MSG_DONTWAIT, NULL);
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EINTR && errno != ECONNREFUSED)
                die("echo: recvmmsg");
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            poll(&pfd, 1, 200);
            continue;
        }
        calls++;
        msgs_in += (uint64_t)n;
        for (int i = 0; i < n; i++) {
            size_t len = rx[i].msg_len;
            size_t seg = gso ? gro_seg(&rx[i].msg_hdr, len) : len;
            pkts += seg ? (len + seg - 1) / seg : 1;
            tiov[i].iov_base = riov[i].iov_base;
            tiov[i].iov_len = len;
            tx[i].msg_hdr = (struct msghdr){.msg_name = &from[i],
                                            .msg_namelen = sizeof(from[i]),
                                            .msg_iov = &tiov[i],
                                            .msg_iovlen = 1};
            if (gso && len > seg)
                set_gso(&tx[i].msg_hdr, tctl[i], (uint16_t)seg);
        }
        int done = 0;
        while (done < n) {
            int k = sendmmsg(fd, tx + done, (unsigned)(n - done), 0);
            if (k < 0) {
                if (errno == EINTR)
                    continue;
                errs++;
                done++; /* skip the failing one */
                continue;
            }
            msgs_out += (uint64_t)k;
            done += k;
        }
    }
    fprintf(stderr,
            "pktrate echo: %llu packets in %llu messages (%llu recvmmsg calls), %llu messages "
            "sent, %llu send errors\n",
            (unsigned long long)pkts, (unsigned long long)msgs_in, (unsigned long long)calls,
            (unsigned long long)msgs_out, (unsigned long long)errs);
    close(fd);
    return 0;
}

/* ==== Load generator ============================================================ */

struct worker {
    int fd;
    int rank;
    uint32_t *seq;     /* per slot: the round in flight */
    uint64_t *sent_ns; /* per slot: last (re)send */
    uint8_t *queued;   /* per slot: in `pending` */
    unsigned *pending; /* slots ready to send */
    unsigned npending;
    uint64_t answers; /* answers that advanced a slot */
    uint64_t stale;   /* duplicate / stale / foreign answers */
    /* send scratch: per pending packet a header and two iovecs */
    uint8_t (*hdr)[INA_HDR_LEN];
    struct iovec *iov;
    struct mmsghdr *msgs;
    char (*ctl)[CTRL_LEN];
    /* receive scratch */
    uint8_t *rxmem;
    struct mmsghdr *rx;
    struct iovec *riov;
    char (*rctl)[CTRL_LEN];
};

struct gen {
    int nworkers, elems, window, gso, batch, mode_switch, spin;
    struct sockaddr_in target;
    struct worker w[MAX_WORKERS];
    uint8_t *payload; /* elems * 4 bytes, shared by every DATA packet */
    uint16_t job;
    uint32_t session, token;
    uint64_t retrans, send_eagain, send_errors;
    size_t pktlen;
};

static void hdr_fill(const struct gen *g, const struct worker *w, uint8_t *b, uint8_t kind,
                     uint32_t slot, uint32_t seq, uint16_t count)
{
    struct ina_hdr h;
    ina__hdr_init(&h, kind);
    h.job = g->job;
    h.rank = (uint16_t)w->rank;
    h.session = g->session;
    h.token = g->token;
    h.slot = slot | ((seq & 1) ? INA_SLOT_SET_BIT : 0);
    h.seq = seq;
    h.count = count;
    h.exp = 0;
    ina__hdr_encode(b, &h);
}

/* Join as ranks 0..N-1 of one job; fills job/session/token and the granted elems/window. */
static int do_join(struct gen *g)
{
    char name[32];
    snprintf(name, sizeof(name), "pktrate-%d-%u", (int)getpid(), (unsigned)(ina__clock_ns() & 0xFFFF));
    uint64_t nonce0 = ina__clock_ns() ^ ((uint64_t)getpid() << 32);
    int acked[MAX_WORKERS] = {0}, nacked = 0;
    for (int attempt = 0; attempt < 10 && nacked < g->nworkers; attempt++) {
        for (int r = 0; r < g->nworkers; r++) {
            if (acked[r])
                continue;
            uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
            struct ina_hdr h;
            ina__hdr_init(&h, INA_K_JOIN);
            h.rank = (uint16_t)r;
            ina__hdr_encode(b, &h);
            struct ina_join j;
            memset(&j, 0, sizeof(j));
            j.nonce = nonce0 + (uint64_t)r;
            j.world_size = (uint16_t)g->nworkers;
            j.elems = (uint16_t)g->elems;
            j.window = (uint32_t)g->window;
            j.sw_version = INA_VERSION_NUMBER;
            snprintf(j.name, sizeof(j.name), "%s", name);
            ina__join_encode(b + INA_HDR_LEN, &j);
            if (send(g->w[r].fd, b, sizeof(b), 0) < 0)
                die("send JOIN");
        }
        uint64_t deadline = ina__clock_ns() + 1000000000ull;
        while (nacked < g->nworkers && ina__clock_ns() < deadline) {
            struct pollfd pfd[MAX_WORKERS];
            for (int r = 0; r < g->nworkers; r++)
                pfd[r] = (struct pollfd){.fd = g->w[r].fd, .events = POLLIN};
            if (poll(pfd, (nfds_t)g->nworkers, 100) <= 0)
                continue;
            for (int r = 0; r < g->nworkers; r++) {
                if (!(pfd[r].revents & POLLIN))
                    continue;
                uint8_t b[2048];
                ssize_t len = recv(g->w[r].fd, b, sizeof(b), MSG_DONTWAIT);
                struct ina_hdr h;
                if (len < 0 || ina__hdr_decode(b, (size_t)len, &h) != INA_PARSE_OK)
                    continue;
                if (h.kind == INA_K_JOIN_NAK) {
                    fprintf(stderr, "pktrate: JOIN refused for rank %d\n", r);
                    return -1;
                }
                struct ina_join j;
                if (h.kind != INA_K_JOIN_ACK ||
                    ina__join_decode(b + INA_HDR_LEN, (size_t)len - INA_HDR_LEN, &j) != 0)
                    continue;
                if (!acked[r]) {
                    acked[r] = 1;
                    nacked++;
                }
                g->job = h.job;
                g->session = h.session;
                g->token = h.token;
                if ((int)j.elems != g->elems || (int)j.window != g->window) {
                    fprintf(stderr, "pktrate: switch granted elems %u window %u (asked %d, %d)\n",
                            j.elems, j.window, g->elems, g->window);
                    g->elems = j.elems;
                    g->window = (int)j.window;
                }
            }
        }
    }
    if (nacked < g->nworkers) {
        fprintf(stderr, "pktrate: JOIN: only %d of %d ranks acknowledged\n", nacked, g->nworkers);
        return -1;
    }
    return 0;
}

static void do_leave(struct gen *g)
{
    for (int r = 0; r < g->nworkers; r++) {
        uint8_t b[INA_HDR_LEN];
        struct ina_hdr h;
        ina__hdr_init(&h, INA_K_LEAVE);
        h.job = g->job;
        h.rank = (uint16_t)r;
        h.session = g->session;
        h.token = g->token;
        ina__hdr_encode(b, &h);
        (void)send(g->w[r].fd, b, sizeof(b), 0);
    }
}

static void queue_slot(struct worker *w, unsigned s)
{
    if (!w->queued[s]) {
        w->queued[s] = 1;
        w->pending[w->npending++] = s;
    }
}

/* Send every pending packet of worker w: GSO trains or one datagram per message. */
static void flush_worker(struct gen *g, struct worker *w, uint64_t now)
{
    if (w->npending == 0)
        return;
    unsigned np = w->npending, nmsg = 0;
    size_t pl = 4 * (size_t)g->elems;
    unsigned per = 1;
    if (g->gso) {
        per = (unsigned)(GSO_MAX_BYTES / g->pktlen);
        if (per > GSO_MAX_SEGS)
            per = GSO_MAX_SEGS;
        if (per < 1)
            per = 1;
    }
    for (unsigned i = 0; i < np; i++) {
        unsigned s = w->pending[i];
        hdr_fill(g, w, w->hdr[i], INA_K_DATA, s, w->seq[s], (uint16_t)g->elems);
        w->iov[2 * i] = (struct iovec){.iov_base = w->hdr[i], .iov_len = INA_HDR_LEN};
        w->iov[2 * i + 1] = (struct iovec){.iov_base = g->payload, .iov_len = pl};
        w->sent_ns[s] = now;
    }
    for (unsigned i = 0; i < np; i += per) {
        unsigned k = np - i < per ? np - i : per;
        struct msghdr *mh = &w->msgs[nmsg].msg_hdr;
        memset(mh, 0, sizeof(*mh));
        mh->msg_iov = &w->iov[2 * i];
        mh->msg_iovlen = 2 * k;
        if (k > 1)
            set_gso(mh, w->ctl[nmsg], (uint16_t)g->pktlen);
        nmsg++;
    }
    unsigned done = 0;
    while (done < nmsg) {
        int k = sendmmsg(w->fd, w->msgs + done, nmsg - done, MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == ENOBUFS) {
                g->send_eagain++;
                break; /* keep the rest pending */
            }
            g->send_errors++;
            done++; /* drop that message; the retransmission timer resends */
            continue;
        }
        done += (unsigned)k;
    }
    /* Packets of the messages sent leave the pending list. */
    unsigned sent_pkts = done * per < np ? done * per : np;
    for (unsigned i = 0; i < sent_pkts; i++)
        w->queued[w->pending[i]] = 0;
    memmove(w->pending, w->pending + sent_pkts, (np - sent_pkts) * sizeof(unsigned));
    w->npending = np - sent_pkts;
}

/* Receive what is there for worker w; @return datagrams seen. */
static unsigned poll_worker(struct gen *g, struct worker *w)
{
    size_t bufsz = g->gso ? RXBUF : INA_MAX_DATAGRAM + 1;
    for (int i = 0; i < g->batch; i++) {
        w->riov[i].iov_base = w->rxmem + (size_t)i * bufsz;
        w->riov[i].iov_len = bufsz;
        w->rx[i].msg_hdr = (struct msghdr){.msg_iov = &w->riov[i],
                                           .msg_iovlen = 1,
                                           .msg_control = g->gso ? w->rctl[i] : NULL,
                                           .msg_controllen = g->gso ? CTRL_LEN : 0};
    }
    int n = recvmmsg(w->fd, w->rx, (unsigned)g->batch, MSG_DONTWAIT, NULL);
    if (n <= 0) {
        if (n < 0 && errno == ECONNREFUSED) {
            fprintf(stderr, "pktrate: the server is not running (ECONNREFUSED)\n");
            exit(1);
        }
        return 0;
    }
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        size_t len = w->rx[i].msg_len;
        size_t seg = g->gso ? gro_seg(&w->rx[i].msg_hdr, len) : len;
        const uint8_t *p = w->riov[i].iov_base;
        for (size_t off = 0; off < len; off += seg) {
            const uint8_t *d = p + off;
            size_t dl = len - off < seg ? len - off : seg;
            seen++;
            if (dl < INA_HDR_LEN || ina__get16(d) != INA_WIRE_MAGIC ||
                (d[3] != INA_K_RESULT && d[3] != INA_K_DATA)) {
                w->stale++;
                if (d[3] == INA_K_ABORT) {
                    fprintf(stderr, "pktrate: the switch aborted the job\n");
                    exit(1);
                }
                continue;
            }
            uint32_t slot = ina__get32(d + 16) & INA_SLOT_INDEX_MASK, seq = ina__get32(d + 20);
            if (slot >= (uint32_t)g->window || seq != w->seq[slot]) {
                w->stale++;
                continue;
            }
            w->seq[slot] = seq + 1;
            w->answers++;
            queue_slot(w, slot);
        }
    }
    return seen;
}

struct srv_sample {
    double cpu_s;   /* utime + stime */
    double sched_s; /* schedstat runtime */
    int ok;
};

static struct srv_sample srv_read(int pid)
{
    struct srv_sample s = {0, 0, 0};
    if (pid <= 0)
        return s;
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return s;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return s;
    /* fields after ')': 3 state ... 14 utime 15 stime */
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return s;
    double hz = (double)sysconf(_SC_CLK_TCK);
    s.cpu_s = (double)(ut + st) / hz;
    snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
    f = fopen(path, "r");
    if (f) {
        unsigned long long rt = 0;
        if (fscanf(f, "%llu", &rt) == 1)
            s.sched_s = (double)rt * 1e-9;
        fclose(f);
    }
    s.ok = 1;
    return s;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static uint64_t total_answers(const struct gen *g)
{
    uint64_t t = 0;
    for (int r = 0; r < g->nworkers; r++)
        t += g->w[r].answers;
    return t;
}

static int run_gen(struct gen *g, double warmup_s, double duration_s, int srv_pid, double rto_ms,
                   const char *label)
{
    g->pktlen = INA_HDR_LEN + 4 * (size_t)g->elems;
    if (g->pktlen > GSO_MAX_BYTES) {
        fprintf(stderr, "pktrate: packet too large\n");
        return 2;
    }
    for (int r = 0; r < g->nworkers; r++) {
        struct worker *w = &g->w[r];
        w->rank = r;
        w->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (w->fd < 0)
            die("socket");
        struct sockaddr_in lo = {.sin_family = AF_INET};
        lo.sin_addr = g->target.sin_addr;
        if (bind(w->fd, (struct sockaddr *)&lo, sizeof(lo)) != 0)
            die("bind");
        if (connect(w->fd, (struct sockaddr *)&g->target, sizeof(g->target)) != 0)
            die("connect");
        set_buffers(w->fd, 16 << 20);
        int one = 1;
        if (g->gso && setsockopt(w->fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0)
            die("UDP_GRO");
    }
    if (g->mode_switch && do_join(g) != 0)
        return 1;
    g->pktlen = INA_HDR_LEN + 4 * (size_t)g->elems;
    g->payload = calloc(4 * (size_t)g->elems, 1);
    for (int i = 0; i < g->elems; i++)
        ina__put32(g->payload + 4 * i, (uint32_t)(i * 7 + 1));
    size_t bufsz = g->gso ? RXBUF : INA_MAX_DATAGRAM + 1;
    for (int r = 0; r < g->nworkers; r++) {
        struct worker *w = &g->w[r];
        size_t W = (size_t)g->window;
        w->seq = calloc(W, sizeof(*w->seq));
        w->sent_ns = calloc(W, sizeof(*w->sent_ns));
        w->queued = calloc(W, 1);
        w->pending = calloc(W, sizeof(unsigned));
        w->hdr = calloc(W, INA_HDR_LEN);
        w->iov = calloc(2 * W, sizeof(struct iovec));
        w->msgs = calloc(W, sizeof(struct mmsghdr));
        w->ctl = calloc(W, CTRL_LEN);
        w->rxmem = malloc((size_t)g->batch * bufsz);
        w->rx = calloc((size_t)g->batch, sizeof(struct mmsghdr));
        w->riov = calloc((size_t)g->batch, sizeof(struct iovec));
        w->rctl = calloc((size_t)g->batch, CTRL_LEN);
        if (!w->seq || !w->sent_ns || !w->queued || !w->pending || !w->hdr || !w->iov ||
            !w->msgs || !w->ctl || !w->rxmem || !w->rx || !w->riov || !w->rctl)
            die("malloc");
        for (unsigned s = 0; s < W; s++)
            queue_slot(w, s);
    }

    uint64_t t0 = ina__clock_ns(), rto = (uint64_t)(rto_ms * 1e6);
    uint64_t t_start = t0 + (uint64_t)(warmup_s * 1e9);
    uint64_t t_end = t_start + (uint64_t)(duration_s * 1e9);
    uint64_t next_scan = t0 + rto / 4;
    int measuring = 0;
    uint64_t a0 = 0, a1 = 0, m0 = 0, m1 = 0;
    double c0 = 0, c1 = 0;
    struct srv_sample s0 = {0, 0, 0}, s1 = {0, 0, 0};
    unsigned idle = 0;
    uint64_t polls = 0, busy_polls = 0;
    for (;;) {
        uint64_t now = ina__clock_ns();
        unsigned seen = 0;
        for (int r = 0; r < g->nworkers; r++) {
            struct worker *w = &g->w[r];
            seen += poll_worker(g, w);
            flush_worker(g, w, now);
        }
        polls++;
        busy_polls += seen > 0;
        if (!measuring && now >= t_start) {
            measuring = 1;
            a0 = total_answers(g);
            m0 = now;
            c0 = self_cpu_s();
            s0 = srv_read(srv_pid);
        } else if (measuring && now >= t_end) {
            a1 = total_answers(g);
            m1 = now;
            c1 = self_cpu_s();
            s1 = srv_read(srv_pid);
            break;
        }
        if (now >= next_scan) {
            next_scan = now + rto / 4;
            for (int r = 0; r < g->nworkers; r++) {
                struct worker *w = &g->w[r];
                for (unsigned s = 0; s < (unsigned)g->window; s++)
                    if (!w->queued[s] && now - w->sent_ns[s] > rto) {
                        queue_slot(w, s);
                        g->retrans++;
                    }
            }
        }
        if (seen == 0) {
            if (!g->spin && ++idle > 64) {
                struct pollfd pfd[MAX_WORKERS];
                for (int r = 0; r < g->nworkers; r++)
                    pfd[r] = (struct pollfd){.fd = g->w[r].fd, .events = POLLIN};
                poll(pfd, (nfds_t)g->nworkers, 1);
            }
        } else {
            idle = 0;
        }
    }
    if (g->mode_switch)
        do_leave(g);

    double wall = (double)(m1 - m0) * 1e-9;
    uint64_t pkts = a1 - a0;
    double pps = (double)pkts / wall;
    double srv_cpu = s1.ok && s0.ok ? s1.cpu_s - s0.cpu_s : 0;
    double srv_sched = s1.ok && s0.ok ? s1.sched_s - s0.sched_s : 0;
    double srv_pps_core = srv_sched > 0 ? (double)pkts / srv_sched : 0;
    double srv_pps_core_stat = srv_cpu > 0 ? (double)pkts / srv_cpu : 0;
    uint64_t stale = 0;
    for (int r = 0; r < g->nworkers; r++)
        stale += g->w[r].stale;
    fprintf(stderr,
            "pktrate %s: %d workers x window %d, %d elems (%zu B datagrams), %s: %llu server "
            "packets in %.2f s = %.0f pkts/s; server CPU %.2f s (stat) / %.2f s (schedstat) = "
            "%.0f pkts/s per core; generator CPU %.2f s; retransmits %llu, stale %llu, "
            "send EAGAIN %llu, errors %llu, busy polls %.0f%%\n",
            label, g->nworkers, g->window, g->elems, g->pktlen, g->gso ? "GSO/GRO" : "plain",
            (unsigned long long)pkts, wall, pps, srv_cpu, srv_sched, srv_pps_core, c1 - c0,
            (unsigned long long)g->retrans, (unsigned long long)stale,
            (unsigned long long)g->send_eagain, (unsigned long long)g->send_errors,
            polls ? 100.0 * (double)busy_polls / (double)polls : 0.0);
    printf("RESULT label=%s mode=%s workers=%d window=%d elems=%d bytes=%zu gso=%d pkts=%llu "
           "wall_s=%.3f pps=%.0f srv_cpu_s=%.3f srv_sched_s=%.3f srv_pps_per_core=%.0f "
           "srv_pps_per_core_stat=%.0f gen_cpu_s=%.3f retrans=%llu\n",
           label, g->mode_switch ? "switch" : "echo", g->nworkers, g->window, g->elems, g->pktlen,
           g->gso, (unsigned long long)pkts, wall, pps, srv_cpu, srv_sched, srv_pps_core,
           srv_pps_core_stat, c1 - c0, (unsigned long long)g->retrans);
    fflush(stdout);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage:\n"
            "  pktrate --echo [--listen ADDR:PORT] [--port-file F] [--gso] [--batch B] [--cpu C]\n"
            "  pktrate --target ADDR:PORT --mode switch|echo [--workers N] [--elems E]\n"
            "          [--window W] [--gso] [--batch B] [--warmup S] [--duration S]\n"
            "          [--server-pid PID] [--rto MS] [--label L] [--cpu C] [--spin]\n"
            "Defaults: --listen 127.0.0.1:0, --batch 16 (echo) / 64 (generator), --workers 4,\n"
            "--elems 256, --window 128, --warmup 0.5, --duration 3, --rto 1000.\n"
            "--spin: the generator busy-polls its sockets instead of sleeping in poll() when\n"
            "idle (give it a core of its own).\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"echo", no_argument, 0, 'E'},          {"listen", required_argument, 0, 'l'},
        {"port-file", required_argument, 0, 'p'}, {"gso", no_argument, 0, 'g'},
        {"batch", required_argument, 0, 'b'},   {"cpu", required_argument, 0, 'c'},
        {"target", required_argument, 0, 't'},  {"mode", required_argument, 0, 'm'},
        {"workers", required_argument, 0, 'n'}, {"elems", required_argument, 0, 'k'},
        {"window", required_argument, 0, 'w'},  {"warmup", required_argument, 0, 'W'},
        {"duration", required_argument, 0, 'd'}, {"server-pid", required_argument, 0, 'P'},
        {"rto", required_argument, 0, 'r'},     {"label", required_argument, 0, 'L'},
        {"spin", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int echo = 0, gso = 0, batch = 0, cpu = -1, srv_pid = 0, c;
    const char *listen_s = "127.0.0.1:0", *port_file = NULL, *target = NULL, *mode = "switch",
               *label = "run";
    double warmup = 0.5, duration = 3.0, rto = 1000;
    static struct gen g;
    g.nworkers = 4;
    g.elems = 256;
    g.window = 128;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'E': echo = 1; break;
        case 'l': listen_s = optarg; break;
        case 'p': port_file = optarg; break;
        case 'g': gso = 1; break;
        case 'b': batch = atoi(optarg); break;
        case 'c': cpu = atoi(optarg); break;
        case 't': target = optarg; break;
        case 'm': mode = optarg; break;
        case 'n': g.nworkers = atoi(optarg); break;
        case 'k': g.elems = atoi(optarg); break;
        case 'w': g.window = atoi(optarg); break;
        case 'W': warmup = atof(optarg); break;
        case 'd': duration = atof(optarg); break;
        case 'P': srv_pid = atoi(optarg); break;
        case 'r': rto = atof(optarg); break;
        case 'L': label = optarg; break;
        case 'S': g.spin = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    pin_cpu(cpu);
    if (echo)
        return run_echo(listen_s, port_file, gso, batch > 0 ? batch : 16);
    if (!target || parse_addr(target, &g.target) != 0) {
        fprintf(stderr, "pktrate: --target ADDR:PORT required (or --echo)\n");
        usage(stderr);
        return 2;
    }
    if (g.nworkers < 1 || g.nworkers > MAX_WORKERS || g.elems < 1 || g.elems > INA_MAX_ELEMS ||
        g.window < 1 || (g.window & (g.window - 1)) != 0) {
        fprintf(stderr, "pktrate: bad --workers/--elems/--window (window: power of 2)\n");
        return 2;
    }
    g.mode_switch = strcmp(mode, "switch") == 0;
    if (!g.mode_switch && strcmp(mode, "echo") != 0) {
        fprintf(stderr, "pktrate: --mode switch|echo\n");
        return 2;
    }
    g.gso = gso;
    g.batch = batch > 0 ? batch : 64;
    return run_gen(&g, warmup, duration, srv_pid, rto, label);
}
