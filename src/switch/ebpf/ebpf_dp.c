/* ebpf_dp.c: the eBPF dataplane's loader and its side of the control plane: maps, attach, events, counters. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "common/wire.h"
#include "ina.h"
#include "switch/ebpf/ebpf_dp.h"
#include "switch/ebpf/iface.h"
#include "switch/ebpf/ina_bpf.h"
#include "common/log.h"
#include "engine/engine.h"

#include "ina_dp.skel.h" /* generated: bpftool gen skeleton (CMakeLists.txt) */

/* The program and this file must agree on the wire and on the limits. */
_Static_assert(INA_BPF_MAX_RANKS == INA_MAX_WORKERS, "ranks");
_Static_assert(INA_BPF_MAX_ELEMS == INA_EBPF_MAX_ELEMS, "elems");
_Static_assert(INA_BPF_MAX_JOBS == INA_SW_MAX_JOBS, "jobs");
_Static_assert(INA_BPF_MAX_RANKS / 64 == INA_BITMAP_WORDS, "bitmap");
_Static_assert(INA_OP_ADD_BFP == 3 && INA_K_DATA == 1 && INA_K_RESULT == 2, "wire");
_Static_assert(INA_EXP_ZERO == -32768 && INA_EXP_NONFINITE == 32767, "exponents");

/* Not in Debian 12's headers (Linux 6.1): TCX, the link-based TC hook of
 * Linux 6.6. A link is detached when its last descriptor closes, so a
 * switch that dies leaves no program behind on the interface. */
#ifndef BPF_TCX_INGRESS
#define BPF_TCX_INGRESS 46
#endif

#define FRAME_HDR (14 + 20 + 8) /* Ethernet, IPv4, UDP before the datagram */
/* BPF_PROG_TEST_RUN takes frames that fit one page with the kernel's head
 * and tail room; a datagram fed back must fit too. */
#define TEST_RUN_MAX_FRAME 3600

struct ina_ebpf {
    struct ina_dp *skel;
    struct ina_switch *sw;
    struct ring_buffer *rb;
    char iface[32];
    struct ina_iface ifc;
    uint32_t addr; /* the switch's address, network order: what fed-back frames go to */
    uint16_t port; /* network order */
    int sock_fd;
    uint32_t nslots;
    int ncpu;
    int tcx_fd;              /* TCX link, or -1 */
    int tc_legacy;           /* attached as a clsact filter instead (detached at close) */
    struct bpf_tc_hook tc_hook;
    struct bpf_link *xdp;    /* the pass-through XDP on a veth, or NULL */
    int lo_gso_was;          /* -1: untouched; else the state to restore */
    /* Counter snapshots: sync() folds the growth since the last call into sw. */
    struct ina_bpf_stats prev;
    struct ina_bpf_job_stats *prev_job; /* INA_BPF_MAX_JOBS */
    void *percpu;                       /* ncpu values of the largest per-CPU map */
    struct ina_bpf_set *set_buf;        /* job start: the initial sets */
    uint32_t *key_buf;
    /* DATA fed back from the socket (dp_ops.h: data) */
    uint8_t frame[FRAME_HDR + INA_MAX_DATAGRAM];
    uint8_t out[FRAME_HDR + INA_MAX_DATAGRAM];
    uint64_t fed_back, fed_back_too_big, fed_back_failed;
    int warned_too_big;
};

/* ---- libbpf's messages ------------------------------------------------------- */

/* The last lines libbpf printed (the verifier's verdict on a failed load). */
static char libbpf_tail[2048];

static int on_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    if (level == LIBBPF_DEBUG)
        return 0;
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t have = strlen(libbpf_tail), add = strlen(line);
    if (add >= sizeof(libbpf_tail))
        return 0;
    if (have + add >= sizeof(libbpf_tail)) {
        memmove(libbpf_tail, libbpf_tail + (have + add - sizeof(libbpf_tail) + 1),
                sizeof(libbpf_tail) - add - 1);
        have = sizeof(libbpf_tail) - add - 1;
    }
    memcpy(libbpf_tail + have, line, add + 1);
    return 0;
}

