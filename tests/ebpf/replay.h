/* replay.h: feed one trace to two switches, the userspace dataplane and the eBPF program, and compare them. */
#ifndef INA_TEST_REPLAY_H
#define INA_TEST_REPLAY_H

/*
 * One specification, two dataplanes. Both switches run the same control
 * plane (control.c) with the same parameters and the same seed, so the
 * same joins give the same sessions and tokens. For every input of a trace
 * (src/switch/trace.h):
 *
 *   userspace  ina__switch_input() on switch U; its output is what it queued.
 *   eBPF       the datagram in an Ethernet/IPv4/UDP frame, run through the
 *              program with BPF_PROG_TEST_RUN as TC ingress would (on lo of
 *              this test's own network namespace); its output is what the
 *              program cloned onto lo (read back from an AF_PACKET socket),
 *              then the frame it redirected; a datagram it passes up goes
 *              to switch E's ina__switch_input(), as the socket would, and
 *              E's queue follows; then E acts on the program's events.
 *              A share of DATA (fallback_pct) skips the frame and goes to
 *              ina__switch_input() directly, as a GSO train split by the
 *              kernel would: E feeds it back to the program (ebpf_dp.c).
 *
 * Every output datagram (destination address and port, bytes) must be the
 * same, in the same order, and so must every counter of the two switches
 * (global, per job, per rank) after every input. The program's frames are
 * checked too: from the switch's address and port, IPv4 checksum right,
 * UDP length right, Ethernet destination the rank's (learnt) address.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/pkt_cls.h>
#include <net/ethernet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#include "switch/ebpf/ebpf_dp.h"
#include "engine/engine.h"
#include "switch/trace.h"

#define RP_MAX_OUT 1100   /* outputs of one input: an ABORT and a result to 256 ranks, twice over */
#define RP_MAX_DGRAM 3600 /* what BPF_PROG_TEST_RUN takes (ebpf_dp.c) */
#define RP_FRAME_HDR 42

struct rp_out {
    struct sockaddr_in dst;
    uint16_t len;
    uint8_t data[RP_MAX_DGRAM];
};

struct rp {
    struct ina_switch *u, *e_sw;
    struct ina_ebpf *e;
    int cap_fd;
    struct sockaddr_in sw_addr;
    uint64_t base_ns;
    int fallback_pct;
    uint64_t rng;
    struct rp_out *uo, *eo;
    int nu, ne;
    uint64_t prog_out;     /* datagrams the program sent (its tx_packets must agree) */
    uint64_t inputs, compared, fed_back, l2_unlearnt;
    uint64_t group_out;    /* of prog_out, to a job's multicast group (--multicast) */
    int diffs;             /* inputs whose outputs or counters differed */
    int verbose;
};

