/* test_tree.c: a tree of switches (ina-switch --parent) as state machines joined by an in-memory network: registration, sums, loss and duplicates at both levels, aborts and refusals that reach every rank alike. No sockets. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "common/log.h"
#include "engine/engine.h"
#include "test_addr.h"

/*
 * The network: a parent P (and P2, a second dataplane thread of P's host for
 * REDIRECTs), children C0 and C1 with --parent P, and NW workers: ranks 0, 1
 * join C0, ranks 2, 3 join C1. deliver() moves every queued datagram to the
 * switch or worker it is addressed to, until nothing moves; a rule may drop
 * the next datagram of a kind on one link, or duplicate every datagram
 * between switches.
 */
enum { P, C0, C1, P2, NSW };
#define NW 4
#define K 4 /* elements per packet */
#define W 4 /* window */
#define MAXDG 256
#define INBOX 96

static struct ina_switch sws[NSW];
static int sw_on[NSW];
static struct sockaddr_in sw_addr[NSW], w_addr[NW];
static uint64_t now = 1000000000ull;

struct dg {
    uint8_t b[MAXDG];
    size_t len;
};
static struct dg inbox[NW][INBOX];
static int ninbox[NW];

static struct {
    int from, to, kind, n; /* drop the next n datagrams of kind from switch `from` to node `to` */
} drop_rule;
static int dup_links; /* deliver every datagram between two switches twice */
static int delivered_between_switches;

static int child_of(int r) { return r < NW / 2 ? C0 : C1; }

struct opts {
    uint32_t nslots[NSW];
    int secret;       /* every switch has the same shared secret */
    int redirect;     /* P is thread 0 of 2, P2 thread 1 (ports 7000, 7001) */
    int p_multicast;  /* P has --multicast */
    int p_int_only;   /* P has --int-ops-only */
};

static void net_open(const struct opts *o)
{
    memset(&drop_rule, 0, sizeof(drop_rule));
    dup_links = 0;
    memset(ninbox, 0, sizeof(ninbox));
    sw_addr[P] = mkaddr(0x0A000001, 7000);
    sw_addr[P2] = mkaddr(0x0A000001, 7001);
    sw_addr[C0] = mkaddr(0x0A000101, 7000);
    sw_addr[C1] = mkaddr(0x0A000201, 7000);
    for (int r = 0; r < NW; r++)
        w_addr[r] = mkaddr(child_of(r) == C0 ? 0x0A000101 : 0x0A000201, (uint16_t)(5000 + r));
    for (int s = 0; s < NSW; s++) {
        sw_on[s] = s != P2 || o->redirect;
        if (!sw_on[s])
            continue;
        struct ina_switch_params p;
        memset(&p, 0, sizeof(p));
        p.nslots = o->nslots[s] ? o->nslots[s] : 16;
        p.max_elems = 16;
        p.join_timeout_ns = 10000000000ull;
        p.idle_timeout_ns = 60000000000ull;
        p.min_job_slots = 1;
        if (s == C0 || s == C1) {
            p.nparents = 1;
            p.parents[0] = sw_addr[P];
        } else {
            p.mcast_base = o->p_multicast ? 0xEFFF4900u : 0;
            p.int_ops_only = o->p_int_only;
        }
        if (o->redirect && (s == P || s == P2)) {
            p.nshards = 2;
            p.shard = s == P2;
            p.shard_ports[0] = 7000;
            p.shard_ports[1] = 7001;
        }
        if (o->secret) {
            p.has_secret = 1;
            ina__hmac_key_init(&p.secret, (const uint8_t *)"tree secret", 11);
        }
        CHECK_EQ_INT(ina__switch_init(&sws[s], &p), 0);
    }
}

static void net_close(void)
{
    for (int s = 0; s < NSW; s++)
        if (sw_on[s])
            ina__switch_free(&sws[s]);
    memset(sw_on, 0, sizeof(sw_on));
}

/* The switch at an address, or -1. */
static int sw_at(const struct sockaddr_in *a)
{
    for (int s = 0; s < NSW; s++)
        if (sw_on[s] && ina__addr_eq(a, &sw_addr[s]))
            return s;
    return -1;
}

static int w_at(const struct sockaddr_in *a)
{
    for (int r = 0; r < NW; r++)
        if (ina__addr_eq(a, &w_addr[r]))
            return r;
    return -1;
}

/* Move datagrams until nothing is queued anywhere. */
static void deliver(void)
{
    static struct {
        struct dg d;
        int from;
        struct sockaddr_in to;
    } q[4096];
    for (int round = 0; round < 64; round++) {
        int n = 0;
        for (int s = 0; s < NSW; s++) {
            if (!sw_on[s])
                continue;
            struct ina_txq *t = &sws[s].txq;
            for (unsigned i = 0; i < t->nmsg && n < 4096; i++, n++) {
                q[n].from = s;
                q[n].to = t->addrs[i];
                q[n].d.len = t->iovs[i].iov_len < MAXDG ? t->iovs[i].iov_len : MAXDG;
                memcpy(q[n].d.b, t->iovs[i].iov_base, q[n].d.len);
            }
            ina__switch_tx_reset(&sws[s]);
        }
        if (n == 0)
            return;
        for (int i = 0; i < n; i++) {
            int kind = q[i].d.len > 3 ? q[i].d.b[3] : -1;
            int t = sw_at(&q[i].to), w = w_at(&q[i].to);
            int to = t >= 0 ? t : w >= 0 ? 100 + w : -1;
            if (drop_rule.n > 0 && drop_rule.from == q[i].from && drop_rule.to == to &&
                drop_rule.kind == kind) {
                drop_rule.n--;
                continue;
            }
            if (t >= 0) {
                delivered_between_switches++;
                for (int c = 0; c < 1 + dup_links; c++)
                    ina__switch_input(&sws[t], q[i].d.b, q[i].d.len, &sw_addr[q[i].from], now);
            } else if (w >= 0) {
                CHECK(ninbox[w] < INBOX); /* (a test that keeps too much in its inboxes) */
                if (ninbox[w] < INBOX)
                    inbox[w][ninbox[w]++] = q[i].d;
            }
        }
    }
    CHECK(!"the network did not settle");
}

static void tick(uint64_t step_ns)
{
    now += step_ns;
    for (int s = 0; s < NSW; s++)
        if (sw_on[s])
            ina__switch_tick(&sws[s], now);
    deliver();
}