/* The verifier's last words before libbpf's end of the load log, or the
 * last line libbpf printed. */
static const char *verifier_verdict(void)
{
    char *endlog = strstr(libbpf_tail, "-- END PROG LOAD LOG --");
    if (endlog) {
        *endlog = '\0';
        while (endlog > libbpf_tail && (endlog[-1] == '\n' || endlog[-1] == ' '))
            *--endlog = '\0';
    } else {
        endlog = libbpf_tail + strlen(libbpf_tail);
        while (endlog > libbpf_tail && endlog[-1] == '\n')
            *--endlog = '\0';
    }
    char *nl = strrchr(libbpf_tail, '\n');
    if (nl && nl > libbpf_tail) { /* two lines: the verdict and what it counted */
        *nl = ' ';
        char *prev = strrchr(libbpf_tail, '\n');
        *nl = '\n';
        nl = prev;
    }
    for (char *c = nl ? nl : libbpf_tail; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return nl ? nl + 1 : libbpf_tail;
}

/* ---- Map helpers -------------------------------------------------------------- */

static int map_fd(const struct bpf_map *m) { return bpf_map__fd(m); }

/* Set every CPU's copy of a per-CPU array entry to zero. */
static int percpu_zero(struct ina_ebpf *e, const struct bpf_map *m, uint32_t key)
{
    size_t vs = (bpf_map__value_size(m) + 7) & ~(size_t)7;
    memset(e->percpu, 0, vs * (size_t)e->ncpu);
    return bpf_map_update_elem(map_fd(m), &key, e->percpu, BPF_ANY) ? -errno : 0;
}

/* ---- dp_ops hooks ----------------------------------------------------------------- */

/*
 * The job became ACTIVE: its sets to "rounds -2 and -1 complete" (§6.3,
 * control.c: ina__job_reset_slots), its counters to zero, then its entry,
 * which makes the program serve it. Ranks learn of the job only after this
 * returns (the JOIN_ACKs are queued after), so no DATA races the setup.
 */
static void hook_job_start(void *ctx, struct ina_switch *sw, const struct ina_job *job)
{
    struct ina_ebpf *e = ctx;
    (void)sw;
    uint32_t ji = job->id - 1u;
    for (uint32_t i = 0; i < job->window; i++)
        for (unsigned set = 0; set < 2; set++) {
            struct ina_bpf_set *s = &e->set_buf[i * 2 + set];
            memset(s, 0, sizeof(*s));
            s->seq = (uint32_t)set - 2u;
            s->complete = 1;
            s->nrecv = (uint16_t)job->world;
            for (int r = 0; r < job->world; r++)
                s->bitmap[r >> 6] |= 1ull << (r & 63);
            e->key_buf[i * 2 + set] = (job->slot_base + i) * 2 + set;
        }
    uint32_t n = job->window * 2;
    LIBBPF_OPTS(bpf_map_batch_opts, bo, .elem_flags = BPF_F_LOCK);
    if (bpf_map_update_batch(map_fd(e->skel->maps.sets), e->key_buf, e->set_buf, &n, &bo) != 0) {
        for (uint32_t k = 0; k < job->window * 2; k++)
            bpf_map_update_elem(map_fd(e->skel->maps.sets), &e->key_buf[k], &e->set_buf[k],
                                BPF_F_LOCK);
    }
    uint64_t nobound = INA_BPF_NO_BOUND;
    bpf_map_update_elem(map_fd(e->skel->maps.evict), &ji, &nobound, BPF_ANY);
    percpu_zero(e, e->skel->maps.job_stats, ji);
    memset(&e->prev_job[ji], 0, sizeof(e->prev_job[ji]));

    struct ina_bpf_job bj;
    memset(&bj, 0, sizeof(bj));
    bj.state = INA_BPF_JOB_ACTIVE;
    bj.session = job->session;
    bj.token = job->token;
    bj.id = job->id;
    bj.world = (uint16_t)job->world;
    bj.elems = job->elems;
    bj.window = job->window;
    bj.slot_base = job->slot_base;
    if (job->mcast.sin_family) { /* --multicast: the group's Ethernet address, RFC 1112 */
        uint32_t g = ntohl(job->mcast.sin_addr.s_addr);
        const uint8_t mac[6] = {0x01, 0x00, 0x5e, (uint8_t)((g >> 16) & 0x7f), (uint8_t)(g >> 8),
                                (uint8_t)g};
        bj.group.addr = job->mcast.sin_addr.s_addr;
        bj.group.port = job->mcast.sin_port;
        memcpy(bj.group.mac, mac, sizeof(mac));
    }
    for (int r = 0; r < job->world; r++) {
        bj.members[r].addr = job->members[r].addr.sin_addr.s_addr;
        bj.members[r].port = job->members[r].addr.sin_port;
        /* The next hop until the rank's own frames say otherwise: what the
         * neighbour table learnt from its ARP (a rank behind a router has
         * none; its first DATA teaches the program the router's address). */
        if (!e->ifc.loopback)
            ina__iface_neighbour(e->iface, bj.members[r].addr, bj.members[r].mac);
    }
    if (bpf_map_update_elem(map_fd(e->skel->maps.jobs), &ji, &bj, BPF_ANY) != 0)
        ina__log(INA_LOG_ERROR, "ebpf_job_start_failed", INA_KV_I("job", job->id),
                INA_KV_S("reason", strerror(errno)));
}

static void hook_job_end(void *ctx, struct ina_switch *sw, const struct ina_job *job)
{
    struct ina_ebpf *e = ctx;
    (void)sw;
    uint32_t ji = job->id - 1u;
    struct ina_bpf_job bj;
    memset(&bj, 0, sizeof(bj)); /* state FREE: its DATA is NO_JOB from now on */
    bpf_map_update_elem(map_fd(e->skel->maps.jobs), &ji, &bj, BPF_ANY);
}

static uint32_t hook_slot_seq(void *ctx, uint32_t abs_slot, unsigned set)
{
    struct ina_ebpf *e = ctx;
    uint32_t key = abs_slot * 2 + set;
    struct ina_bpf_set s;
    /* Under the set's lock: a DATA on another CPU either moved the set
     * before this read or sees the bound the caller set before it. */
    if (bpf_map_lookup_elem_flags(map_fd(e->skel->maps.sets), &key, &s, BPF_F_LOCK) != 0)
        return (uint32_t)set - 2u;
    return s.seq;
}

static void hook_job_evict(void *ctx, const struct ina_job *job, uint64_t bound)
{
    struct ina_ebpf *e = ctx;
    uint32_t ji = job->id - 1u;
    bpf_map_update_elem(map_fd(e->skel->maps.evict), &ji, &bound, BPF_ANY);
}

/* Sum the per-CPU copies of an array of __u64 counters (n of them) into sum.
 * __u64 (unsigned long long), as the structs declare them: uint64_t is
 * unsigned long here, and reading one through the other breaks aliasing. */
static void sum_percpu(const void *percpu, size_t value_size, int ncpu, __u64 *sum, size_t n)
{
    size_t stride = (value_size + 7) & ~(size_t)7;
    memset(sum, 0, n * sizeof(__u64));
    for (int c = 0; c < ncpu; c++) {
        const __u64 *v = (const __u64 *)((const uint8_t *)percpu + (size_t)c * stride);
        for (size_t i = 0; i < n; i++)
            sum[i] += v[i];
    }
}

/* The latest of the per-CPU copies of a job's last_rx_ns. */
static uint64_t max_last_rx(const void *percpu, int ncpu)
{
    size_t stride = (sizeof(struct ina_bpf_job_stats) + 7) & ~(size_t)7;
    uint64_t m = 0;
    for (int c = 0; c < ncpu; c++) {
        const struct ina_bpf_job_stats *js =
            (const void *)((const uint8_t *)percpu + (size_t)c * stride);
        if (js->last_rx_ns > m)
            m = js->last_rx_ns;
    }
    return m;
}

static void sync_job(struct ina_ebpf *e, struct ina_job *job)
{
    uint32_t ji = job->id - 1u;
    if (bpf_map_lookup_elem(map_fd(e->skel->maps.job_stats), &ji, e->percpu) != 0)
        return;
    struct ina_bpf_job_stats cur, *prev = &e->prev_job[ji];
    sum_percpu(e->percpu, sizeof(cur), e->ncpu, (__u64 *)&cur, sizeof(cur) / 8);
    uint64_t last = max_last_rx(e->percpu, e->ncpu);
    if (last > job->last_rx_ns)
        job->last_rx_ns = last;
    job->c.rx_packets += cur.rx_packets - prev->rx_packets;
    job->c.rx_bytes += cur.rx_bytes - prev->rx_bytes;
    job->c.contributions += cur.contributions - prev->contributions;
    job->c.completions += cur.completions - prev->completions;
    job->c.retransmits += cur.retransmits - prev->retransmits;
    for (int d = 0; d < INA_DROP__COUNT; d++)
        job->c.drops[d] += cur.drops[d] - prev->drops[d];
    for (int r = 0; r < job->world; r++) {
        job->members[r].rx_packets += cur.member_rx[r][0] - prev->member_rx[r][0];
        job->members[r].rx_bytes += cur.member_rx[r][1] - prev->member_rx[r][1];
    }
    *prev = cur;
}

static void hook_sync(void *ctx, struct ina_switch *sw)
{
    struct ina_ebpf *e = ctx;
    uint32_t zero = 0;
    if (bpf_map_lookup_elem(map_fd(e->skel->maps.stats), &zero, e->percpu) == 0) {
        struct ina_bpf_stats cur, *prev = &e->prev;
        sum_percpu(e->percpu, sizeof(cur), e->ncpu, (__u64 *)&cur, sizeof(cur) / 8);
        sw->c.rx_packets += cur.rx_packets - prev->rx_packets;
        sw->c.rx_bytes += cur.rx_bytes - prev->rx_bytes;
        sw->c.tx_packets += cur.tx_packets - prev->tx_packets;
        sw->c.tx_bytes += cur.tx_bytes - prev->tx_bytes;
        sw->c.tx_errors += cur.tx_errors - prev->tx_errors;
        sw->c.contributions += cur.contributions - prev->contributions;
        sw->c.completions += cur.completions - prev->completions;
        sw->c.results_resent += cur.results_resent - prev->results_resent;
        for (int d = 0; d < INA_DROP__COUNT; d++)
            sw->c.drops[d] += cur.drops[d] - prev->drops[d];
        *prev = cur;
    }
    for (int i = 0; i < INA_SW_MAX_JOBS; i++)
        if (sw->jobs[i].state == INA_JOB_ACTIVE)
            sync_job(e, &sw->jobs[i]);
}

/* The IPv4 header checksum of the 20 bytes at p. */
static uint16_t ip_checksum(const uint8_t *p)
{
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint16_t)~sum;
}