static inline uint64_t rp_rand(struct rp *r)
{
    uint64_t x = (r->rng += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The Ethernet address the trace's senders have: one per source address. */
static inline void rp_mac_of(const struct sockaddr_in *a, uint8_t mac[6])
{
    uint32_t ip = ntohl(a->sin_addr.s_addr);
    if (IN_MULTICAST(ip)) { /* a job's group (--multicast): RFC 1112's mapping */
        const uint8_t g[6] = {0x01, 0x00, 0x5e, (uint8_t)((ip >> 16) & 0x7f), (uint8_t)(ip >> 8),
                              (uint8_t)ip};
        memcpy(mac, g, 6);
        return;
    }
    mac[0] = 0x02;
    mac[1] = (uint8_t)(a->sin_addr.s_addr >> 24);
    memcpy(mac + 2, &a->sin_port, 2);
    mac[4] = (uint8_t)(a->sin_addr.s_addr >> 16);
    mac[5] = 0x5a;
}

static inline uint16_t rp_ip_csum(const uint8_t *p)
{
    uint32_t s = 0;
    for (int i = 0; i < 20; i += 2)
        s += (uint32_t)(p[i] << 8 | p[i + 1]);
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    return (uint16_t)~s;
}

/* Queue a datagram into an output list. */
static inline int rp_push(struct rp_out *list, int *n, const struct sockaddr_in *dst,
                          const uint8_t *b, size_t len)
{
    if (*n >= RP_MAX_OUT || len > RP_MAX_DGRAM)
        return -1;
    struct rp_out *o = &list[(*n)++];
    memset(&o->dst, 0, sizeof(o->dst));
    o->dst.sin_family = AF_INET;
    o->dst.sin_addr = dst->sin_addr;
    o->dst.sin_port = dst->sin_port;
    o->len = (uint16_t)len;
    memcpy(o->data, b, len);
    return 0;
}

/* What a switch queued (control packets, the userspace dataplane's results), then empty its queue. */
static inline void rp_take_txq(struct ina_switch *sw, struct rp_out *list, int *n)
{
    for (unsigned i = 0; i < sw->txq.nmsg; i++) {
        const uint8_t *d = sw->txq.iovs[i].iov_base;
        if (!sw->dp && sw->txq.iovs[i].iov_len == INA_HDR_LEN && d[3] == INA_K_DOORBELL)
            continue; /* the dead-rank probe: userspace only (PROTOCOL.md §5.4, §16); no rings here */
        rp_push(list, n, &sw->txq.addrs[i], sw->txq.iovs[i].iov_base, sw->txq.iovs[i].iov_len);
    }
    ina__switch_tx_reset(sw);
}

/*
 * A frame the program sent: check its headers (a problem is a diff), and
 * queue its datagram. want_mac: the destination's address as learnt, or
 * NULL when the frame may carry none (0: the rank was only fed back).
 */
static inline int rp_take_frame(struct rp *r, const uint8_t *f, size_t flen)
{
    if (flen < RP_FRAME_HDR || f[12] != 0x08 || f[13] != 0x00 || f[14] != 0x45 || f[23] != 17)
        return 0; /* not IPv4/UDP without options: not the program's */
    const uint8_t *ip = f + 14, *udp = f + 34;
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    memcpy(&src.sin_addr.s_addr, ip + 12, 4);
    memcpy(&src.sin_port, udp, 2);
    memcpy(&dst.sin_addr.s_addr, ip + 16, 4);
    memcpy(&dst.sin_port, udp + 2, 2);
    if (src.sin_port != r->sw_addr.sin_port)
        return 0; /* the stack's (an ICMP error, a stray) */
    size_t ulen = ina__get16(udp + 4), iplen = ina__get16(ip + 2);
    int bad = 0;
    if (src.sin_addr.s_addr != r->sw_addr.sin_addr.s_addr || rp_ip_csum(ip) != 0 ||
        iplen != 20 + ulen || ulen < 8 || RP_FRAME_HDR + ulen - 8 > flen) {
        fprintf(stderr, "frame to %s:%d: bad headers (source, checksum or lengths)\n",
                inet_ntoa(dst.sin_addr), ntohs(dst.sin_port));
        bad = 1;
    }
    uint8_t mac[6], zero[6] = {0};
    rp_mac_of(&dst, mac);
    if (memcmp(f, mac, 6) != 0) {
        if (memcmp(f, zero, 6) == 0) {
            r->l2_unlearnt++; /* a rank whose frames were all fed back (no Ethernet source) */
        } else {
            fprintf(stderr, "frame to %s:%d: wrong Ethernet destination\n",
                    inet_ntoa(dst.sin_addr), ntohs(dst.sin_port));
            bad = 1;
        }
    }
    if (bad)
        return -1;
    r->prog_out++;
    r->group_out += IN_MULTICAST(ntohl(dst.sin_addr.s_addr)) != 0;
    return rp_push(r->eo, &r->ne, &dst, udp + 8, ulen - 8);
}

/* Everything the capture socket holds: the frames that left by lo. */
static inline int rp_drain_capture(struct rp *r)
{
    uint8_t buf[RP_FRAME_HDR + RP_MAX_DGRAM + 64];
    int rc = 0;
    for (;;) {
        struct sockaddr_ll from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(r->cap_fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n < 0)
            return rc;
        if (from.sll_pkttype == PACKET_OUTGOING && rp_take_frame(r, buf, (size_t)n) != 0)
            rc = -1;
    }
}

/* The frame in which a datagram from src reaches the switch's interface. */
static inline size_t rp_frame(const struct rp *r, uint8_t *f, const struct sockaddr_in *src,
                              const uint8_t *d, size_t len)
{
    memset(f, 0, 6); /* lo's address */
    rp_mac_of(src, f + 6);
    f[12] = 0x08;
    f[13] = 0x00;
    uint8_t *ip = f + 14;
    memset(ip, 0, 20);
    ip[0] = 0x45;
    ina__put16(ip + 2, (uint16_t)(28 + len));
    ip[8] = 64;
    ip[9] = 17;
    memcpy(ip + 12, &src->sin_addr.s_addr, 4);
    memcpy(ip + 16, &r->sw_addr.sin_addr.s_addr, 4);
    ina__put16(ip + 10, rp_ip_csum(ip));
    uint8_t *udp = ip + 20;
    memcpy(udp, &src->sin_port, 2);
    memcpy(udp + 2, &r->sw_addr.sin_port, 2);
    ina__put16(udp + 4, (uint16_t)(8 + len));
    ina__put16(udp + 6, 0);
    memcpy(udp + 8, d, len);
    return RP_FRAME_HDR + len;
}

/* ---- Comparing ------------------------------------------------------------------ */

static inline void rp_dump_out(const char *who, const struct rp_out *o)
{
    struct ina_hdr h;
    int pr = ina__hdr_decode(o->data, o->len, &h);
    fprintf(stderr, "  %s -> %s:%d %u bytes", who, inet_ntoa(o->dst.sin_addr), ntohs(o->dst.sin_port),
            o->len);
    if (pr == INA_PARSE_OK)
        fprintf(stderr, " kind %u job %u slot %08x seq %u count %u exp %d op %u tag %u", h.kind,
                h.job, h.slot, h.seq, h.count, h.exp, h.op, h.tag);
    fprintf(stderr, "\n");
}

static inline int rp_same_outputs(struct rp *r)
{
    int same = r->nu == r->ne;
    for (int i = 0; same && i < r->nu; i++)
        same = ina__addr_eq(&r->uo[i].dst, &r->eo[i].dst) && r->uo[i].len == r->eo[i].len &&
               memcmp(r->uo[i].data, r->eo[i].data, r->uo[i].len) == 0;
    if (!same) {
        fprintf(stderr, "outputs differ: userspace %d datagram(s), eBPF %d\n", r->nu, r->ne);
        for (int i = 0; i < r->nu; i++)
            rp_dump_out("userspace", &r->uo[i]);
        for (int i = 0; i < r->ne; i++)
            rp_dump_out("eBPF     ", &r->eo[i]);
    }
    r->compared += (uint64_t)r->nu;
    return same;
}

#define RP_CMP(what, a, b)                                                                     \
    do {                                                                                       \
        if ((a) != (b)) {                                                                      \
            fprintf(stderr, "%s: userspace %llu, eBPF %llu\n", what, (unsigned long long)(a), \
                    (unsigned long long)(b));                                                  \
            same = 0;                                                                          \
        }                                                                                      \
    } while (0)

static inline int rp_same_counters(struct rp *r)
{
    const struct ina_sw_counters *a = &r->u->c, *b = &r->e_sw->c;
    int same = 1;
    RP_CMP("rx_packets", a->rx_packets, b->rx_packets);
    RP_CMP("rx_bytes", a->rx_bytes, b->rx_bytes);
    RP_CMP("contributions", a->contributions, b->contributions);
    RP_CMP("completions", a->completions, b->completions);
    RP_CMP("results_resent", a->results_resent, b->results_resent);
    RP_CMP("jobs_started", a->jobs_started, b->jobs_started);
    RP_CMP("jobs_ended", a->jobs_ended, b->jobs_ended);
    RP_CMP("jobs_aborted", a->jobs_aborted, b->jobs_aborted);
    RP_CMP("jobs_refused", a->jobs_refused, b->jobs_refused);
    RP_CMP("jobs_evicted", a->jobs_evicted, b->jobs_evicted);
    RP_CMP("joins_expired", a->joins_expired, b->joins_expired);
    for (int d = 0; d < INA_DROP__COUNT; d++)
        RP_CMP(ina__drop_name((enum ina_drop)d), a->drops[d], b->drops[d]);
    /* What the program sent by itself: the userspace switch counts its
     * sends when it flushes (main.c), not here, so compare with the frames. */
    RP_CMP("eBPF tx_packets vs frames", b->tx_packets, r->prog_out);
    RP_CMP("eBPF tx_errors", b->tx_errors, 0);
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        const struct ina_job *x = &r->u->jobs[i], *y = &r->e_sw->jobs[i];
        RP_CMP("job state", x->state, y->state);
        if (x->state != INA_JOB_ACTIVE || y->state != INA_JOB_ACTIVE)
            continue;
        RP_CMP("job session", x->session, y->session);
        RP_CMP("job token", x->token, y->token);
        RP_CMP("job rx_packets", x->c.rx_packets, y->c.rx_packets);
        RP_CMP("job rx_bytes", x->c.rx_bytes, y->c.rx_bytes);
        RP_CMP("job contributions", x->c.contributions, y->c.contributions);
        RP_CMP("job completions", x->c.completions, y->c.completions);
        RP_CMP("job retransmits", x->c.retransmits, y->c.retransmits);
        for (int d = 0; d < INA_DROP__COUNT; d++)
            RP_CMP("job drop", x->c.drops[d], y->c.drops[d]);
        for (int m = 0; m < x->world; m++) {
            RP_CMP("rank rx_packets", x->members[m].rx_packets, y->members[m].rx_packets);
            RP_CMP("rank rx_bytes", x->members[m].rx_bytes, y->members[m].rx_bytes);
        }
    }
    return same;
}

/* ---- Driving both -------------------------------------------------------------- */

/* A DATA datagram the eBPF side receives by the socket, not by the interface. */
static inline int rp_is_data(const uint8_t *b, size_t len)
{
    return len >= INA_HDR_LEN && b[0] == 0x49 && b[1] == 0x4E && b[2] == 1 && b[3] == INA_K_DATA;
}

/* The eBPF side's share of one datagram. @return 0, or -1 on a broken frame. */
static inline int rp_ebpf_datagram(struct rp *r, const struct ina_trace_rec *rec, uint64_t now)
{
    int rc = 0;
    if (rp_is_data(rec->data, rec->len) && (int)(rp_rand(r) % 100) < r->fallback_pct) {
        r->fed_back++;
        ina__switch_input(r->e_sw, rec->data, rec->len, &rec->src, now);
        return rp_drain_capture(r);
    }
    static uint8_t frame[RP_FRAME_HDR + INA_MAX_DATAGRAM], out[RP_FRAME_HDR + INA_MAX_DATAGRAM];
    size_t flen = rp_frame(r, frame, &rec->src, rec->data, rec->len);
    uint32_t outlen = sizeof(out);
    int verdict = TC_ACT_OK;
    if (flen <= RP_FRAME_HDR + RP_MAX_DGRAM &&
        ina__ebpf_test_run(r->e, frame, (uint32_t)flen, out, &outlen, &verdict) != 0) {
        fprintf(stderr, "BPF_PROG_TEST_RUN failed: %s\n", strerror(errno));
        return -1;
    }
    rc = rp_drain_capture(r); /* its clones, in order */
    if (verdict == TC_ACT_REDIRECT && rp_take_frame(r, out, outlen) != 0)
        rc = -1;
    if (verdict == TC_ACT_OK || verdict == TC_ACT_UNSPEC) {
        ina__switch_input(r->e_sw, rec->data, rec->len, &rec->src, now);
        if (rp_drain_capture(r) != 0)
            rc = -1;
    }
    return rc;
}

/* One input of the trace, to both. @return 1 if they agreed, 0 if not. */
static inline int rp_input(struct rp *r, const struct ina_trace_rec *rec)
{
    uint64_t now = r->base_ns + rec->t_ns;
    int ok = 1;
    r->nu = r->ne = 0;
    r->inputs++;
    switch (rec->type) {
    case INA_TRACE_DATAGRAM:
        ina__switch_input(r->u, rec->data, rec->len, &rec->src, now);
        if (rp_ebpf_datagram(r, rec, now) != 0)
            ok = 0;
        break;
    case INA_TRACE_TICK:
        r->e_sw->dp->sync(r->e_sw->dp_ctx, r->e_sw);
        ina__switch_tick(r->u, now);
        ina__switch_tick(r->e_sw, now);
        break;
    case INA_TRACE_ABORT:
    case INA_TRACE_EVICT:
        if (rec->len >= 2) {
            uint16_t id = ina__get16(rec->data);
            int a = rec->type == INA_TRACE_ABORT ? ina__switch_abort_job(r->u, id)
                                                 : ina__switch_evict_job(r->u, id);
            r->e_sw->dp->sync(r->e_sw->dp_ctx, r->e_sw); /* the job's counters, before its end */
            int b = rec->type == INA_TRACE_ABORT ? ina__switch_abort_job(r->e_sw, id)
                                                 : ina__switch_evict_job(r->e_sw, id);
            if (a != b) {
                fprintf(stderr, "operator request on job %u: userspace %d, eBPF %d\n", id, a, b);
                ok = 0;
            }
        }
        break;
    }
    /* What the program reported (a MISMATCH), then what E queued. */
    rp_take_txq(r->u, r->uo, &r->nu);
    while (ina__ebpf_poll(r->e) > 0)
        rp_take_txq(r->e_sw, r->eo, &r->ne);
    rp_take_txq(r->e_sw, r->eo, &r->ne);
    if (rp_drain_capture(r) != 0)
        ok = 0;
    r->e_sw->dp->sync(r->e_sw->dp_ctx, r->e_sw);
    if (!rp_same_outputs(r) || !rp_same_counters(r))
        ok = 0;
    if (!ok) {
        r->diffs++;
        fprintf(stderr, "  (input %llu: type %d, %u bytes from %s:%d)\n",
                (unsigned long long)r->inputs, rec->type, rec->len, inet_ntoa(rec->src.sin_addr),
                ntohs(rec->src.sin_port));
    }
    return ok;
}

/* The switches; the program stays (rp_open's caller owns it). */
static inline void rp_close(struct rp *r)
{
    while (r->e && r->e_sw && r->e_sw->dp && ina__ebpf_poll(r->e) > 0)
        ina__switch_tx_reset(r->e_sw); /* events of this trace, against its own switch */
    if (r->u)
        ina__switch_free(r->u);
    if (r->e_sw)
        ina__switch_free(r->e_sw);
    free(r->u);
    free(r->e_sw);
    free(r->uo);
    free(r->eo);
    memset(r, 0, sizeof(*r));
}

/*
 * Two switches for a trace with header h, the eBPF side served by program
 * e (loaded once for every trace: loading it, which the verifier checks,
 * costs far more than a trace), at the switch address e was opened with
 * (sw_addr; a trace's own address does not matter: no ina datagram carries
 * it). cap_fd captures lo. @return 0, or -1 with err filled in.
 */
static inline int rp_open(struct rp *r, const struct ina_trace_header *h, struct ina_ebpf *e,
                          const struct sockaddr_in *sw_addr, int cap_fd, int fallback_pct,
                          uint64_t seed, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->cap_fd = cap_fd;
    r->sw_addr = *sw_addr;
    r->fallback_pct = fallback_pct;
    r->rng = seed;
    r->e = e;
    r->u = calloc(1, sizeof(*r->u));
    r->e_sw = calloc(1, sizeof(*r->e_sw));
    r->uo = calloc(RP_MAX_OUT, sizeof(*r->uo));
    r->eo = calloc(RP_MAX_OUT, sizeof(*r->eo));
    struct ina_switch_params p = h->p;
    p.seed = h->seed ? h->seed : 1;
    /* What ina-switch --dataplane ebpf offers (op 4 is not among it): the
     * userspace dataplane with the same offer is its specification. */
    p.bpf_ops_only = 1;
    if (!r->u || !r->e_sw || !r->uo || !r->eo || ina__switch_init(r->u, &p) != 0 ||
        ina__switch_init(r->e_sw, &p) != 0) {
        snprintf(err, errlen, "cannot set up the switches (nslots %u, max_elems %u)", p.nslots,
                 p.max_elems);
        rp_close(r);
        return -1;
    }
    ina__ebpf_bind(e, r->e_sw);
    r->base_ns = ina__clock_ns();
    rp_drain_capture(r);
    r->prog_out = 0;
    r->ne = 0;
    return 0;
}

#endif