/* ---- Workers ---------------------------------------------------------------- */

struct wstate {
    uint64_t nonce;
    uint16_t job, flags;
    uint32_t session, token;
    int acked;
};
static struct wstate ws[NW];
static const char *job_name = "tree";
static struct ina_hmac_key wkey; /* workers' copy of the secret */
static int wsecret;

/*
 * A JOIN-shaped datagram into b: header h, the JOIN body (nonce, world,
 * window, name; k = K, lane 0 of 1) and, for a TREE_JOIN, the set (its first
 * 16 ranks: bit r of set). @return its length (no proof of a secret).
 */
static size_t join_dg(uint8_t *b, const struct ina_hdr *h, uint64_t nonce, int world,
                      uint32_t window, const char *name, unsigned set)
{
    ina__hdr_encode(b, h);
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world_size = (uint16_t)world;
    j.elems = K;
    j.window = window;
    j.nlanes = 1;
    snprintf(j.name, sizeof(j.name), "%s", name);
    ina__join_encode(b + INA_HDR_LEN, &j);
    if (h->kind != INA_K_TREE_JOIN)
        return INA_HDR_LEN + INA_JOIN_BODY_LEN;
    memset(b + INA_HDR_LEN + INA_JOIN_BODY_LEN, 0, INA_TREE_SET_LEN);
    b[INA_HDR_LEN + INA_JOIN_BODY_LEN] = (uint8_t)set;
    b[INA_HDR_LEN + INA_JOIN_BODY_LEN + 1] = (uint8_t)(set >> 8);
    return INA_HDR_LEN + INA_TREE_JOIN_LEN;
}

/* Rank r's JOIN with nonce; with the secret, echoing cookie (zeros: none) under its proof. */
static void w_send_join(int r, uint64_t nonce, const uint8_t *cookie)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN + INA_COOKIE_LEN + INA_AUTH_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)r;
    size_t len = join_dg(b, &h, nonce, NW, W, job_name, 0);
    if (wsecret) {
        memcpy(b + len, cookie, INA_COOKIE_LEN);
        len += INA_COOKIE_LEN;
        ina__hmac_sha256(&wkey, b, len, b + len);
        len += INA_AUTH_LEN;
    }
    ina__switch_input(&sws[child_of(r)], b, len, &w_addr[r], now);
}

/* Index in r's inbox of the last datagram of kind, or -1; *h decoded. */
static int w_last(int r, int kind, struct ina_hdr *h)
{
    for (int i = ninbox[r] - 1; i >= 0; i--)
        if (ina__hdr_decode(inbox[r][i].b, inbox[r][i].len, h) == INA_PARSE_OK && h->kind == kind)
            return i;
    return -1;
}

/*
 * Rank r joins its child with nonce. With the secret, as libina does: the
 * first JOIN has no cookie, the child answers JOIN_COOKIE, and the JOIN goes
 * again at once with it (PROTOCOL.md §4.4).
 */
static void w_join(int r, uint64_t nonce)
{
    static const uint8_t none[INA_COOKIE_LEN];
    ws[r].nonce = nonce;
    ws[r].acked = 0;
    w_send_join(r, nonce, none);
    if (!wsecret)
        return;
    deliver();
    struct ina_hdr h;
    int i = w_last(r, INA_K_JOIN_COOKIE, &h);
    CHECK(i >= 0 && inbox[r][i].len == INA_HDR_LEN + INA_JOIN_COOKIE_BODY_LEN &&
          ina__get32(inbox[r][i].b + INA_HDR_LEN + 4) == (uint32_t)nonce);
    if (i >= 0)
        w_send_join(r, nonce, inbox[r][i].b + INA_HDR_LEN + 8);
}

/* Take r's JOIN_ACK (its job, session, token). @return 1 if it has one. */
static int w_take_ack(int r)
{
    struct ina_hdr h;
    int i = w_last(r, INA_K_JOIN_ACK, &h);
    if (i < 0)
        return 0;
    struct ina_join j = {0}; /* read below even if the decode failed (a CHECK does not return) */
    CHECK_EQ_INT(ina__join_decode(inbox[r][i].b + INA_HDR_LEN, inbox[r][i].len - INA_HDR_LEN, &j), 0);
    CHECK(j.nonce == ws[r].nonce);
    CHECK_EQ_INT(j.world_size, NW);
    CHECK_EQ_INT(j.elems, K);
    CHECK_EQ_INT(j.window, W);
    ws[r].job = h.job;
    ws[r].session = h.session;
    ws[r].token = h.token;
    ws[r].flags = h.flags;
    ws[r].acked = 1;
    return 1;
}

/* Every rank joins its child (in the order given), the tree starts the job. */
static void join_all(const int *order, uint64_t nonce0)
{
    for (int i = 0; i < NW; i++) {
        w_join(order[i], nonce0 + (uint64_t)order[i]);
        deliver();
    }
    for (int r = 0; r < NW; r++)
        CHECK(w_take_ack(r));
}

static void w_data(int r, uint32_t slot, uint32_t seq, unsigned count, int16_t exp, uint8_t op,
                   uint8_t tag, const int32_t *vals)
{
    uint8_t b[INA_HDR_LEN + 4 * K];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_DATA);
    h.job = ws[r].job;
    h.rank = (uint16_t)r;
    h.session = ws[r].session;
    h.token = ws[r].token;
    h.slot = slot | ((seq & 1) ? INA_SLOT_SET_BIT : 0);
    h.seq = seq;
    h.count = (uint16_t)count;
    h.exp = exp;
    h.op = op;
    h.tag = tag;
    ina__hdr_encode(b, &h);
    for (unsigned i = 0; i < count; i++)
        ina__put32(b + INA_HDR_LEN + 4 * i, (uint32_t)vals[i]);
    ina__switch_input(&sws[child_of(r)], b, INA_HDR_LEN + 4 * count, &w_addr[r], now);
}

static void w_leave(int r, int abort)
{
    uint8_t b[INA_HDR_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_LEAVE);
    h.job = ws[r].job;
    h.rank = (uint16_t)r;
    h.session = ws[r].session;
    h.token = ws[r].token;
    h.flags = abort ? INA_FLAG_ABORT : 0;
    ina__hdr_encode(b, &h);
    ina__switch_input(&sws[child_of(r)], b, sizeof(b), &w_addr[r], now);
}

