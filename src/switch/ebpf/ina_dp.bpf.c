/* ina_dp.bpf.c: the switch's slot rules (docs/PROTOCOL.md §6) as a TC ingress program; an XDP pass-through. */

/*
 * Compiled with clang -target bpf (CMakeLists.txt), embedded in ina-switch
 * as a libbpf skeleton, loaded and fed by ebpf_dp.c. One program per switch
 * process, on the one interface its workers reach it by (ina-switch
 * --dataplane ebpf --iface IF).
 *
 * What it takes: IPv4/UDP datagrams to the switch's address and port whose
 * ina header says DATA (length >= 32, magic, version 1, kind 1). Everything
 * else on the interface goes on unchanged (TC_ACT_UNSPEC: the next program,
 * then the stack), and the switch's other datagrams (JOIN, LEAVE, ...) reach
 * its socket, where the control plane answers them. A DATA datagram it
 * cannot see whole goes to the socket too (TC_ACT_OK, counted passed_up):
 * a GSO train (veth and lo carry them unsplit), an IP fragment; the switch
 * then feeds each datagram back to this same program with
 * BPF_PROG_TEST_RUN (ebpf_dp.c), so the slots have a single owner.
 *
 * The rules are dataplane.c's, check for check and counter for counter
 * (tests/ebpf/test_ebpf_diff.c replays traces through both and compares
 * every output datagram and counter): checks 6..16 of §6.1, then the slot
 * rule of §6.2 under the slot set's spin lock, with ops 0, 1, 2 and 3 (the
 * block floating point shifts; not op 4, float adds: no floating point
 * here). A round's result is written into the completing packet, which is
 * then cloned to every rank (bpf_clone_redirect) with each rank's addresses,
 * the last copy redirected rather than cloned (or, with --multicast, sent
 * once to the job's group); a duplicate of a complete
 * round is rewritten into that round's result and redirected to its
 * sender. A MISMATCH marks the job ABORTING and tells the control plane
 * (events ring), which sends the ABORT and frees the job.
 *
 * Verifier notes: every loop has a constant bound (INA_BPF_MAX_ELEMS,
 * INA_BPF_MAX_RANKS) besides its real one, and no helper is called while a
 * set's lock is held (the per-CPU scratch for a resent result is looked up
 * before it). Packet pointers are re-derived after every helper that may
 * move the data (pull, clone, change_tail).
 */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "switch/ebpf/ina_bpf.h"
#include "switch/ebpf/pair_add.bpf.h"

/* The wire constants this program uses (common/wire.h; ebpf_dp.c checks
 * that they agree). */
#define W_HDR 32
#define W_KIND_DATA 1
#define W_KIND_RESULT 2
#define W_RANK_SWITCH 0xFFFF
#define W_OP_ADD 0
#define W_OP_MAX 1
#define W_OP_MIN 2
#define W_OP_BFP 3
#define W_EXP_ZERO (-32768)
#define W_EXP_NONFINITE 32767

#define OFF_IP 14
#define OFF_UDP (OFF_IP + 20)
#define OFF_INA (OFF_UDP + 8)

char LICENSE[] SEC("license") = "GPL";

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ina_bpf_config);
} config SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, INA_BPF_MAX_JOBS);
    __type(key, __u32);
    __type(value, struct ina_bpf_job);
} jobs SEC(".maps");

/* evict[id - 1]: first stream position no longer served (INA_BPF_NO_BOUND:
 * not evicted); read under the slot set's lock. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, INA_BPF_MAX_JOBS);
    __type(key, __u32);
    __type(value, __u64);
} evict SEC(".maps");

/* max_entries: nslots * 2, set by the loader before loading. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, struct ina_bpf_set);
} sets SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, struct ina_bpf_values);
} values SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ina_bpf_stats);
} stats SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, INA_BPF_MAX_JOBS);
    __type(key, __u32);
    __type(value, struct ina_bpf_job_stats);
} job_stats SEC(".maps");

/*
 * Per-CPU working memory. The payload is copied in (bpf_skb_load_bytes)
 * before a set is locked, combined there and into the set under the lock,
 * and copied out (bpf_skb_store_bytes) after: the loops under the lock then
 * touch map memory only, with no packet bounds to check per element, and
 * a resent result of another size can be copied out before the packet is
 * resized (a helper, which needs the lock released).
 */