/*
 * DATA that reached the socket (a GSO train the kernel split, an IP
 * fragment): rebuild the frame it came in (no Ethernet source: the program
 * then keeps the rank's next hop it knows) and run the program on it,
 * which aggregates it as if it had seen it on the interface. What the
 * program sends by clone goes out by itself; what it redirects (the last
 * copy of a result, or a resent one) is in the output frame, and goes out
 * of the switch's socket. The program passes up what is the control
 * plane's: an evicted job's DATA (0: ina__switch_input goes on).
 */
static int hook_data(void *ctx, struct ina_switch *sw, const uint8_t *buf, size_t len,
                     const struct sockaddr_in *src)
{
    struct ina_ebpf *e = ctx;
    if (FRAME_HDR + len > TEST_RUN_MAX_FRAME) {
        e->fed_back_too_big++;
        sw->c.rx_packets++;
        sw->c.rx_bytes += len;
        sw->c.drops[INA_DROP_DATAPLANE]++;
        if (!e->warned_too_big++)
            ina__log(INA_LOG_WARN, "ebpf_datagram_not_seen", INA_KV_I("bytes", (long long)len),
                    INA_KV_S("reason",
                             "a DATA datagram reached the socket, not the program (a GSO train "
                             "or an IP fragment) and is too large to feed back: use a packet "
                             "size that fits the MTU, or workers with INA_NO_GSO=1 (docs/EBPF.md)"));
        return 1;
    }
    uint8_t *f = e->frame;
    memcpy(f, e->ifc.mac, 6);
    memset(f + 6, 0, 6);
    f[12] = 0x08;
    f[13] = 0x00;
    uint8_t *ip = f + 14;
    memset(ip, 0, 20);
    ip[0] = 0x45;
    ina__put16(ip + 2, (uint16_t)(20 + 8 + len));
    ip[8] = 64;
    ip[9] = IPPROTO_UDP;
    memcpy(ip + 12, &src->sin_addr.s_addr, 4);
    memcpy(ip + 16, &e->addr, 4);
    ina__put16(ip + 10, ip_checksum(ip));
    uint8_t *udp = ip + 20;
    memcpy(udp, &src->sin_port, 2);
    memcpy(udp + 2, &e->port, 2);
    ina__put16(udp + 4, (uint16_t)(8 + len));
    ina__put16(udp + 6, 0);
    memcpy(udp + 8, buf, len);
    uint32_t outlen = sizeof(e->out);
    int verdict = TC_ACT_SHOT; /* set by every run that succeeds */
    if (ina__ebpf_test_run(e, f, (uint32_t)(FRAME_HDR + len), e->out, &outlen, &verdict) != 0) {
        e->fed_back_failed++;
        sw->c.rx_packets++;
        sw->c.rx_bytes += len;
        sw->c.drops[INA_DROP_DATAPLANE]++;
        return 1;
    }
    e->fed_back++;
    if (verdict == TC_ACT_OK || verdict == TC_ACT_UNSPEC)
        return 0; /* the control plane's */
    if (verdict == TC_ACT_REDIRECT && outlen > FRAME_HDR) {
        const uint8_t *oip = e->out + 14, *oudp = oip + 20;
        struct sockaddr_in dst = {.sin_family = AF_INET};
        memcpy(&dst.sin_addr.s_addr, oip + 16, 4);
        memcpy(&dst.sin_port, oudp + 2, 2);
        size_t dlen = ina__get16(oudp + 4);
        if (dlen >= 8 && FRAME_HDR + dlen - 8 <= outlen &&
            sendto(e->sock_fd, oudp + 8, dlen - 8, 0, (struct sockaddr *)&dst, sizeof(dst)) < 0)
            sw->c.tx_errors++;
    }
    return 1;
}