/* How many RESULTs of (slot, seq) rank r holds; the last one's values and exp. */
static int w_results(int r, uint32_t slot, uint32_t seq, int32_t *vals, int16_t *exp)
{
    int n = 0;
    for (int i = 0; i < ninbox[r]; i++) {
        struct ina_hdr h;
        if (ina__hdr_decode(inbox[r][i].b, inbox[r][i].len, &h) != INA_PARSE_OK ||
            h.kind != INA_K_RESULT || (h.slot & INA_SLOT_INDEX_MASK) != slot || h.seq != seq)
            continue;
        CHECK_EQ_INT(h.job, ws[r].job);
        CHECK_EQ_INT(h.session, ws[r].session);
        CHECK_EQ_INT(h.token, ws[r].token);
        for (unsigned k = 0; k < h.count && vals; k++) {
            int32_t v = (int32_t)ina__get32(inbox[r][i].b + INA_HDR_LEN + 4 * k);
            if (n > 0)
                CHECK_EQ_INT(v, vals[k]); /* every copy the same */
            vals[k] = v;
        }
        if (exp)
            *exp = h.exp;
        n++;
    }
    return n;
}

/* Rank r's ABORT's reason, or 0 if it has none. */
static int w_abort_reason(int r)
{
    struct ina_hdr h;
    int i = w_last(r, INA_K_ABORT, &h);
    uint64_t nonce;
    int32_t reason = 0;
    if (i >= 0)
        ina__nak_decode(inbox[r][i].b + INA_HDR_LEN, inbox[r][i].len - INA_HDR_LEN, &nonce, &reason);
    return i < 0 ? 0 : reason;
}

static int32_t val(int r, uint32_t slot, uint32_t seq, unsigned k)
{
    return (int32_t)((uint32_t)(r + 1) * 0x9E3779B1u ^ slot * 7919u ^ seq * 104729u ^ k * 31u);
}

/* One round of slot at seq: every rank sends (unless skip), then the sums are checked. */
static void round_all(uint32_t slot, uint32_t seq, uint8_t op, int skip)
{
    int32_t v[K];
    for (int r = 0; r < NW; r++) {
        if (r == skip)
            continue;
        for (unsigned k = 0; k < K; k++)
            v[k] = val(r, slot, seq, k);
        w_data(r, slot, seq, K, (int16_t)(r * 3 - 4), op, (uint8_t)(seq * 13 + slot), v);
    }
    deliver();
}

static void check_round(uint32_t slot, uint32_t seq, uint8_t op, int want_results)
{
    for (int r = 0; r < NW; r++) {
        int32_t got[K];
        int16_t exp = 0;
        int n = w_results(r, slot, seq, got, &exp);
        if (want_results < 0) /* any number, each with the sum */
            CHECK(n >= 1);
        else
            CHECK_EQ_INT(n, want_results);
        if (n == 0)
            continue;
        CHECK_EQ_INT(exp, (NW - 1) * 3 - 4); /* the largest of every rank's */
        for (unsigned k = 0; k < K; k++) {
            uint32_t sum = 0;
            int32_t mx = INT32_MIN;
            for (int q = 0; q < NW; q++) {
                sum += (uint32_t)val(q, slot, seq, k);
                mx = val(q, slot, seq, k) > mx ? val(q, slot, seq, k) : mx;
            }
            CHECK_EQ_INT(got[k], op == INA_OP_MAX_I32 ? mx : (int32_t)sum);
        }
    }
}

static const int in_order[NW] = {0, 1, 2, 3};

/* ---- Tests ------------------------------------------------------------------ */