struct ina_bpf_scratch {
    __u32 buf[INA_BPF_MAX_ELEMS]; /* big-endian, as on the wire */
    __u64 opaque[16];             /* see opaque() */
};
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ina_bpf_scratch);
} scratch SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 4096);
} events SEC(".maps");

/* ---- Small pieces ----------------------------------------------------------- */

static __always_inline __u16 get16(const __u8 *p) { return (__u16)(p[0] << 8 | p[1]); }
static __always_inline __u32 get32(const __u8 *p)
{
    return (__u32)p[0] << 24 | (__u32)p[1] << 16 | (__u32)p[2] << 8 | p[3];
}
static __always_inline void put16(__u8 *p, __u16 v)
{
    p[0] = (__u8)(v >> 8);
    p[1] = (__u8)v;
}

/*
 * x / 2^s rounded to nearest, ties up, 0 when s > 32 (dataplane.c:
 * shift_round), and x itself when s = 0, as ((x + r) >> s) & mask with
 * r = 2^(s-1) (0 when s = 0), mask = 0 when s > 32: no branch per element.
 */
struct shift {
    __s64 s, r, mask;
};

static __always_inline struct shift shift_of(__u32 s, int keep)
{
    struct shift sh = {0, 0, keep ? -1 : 0};
    if (s > 32)
        sh.mask = 0;
    else if (s > 0) {
        sh.s = s;
        sh.r = 1ll << (s - 1);
    }
    return sh;
}

static __always_inline __u16 ip_csum(const struct iphdr *ip)
{
    const __u16 *w = (const __u16 *)ip;
    __u32 sum = 0;
#pragma clang loop unroll(full)
    for (int i = 0; i < 10; i++)
        sum += w[i];
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    return (__u16)~sum;
}

/*
 * Address the packet (a RESULT by now) to member m (or a job's group):
 * Ethernet from the interface to m's next hop, IPv4 from the switch's
 * address with that TTL, UDP from the switch's port. The UDP checksum is 0
 * (none, legal for IPv4): the payload changed, and a sum over it would cost
 * more than the rest of the path.
 */
static __always_inline int address_to(struct __sk_buff *skb, const struct ina_bpf_config *cfg,
                                       __u32 saddr, const struct ina_bpf_member *m, __u8 ttl)
{
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    if (data + OFF_INA > end)
        return -1;
    struct ethhdr *eth = data;
    struct iphdr *ip = data + OFF_IP;
    struct udphdr *udp = data + OFF_UDP;
    __builtin_memcpy(eth->h_dest, m->mac, ETH_ALEN);
    __builtin_memcpy(eth->h_source, cfg->mac, ETH_ALEN);
    ip->saddr = saddr;
    ip->daddr = m->addr;
    ip->ttl = ttl;
    ip->check = 0;
    ip->check = ip_csum(ip);
    udp->source = cfg->port;
    udp->dest = m->port;
    udp->check = 0;
    return 0;
}

/* What one DATA datagram comes to, for the counters. */
struct verdict {
    struct ina_bpf_stats *st;
    struct ina_bpf_job_stats *js;
    __u32 len;
    __u32 rank;
};

static __always_inline int drop_global(struct ina_bpf_stats *st, __u32 len, int why)
{
    st->rx_packets++;
    st->rx_bytes += len;
    if (why >= 0 && why < INA_DROP__COUNT)
        st->drops[why]++;
    return TC_ACT_SHOT;
}

/* A datagram of a known job: counted for the job too. */
static __always_inline void rx_job(const struct verdict *v)
{
    v->st->rx_packets++;
    v->st->rx_bytes += v->len;
    v->js->rx_packets++;
    v->js->rx_bytes += v->len;
}

static __always_inline int drop_job(const struct verdict *v, int why)
{
    rx_job(v);
    if (why >= 0 && why < INA_DROP__COUNT) {
        v->st->drops[why]++;
        v->js->drops[why]++;
    }
    return TC_ACT_SHOT;
}

/* A datagram from a rank's registered address: counted for the rank too. */
static __always_inline void rx_member(const struct verdict *v)
{
    rx_job(v);
    __u32 r = v->rank;
    if (r < INA_BPF_MAX_RANKS) {
        v->js->member_rx[r][0]++;
        v->js->member_rx[r][1] += v->len;
    }
}

static __always_inline int drop_member(const struct verdict *v, int why)
{
    rx_member(v);
    if (why >= 0 && why < INA_DROP__COUNT) {
        v->st->drops[why]++;
        v->js->drops[why]++;
    }
    return TC_ACT_SHOT;
}