static const struct ina_dp_ops ebpf_ops = {
    .name = "ebpf",
    .data = hook_data,
    .job_start = hook_job_start,
    .job_end = hook_job_end,
    .slot_seq = hook_slot_seq,
    .job_evict = hook_job_evict,
    .sync = hook_sync,
};

/* ---- Events ------------------------------------------------------------------------ */

static int on_event(void *ctx, void *data, size_t size)
{
    struct ina_ebpf *e = ctx;
    struct ina_switch *sw = e->sw;
    if (!sw || size < sizeof(struct ina_bpf_event))
        return 0;
    if (ina__switch_tx_full(sw))
        return -EAGAIN; /* the caller flushes and asks again; this event stays */
    const struct ina_bpf_event *ev = data;
    struct ina_job *job = ina__job_by_id(sw, (uint16_t)ev->job);
    if (ev->kind == INA_BPF_EV_MISMATCH && job && job->state == INA_JOB_ACTIVE &&
        job->session == ev->session) {
        hook_sync(e, sw); /* the job's counters, before its entry is cleared */
        ina__job_abort(sw, job, INA_ERR_MISMATCH);
    }
    return 0;
}

int ina__ebpf_poll(struct ina_ebpf *e)
{
    if (!e || !e->rb)
        return 0;
    int n = ring_buffer__consume(e->rb);
    return n == -EAGAIN ? 1 : n < 0 ? 0 : n;
}