static void test_join_and_sums(void)
{
    struct opts o = {0};
    net_open(&o);
    /* Rank 1 joins C0 before rank 0: C0 registers {1}, then {0, 1} with rank 0
     * as its member; the parent must forget the first registration. */
    const int order[NW] = {1, 3, 0, 2};
    for (int i = 0; i < 2; i++) {
        w_join(order[i], 0x100 + (uint64_t)order[i]);
        deliver();
    }
    struct ina_job *pj = &sws[P].jobs[0];
    CHECK_EQ_INT(pj->state, INA_JOB_JOINING);
    CHECK_EQ_INT(pj->njoined, 2);
    CHECK_EQ_INT(pj->members[1].weight, 1);
    w_join(0, 0x100);
    deliver();
    CHECK_EQ_INT(pj->njoined, 3); /* {0, 1} from C0, {3} from C1: not 4 */
    CHECK_EQ_INT(pj->members[0].weight, 2);
    CHECK_EQ_INT(pj->members[1].weight, 0);
    CHECK_EQ_INT(pj->members[1].rep, 0);
    CHECK_EQ_INT(pj->state, INA_JOB_JOINING);
    struct ina_hdr wh;
    for (int r = 0; r < NW; r++) /* nobody is acknowledged before every rank joined */
        CHECK_EQ_INT(w_last(r, INA_K_JOIN_ACK, &wh), -1);
    w_join(2, 0x102);
    deliver();
    CHECK_EQ_INT(pj->state, INA_JOB_ACTIVE);
    CHECK_EQ_INT(pj->need, NW);
    CHECK(pj->tree);
    CHECK_EQ_INT(sws[P].c.tree_joins, 4);
    for (int r = 0; r < NW; r++) {
        CHECK(w_take_ack(r));
        CHECK_EQ_INT(ina__flag_levels(ws[r].flags), 1);
        CHECK(!(ws[r].flags & INA_FLAG_CAP_BFP)); /* no op 3 in a tree */
        CHECK(ws[r].flags & INA_FLAG_CAP_F32);    /* the parent offers op 4 */
    }
    CHECK_EQ_INT(sws[C0].jobs[0].need, 2);
    CHECK_EQ_INT(sws[C0].jobs[0].window, W);

    /* Three rounds of every slot: exact sums, the largest exponent. */
    for (uint32_t seq = 0; seq < 3; seq++)
        for (uint32_t slot = 0; slot < W; slot++) {
            round_all(slot, seq, INA_OP_ADD_I32, -1);
            check_round(slot, seq, INA_OP_ADD_I32, 1);
        }
    CHECK_EQ_INT(sws[P].c.contributions, 2 * 3 * W); /* two members, not four */
    CHECK_EQ_INT(sws[C0].c.up_packets, 3 * W);
    CHECK_EQ_INT(sws[C1].c.up_results, 3 * W);
    /* Max, and a round that waits for one rank: nothing moves up until it is in. */
    round_all(0, 3, INA_OP_MAX_I32, 3);
    check_round(0, 3, INA_OP_MAX_I32, 0);
    CHECK_EQ_INT(sws[C0].c.up_packets, 3 * W + 1);
    CHECK_EQ_INT(sws[C1].c.up_packets, 3 * W);
    int32_t v[K];
    for (unsigned k = 0; k < K; k++)
        v[k] = val(3, 0, 3, k);
    w_data(3, 0, 3, K, 5, INA_OP_MAX_I32, 3 * 13, v);
    deliver();
    check_round(0, 3, INA_OP_MAX_I32, 1);

    /* Floats added as floats at both levels (op 4): exact for these values. */
    float f[NW][K];
    for (int r = 0; r < NW; r++) {
        for (unsigned k = 0; k < K; k++) {
            f[r][k] = (float)(r + 1) * 0.25f + (float)k;
            memcpy(&v[k], &f[r][k], 4);
        }
        w_data(r, 1, 3, K, 0, INA_OP_ADD_F32, 99, v);
    }
    deliver();
    for (int r = 0; r < NW; r++) {
        int32_t got[K];
        CHECK_EQ_INT(w_results(r, 1, 3, got, NULL), 1);
        for (unsigned k = 0; k < K; k++) {
            float g;
            memcpy(&g, &got[k], 4);
            CHECK(g == 2.5f + 4.0f * (float)k);
        }
    }
    /* The 16-bit wire at both levels (op 10, binary16; §8.10.7): each child sends
     * its partial sums at their own scale s_c (2 x 40000 = 80000 needs s_c = 1), the
     * parent adds them scaled and picks s = 2 (160000), and the RESULT comes down
     * as the parent sent it. Per word: two elements (element 2j in the high half). */
    CHECK(ws[0].flags & INA_FLAG_CAP_H16); /* the children pass the parent's offer on */
    for (int r = 0; r < NW; r++) {
        const int32_t h16[K] = {(int32_t)0x78E23C00, /* 40000, 1.0 */
                                (int32_t)0x00018000, /* 2^-24, -0 */
                                0, 0};
        w_data(r, 2, 3, K, 0, INA_OP_ADD_F16, 42, h16);
    }
    deliver();
    for (int r = 0; r < NW; r++) {
        int32_t got[K];
        int16_t e = 0;
        CHECK_EQ_INT(w_results(r, 2, 3, got, &e), 1);
        CHECK_EQ_INT(e, 2);
        CHECK_EQ_INT(got[0], (int32_t)0x78E23C00); /* 160000 = 40000 2^2, 4 = 1.0 2^2 */
        CHECK_EQ_INT(got[1], (int32_t)0x00018000); /* 2^-22 = 2^-24 2^2, -0 kept */
        CHECK_EQ_INT(got[2], 0);
    }

    /* Op 3 is not offered in a tree: a worker that sends it anyway is dropped. */
    struct ina_sw_counters snap = sws[C0].c;
    w_data(0, 2, 3, K, 0, INA_OP_ADD_BFP, 7, v);
    CHECK_EQ_INT(sws[C0].c.drops[INA_DROP_OP], snap.drops[INA_DROP_OP] + 1);

    /* Every rank leaves: the children leave the parent, every job ends, every slot is free. */
    for (int r = 0; r < NW; r++)
        w_leave(r, 0);
    deliver();
    for (int s = 0; s < 3; s++) {
        CHECK_EQ_INT(sws[s].c.jobs_ended, 1);
        CHECK_EQ_INT(sws[s].jobs[0].state, INA_JOB_FREE);
        for (uint32_t i = 0; i < sws[s].p.nslots; i++)
            CHECK_EQ_INT(sws[s].slot_owner[i], 0);
    }
    net_close();
}