/* ---- The slot rule's outcomes ----------------------------------------------- */

enum outcome {
    O_CONTRIBUTED, /* new round or combine: counted; maybe complete */
    O_NOT_READY,
    O_DUP_PENDING,
    O_DUP_COMPLETE, /* resend the round's result to this rank */
    O_MISMATCH,
    O_STALE,
    O_FUTURE,
    O_EVICTED, /* past an evicted job's bound: the control plane's */
};

/*
 * A value the verifier cannot see through: written to and read back from
 * per-CPU memory. Loops are verified iteration by iteration, and each way
 * out of one (at every count) continues with its own copy of the state; a
 * loop bound or shift read back this way carries no per-case constants and
 * no ranges refined by the loop, so those copies are all alike and the
 * verifier walks what follows once. Without it the program exceeds the
 * verifier's budget of 1M instructions.
 */
enum { OQ_PLEN, OQ_N, OQ_VS, OQ_VR, OQ_VM, OQ_PS, OQ_PR, OQ_PM, OQ_EXP };

static __always_inline void opaque_put(struct ina_bpf_scratch *scr, int slot, __u64 x)
{
    volatile __u64 *o = &scr->opaque[slot & 15];
    *o = x;
}

static __always_inline __u64 opaque_get(struct ina_bpf_scratch *scr, int slot)
{
    volatile __u64 *o = &scr->opaque[slot & 15];
    return *o;
}

static __always_inline __u64 opaque(struct ina_bpf_scratch *scr, int slot, __u64 x)
{
    opaque_put(scr, slot, x);
    return opaque_get(scr, slot);
}

/* max/min of two int32 without a branch (BPF has no conditional move, and
 * a branch per element doubles what the verifier walks). */
static __always_inline __s32 max32(__s32 a, __s32 b)
{
    __s64 d = (__s64)b - (__s64)a;
    asm volatile("" : "+r"(d)); /* or clang turns it back into a branch */
    return (__s32)(a + (d & ~(d >> 63)));
}
static __always_inline __s32 min32(__s32 a, __s32 b)
{
    __s64 d = (__s64)b - (__s64)a;
    asm volatile("" : "+r"(d));
    return (__s32)(a + (d & (d >> 63)));
}

/*
 * How a contribution with exponent e combines into a round whose exponent
 * is se, left in scr for combine() (opaque: every case reaches the one call
 * of combine() with the same state). Op 3 (dataplane.c: combine_bfp): the
 * side with the smaller exponent is shifted right by the difference, a
 * zero block adds nothing, a non-finite block replaces a finite sum, and
 * finite blocks add nothing to a non-finite one. Ops 0..2: the exponent is
 * the maximum (the next block's, one round ahead), nothing is shifted.
 */
static __always_inline void plan_combine(struct ina_bpf_scratch *scr, __u8 op, __s16 e, __s16 se)
{
    __u32 dv = 0, dp = 0;
    int keep_v = 1, keep_p = 1;
    __s16 exp = e > se ? e : se;
    if (op == W_OP_BFP) {
        exp = se;
        if (e == W_EXP_NONFINITE || se == W_EXP_NONFINITE) {
            if (se != W_EXP_NONFINITE) {
                keep_v = 0; /* the finite sum so far has no class codes */
                exp = W_EXP_NONFINITE;
            } else if (e != W_EXP_NONFINITE) {
                keep_p = 0; /* finite blocks add no class codes */
            }
        } else if (e == W_EXP_ZERO) {
            keep_p = 0;
        } else if (se == W_EXP_ZERO) {
            keep_v = 0;
            exp = e;
        } else {
            __s32 diff = (__s32)e - (__s32)se;
            if (diff > 0) {
                dv = (__u32)diff;
                exp = e;
            } else {
                dp = (__u32)(-diff);
            }
        }
    }
    struct shift sv = shift_of(dv, keep_v), sp = shift_of(dp, keep_p);
    opaque_put(scr, OQ_VS, (__u64)sv.s);
    opaque_put(scr, OQ_VR, (__u64)sv.r);
    opaque_put(scr, OQ_VM, (__u64)sv.mask);
    opaque_put(scr, OQ_PS, (__u64)sp.s);
    opaque_put(scr, OQ_PR, (__u64)sp.r);
    opaque_put(scr, OQ_PM, (__u64)sp.mask);
    opaque_put(scr, OQ_EXP, (__u64)(__s64)exp);
}