int ina__ebpf_event_fd(const struct ina_ebpf *e) { return e && e->rb ? ring_buffer__epoll_fd(e->rb) : -1; }

/* ---- Open, attach, close -------------------------------------------------------------- */

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* The TC hook: TCX where the kernel has it (detached with the process),
 * else a clsact filter (detached by ina__ebpf_close; a switch killed with
 * SIGKILL leaves it: `tc filter del dev IF ingress` removes it). */
static int attach_tc(struct ina_ebpf *e, char *err, size_t errlen)
{
    int prog = bpf_program__fd(e->skel->progs.ina_tc_ingress);
    LIBBPF_OPTS(bpf_link_create_opts, lo);
    e->tcx_fd = bpf_link_create(prog, e->ifc.ifindex, (enum bpf_attach_type)BPF_TCX_INGRESS, &lo);
    if (e->tcx_fd >= 0)
        return 0;
    int tcx_err = errno;
    memset(&e->tc_hook, 0, sizeof(e->tc_hook));
    e->tc_hook.sz = sizeof(e->tc_hook);
    e->tc_hook.ifindex = e->ifc.ifindex;
    e->tc_hook.attach_point = BPF_TC_INGRESS;
    int rc = bpf_tc_hook_create(&e->tc_hook);
    if (rc != 0 && rc != -EEXIST)
        return fail(err, errlen, rc,
                    "cannot attach to %s: TCX: %s; clsact: %s", e->iface, strerror(tcx_err),
                    strerror(-rc));
    LIBBPF_OPTS(bpf_tc_opts, to, .prog_fd = prog, .handle = 0x1BEE, .priority = 1);
    rc = bpf_tc_attach(&e->tc_hook, &to);
    if (rc != 0)
        return fail(err, errlen, rc, "cannot attach to %s: TCX: %s; tc filter: %s", e->iface,
                    strerror(tcx_err), strerror(-rc));
    e->tc_legacy = 1;
    ina__log(INA_LOG_WARN, "ebpf_tc_filter", INA_KV_S("iface", e->iface),
            INA_KV_S("reason", "no TCX in this kernel (Linux < 6.6): attached as a clsact "
                               "filter, which outlives a switch killed with SIGKILL"));
    return 0;
}