static void test_loss_and_duplicates(void)
{
    struct opts o = {0};
    net_open(&o);
    join_all(in_order, 0x200);

    /* C0's partial sum is lost: nobody has a result; a worker of C0
     * retransmits, C0 sends it again, every rank gets the sum. */
    drop_rule.from = C0, drop_rule.to = P, drop_rule.kind = INA_K_DATA, drop_rule.n = 1;
    round_all(0, 0, INA_OP_ADD_I32, -1);
    check_round(0, 0, INA_OP_ADD_I32, 0);
    int32_t v[K];
    for (unsigned k = 0; k < K; k++)
        v[k] = val(1, 0, 0, k);
    w_data(1, 0, 0, K, (int16_t)(1 * 3 - 4), INA_OP_ADD_I32, 0, v);
    deliver();
    CHECK_EQ_INT(sws[C0].c.up_resent, 1);
    check_round(0, 0, INA_OP_ADD_I32, 1);

    /* The parent's RESULT to C1 is lost: ranks 0 and 1 have it, 2 and 3 not;
     * rank 3 retransmits, C1 sends its sum again, the parent answers the
     * duplicate with the result, C1 passes it down. */
    drop_rule.from = P, drop_rule.to = C1, drop_rule.kind = INA_K_RESULT, drop_rule.n = 1;
    round_all(1, 0, INA_OP_ADD_I32, -1);
    CHECK_EQ_INT(w_results(0, 1, 0, NULL, NULL), 1);
    CHECK_EQ_INT(w_results(3, 1, 0, NULL, NULL), 0);
    uint64_t resent = sws[P].c.results_resent;
    for (unsigned k = 0; k < K; k++)
        v[k] = val(3, 1, 0, k);
    w_data(3, 1, 0, K, (int16_t)(3 * 3 - 4), INA_OP_ADD_I32, 1, v);
    deliver();
    CHECK_EQ_INT(sws[P].c.results_resent, resent + 1);
    check_round(1, 0, INA_OP_ADD_I32, 1);

    /* A worker's retransmission while C0's round still waits for C1: C0 sends
     * its partial sum again, the parent drops the duplicate (DUP_PENDING),
     * and the sum is still counted once. */
    for (int r = 0; r < 2; r++) {
        for (unsigned k = 0; k < K; k++)
            v[k] = val(r, 2, 0, k);
        w_data(r, 2, 0, K, (int16_t)(r * 3 - 4), INA_OP_ADD_I32, 2, v);
    }
    deliver();
    uint64_t dup = sws[P].c.drops[INA_DROP_DUP_PENDING];
    w_data(0, 2, 0, K, -4, INA_OP_ADD_I32, 2, v);
    deliver();
    CHECK_EQ_INT(sws[P].c.drops[INA_DROP_DUP_PENDING], dup + 1);
    for (int r = 2; r < NW; r++) {
        for (unsigned k = 0; k < K; k++)
            v[k] = val(r, 2, 0, k);
        w_data(r, 2, 0, K, (int16_t)(r * 3 - 4), INA_OP_ADD_I32, 2, v);
    }
    deliver();
    check_round(2, 0, INA_OP_ADD_I32, 1);

    /* Every datagram between switches duplicated, and every worker's DATA
     * sent twice: never added twice at either level (every RESULT a rank
     * gets holds the exact sum). */
    round_all(3, 0, INA_OP_ADD_I32, -1); /* (slot 3's first round) */
    check_round(3, 0, INA_OP_ADD_I32, 1);
    dup_links = 1;
    for (uint32_t seq = 1; seq < 4; seq++)
        for (uint32_t slot = 0; slot < W; slot++) {
            round_all(slot, seq, INA_OP_ADD_I32, -1);
            round_all(slot, seq, INA_OP_ADD_I32, -1);
            check_round(slot, seq, INA_OP_ADD_I32, -1);
            memset(ninbox, 0, sizeof(ninbox));
        }
    dup_links = 0;
    CHECK(sws[P].c.drops[INA_DROP_DUP_PENDING] + sws[P].c.results_resent > dup + 1);

    /* A stale RESULT (a duplicate of the parent's, after the round moved on)
     * is dropped at the child, not passed down. */
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_RESULT);
    h.job = sws[C0].jobs[0].up.job;
    h.rank = INA_RANK_SWITCH;
    h.session = sws[C0].jobs[0].up.session;
    h.token = sws[C0].jobs[0].up.token;
    h.slot = 0 | INA_SLOT_SET_BIT;
    h.seq = 3;
    h.count = K;
    h.tag = 3 * 13;
    uint8_t b[INA_HDR_LEN + 4 * K];
    memset(b, 0, sizeof(b));
    ina__hdr_encode(b, &h);
    uint64_t up = sws[C0].c.drops[INA_DROP_UPSTREAM];
    ina__switch_input(&sws[C0], b, sizeof(b), &sw_addr[P], now);
    CHECK_EQ_INT(sws[C0].c.drops[INA_DROP_UPSTREAM], up + 1);
    /* The same from a stranger, or with another token: dropped too. */
    struct sockaddr_in stranger = mkaddr(0x0A000001, 7009);
    ina__switch_input(&sws[C0], b, sizeof(b), &stranger, now);
    CHECK_EQ_INT(sws[C0].c.drops[INA_DROP_UPSTREAM], up + 2);
    CHECK_EQ_INT(sws[C0].txq.nmsg, 0);
    /* A rank a child stands for cannot send at the parent, even from the child's address. */
    struct ina_hdr d;
    ina__hdr_init(&d, INA_K_DATA);
    d.job = sws[C0].jobs[0].up.job;
    d.rank = 1;
    d.session = sws[C0].jobs[0].up.session;
    d.token = sws[C0].jobs[0].up.token;
    ina__hdr_encode(b, &d);
    uint64_t rk = sws[P].c.drops[INA_DROP_RANK];
    ina__switch_input(&sws[P], b, INA_HDR_LEN, &sw_addr[C0], now);
    CHECK_EQ_INT(sws[P].c.drops[INA_DROP_RANK], rk + 1);
    net_close();
}

/* A TREE_JOIN lost: the child sends it again on its tick, 100 ms doubling. */
static void test_tree_join_retransmit(void)
{
    struct opts o = {0};
    net_open(&o);
    drop_rule.from = C1, drop_rule.to = P, drop_rule.kind = INA_K_TREE_JOIN, drop_rule.n = 3;
    for (int r = 0; r < NW; r++) {
        w_join(r, 0x300 + (uint64_t)r);
        deliver();
    }
    CHECK_EQ_INT(sws[P].jobs[0].njoined, 2); /* C1's registrations of {2} and {2, 3} lost */
    tick(50000000);                          /* too early */
    CHECK_EQ_INT(sws[P].jobs[0].njoined, 2);
    tick(100000000); /* 150 ms: resent, lost again */
    CHECK_EQ_INT(drop_rule.n, 0);
    tick(150000000); /* 300 ms: not yet (200 ms after the last) */
    CHECK_EQ_INT(sws[P].jobs[0].state, INA_JOB_JOINING);
    tick(100000000); /* 400 ms */
    CHECK_EQ_INT(sws[P].jobs[0].state, INA_JOB_ACTIVE);
    for (int r = 0; r < NW; r++)
        CHECK(w_take_ack(r));
    round_all(0, 0, INA_OP_ADD_I32, -1);
    check_round(0, 0, INA_OP_ADD_I32, 1);
    net_close();
}

/* Every way a job ends abnormally reaches every rank, with one reason. */
static void test_aborts(void)
{
    struct opts o = {0};
    net_open(&o);
    /* A worker fails (LEAVE with abort) at C1: ABORTED at every rank, and
     * every switch frees the job. */
    job_name = "tree-abort";
    join_all(in_order, 0x400);
    w_leave(2, 1);
    deliver();
    for (int r = 0; r < NW; r++)
        CHECK_EQ_INT(w_abort_reason(r), INA_ERR_ABORTED);
    for (int s = 0; s < 3; s++)
        CHECK_EQ_INT(sws[s].jobs[0].state, INA_JOB_FREE);

    /* Ranks 0 and 1 disagree on a round at C0: MISMATCH at every rank. */
    memset(ninbox, 0, sizeof(ninbox));
    job_name = "tree-mismatch";
    join_all(in_order, 0x500);
    int32_t v[K] = {1, 2, 3, 4};
    w_data(0, 0, 0, K, 0, INA_OP_ADD_I32, 1, v);
    w_data(1, 0, 0, K, 0, INA_OP_ADD_I32, 2, v);
    deliver();
    for (int r = 0; r < NW; r++)
        CHECK_EQ_INT(w_abort_reason(r), INA_ERR_MISMATCH);

    /* A worker restarts (a new JOIN) while the job runs: every rank is
     * aborted, and C0 registers a new job with a new nonce. */
    memset(ninbox, 0, sizeof(ninbox));
    job_name = "tree-restart";
    join_all(in_order, 0x600);
    uint64_t old = sws[C0].jobs[0].up.nonce;
    w_join(1, 0x6FF);
    deliver();
    for (int r = 0; r < NW; r++)
        CHECK_EQ_INT(w_abort_reason(r), INA_ERR_ABORTED);
    CHECK_EQ_INT(sws[C0].jobs[0].state, INA_JOB_JOINING);
    CHECK(sws[C0].jobs[0].up.nonce != 0 && sws[C0].jobs[0].up.nonce != old);
    CHECK_EQ_INT(sws[P].jobs[0].state, INA_JOB_JOINING);
    CHECK_EQ_INT(sws[P].jobs[0].njoined, 1); /* only rank 1 so far */

    /* C1 idles past its timeout: TIMEOUT at every rank. */
    for (int r = 0; r < NW; r++)
        if (r != 1)
            w_join(r, 0x700 + (uint64_t)r);
    deliver();
    for (int r = 0; r < NW; r++)
        CHECK(w_take_ack(r));
    memset(ninbox, 0, sizeof(ninbox));
    now += 61000000000ull;
    ina__switch_tick(&sws[C1], now);
    deliver();
    for (int r = 0; r < NW; r++)
        CHECK_EQ_INT(w_abort_reason(r), INA_ERR_TIMEOUT);
    for (int s = 0; s < 3; s++)
        CHECK_EQ_INT(sws[s].jobs[0].state, INA_JOB_FREE);
    job_name = "tree";
    net_close();
}