/*
 * The set's values hold element j at v[j ^ 1] (ina_bpf.h): each 64-bit word
 * is the byte swap of the element pair's 8 wire bytes, so one load, one
 * swap and one store move two elements between the wire and the set.
 */
/* A contribution of n elements (scr->buf, big-endian) becomes the set's
 * values: a new round overwrites, so there is no clearing pass. */
static __always_inline void take_values(__s32 *v, struct ina_bpf_scratch *scr, __u32 n)
{
    __u64 *v2 = (__u64 *)v, *b2 = (__u64 *)scr->buf;
    __u32 np = (n + 1) / 2; /* an odd n moves one element past it: never read */
#pragma clang loop unroll(disable)
    for (__u32 i = 0; i < INA_BPF_MAX_ELEMS / 2 && i < np; i++)
        v2[i] = __builtin_bswap64(b2[i]);
}

/* The set's n values into scr->buf, big-endian: a round's result. */
static __always_inline void give_values(const __s32 *v, struct ina_bpf_scratch *scr, __u32 n)
{
    const __u64 *v2 = (const __u64 *)v;
    __u64 *b2 = (__u64 *)scr->buf;
    __u32 np = (n + 1) / 2;
#pragma clang loop unroll(disable)
    for (__u32 i = 0; i < INA_BPF_MAX_ELEMS / 2 && i < np; i++)
        b2[i] = __builtin_bswap64(v2[i]);
}

/*
 * Combine one contribution (scr->buf, n elements, big-endian) into the
 * set's values by the round's op, leaving the new values in scr->buf too
 * (the result's payload, if the round completes). Integer add, the bulk of
 * the work, goes two elements at a time (add_pairs). Block floating point
 * (op 3) takes the shifts plan_combine() left: v' = round(v / 2^dv) +
 * round(p / 2^dp), each term masked.
 */
static __always_inline void combine(__s32 *v, struct ina_bpf_scratch *scr, __u32 n, __u8 op)
{
    __u32 *b = scr->buf;
    if (op == W_OP_ADD) {
        __u64 *v2 = (__u64 *)v, *b2 = (__u64 *)scr->buf;
        __u32 np = (n + 1) / 2;
#pragma clang loop unroll(disable)
        for (__u32 i = 0; i < INA_BPF_MAX_ELEMS / 2 && i < np; i++) {
            __u64 x = add_pairs(v2[i], __builtin_bswap64(b2[i]));
            v2[i] = x;
            b2[i] = __builtin_bswap64(x);
        }
    } else if (op == W_OP_MAX) {
#pragma clang loop unroll(disable)
        for (__u32 i = 0; i < INA_BPF_MAX_ELEMS && i < n; i++) {
            __s32 x = max32(v[i ^ 1], (__s32)bpf_ntohl(b[i]));
            v[i ^ 1] = x;
            b[i] = bpf_htonl((__u32)x);
        }
    } else if (op == W_OP_MIN) {
#pragma clang loop unroll(disable)
        for (__u32 i = 0; i < INA_BPF_MAX_ELEMS && i < n; i++) {
            __s32 x = min32(v[i ^ 1], (__s32)bpf_ntohl(b[i]));
            v[i ^ 1] = x;
            b[i] = bpf_htonl((__u32)x);
        }
    } else {
        __s64 vs = (__s64)opaque_get(scr, OQ_VS) & 63, vr = (__s64)opaque_get(scr, OQ_VR),
              vm = (__s64)opaque_get(scr, OQ_VM);
        __s64 ps = (__s64)opaque_get(scr, OQ_PS) & 63, pr = (__s64)opaque_get(scr, OQ_PR),
              pm = (__s64)opaque_get(scr, OQ_PM);
#pragma clang loop unroll(disable)
        for (__u32 i = 0; i < INA_BPF_MAX_ELEMS && i < n; i++) {
            __s64 a = (((__s64)v[i ^ 1] + vr) >> vs) & vm;
            __s64 c = (((__s64)(__s32)bpf_ntohl(b[i]) + pr) >> ps) & pm;
            __s32 x = (__s32)((__u32)a + (__u32)c);
            v[i ^ 1] = x;
            b[i] = bpf_htonl((__u32)x);
        }
    }
}

/* ---- What goes out ---------------------------------------------------------- */

/* A round's RESULT header fields beyond those the DATA already carries
 * (job, session, token, slot, seq: equal, since d = 0 or a new round). */