int ina__ebpf_open(struct ina_ebpf **out, const struct ina_ebpf_opts *o, char *err, size_t errlen)
{
    *out = NULL;
    struct ina_ebpf *e = calloc(1, sizeof(*e));
    if (!e)
        return fail(err, errlen, -ENOMEM, "out of memory");
    e->tcx_fd = -1;
    e->lo_gso_was = -1;
    e->sock_fd = o->sock_fd;
    e->nslots = o->nslots;
    e->port = o->addr.sin_port;
    int rc;
    if (o->iface) {
        snprintf(e->iface, sizeof(e->iface), "%s", o->iface);
        rc = ina__iface_info(o->iface, &e->ifc);
        if (rc != 0) {
            free(e);
            return fail(err, errlen, rc, "no network interface '%s'", o->iface);
        }
        if (e->ifc.loopback && o->multicast) {
            free(e);
            return fail(err, errlen, -EINVAL,
                        "--multicast on the loopback interface '%s': the kernel drops multicast "
                        "from a loopback address on input (use a veth or a NIC, or --dataplane "
                        "userspace)", o->iface);
        }
    } else {
        e->ifc.ifindex = o->ifindex;
        e->ifc.loopback = 1;
    }
    e->addr = o->addr.sin_addr.s_addr ? o->addr.sin_addr.s_addr : e->ifc.addr;
    e->ncpu = libbpf_num_possible_cpus();
    size_t stride = (sizeof(struct ina_bpf_job_stats) + 7) & ~(size_t)7;
    e->percpu = calloc((size_t)(e->ncpu > 0 ? e->ncpu : 1), stride);
    e->prev_job = calloc(INA_BPF_MAX_JOBS, sizeof(*e->prev_job));
    e->set_buf = calloc((size_t)o->nslots * 2, sizeof(*e->set_buf));
    e->key_buf = calloc((size_t)o->nslots * 2, sizeof(*e->key_buf));
    if (e->ncpu <= 0 || !e->percpu || !e->prev_job || !e->set_buf || !e->key_buf) {
        ina__ebpf_close(e);
        return fail(err, errlen, -ENOMEM, "out of memory");
    }

    libbpf_tail[0] = '\0';
    libbpf_set_print(on_libbpf_print);
    e->skel = ina_dp__open();
    if (!e->skel) {
        rc = -errno;
        ina__ebpf_close(e);
        return fail(err, errlen, rc, "cannot open the eBPF object: %s", strerror(-rc));
    }
    bpf_map__set_max_entries(e->skel->maps.sets, o->nslots * 2);
    bpf_map__set_max_entries(e->skel->maps.values, o->nslots * 2);
    rc = ina_dp__load(e->skel);
    if (rc != 0) {
        ina__ebpf_close(e);
        if (rc == -EPERM)
            return fail(err, errlen, rc,
                        "cannot load the eBPF program: not permitted: it needs root (or the "
                        "CAP_BPF and CAP_NET_ADMIN capabilities)");
        return fail(err, errlen, rc, "cannot load the eBPF program (%s): %s", strerror(-rc),
                    verifier_verdict());
    }
    struct ina_bpf_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.ifindex = (uint32_t)e->ifc.ifindex;
    cfg.addr = o->addr.sin_addr.s_addr;
    cfg.port = o->addr.sin_port;
    memcpy(cfg.mac, e->ifc.mac, 6);
    cfg.nslots = o->nslots;
    cfg.max_op = INA_OP_ADD_BFP;
    uint32_t zero = 0;
    uint64_t nobound = INA_BPF_NO_BOUND;
    for (uint32_t j = 0; j < INA_BPF_MAX_JOBS; j++)
        bpf_map_update_elem(map_fd(e->skel->maps.evict), &j, &nobound, BPF_ANY);
    if (bpf_map_update_elem(map_fd(e->skel->maps.config), &zero, &cfg, BPF_ANY) != 0) {
        rc = -errno;
        ina__ebpf_close(e);
        return fail(err, errlen, rc, "cannot configure the eBPF program: %s", strerror(-rc));
    }
    e->rb = ring_buffer__new(map_fd(e->skel->maps.events), on_event, e, NULL);
    if (!e->rb) {
        rc = -errno;
        ina__ebpf_close(e);
        return fail(err, errlen, rc, "cannot open the eBPF event ring: %s", strerror(-rc));
    }
    if (!o->iface) {
        *out = e;
        return 0;
    }
    if (e->ifc.loopback && o->lo_gso_off) {
        int was = 0;
        if (ina__iface_udp_gso(e->iface, 0, &was) == 0 && was) {
            e->lo_gso_was = was;
            ina__log(INA_LOG_WARN, "ebpf_lo_gso_off", INA_KV_S("iface", e->iface),
                    INA_KV_S("reason", "UDP segmentation offload off while the switch runs, so "
                                       "that GSO trains reach the program as datagrams"));
        }
    }
    rc = attach_tc(e, err, errlen);
    if (rc != 0) {
        ina__ebpf_close(e);
        return rc;
    }
    /* On a veth, a pass-through XDP program makes the peer split GSO
     * trains before they cross (the kernel's veth_fix_features). */
    if (strcmp(e->ifc.driver, "veth") == 0) {
        e->xdp = bpf_program__attach_xdp(e->skel->progs.ina_xdp_pass, e->ifc.ifindex);
        if (!e->xdp)
            ina__log(INA_LOG_WARN, "ebpf_xdp_failed", INA_KV_S("iface", e->iface),
                    INA_KV_S("reason", "GSO trains from the peer reach the socket and are fed "
                                       "back datagram by datagram"));
    }
    *out = e;
    return 0;
}