/* No room at one child, or at the parent: every rank is refused with
 * NOSPACE (no fallback aggregator: a child could not tell every rank), and
 * no slot stays held. */
static void test_nospace(void)
{
    struct opts o = {.nslots = {[C1] = 8}};
    net_open(&o);
    /* Another job holds all of C1's pool. */
    struct sockaddr_in other = mkaddr(0x0A000201, 6000);
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    ina__switch_input(&sws[C1], b, join_dg(b, &h, 77, 1, 8, "hog", 0), &other, now);
    deliver(); /* (C1 registers the hog at P too: a world of 1, started at once) */
    for (int r = 0; r < NW; r++) {
        w_join(r, 0x800 + (uint64_t)r);
        deliver();
    }
    for (int r = 0; r < NW; r++) {
        struct ina_hdr nh;
        int i = w_last(r, INA_K_JOIN_NAK, &nh);
        CHECK(i >= 0);
        if (i < 0)
            continue;
        CHECK_EQ_INT(inbox[r][i].len, INA_HDR_LEN + INA_NAK_BODY_LEN); /* no fallback */
        uint64_t nonce;
        int32_t reason;
        ina__nak_decode(inbox[r][i].b + INA_HDR_LEN, INA_NAK_BODY_LEN, &nonce, &reason);
        CHECK(nonce == 0x800 + (uint64_t)r);
        CHECK_EQ_INT(reason, INA_ERR_NOSPACE);
        CHECK_EQ_INT(w_last(r, INA_K_JOIN_ACK, &nh), -1);
    }
    for (uint32_t i = 0; i < 16; i++) {
        CHECK_EQ_INT(sws[C0].slot_owner[i], 0); /* C0's reservation went back */
        CHECK_EQ_INT(sws[P].slot_owner[i] != 0, i < 8); /* only the hog's */
    }
    CHECK_EQ_INT(sws[P].c.jobs_refused, 1);
    net_close();
}

/* The parent's job runs on another of its dataplane threads: the child follows the REDIRECT. */
static void test_redirect(void)
{
    struct opts o = {.redirect = 1};
    net_open(&o);
    static char name[32];
    for (int i = 0;; i++) {
        snprintf(name, sizeof(name), "redirect-%d", i);
        if (ina__lane_shard(name, 0, 2) == 1)
            break;
    }
    job_name = name;
    join_all(in_order, 0x900);
    CHECK(sws[P].c.join_redirects >= 2);
    CHECK_EQ_INT(sws[P2].c.tree_joins >= 2, 1);
    CHECK_EQ_INT(sws[P2].jobs[0].state, INA_JOB_ACTIVE);
    round_all(3, 0, INA_OP_ADD_I32, -1);
    check_round(3, 0, INA_OP_ADD_I32, 1);
    job_name = "tree";
    net_close();
}

/* With a shared secret every TREE_JOIN carries its proof (checked by the
 * parent) and the parent's JOIN_ACK its own (checked by the child). */
static void test_secret(void)
{
    struct opts o = {.secret = 1};
    net_open(&o);
    ina__hmac_key_init(&wkey, (const uint8_t *)"tree secret", 11);
    wsecret = 1;
    join_all(in_order, 0xA00);
    round_all(0, 0, INA_OP_ADD_I32, -1);
    check_round(0, 0, INA_OP_ADD_I32, 1);
    CHECK_EQ_INT(sws[P].c.drops[INA_DROP_AUTH], 0);
    /* A TREE_JOIN without the proof: REJECTED, counted AUTH. */
    uint8_t b[INA_HDR_LEN + INA_TREE_JOIN_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_TREE_JOIN);
    struct sockaddr_in stranger = mkaddr(0x0A000301, 7000);
    ina__switch_input(&sws[P], b, join_dg(b, &h, 5, 2, W, "forged", 0x3), &stranger, now);
    CHECK_EQ_INT(sws[P].c.drops[INA_DROP_AUTH], 1);
    CHECK_EQ_INT(sws[P].txq.nmsg, 1);
    wsecret = 0;
    net_close();
}

/* A TREE_JOIN of one set, by hand: its rep is the set's lowest rank. */
static void tree_join_by_hand(int sw_idx, const struct sockaddr_in *src, uint64_t nonce,
                              unsigned set_bits, int world)
{
    uint8_t b[INA_HDR_LEN + INA_TREE_JOIN_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_TREE_JOIN);
    h.rank = (uint16_t)__builtin_ctz(set_bits);
    ina__switch_input(&sws[sw_idx], b, join_dg(b, &h, nonce, world, W, "by-hand", set_bits), src,
                     now);
}

/* A worker's JOIN of (name, rank, world), by hand, to a switch from src. */
static void join_by_hand(int sw_idx, const struct sockaddr_in *src, uint64_t nonce, int rank,
                         int world, const char *name)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)rank;
    ina__switch_input(&sws[sw_idx], b, join_dg(b, &h, nonce, world, W, name, 0), src, now);
}