struct round {
    __u16 count;
    __s16 exp;
    __u8 op, tag;
};

/* Make the packet the RESULT of round rd: the payload (plen bytes) from
 * scr->buf, kind, rank, count, exp, flags 0, op, tag. @return 0, or -1. */
static __always_inline int make_result(struct __sk_buff *skb, struct ina_bpf_scratch *scr,
                                       __u64 plen, const struct round *rd)
{
    if (plen > sizeof(scr->buf))
        return -1;
    if (plen > 0 && bpf_skb_store_bytes(skb, OFF_INA + W_HDR, scr->buf, plen, 0) != 0)
        return -1;
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    if (data + OFF_INA + W_HDR > end)
        return -1;
    __u8 *h = data + OFF_INA;
    h[3] = W_KIND_RESULT;
    put16(h + 6, W_RANK_SWITCH);
    put16(h + 24, rd->count);
    put16(h + 26, (__u16)rd->exp);
    put16(h + 28, 0);
    h[30] = rd->op;
    h[31] = rd->tag;
    return 0;
}

/*
 * The completing packet becomes the round's RESULT and goes to every rank,
 * in rank order: a clone per rank, the last one the packet itself
 * (redirected). bpf_clone_redirect() leaves the packet's head private
 * again (it copies it: the clone keeps the shared one), so the packet can
 * be readdressed in place for the next rank. A job with a multicast group
 * (--multicast) sends it once, to the group, TTL 1 (PROTOCOL.md §4.1): the
 * network, or the ranks' host, makes the copies, and no clone is made here.
 */
static __always_inline int send_result(struct __sk_buff *skb, const struct ina_bpf_config *cfg,
                                       struct ina_bpf_stats *st, struct ina_bpf_job *job,
                                       struct ina_bpf_scratch *scr, __u64 plen,
                                       const struct round *rd, __u32 world, __u32 saddr)
{
    if (make_result(skb, scr, plen, rd) != 0) {
        st->tx_errors++;
        return TC_ACT_SHOT;
    }
    __u64 len = W_HDR + plen;
    if (job->group.addr) {
        if (address_to(skb, cfg, saddr, &job->group, 1) != 0) {
            st->tx_errors++;
            return TC_ACT_SHOT;
        }
        st->tx_packets++;
        st->tx_bytes += len;
        return bpf_redirect(cfg->ifindex, 0);
    }
#pragma clang loop unroll(disable)
    for (__u32 r = 0; r < INA_BPF_MAX_RANKS && r < world; r++) {
        if (address_to(skb, cfg, saddr, &job->members[r], 64) != 0) {
            st->tx_errors++;
            return TC_ACT_SHOT;
        }
        if (r + 1 == world) {
            st->tx_packets++;
            st->tx_bytes += len;
            return bpf_redirect(cfg->ifindex, 0);
        }
        /* Counted without a branch: one path per rank for the verifier. */
        __u64 fail = (__u64)(__s64)bpf_clone_redirect(skb, cfg->ifindex, 0) >> 63;
        st->tx_errors += fail;
        st->tx_packets += 1 - fail;
        st->tx_bytes += len & (fail - 1);
    }
    return TC_ACT_SHOT;
}

/*
 * A duplicate of a complete round: the packet becomes that round's RESULT
 * and goes back to its sender, member m. A duplicate with another count
 * (len bytes) gets the round's count: the packet is resized first.
 */
static __always_inline int resend_result(struct __sk_buff *skb, const struct ina_bpf_config *cfg,
                                         struct ina_bpf_stats *st,
                                         const struct ina_bpf_member *m,
                                         struct ina_bpf_scratch *scr, __u32 len,
                                         const struct round *rd, __u32 saddr)
{
    __u32 rlen = W_HDR + 4 * (__u32)rd->count;
    if (rlen != len) {
        if (bpf_skb_change_tail(skb, OFF_INA + rlen, 0) != 0) {
            st->tx_errors++;
            return TC_ACT_SHOT;
        }
        void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
        if (data + OFF_INA > end)
            return TC_ACT_SHOT;
        struct iphdr *ip = data + OFF_IP;
        struct udphdr *udp = data + OFF_UDP;
        ip->tot_len = bpf_htons((__u16)(20 + 8 + rlen));
        udp->len = bpf_htons((__u16)(8 + rlen));
    }
    if (make_result(skb, scr, opaque(scr, OQ_PLEN, 4 * (__u64)rd->count), rd) != 0 ||
        address_to(skb, cfg, saddr, m, 64) != 0) {
        st->tx_errors++;
        return TC_ACT_SHOT;
    }
    st->tx_packets++;
    st->tx_bytes += rlen;
    return bpf_redirect(cfg->ifindex, 0);
}