void ina__ebpf_bind(struct ina_ebpf *e, struct ina_switch *sw)
{
    /* A switch with no jobs yet: the program forgets any it served (a
     * test binds one program to switch after switch), and counting starts
     * from what the program has counted so far. */
    struct ina_bpf_job free_job;
    memset(&free_job, 0, sizeof(free_job));
    for (uint32_t j = 0; j < INA_BPF_MAX_JOBS; j++)
        bpf_map_update_elem(map_fd(e->skel->maps.jobs), &j, &free_job, BPF_ANY);
    uint32_t zero = 0;
    if (bpf_map_lookup_elem(map_fd(e->skel->maps.stats), &zero, e->percpu) == 0)
        sum_percpu(e->percpu, sizeof(e->prev), e->ncpu, (__u64 *)&e->prev, sizeof(e->prev) / 8);
    e->sw = sw;
    sw->dp = &ebpf_ops;
    sw->dp_ctx = e;
}

void ina__ebpf_report(const struct ina_ebpf *e, FILE *f)
{
    if (!e)
        return;
    uint32_t zero = 0;
    uint64_t passed_up = 0;
    if (e->skel && bpf_map_lookup_elem(map_fd(e->skel->maps.stats), &zero, e->percpu) == 0) {
        struct ina_bpf_stats cur;
        sum_percpu(e->percpu, sizeof(cur), e->ncpu, (__u64 *)&cur, sizeof(cur) / 8);
        passed_up = cur.passed_up;
    }
    fprintf(f, "  ebpf_passed_up  %llu\n", (unsigned long long)passed_up);
    fprintf(f, "  ebpf_fed_back   %llu\n", (unsigned long long)e->fed_back);
    fprintf(f, "  ebpf_too_big    %llu\n", (unsigned long long)e->fed_back_too_big);
    /* The kernel's own accounting of the program (0 unless
     * kernel.bpf_stats_enabled=1): its CPU time, which no process is
     * charged with (bench/ebpf.sh divides it by the contributions). */
    struct bpf_prog_info info;
    uint32_t len = sizeof(info);
    memset(&info, 0, sizeof(info));
    if (e->skel && bpf_obj_get_info_by_fd(bpf_program__fd(e->skel->progs.ina_tc_ingress), &info,
                                          &len) != 0)
        memset(&info, 0, sizeof(info));
    fprintf(f, "  ebpf_prog_runs  %llu\n", (unsigned long long)info.run_cnt);
    fprintf(f, "  ebpf_prog_ns    %llu\n", (unsigned long long)info.run_time_ns);
}