/* The kind and reason of the last datagram sw_idx queued to dst (-1, 0 if none). */
static int last_to(int sw_idx, const struct sockaddr_in *dst, int32_t *reason)
{
    const struct ina_txq *t = &sws[sw_idx].txq;
    for (int i = (int)t->nmsg - 1; i >= 0; i--) {
        if (!ina__addr_eq(&t->addrs[i], dst))
            continue;
        const uint8_t *b = t->iovs[i].iov_base;
        uint64_t nonce;
        *reason = 0;
        if (t->iovs[i].iov_len >= INA_HDR_LEN + INA_NAK_BODY_LEN)
            ina__nak_decode(b + INA_HDR_LEN, t->iovs[i].iov_len - INA_HDR_LEN, &nonce, reason);
        return b[3];
    }
    *reason = 0;
    return -1;
}

/* A member's registrations replace each other (the same nonce and address:
 * its earlier set goes, even when the sets do not overlap). A rank registered
 * by another member, alive on another host, is not taken over (§5.2 step 6′);
 * one registered from the same host (a restart), or whose member fell
 * silent, is, with all of that member's set. */
static void test_reregistration(void)
{
    struct opts o = {0};
    net_open(&o);
    const struct ina_job *pj = &sws[P].jobs[0];
    tree_join_by_hand(P, &sw_addr[C0], 0x51, 0x1, 5); /* {0} */
    CHECK_EQ_INT(pj->njoined, 1);
    tree_join_by_hand(P, &sw_addr[C0], 0x51, 0x2, 5); /* {1}: the same member moved */
    CHECK_EQ_INT(pj->njoined, 1);
    CHECK(!pj->members[0].joined);
    CHECK_EQ_INT(pj->members[1].weight, 1);
    ina__switch_tx_reset(&sws[P]);
    tree_join_by_hand(P, &sw_addr[C1], 0x52, 0xE, 5); /* {1, 2, 3}: rank 1 is C0's, alive */
    int32_t reason;
    CHECK_EQ_INT(last_to(P, &sw_addr[C1], &reason), INA_K_JOIN_NAK);
    CHECK_EQ_INT(reason, INA_ERR_REJECTED);
    CHECK_EQ_INT(sws[P].c.joins_refused_taken, 1);
    CHECK_EQ_INT(pj->njoined, 1);
    CHECK_EQ_INT(pj->members[1].weight, 1);
    tree_join_by_hand(P, &sw_addr[C1], 0x52, 0xC, 5); /* {2, 3}: nobody's yet */
    CHECK_EQ_INT(pj->njoined, 3);
    tree_join_by_hand(P, &sw_addr[C0], 0x51, 0x3, 5); /* {0, 1}: C0's set grows */
    CHECK_EQ_INT(pj->njoined, 4);
    CHECK_EQ_INT(pj->members[0].weight, 2);
    /* C0 restarts: a new nonce from another port of its host takes its ranks. */
    struct sockaddr_in c0b = sw_addr[C0];
    c0b.sin_port = htons(7100);
    tree_join_by_hand(P, &c0b, 0x53, 0x3, 5);
    CHECK_EQ_INT(pj->njoined, 4);
    CHECK(pj->members[0].nonce == 0x53 && ina__addr_eq(&pj->members[1].addr, &c0b));
    /* C0 falls silent: once its registration is over, C1 may take rank 1
     * (C1 re-registers, as its TREE_JOINs go on; C0's whole set goes). */
    now += INA_SW_JOIN_SILENT_NS + 1;
    tree_join_by_hand(P, &sw_addr[C1], 0x52, 0xE, 5);
    CHECK_EQ_INT(pj->njoined, 3);
    CHECK_EQ_INT(pj->members[1].weight, 3);
    CHECK_EQ_INT(pj->members[2].rep, 1);
    CHECK(!pj->members[0].joined);
    CHECK_EQ_INT(sws[P].c.joins_refused_taken, 1);
    CHECK_EQ_INT(pj->state, INA_JOB_JOINING);
    net_close();
}

/*
 * Issue 30, item 6: ranks 0 and 1 of a world of 3 joined the parent; a
 * TREE_JOIN from another host claiming {0, 1, 2} must not take them over,
 * start the job with itself and lock them out. It is refused (REJECTED,
 * joins_refused_taken), the real ranks stay registered, and the job starts
 * with them when rank 2 joins. So it goes for a forged worker JOIN too.
 */
static void test_takeover_refused(void)
{
    struct opts o = {0};
    net_open(&o);
    const struct sockaddr_in a[3] = {mkaddr(0x0A000501, 5000), mkaddr(0x0A000502, 5001),
                                     mkaddr(0x0A000503, 5002)};
    const struct sockaddr_in forger = mkaddr(0x0A000909, 7000);
    const struct ina_job *pj = &sws[P].jobs[0];
    join_by_hand(P, &a[0], 0x61, 0, 3, "takeover");
    join_by_hand(P, &a[1], 0x62, 1, 3, "takeover");
    CHECK_EQ_INT(pj->njoined, 2);
    ina__switch_tx_reset(&sws[P]);
    uint8_t b[INA_HDR_LEN + INA_TREE_JOIN_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_TREE_JOIN);
    ina__switch_input(&sws[P], b, join_dg(b, &h, 0x66, 3, W, "takeover", 0x7), &forger, now);
    int32_t reason;
    CHECK_EQ_INT(last_to(P, &forger, &reason), INA_K_JOIN_NAK);
    CHECK_EQ_INT(reason, INA_ERR_REJECTED);
    CHECK_EQ_INT(sws[P].c.joins_refused_taken, 1);
    join_by_hand(P, &forger, 0x67, 1, 3, "takeover"); /* a forged worker JOIN of rank 1 */
    CHECK_EQ_INT(sws[P].c.joins_refused_taken, 2);
    CHECK_EQ_INT(pj->state, INA_JOB_JOINING);
    CHECK_EQ_INT(pj->njoined, 2);
    for (int r = 0; r < 2; r++)
        CHECK(ina__addr_eq(&pj->members[r].addr, &a[r]) && pj->members[r].weight == 1);
    CHECK(!pj->members[2].joined);
    ina__switch_tx_reset(&sws[P]);
    join_by_hand(P, &a[2], 0x63, 2, 3, "takeover");
    CHECK_EQ_INT(pj->state, INA_JOB_ACTIVE);
    CHECK(!pj->tree);
    for (int r = 0; r < 3; r++)
        CHECK_EQ_INT(last_to(P, &a[r], &reason), INA_K_JOIN_ACK);
    CHECK_EQ_INT(last_to(P, &forger, &reason), -1);
    net_close();
}