/* ---- DATA ------------------------------------------------------------------- */

/*
 * One DATA datagram of len bytes at OFF_INA, its header linear. Checks
 * 6..16 of §6.1 and the slot rule (input.c: ina__switch_input,
 * ina__dp_data).
 */
static __always_inline int on_data(struct __sk_buff *skb, const struct ina_bpf_config *cfg,
                                   struct ina_bpf_stats *st, __u32 len)
{
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    if (data + OFF_INA + W_HDR > end)
        return TC_ACT_SHOT; /* cannot be: the caller pulled it */
    struct ethhdr *eth = data;
    struct iphdr *ip = data + OFF_IP;
    struct udphdr *udp = data + OFF_UDP;
    __u8 *h = data + OFF_INA;

    __u32 count = get16(h + 24);
    if (len != W_HDR + 4 * count)
        return drop_global(st, len, INA_DROP_LENGTH);
    __u32 id = get16(h + 4);
    if (id == 0 || id > INA_BPF_MAX_JOBS)
        return drop_global(st, len, INA_DROP_NO_JOB);
    __u32 ji = id - 1;
    struct ina_bpf_job *job = bpf_map_lookup_elem(&jobs, &ji);
    struct ina_bpf_job_stats *js = bpf_map_lookup_elem(&job_stats, &ji);
    if (!job || !js || job->state != INA_BPF_JOB_ACTIVE)
        return drop_global(st, len, INA_DROP_NO_JOB);
    struct verdict v = {.st = st, .js = js, .len = len, .rank = INA_BPF_MAX_RANKS};
    if (get32(h + 8) != job->session)
        return drop_job(&v, INA_DROP_SESSION);
    if (get32(h + 12) != job->token)
        return drop_job(&v, INA_DROP_TOKEN);
    __u32 rank = get16(h + 6);
    if (rank >= job->world || rank >= INA_BPF_MAX_RANKS)
        return drop_job(&v, INA_DROP_RANK);
    struct ina_bpf_member *m = &job->members[rank];
    if (ip->saddr != m->addr || udp->source != m->port)
        return drop_job(&v, INA_DROP_SOURCE);
    v.rank = rank;
    /* The idle timer (§5.4), and the rank's next hop for its results: the
     * frame's source, unless the frame was built by the switch itself
     * (fed back through BPF_PROG_TEST_RUN: no Ethernet source). */
    /* The coarse clock: CLOCK_MONOTONIC at tick resolution (a few ms, nothing
     * to an idle timeout of seconds), read from memory rather than from the
     * clock source, which costs tens of ns a packet in a VM. */
    js->last_rx_ns = bpf_ktime_get_coarse_ns();
    const __u8 *src = eth->h_source;
    if ((src[0] | src[1] | src[2] | src[3] | src[4] | src[5]) &&
        ((m->mac[0] ^ src[0]) | (m->mac[1] ^ src[1]) | (m->mac[2] ^ src[2]) |
         (m->mac[3] ^ src[3]) | (m->mac[4] ^ src[4]) | (m->mac[5] ^ src[5])))
        __builtin_memcpy(m->mac, src, ETH_ALEN);