void ina__ebpf_close(struct ina_ebpf *e)
{
    if (!e)
        return;
    if (e->xdp)
        bpf_link__destroy(e->xdp);
    if (e->tcx_fd >= 0)
        close(e->tcx_fd);
    if (e->tc_legacy) {
        LIBBPF_OPTS(bpf_tc_opts, to, .handle = 0x1BEE, .priority = 1);
        bpf_tc_detach(&e->tc_hook, &to);
    }
    if (e->lo_gso_was >= 0) {
        int was;
        ina__iface_udp_gso(e->iface, e->lo_gso_was, &was);
    }
    ring_buffer__free(e->rb);
    ina_dp__destroy(e->skel);
    free(e->percpu);
    free(e->prev_job);
    free(e->set_buf);
    free(e->key_buf);
    free(e);
}

int ina__ebpf_built(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return 1;
}

uint32_t ina__ebpf_mtu_elems(const struct ina_ebpf *e)
{
    if (!e || e->ifc.mtu <= 20 + 8 + INA_HDR_LEN)
        return 0;
    return (uint32_t)(e->ifc.mtu - 20 - 8 - INA_HDR_LEN) / 4; /* IPv4, UDP, ina header */
}

int ina__ebpf_test_run(struct ina_ebpf *e, const void *frame, uint32_t len, void *out,
                      uint32_t *outlen, int *retval)
{
    struct __sk_buff ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.ifindex = (uint32_t)e->ifc.ifindex;
    LIBBPF_OPTS(bpf_test_run_opts, t, .data_in = frame, .data_size_in = len, .data_out = out,
                .data_size_out = *outlen, .ctx_in = &ctx, .ctx_size_in = sizeof(ctx),
                .repeat = 1);
    if (bpf_prog_test_run_opts(bpf_program__fd(e->skel->progs.ina_tc_ingress), &t) != 0)
        return -errno;
    *outlen = t.data_size_out;
    *retval = (int)t.retval;
    return 0;
}