/* A registration lives while its rank waits (PROTOCOL.md §5.2): a worker that
 * withdraws, or falls silent, shrinks its child's set, which the child tells
 * its parent at once; a child that falls silent is forgotten by the parent. */
static void test_registration_lifetime(void)
{
    struct opts o = {0};
    net_open(&o);
    w_join(0, 0xC00);
    w_join(1, 0xC01);
    deliver();
    const struct ina_job *pj = &sws[P].jobs[0];
    CHECK_EQ_INT(pj->njoined, 2);
    CHECK_EQ_INT(pj->members[0].weight, 2);
    /* Rank 1 withdraws (the body of its JOIN, its nonce). */
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_WITHDRAW);
    h.rank = 1;
    ina__switch_input(&sws[C0], b, join_dg(b, &h, 0xC01, NW, W, job_name, 0), &w_addr[1], now);
    deliver();
    CHECK_EQ_INT(sws[C0].jobs[0].njoined, 1);
    CHECK_EQ_INT(pj->njoined, 1); /* C0 said so at once: {0} */
    CHECK_EQ_INT(pj->members[0].weight, 1);
    CHECK(!pj->members[1].joined);
    /* Rank 0 falls silent: C0 forgets it, frees the job and stops
     * registering; the parent forgets C0 when its TREE_JOINs stop. */
    for (int t = 0; t < 4; t++)
        tick(1000000000ull);
    CHECK_EQ_INT(sws[C0].jobs[0].state, INA_JOB_FREE);
    for (int t = 0; t < 4; t++)
        tick(1000000000ull);
    CHECK_EQ_INT(pj->state, INA_JOB_FREE);
    CHECK(sws[P].c.joins_expired >= 1);
    for (uint32_t i = 0; i < 16; i++)
        CHECK_EQ_INT(sws[C0].slot_owner[i], 0); /* its reservation went back */
    net_close();
}

/* TREE_JOINs the parent must refuse: malformed sets, a multicast parent. */
static void test_tree_join_refused(void)
{
    struct opts o = {.p_multicast = 0};
    struct {
        uint8_t set0, set1;
        int rank, world, multicast;
    } cases[] = {
        {0x00, 0x00, 0, 4, 0}, /* empty */
        {0x06, 0x00, 0, 4, 0}, /* lowest is 1, header says 0 */
        {0x11, 0x00, 0, 4, 0}, /* rank 4 of a world of 4 */
        {0x03, 0x00, 0, 4, 1}, /* a multicast parent cannot serve a child */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        o.p_multicast = cases[c].multicast;
        net_open(&o);
        uint8_t b[INA_HDR_LEN + INA_TREE_JOIN_LEN];
        struct ina_hdr h;
        ina__hdr_init(&h, INA_K_TREE_JOIN);
        h.rank = (uint16_t)cases[c].rank;
        size_t len = join_dg(b, &h, 9, cases[c].world, W, "bad",
                             cases[c].set0 | (unsigned)cases[c].set1 << 8);
        ina__switch_input(&sws[P], b, len, &sw_addr[C0], now);
        CHECK_EQ_INT(sws[P].c.drops[INA_DROP_JOIN], 1);
        CHECK_EQ_INT(sws[P].jobs[0].state, INA_JOB_FREE);
        struct ina_hdr nh;
        memset(&nh, 0, sizeof(nh));
        CHECK_EQ_INT(sws[P].txq.nmsg, 1);
        if (sws[P].txq.nmsg == 1) {
            CHECK_EQ_INT(ina__hdr_decode(sws[P].txq.iovs[0].iov_base, sws[P].txq.iovs[0].iov_len,
                                        &nh), INA_PARSE_OK);
            CHECK_EQ_INT(nh.kind, INA_K_JOIN_NAK);
        }
        /* A short one (no set): dropped without an answer. */
        ina__switch_tx_reset(&sws[P]);
        ina__switch_input(&sws[P], b, INA_HDR_LEN + INA_JOIN_BODY_LEN, &sw_addr[C0], now);
        CHECK_EQ_INT(sws[P].c.drops[INA_DROP_JOIN], 2);
        CHECK_EQ_INT(sws[P].txq.nmsg, 0);
        net_close();
    }
    /* A parent that grants a window larger than the child proposed: the
     * child refuses its ranks (PROTO) and tells the parent to end the job. */
    o.p_multicast = 0;
    net_open(&o);
    for (int r = 0; r < NW; r++) {
        w_join(r, 0xB00 + (uint64_t)r);
    }
    /* Hand-feed C0 a JOIN_ACK for its registration with window 2 W. */
    struct ina_job *cj = &sws[C0].jobs[0];
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN_ACK);
    h.job = 3;
    h.rank = INA_RANK_SWITCH;
    h.session = 0x1234;
    h.token = 0x5678;
    size_t len = join_dg(b, &h, cj->up.nonce, NW, 2 * W, job_name, 0);
    ina__switch_tx_reset(&sws[C0]);
    ina__switch_input(&sws[C0], b, len, &sw_addr[P], now);
    CHECK_EQ_INT(cj->state, INA_JOB_FREE);
    int naks = 0, leaves = 0;
    for (unsigned i = 0; i < sws[C0].txq.nmsg; i++) {
        struct ina_hdr th;
        memset(&th, 0, sizeof(th));
        ina__hdr_decode(sws[C0].txq.iovs[i].iov_base, sws[C0].txq.iovs[i].iov_len, &th);
        naks += th.kind == INA_K_JOIN_NAK;
        leaves += th.kind == INA_K_LEAVE && (th.flags & INA_FLAG_ABORT) && th.session == 0x1234;
    }
    CHECK_EQ_INT(naks, 2);
    CHECK_EQ_INT(leaves, 2);
    for (uint32_t i = 0; i < 16; i++)
        CHECK_EQ_INT(sws[C0].slot_owner[i], 0);
    net_close();
}

int main(void)
{
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT); /* only errors: job events are expected here */
    test_join_and_sums();
    test_loss_and_duplicates();
    test_tree_join_retransmit();
    test_aborts();
    test_nospace();
    test_redirect();
    test_secret();
    test_tree_join_refused();
    test_reregistration();
    test_takeover_refused();
    test_registration_lifetime();
    return check_report("test_tree");
}