    __u32 slot = get32(h + 16), rel = slot & 0x7FFFFFFFu, set = slot >> 31;
    if (rel >= job->window)
        return drop_member(&v, INA_DROP_SLOT);
    if (count > job->elems || count > INA_BPF_MAX_ELEMS)
        return drop_member(&v, INA_DROP_COUNT);
    __u8 op = h[30], tag = h[31];
    if (op > cfg->max_op || op > W_OP_BFP)
        return drop_member(&v, INA_DROP_OP);
    __u32 seq = get32(h + 20);
    if (set != (seq & 1))
        return drop_member(&v, INA_DROP_SET);
    __s16 e = (__s16)get16(h + 26);
    __u32 world = job->world;
    __u32 window = job->window;
    __u32 key = (job->slot_base + rel) * 2 + set;
    __u32 saddr = ip->daddr; /* the switch's address, source of what goes out */
    struct ina_bpf_set *ss = bpf_map_lookup_elem(&sets, &key);
    struct ina_bpf_values *vals = bpf_map_lookup_elem(&values, &key);
    __u64 *bound = bpf_map_lookup_elem(&evict, &ji);
    __u32 zero = 0;
    struct ina_bpf_scratch *scr = bpf_map_lookup_elem(&scratch, &zero);
    if (!ss || !vals || !bound || !scr)
        return drop_member(&v, INA_DROP_SLOT); /* a job past the maps: the loader prevents it */
    __u64 plen = opaque(scr, OQ_PLEN, 4 * (__u64)count);
    if (plen > sizeof(scr->buf))
        return drop_member(&v, INA_DROP_COUNT);
    if (plen > 0 && bpf_skb_load_bytes(skb, OFF_INA + W_HDR, scr->buf, plen) != 0)
        return drop_global(st, len, INA_DROP_LENGTH); /* cannot be: the length was checked */
    plen = opaque_get(scr, OQ_PLEN); /* again: forget what "plen > 0" told the verifier */
    __u32 n = (__u32)opaque(scr, OQ_N, count); /* loop bound (see opaque) */
    __u64 pos = (__u64)seq * window + rel;
    __u64 bit = 1ull << (rank & 63);
    __u32 word = (rank >> 6) & 3;

    enum outcome o;
    int complete = 0;
    struct round rd = {.count = (__u16)count, .op = op, .tag = tag};
    int combine_now = 0;
    bpf_spin_lock(&ss->lock);
    __s32 d = (__s32)(seq - ss->seq);
    if (*bound != INA_BPF_NO_BOUND && pos >= *bound) {
        o = O_EVICTED;
    } else if (d == 2) {
        if (!ss->complete) {
            o = O_NOT_READY;
        } else {
            /* New round: overwrite, so no clearing pass and no identity value. */
            ss->seq = seq;
            ss->count = (__u16)count;
            ss->exp = e;
            ss->tag = tag;
            ss->op = op;
            ss->nrecv = 1;
            ss->complete = world == 1;
            ss->bitmap[0] = ss->bitmap[1] = ss->bitmap[2] = ss->bitmap[3] = 0;
            ss->bitmap[word] = bit;
            take_values(vals->v, scr, n);
            o = O_CONTRIBUTED;
            complete = ss->complete; /* N = 1: the payload is the result */
            rd.exp = ss->exp;
        }
    } else if (d == 0) {
        if (ss->bitmap[word] & bit) {
            if (!ss->complete) {
                o = O_DUP_PENDING;
            } else {
                o = O_DUP_COMPLETE;
                rd.count = ss->count;
                rd.exp = ss->exp;
                rd.op = ss->op;
                rd.tag = ss->tag;
                __u32 rn = (__u32)opaque(scr, OQ_N, rd.count);
                give_values(vals->v, scr, rn);
            }
        } else if (count != ss->count || tag != ss->tag || op != ss->op) {
            o = O_MISMATCH;
        } else {
            ss->bitmap[word] |= bit;
            ss->nrecv++;
            plan_combine(scr, op, e, ss->exp);
            combine_now = 1;
            o = O_CONTRIBUTED;
        }
    } else if (d < 0) {
        o = O_STALE;
    } else {
        o = O_FUTURE;
    }
    if (combine_now) { /* one call site: the verifier walks its loops once */
        combine(vals->v, scr, n, op);
        ss->exp = (__s16)opaque_get(scr, OQ_EXP);
        if (ss->nrecv == world)
            ss->complete = 1;
        complete = ss->complete;
        rd.exp = ss->exp;
    }
    bpf_spin_unlock(&ss->lock);

    switch (o) {
    case O_EVICTED:
        st->passed_up++;
        return TC_ACT_OK; /* not counted here: the control plane counts and answers it */
    case O_NOT_READY: return drop_member(&v, INA_DROP_NOT_READY);
    case O_STALE: return drop_member(&v, INA_DROP_STALE);
    case O_FUTURE: return drop_member(&v, INA_DROP_FUTURE);
    case O_DUP_PENDING:
        js->retransmits++;
        return drop_member(&v, INA_DROP_DUP_PENDING);
    case O_MISMATCH: {
        /* Ranks run different operations here: no sum exists. The job
         * serves nothing more; the control plane aborts it. */
        drop_member(&v, INA_DROP_MISMATCH);
        job->state = INA_BPF_JOB_ABORTING;
        struct ina_bpf_event ev = {.kind = INA_BPF_EV_MISMATCH, .job = id,
                                   .session = job->session};
        bpf_ringbuf_output(&events, &ev, sizeof(ev), 0);
        return TC_ACT_SHOT;
    }
    case O_CONTRIBUTED:
        rx_member(&v);
        st->contributions++;
        js->contributions++;
        if (!complete)
            return TC_ACT_SHOT; /* kept in the slot: nothing goes out yet */
        st->completions++;
        js->completions++;
        return send_result(skb, cfg, st, job, scr, plen, &rd, world, saddr);
    case O_DUP_COMPLETE:
        break;
    }

    /* The round's result, to this rank only (its RESULT was lost). */
    js->retransmits++;
    rx_member(&v);
    st->results_resent++;
    return resend_result(skb, cfg, st, m, scr, len, &rd, saddr);
}

/* ---- Entry points ----------------------------------------------------------- */

/* Make the first n bytes linear. @return 0, or -1 if the packet is shorter. */
static __always_inline int linear(struct __sk_buff *skb, __u32 n)
{
    if ((void *)(long)skb->data + n <= (void *)(long)skb->data_end)
        return 0;
    if (skb->len < n || bpf_skb_pull_data(skb, n) != 0)
        return -1;
    return (void *)(long)skb->data + n <= (void *)(long)skb->data_end ? 0 : -1;
}

SEC("tc")
int ina_tc_ingress(struct __sk_buff *skb)
{
    __u32 zero = 0;
    struct ina_bpf_config *cfg = bpf_map_lookup_elem(&config, &zero);
    if (!cfg || !cfg->port || skb->protocol != bpf_htons(ETH_P_IP))
        return TC_ACT_UNSPEC;
    if (linear(skb, OFF_INA) != 0)
        return TC_ACT_UNSPEC;
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    if (data + OFF_INA > end)
        return TC_ACT_UNSPEC;
    struct ethhdr *eth = data;
    struct iphdr *ip = data + OFF_IP;
    struct udphdr *udp = data + OFF_UDP;
    /* IP options move the UDP header: not this program's (the socket gets
     * them, and with them the datagram if it is ours). */
    if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->version != 4 || ip->ihl != 5 ||
        ip->protocol != IPPROTO_UDP || udp->dest != cfg->port ||
        (cfg->addr && ip->daddr != cfg->addr))
        return TC_ACT_UNSPEC;
    struct ina_bpf_stats *st = bpf_map_lookup_elem(&stats, &zero);
    if (!st)
        return TC_ACT_OK;
    /* To the switch. Fragments and GSO trains: the kernel's stack makes
     * datagrams of them, the socket feeds them back one by one. */
    if ((ip->frag_off & bpf_htons(0x3FFF)) || skb->gso_segs > 1) {
        st->passed_up++;
        return TC_ACT_OK;
    }
    __u32 ulen = bpf_ntohs(udp->len);
    if (ulen < 8 + W_HDR || bpf_ntohs(ip->tot_len) != 20 + ulen || skb->len < OFF_UDP + ulen)
        return TC_ACT_OK; /* short or malformed: the stack and the control plane judge it */
    if (linear(skb, OFF_INA + W_HDR) != 0)
        return TC_ACT_OK;
    data = (void *)(long)skb->data;
    end = (void *)(long)skb->data_end;
    __u8 *h = data + OFF_INA;
    if ((void *)(h + W_HDR) > end)
        return TC_ACT_OK;
    if (h[0] != 0x49 || h[1] != 0x4E || h[2] != 1 || h[3] != W_KIND_DATA)
        return TC_ACT_OK; /* control packets: the switch's socket */
    __u32 len = ulen - 8;
    /* Longer than any DATA this program serves: a LENGTH or COUNT drop (or
     * an earlier one), which reads the header only; else all of it. */
    if (len <= W_HDR + 4 * INA_BPF_MAX_ELEMS && linear(skb, OFF_INA + len) != 0) {
        st->passed_up++;
        return TC_ACT_OK;
    }
    return on_data(skb, cfg, st, len);
}

/*
 * XDP on a veth: a no-op whose presence makes the peer split GSO trains
 * before they cross (veth_fix_features drops the peer's GSO offloads), so
 * that the TC program above sees each datagram. ebpf_dp.c attaches it to
 * veth interfaces only.
 */
SEC("xdp")
int ina_xdp_pass(struct xdp_md *ctx)
{
    (void)ctx;
    return XDP_PASS;
}
