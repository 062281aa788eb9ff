/* sched.c: ina-sched's engine: REQ/GRANT/DONE, the delay-bounded, shortest-finish-first grant rule. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "common/log.h"
#include "sched/sched.h"

static const char *const drop_names[] = {
#define INA__SCHED_DROP_NAME(name, text) #name,
    INA_SCHED_DROP_MAP(INA__SCHED_DROP_NAME)
#undef INA__SCHED_DROP_NAME
};

const char *ina__sched_drop_name(enum ina_sched_drop d)
{
    return (unsigned)d < INA_SCHED_DROP__COUNT ? drop_names[d] : "?";
}

int ina__sched_init(struct ina_sched *s, const struct ina_sched_params *p)
{
    memset(s, 0, sizeof(*s));
    if (p->world == 0 || p->world > INA_MAX_WORKERS || p->window == 0 ||
        p->window > INA_SCHED_VOIDS || p->job[0] == '\0' || !memchr(p->job, 0, sizeof(p->job)) ||
        !(p->initial_rate > 0) || !(p->straggler_ratio >= 0 && p->straggler_ratio < 1) ||
        p->aggregate > p->world || p->nservers > 2 || (p->nservers && !p->failover_ns))
        return -EINVAL;
    for (unsigned i = 0; i < p->nservers; i++)
        if (p->server[i].sin_port == 0)
            return -EINVAL;
    s->p = *p;
    /* With servers, a scheduler may be starting on a running job: ask before granting. */
    s->recovering = p->nservers ? INA_SCHED_RECOVER_STATE : INA_SCHED_RUNNING;
    return 0;
}

void ina__sched_tx_reset(struct ina_sched *s)
{
    s->c.drops[INA_SCHED_DROP_TXQ] += s->tx.overflows;
    s->tx.overflows = 0;
    s->tx.n = 0;
    s->tx.relay = NULL;
    s->tx.relay_len = 0;
}

/* Room for one reply of len bytes to dst, or NULL (counted: drop TXQ). */
static uint8_t *tx_slot(struct ina_sched *s, size_t len, const struct sockaddr_in *dst)
{
    if (s->tx.n >= INA_SCHED_TX_MSGS) {
        s->tx.overflows++;
        return NULL;
    }
    s->tx.len[s->tx.n] = len;
    s->tx.dst[s->tx.n] = *dst;
    return s->tx.buf[s->tx.n++];
}

/* GRANT to rank r: its current request's answer (a grant with its stamp, or a refusal). */
static void send_grant(struct ina_sched *s, unsigned r)
{
    const struct ina_sched_rank *k = &s->ranks[r];
    uint8_t *b = tx_slot(s, INA_HDR_LEN + INA_SCHED_GRANT_LEN, &k->addr);
    if (!b)
        return;
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_SCHED_GRANT);
    h.rank = INA_RANK_SWITCH;
    h.slot = k->uid;
    h.seq = k->status == 0 ? k->stamp : INA_STAMP_NONE;
    ina__hdr_encode(b, &h);
    uint8_t *body = b + INA_HDR_LEN;
    ina__put32(body, (uint32_t)k->status);
    ina__put32(body + 4, h.seq);
    ina__put32(body + 8, k->bound_at_grant);
    ina__put32(body + 12, k->straggler);
    ina__put32(body + 16, k->status == 0 ? k->group_size : 1);
    ina__put32(body + 20, k->status == 0 ? k->group_index : 0);
}

/* ---- Learned rates and stragglers ------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Re-mark stragglers: ranks with a learned rate below ratio x the median learned rate. */
static void mark_stragglers(struct ina_sched *s)
{
    double rates[INA_MAX_WORKERS];
    unsigned n = 0;
    for (unsigned r = 0; r < s->p.world; r++)
        if (s->ranks[r].samples >= 2 && !s->ranks[r].departed)
            rates[n++] = s->ranks[r].rate;
    if (n < 2 || s->p.straggler_ratio <= 0)
        return;
    qsort(rates, n, sizeof(double), cmp_double);
    double median = n % 2 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
    for (unsigned r = 0; r < s->p.world; r++) {
        struct ina_sched_rank *k = &s->ranks[r];
        uint8_t was = k->straggler;
        k->straggler = k->samples >= 2 && !k->departed && k->rate < s->p.straggler_ratio * median;
        if (k->straggler != was)
            ina__log(INA_LOG_INFO, k->straggler ? "straggler" : "straggler_recovered",
                    INA_KV_I("rank", r), INA_KV_I("rate_kbps", (long long)(k->rate / 1000)),
                    INA_KV_I("median_kbps", (long long)(median / 1000)));
    }
}

/*
 * The weight of a rate sample that comes dt after the rank's last: at least
 * INA_SCHED_RATE_WEIGHT (several samples in a row move the rate, one outlier does not),
 * and 1 - 2^(-dt / halflife) when that is more. Links change in time, not in samples: a
 * rank that is granted rarely (a straggler yields to the others) would otherwise keep its
 * old rate for many grants after its link recovered; with the time weight one sample a
 * half-life after the last moves it half way or more.
 */
static double rate_weight(const struct ina_sched *s, uint64_t dt)
{
    double w = INA_SCHED_RATE_WEIGHT;
    if (s->p.rate_halflife_ns) {
        double t = 1.0 - exp2(-(double)dt / (double)s->p.rate_halflife_ns);
        if (t > w)
            w = t;
    }
    return w;
}

static void learn_rate(struct ina_sched *s, unsigned r, uint32_t bytes, uint32_t usec,
                       uint64_t now)
{
    struct ina_sched_rank *k = &s->ranks[r];
    if (usec == 0 || bytes == 0)
        return;
    double rate = (double)bytes * 1e6 / usec;
    if (k->samples) {
        double w = rate_weight(s, now - k->sample_ns);
        k->rate += w * (rate - k->rate);
    } else {
        k->rate = rate;
    }
    k->sample_ns = now;
    k->samples++;
    mark_stragglers(s);
}

/* Predicted seconds to send rank r's request: bytes over its learned (or the assumed) rate. */
static double predicted(const struct ina_sched *s, const struct ina_sched_rank *k)
{
    return (double)k->bytes / (k->samples ? k->rate : s->p.initial_rate);
}

/* ---- Grants ---------------------------------------------------------------------- */

/*
 * A: the versions known applied. Our own count of applied grants is exact when
 * every update is scheduled; the largest version a worker or a DONE reported
 * catches it up after a restart or unscheduled sending. Both are at most the
 * server's version now, and at most A + O when the stamp is applied.
 */
uint32_t ina__sched_known_applied(const struct ina_sched *s)
{
    return (int32_t)(s->floor - s->applied) > 0 ? s->floor : s->applied;
}

/* A request's base: a fetch request's is A when it is granted (the worker pulls after the
 * grant and the server has applied at least A by then). */
static uint32_t req_base(const struct ina_sched *s, const struct ina_sched_rank *k)
{
    return k->fetch && k->state == INA_SCHED_PENDING ? ina__sched_known_applied(s) : k->base;
}

/* The request's delay at the server is at most A + O - base (one version per grant ahead);
 * for a fetch request that is O. */
static int fits(const struct ina_sched *s, const struct ina_sched_rank *k)
{
    return ina__sched_known_applied(s) + s->outstanding - req_base(s, k) <= s->p.max_delay;
}

/*
 * Grant the next stamp to the n ranks of members[] (n > 1: a group, members[0]
 * its leader). A group is one update at the servers, one version: it counts
 * once in O, and each member's bound is that of a lone grant at this moment
 * (every member is a fetch request, based at A).
 */
static void grant(struct ina_sched *s, const unsigned *members, unsigned n, uint64_t now)
{
    uint32_t stamp = s->next_stamp++;
    for (unsigned i = 0; i < n; i++) {
        struct ina_sched_rank *k = &s->ranks[members[i]];
        k->base = req_base(s, k);
        k->bound_at_grant = ina__sched_known_applied(s) + s->outstanding;
        if (k->bound_at_grant - k->base > s->p.max_delay)
            s->c.bound_violations++; /* fits() was checked: never */
        k->state = INA_SCHED_GRANTED;
        k->status = 0;
        k->stamp = stamp;
        k->since_ns = now;
        k->member = i > 0;
        k->group_size = (uint16_t)n;
        k->group_index = (uint16_t)i;
        s->c.grants++;
    }
    s->outstanding++;
    if (n > 1) {
        s->c.groups++;
        s->c.group_members += n;
    }
    for (unsigned i = 0; i < n; i++)
        send_grant(s, members[i]);
}

/* Slack: grants that may still come before this one's stamp and keep it within D. */
static uint32_t slack(const struct ina_sched *s, const struct ina_sched_rank *k)
{
    return s->p.max_delay - (ina__sched_known_applied(s) + s->outstanding - req_base(s, k));
}

/* A request that has waited max_wait_ns: slowed (a straggler's, or a slow rank's passed
 * over by shortest-first), never starved. */
static int aged(const struct ina_sched *s, const struct ina_sched_rank *k, uint64_t now)
{
    return s->p.max_wait_ns && now - k->since_ns >= s->p.max_wait_ns;
}

/* Order class: 0 a request that has waited its limit, 1 a non-straggler's, 2 a straggler's. */
static int order_class(const struct ina_sched *s, const struct ina_sched_rank *k, uint64_t now)
{
    return aged(s, k, now) ? 0 : k->straggler ? 2 : 1;
}

/* 1 if request a goes before b: by order_class() (a request that has waited its limit
 * first, stragglers last), then those with no slack left (the next grant would make them
 * infeasible), then the shortest predicted transfer; among aged requests, the oldest. */
static int before(const struct ina_sched *s, const struct ina_sched_rank *a,
                  const struct ina_sched_rank *b, uint64_t now)
{
    int ca = order_class(s, a, now), cb = order_class(s, b, now);
    if (ca != cb)
        return ca < cb;
    if (ca == 0 && a->since_ns != b->since_ns)
        return a->since_ns < b->since_ns;
    int ua = slack(s, a) == 0, ub = slack(s, b) == 0;
    if (ua != ub)
        return ua;
    return predicted(s, a) < predicted(s, b);
}

/* A request that may join a group: a fetch request (based at the grant) of a rank that can
 * aggregate and is not a straggler (a straggler would hold its whole group back). */
static int groupable(const struct ina_sched *s, const struct ina_sched_rank *k)
{
    return s->p.aggregate > 1 && k->fetch && k->can_aggregate && !k->straggler;
}

/* The best pending feasible request by before(), or -1. With picked (a group being formed:
 * the ranks already in it), only a groupable one outside it. *stragglers (if not NULL):
 * the feasible stragglers' requests passed over. */
static int best_request(struct ina_sched *s, const uint8_t *picked, unsigned *stragglers,
                        uint64_t now)
{
    int best = -1;
    for (unsigned r = 0; r < s->p.world; r++) {
        const struct ina_sched_rank *k = &s->ranks[r];
        if (k->state != INA_SCHED_PENDING || !fits(s, k) ||
            (picked && (picked[r] || !groupable(s, k))))
            continue;
        if (stragglers)
            *stragglers += k->straggler;
        if (best < 0 || before(s, k, &s->ranks[best], now))
            best = (int)r;
    }
    return best;
}

/*
 * Hold the group members[0..n) (the best feasible request and those that join it) for one
 * more member? Granted now, its slot in the window makes n gradients in P, the group's
 * predicted duration (its slowest member's bytes over its learned rate; in fetch mode the
 * pull, the computation and the update). Held until the next groupable request comes, e
 * from now (the earliest predicted end of a granted groupable rank: a worker asks again as
 * soon as it is done; 0 for one whose DONE just came), the slot makes n + 1 in P + e: more
 * per second when e < P / n. A
 * group already at `aggregate`, one with a request that has waited max_wait, or one held
 * agg_hold_ns is granted. @return 1: hold (the caller grants nothing now).
 */
static int hold_group(struct ina_sched *s, const unsigned *members, unsigned n, uint64_t now)
{
    if (!s->p.agg_hold_ns || n >= s->p.aggregate || !groupable(s, &s->ranks[members[0]]) ||
        (s->hold_since_ns && now - s->hold_since_ns >= s->p.agg_hold_ns))
        return 0;
    double p = 0, e = -1;
    for (unsigned i = 0; i < n; i++) {
        const struct ina_sched_rank *k = &s->ranks[members[i]];
        if (aged(s, k, now))
            return 0;
        if (predicted(s, k) > p)
            p = predicted(s, k);
    }
    for (unsigned r = 0; r < s->p.world; r++) {
        const struct ina_sched_rank *k = &s->ranks[r];
        if (!k->fetch || !k->can_aggregate || k->straggler || k->departed)
            continue;
        double left;
        if (k->state == INA_SCHED_GRANTED) /* < 0: late, due any moment */
            left = ((double)k->since_ns - (double)now) / 1e9 + predicted(s, k);
        else if (k->state == INA_SCHED_ANSWERED && k->done_ns && now - k->done_ns < INA_SCHED_REASK_NS)
            left = 0; /* its DONE just came: its next REQ follows (the DONE came first) */
        else
            continue;
        if (e < 0 || left < e)
            e = left > 0 ? left : 0;
    }
    if (e < 0 || !(e * n < p))
        return 0;
    if (!s->hold_since_ns) {
        s->hold_since_ns = now;
        s->hold_predicted_ns = (uint64_t)(e * 1e9);
        s->hold_members = n;
        s->c.holds++;
    }
    return 1;
}

/* A group is granted: the hold (if one was on) ends, measured against its prediction. */
static void hold_end(struct ina_sched *s, unsigned n, uint64_t now)
{
    if (!s->hold_since_ns)
        return;
    s->c.hold_us += (now - s->hold_since_ns) / 1000;
    s->c.hold_predicted_us += s->hold_predicted_ns / 1000;
    s->c.holds_joined += n > s->hold_members;
    s->hold_since_ns = 0;
}

/*
 * Refuse what can never fit, then grant while the window has room: among the
 * feasible requests the first by before(); if it can aggregate, the next
 * groupable requests by before() join it, up to `aggregate` members (and a group
 * short of that may be held for the next one: hold_group()).
 */
static void schedule(struct ina_sched *s, uint64_t now)
{
    if (s->recovering)
        return; /* the stamps and A are not known yet (§15.9) */
    for (unsigned r = 0; r < s->p.world; r++) {
        struct ina_sched_rank *k = &s->ranks[r];
        if (k->state == INA_SCHED_PENDING && !k->fetch &&
            ina__sched_known_applied(s) - k->base > s->p.max_delay) {
            k->state = INA_SCHED_ANSWERED;
            k->status = INA_ERR_STALE;
            k->bound_at_grant = ina__sched_known_applied(s);
            s->c.refused_stale++;
            send_grant(s, r);
        }
    }
    while (s->outstanding < s->p.window) {
        unsigned stragglers = 0, members[INA_MAX_WORKERS], n = 0;
        int best = best_request(s, NULL, &stragglers, now);
        if (best < 0)
            return;
        members[n++] = (unsigned)best;
        if (groupable(s, &s->ranks[best])) {
            uint8_t picked[INA_MAX_WORKERS] = {0};
            picked[best] = 1;
            int next;
            while (n < s->p.aggregate && (next = best_request(s, picked, NULL, now)) >= 0) {
                picked[next] = 1;
                members[n++] = (unsigned)next;
            }
            if (hold_group(s, members, n, now))
                return;
        }
        if (!s->ranks[best].straggler)
            s->c.straggler_waits += stragglers;
        if (aged(s, &s->ranks[best], now))
            s->c.aged_grants++;
        hold_end(s, n, now);
        grant(s, members, n, now);
    }
}

/* A grant ends: its outcome is known (DONE), assumed (next REQ, expiry: counted as applied).
 * A group member's other than the leader's holds no share of O: only its request ends. */
static void end_grant(struct ina_sched *s, struct ina_sched_rank *k, int applied)
{
    k->state = INA_SCHED_ANSWERED;
    if (k->member)
        return;
    s->outstanding--;
    if (applied)
        s->applied++;
}

/* ---- Membership and failures (§15.9) ---------------------------------------------------- */

unsigned ina__sched_live_ranks(const struct ina_sched *s)
{
    unsigned n = 0;
    for (unsigned r = 0; r < s->p.world; r++)
        n += s->ranks[r].bound && !s->ranks[r].departed;
    return n;
}

static void depart(struct ina_sched *s, unsigned r, const char *why)
{
    struct ina_sched_rank *k = &s->ranks[r];
    if (k->departed)
        return;
    k->departed = 1;
    s->c.ranks_departed++;
    ina__log(INA_LOG_WARN, "rank_departed", INA_KV_I("rank", r), INA_KV_S("reason", why),
            INA_KV_I("world", ina__sched_live_ranks(s)));
    mark_stragglers(s);
}

/* A datagram of rank r: a departed rank is back in the world. */
static void heard_from(struct ina_sched *s, unsigned r)
{
    struct ina_sched_rank *k = &s->ranks[r];
    if (!k->departed)
        return;
    k->departed = 0;
    k->depart_voided = 0;
    s->c.ranks_returned++;
    ina__log(INA_LOG_INFO, "rank_returned", INA_KV_I("rank", r), INA_KV_I("world", ina__sched_live_ranks(s)));
}

/* Server i is heard from within the failover time (counting from the start for one never
 * heard). */
static int server_alive(const struct ina_sched *s, unsigned i, uint64_t now)
{
    uint64_t last = s->srv[i].last_rx_ns ? s->srv[i].last_rx_ns : s->start_ns;
    return now - last <= s->p.failover_ns;
}

/* The server that is not the authority, or -1. */
static int other_server(const struct ina_sched *s)
{
    return s->p.nservers == 2 ? (int)(1 - s->auth) : -1;
}

/* PS_SYNC to server i: action on the job, with its argument and count. */
static void send_sync(struct ina_sched *s, unsigned i, uint32_t action, uint32_t arg, uint32_t n)
{
    uint8_t *b = tx_slot(s, INA_HDR_LEN + INA_PS_SYNC_LEN, &s->p.server[i]);
    if (!b)
        return;
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_SYNC);
    h.rank = INA_RANK_SWITCH;
    h.slot = ++s->srv[i].q;
    ina__hdr_encode(b, &h);
    uint8_t *p = b + INA_HDR_LEN;
    memset(p, 0, INA_PS_SYNC_LEN);
    memcpy(p, s->p.job, strnlen(s->p.job, 31));
    ina__put32(p + 32, action);
    ina__put32(p + 36, arg);
    ina__put32(p + 40, n);
    s->c.syncs_sent++;
}

static struct ina_sched_void *void_add(struct ina_sched *s, uint8_t state, unsigned rank,
                                       uint32_t stamp, uint32_t n, int in_o)
{
    for (unsigned i = 0; i < INA_SCHED_VOIDS; i++) {
        struct ina_sched_void *v = &s->voids[i];
        if (v->state != INA_SCHED_VOID_FREE)
            continue;
        *v = (struct ina_sched_void){.state = state, .in_o = (uint8_t)in_o,
                                     .rank = (uint16_t)rank, .stamp = stamp, .n = n};
        return v;
    }
    return NULL;
}

/* A grant's lease ran out: its worker died, left or stalls. With servers, its stamp stays in
 * O until the authority says whether its update came (taken) or not (voided); without, it
 * counts as applied, as before §15.9. */
static void expire(struct ina_sched *s, unsigned r, uint64_t now)
{
    struct ina_sched_rank *k = &s->ranks[r];
    s->c.grants_expired++;
    ina__log(INA_LOG_WARN, "grant_expired", INA_KV_I("rank", r), INA_KV_I("uid", k->uid),
            INA_KV_I("stamp", k->stamp));
    if (!s->p.nservers || k->member ||
        !void_add(s, INA_SCHED_VOID_ASK, r, k->stamp, 1, 1)) {
        end_grant(s, k, 1); /* it may still be applied: counted as applied (the safe side) */
        depart(s, r, "lease_expired");
    } else {
        /* Its share of O moves to the void. It departs if the stamp is voided: a worker
         * whose update is held behind a dead one's stamp outlives its lease too. */
        k->state = INA_SCHED_ANSWERED;
    }
    (void)now;
}

/* The authority resolved a void of an expired grant (or a restart's orphans). */
static void void_resolved(struct ina_sched *s, struct ina_sched_void *v)
{
    if (v->in_o) {
        v->in_o = 0;
        s->outstanding--;
    }
}

/* A PS_STATE about stamps being voided, from server i. */
static void on_void_state(struct ina_sched *s, unsigned i, uint32_t arg, uint32_t result,
                          uint32_t run, uint64_t now)
{
    const struct ina_sched_server *sv = &s->srv[i];
    int o = other_server(s);
    for (unsigned e = 0; e < INA_SCHED_VOIDS; e++) {
        struct ina_sched_void *v = &s->voids[e];
        if (v->stamp != arg || v->state == INA_SCHED_VOID_FREE ||
            (v->state == INA_SCHED_VOID_ASK) != (i == s->auth))
            continue;
        if (result == INA_PS_FATE_NO_JOB) { /* no job there: nothing to void */
            void_resolved(s, v);
            v->state = INA_SCHED_VOID_FREE;
            continue;
        }
        if (v->state == INA_SCHED_VOID_ASK && v->n > 1) { /* a restart's orphans */
            if ((int32_t)(sv->next_stamp - (v->stamp + v->n)) < 0)
                continue; /* not all resolved yet: asked again */
            v->state = INA_SCHED_VOID_FREE;
            s->repair_eager_ns = now + INA_SCHED_EAGER_NS; /* the other server: at once */
            if ((int32_t)(sv->next_stamp - s->next_stamp) > 0)
                s->next_stamp = sv->next_stamp;
            if (s->recovering == INA_SCHED_RECOVER_VOID) {
                s->recovering = INA_SCHED_RUNNING;
                s->c.recoveries++;
                ina__log(INA_LOG_WARN, "recovered", INA_KV_S("reason", "orphans_voided"),
                        INA_KV_I("version", ina__sched_known_applied(s)), INA_KV_I("next_stamp", s->next_stamp),
                        INA_KV_I("world", ina__sched_live_ranks(s)));
            }
            continue;
        }
        if (v->state == INA_SCHED_VOID_ASK) {
            if (result == INA_PS_FATE_HELD || result == INA_PS_FATE_WAITING)
                continue; /* its update is here, or earlier stamps are not: asked again */
            void_resolved(s, v);
            if (result != INA_PS_FATE_VOIDED) {
                s->c.voids_late++; /* its update came after all (the worker is slow, or died
                                      after sending it) */
                v->state = INA_SCHED_VOID_FREE;
                continue;
            }
            s->c.stamps_voided++;
            s->repair_eager_ns = now + INA_SCHED_EAGER_NS;
            ina__log(INA_LOG_WARN, "stamp_voided", INA_KV_I("stamp", v->stamp),
                    INA_KV_I("rank", v->rank), INA_KV_I("version", sv->version));
            if (v->rank < s->p.world) {
                depart(s, v->rank, "stamp_voided");
                s->ranks[v->rank].depart_voided = 1; /* its servers are told it has gone */
            }
            v->state = o >= 0 ? INA_SCHED_VOID_RELAY : INA_SCHED_VOID_FREE;
            v->sent_ns = 0; /* at the other server now */
            continue;
        }
        /* RELAY: the other server voids it too, or it must already have. */
        if (result == INA_PS_FATE_HELD || result == INA_PS_FATE_WAITING)
            continue;
        if (result == INA_PS_FATE_VOIDED) {
            s->c.void_relays++;
        } else if (result == INA_PS_FATE_TAKEN) {
            s->c.replica_diverged++; /* it took what the authority voided: a bug, never */
            ina__log(INA_LOG_ERROR, "replica_diverged", INA_KV_I("stamp", v->stamp),
                    INA_KV_I("server", i));
        }
        v->state = INA_SCHED_VOID_FREE;
    }
    (void)run;
    schedule(s, now);
}

/* The other server lags the authority on the same stamp: ask the authority about it, then
 * void it there too, or replay its update (§15.9). */
static void repair_tick(struct ina_sched *s, uint64_t now)
{
    int o = other_server(s);
    if (o < 0)
        return;
    struct ina_sched_server *a = &s->srv[s->auth], *b = &s->srv[o];
    if (!a->have_state || !b->have_state || !server_alive(s, s->auth, now) ||
        !server_alive(s, (unsigned)o, now) || (int32_t)(b->next_stamp - a->next_stamp) >= 0) {
        b->lag_since_ns = 0;
        s->repair = 0;
        return;
    }
    /* Right after the authority voided stamps, the other server lags for that reason: ask at
     * once. Otherwise only a lag that stays across a probe (the copies may be on their way). */
    int eager = now < s->repair_eager_ns;
    if (!b->lag_since_ns || b->lag_stamp != b->next_stamp) {
        b->lag_stamp = b->next_stamp;
        b->lag_since_ns = now;
        s->repair = 0;
        if (!eager)
            return;
    }
    if ((!eager && now - b->lag_since_ns < INA_SCHED_PROBE_NS) ||
        (s->repair && now - s->repair_ns < INA_SCHED_RESEND_NS))
        return;
    s->repair = 1; /* stuck across a probe: what became of that stamp at the authority? */
    s->repair_stamp = b->next_stamp;
    s->repair_ns = now;
    send_sync(s, s->auth, INA_PS_SYNC_STATE, b->next_stamp, 0);
}

/* The authority's answer about the stamp the other server is stuck at. */
static void on_repair_state(struct ina_sched *s, uint32_t action, uint32_t arg, uint32_t result,
                            uint32_t run, uint64_t now)
{
    int o = other_server(s);
    if (!s->repair || arg != s->repair_stamp || o < 0)
        return;
    if (action == INA_PS_SYNC_STATE && s->repair == 1) {
        if (result == INA_PS_FATE_VOIDED) { /* void it there too (unless being done) */
            int busy = 0;
            for (unsigned e = 0; e < INA_SCHED_VOIDS; e++)
                busy |= s->voids[e].state != INA_SCHED_VOID_FREE && s->voids[e].stamp == arg;
            if (!busy)
                void_add(s, INA_SCHED_VOID_RELAY, 0xFFFF, arg, run ? run : 1, 0);
            s->repair = 0;
        } else if (result == INA_PS_FATE_TAKEN &&
                   !(s->srv[s->auth].flags & INA_PS_STATE_CHAIN_PRIMARY) &&
                   now - s->srv[o].lag_since_ns >= INA_SCHED_REPAIR_NS) {
            s->repair = 2; /* its worker died before the replica had it: the primary has it */
            s->repair_ns = now;
            send_sync(s, s->auth, INA_PS_SYNC_REPLAY, arg, 0);
        } else {
            s->repair = 0; /* taken: the worker (or the chain) is still delivering it */
        }
    } else if (action == INA_PS_SYNC_REPLAY && s->repair == 2 && !run) {
        s->repair = 0; /* not kept there (its rank sent a later update: that worker is alive) */
    }
}

/* The scheduler started with servers: rebuild A and the next stamp from the authority. */
static void recovery_tick(struct ina_sched *s, uint64_t now)
{
    struct ina_sched_server *a = &s->srv[s->auth];
    int o = other_server(s);
    if (s->recovering == INA_SCHED_RECOVER_STATE) {
        if (a->no_job) {
            s->recovering = INA_SCHED_RUNNING; /* a new job: nothing to rebuild */
        } else if (a->have_state) {
            if ((int32_t)(a->version - s->floor) > 0)
                s->floor = a->version;
            s->next_stamp = a->next_stamp;
            s->recovering = INA_SCHED_RECOVER_RANKS;
            ina__log(INA_LOG_WARN, "recovering", INA_KV_I("version", a->version),
                    INA_KV_I("next_stamp", a->next_stamp), INA_KV_I("server", s->auth));
        } else if (now - s->start_ns > s->p.failover_ns) {
            if (o >= 0 && (s->srv[o].have_state || s->srv[o].no_job)) {
                s->auth = (unsigned)o; /* the primary is silent, the replica is not */
                s->c.server_failovers++;
            } else {
                s->recovering = INA_SCHED_RUNNING;
                ina__log(INA_LOG_WARN, "no_server_state", INA_KV_S("reason", "no_answer"));
            }
        }
        return;
    }
    if (s->recovering != INA_SCHED_RECOVER_RANKS)
        return;
    /* Every live rank asks again once its old grant, if any, was answered: then no stamp
     * beyond the authority's next one belongs to a live worker, and none is held. */
    int all = a->held == 0;
    for (unsigned r = 0; r < s->p.world && all; r++)
        if ((a->joined[r / 8] >> (r % 8) & 1) && !(a->left[r / 8] >> (r % 8) & 1))
            all = s->ranks[r].state == INA_SCHED_PENDING;
    if (all) {
        if ((int32_t)(a->next_stamp - s->next_stamp) > 0)
            s->next_stamp = a->next_stamp;
        s->recovering = INA_SCHED_RUNNING;
        s->c.recoveries++;
        ina__log(INA_LOG_WARN, "recovered", INA_KV_S("reason", "all_ranks_asked"),
                INA_KV_I("version", ina__sched_known_applied(s)), INA_KV_I("next_stamp", s->next_stamp),
                INA_KV_I("world", ina__sched_live_ranks(s)));
        schedule(s, now);
    } else if (now - s->start_ns > s->p.grant_timeout_ns) {
        /* A rank is silent (dead) or still on an old grant: after a lease, void whatever the
         * old scheduler may have granted and has not come (a late update is answered VOIDED). */
        if (void_add(s, INA_SCHED_VOID_ASK, 0xFFFF, a->next_stamp, INA_PS_VOID_MAX, 0))
            s->recovering = INA_SCHED_RECOVER_VOID;
    }
}

static void servers_tick(struct ina_sched *s, uint64_t now)
{
    int o = other_server(s);
    for (unsigned i = 0; i < s->p.nservers; i++) {
        struct ina_sched_server *sv = &s->srv[i];
        if (now - sv->last_probe_ns < INA_SCHED_PROBE_NS && sv->last_probe_ns)
            continue;
        sv->last_probe_ns = now;
        send_sync(s, i, INA_PS_SYNC_STATE, 0, 0);
        if (!sv->have_state)
            continue;
        for (unsigned r = 0; r < s->p.world; r++) /* until its state shows the rank left */
            if (s->ranks[r].depart_voided && (sv->joined[r / 8] >> (r % 8) & 1) &&
                !(sv->left[r / 8] >> (r % 8) & 1))
                send_sync(s, i, INA_PS_SYNC_DEPART, r, 0);
    }
    if (o >= 0 && !s->recovering && !server_alive(s, s->auth, now) &&
        server_alive(s, (unsigned)o, now) && s->srv[o].last_rx_ns) {
        ina__log(INA_LOG_WARN, "server_failover", INA_KV_I("from", s->auth), INA_KV_I("to", o),
                INA_KV_I("silent_ms", (now - s->srv[s->auth].last_rx_ns) / 1000000));
        s->auth = (unsigned)o;
        s->c.server_failovers++;
        s->repair = 0;
        o = other_server(s);
        /* Voids the old authority made but the new one has not: it decides them now (it has
         * no update of theirs: the workers send it one only after the old one answered). */
        for (unsigned e = 0; e < INA_SCHED_VOIDS; e++)
            if (s->voids[e].state == INA_SCHED_VOID_RELAY) {
                s->voids[e].state = INA_SCHED_VOID_ASK;
                s->voids[e].sent_ns = 0;
            }
    }
    recovery_tick(s, now);
    for (unsigned e = 0; e < INA_SCHED_VOIDS; e++) {
        struct ina_sched_void *v = &s->voids[e];
        if (v->state == INA_SCHED_VOID_FREE || (v->sent_ns && now - v->sent_ns < INA_SCHED_RESEND_NS))
            continue;
        unsigned i = v->state == INA_SCHED_VOID_ASK ? s->auth : (unsigned)o;
        if (v->state == INA_SCHED_VOID_RELAY && (o < 0 || !server_alive(s, i, now))) {
            v->state = INA_SCHED_VOID_FREE; /* nobody to repeat it at */
            continue;
        }
        v->sent_ns = now;
        send_sync(s, i, INA_PS_SYNC_VOID, v->stamp, v->n);
    }
    repair_tick(s, now);
}

/* A PS_STATE from server i (length and name checked). */
static void on_state(struct ina_sched *s, unsigned i, const uint8_t *body, uint64_t now)
{
    struct ina_sched_server *sv = &s->srv[i];
    uint32_t action = ina__get32(body + 32), arg = ina__get32(body + 36),
             result = ina__get32(body + 40), run = ina__get32(body + 44);
    s->c.states++;
    sv->last_rx_ns = now ? now : 1;
    sv->no_job = result == INA_PS_FATE_NO_JOB;
    sv->have_state = !sv->no_job;
    if (sv->have_state) {
        sv->version = ina__get32(body + 48);
        sv->next_stamp = ina__get32(body + 52);
        sv->held = ina__get32(body + 56);
        sv->flags = ina__get32(body + 60);
        sv->world = ina__get16(body + 64);
        sv->start = ina__get16(body + 66);
        sv->digest = ina__get64(body + 68);
        memcpy(sv->joined, body + 76, 32);
        memcpy(sv->left, body + 108, 32);
    }
    if (i == s->auth && sv->have_state) {
        if ((int32_t)(sv->version - s->floor) > 0)
            s->floor = sv->version; /* at most the version now: A stays a lower bound */
        if (!s->recovering && (int32_t)(sv->next_stamp - s->next_stamp) > 0) {
            s->c.stamps_resynced++; /* stamps it took that this scheduler never granted */
            ina__log(INA_LOG_WARN, "stamps_resynced", INA_KV_I("ours", s->next_stamp),
                    INA_KV_I("server", sv->next_stamp));
            s->next_stamp = sv->next_stamp;
        }
    }
    /* Both servers at the same stamp resolved the same stamps alike: same version, same
     * model (updates held do not change it). */
    if (s->p.nservers == 2 && s->srv[0].have_state && s->srv[1].have_state &&
        s->srv[0].next_stamp == s->srv[1].next_stamp &&
        (!s->checked || s->checked_stamp != s->srv[0].next_stamp)) {
        s->checked = 1;
        s->checked_stamp = s->srv[0].next_stamp;
        s->c.replica_checks++;
        if (s->srv[0].digest != s->srv[1].digest || s->srv[0].version != s->srv[1].version) {
            s->c.replica_mismatch++;
            ina__log(INA_LOG_ERROR, "replica_mismatch", INA_KV_I("stamp", s->checked_stamp),
                    INA_KV_I("version", s->srv[0].version));
        }
    }
    if (action == INA_PS_SYNC_VOID)
        on_void_state(s, i, arg, result, run, now);
    else if (i == s->auth && (action == INA_PS_SYNC_STATE || action == INA_PS_SYNC_REPLAY))
        on_repair_state(s, action, arg, result, run, now);
}

/* A PS_REPLAY from the authority (source, length and name checked): pass it on. */
static void on_replay(struct ina_sched *s, const uint8_t *buf, size_t len)
{
    int o = other_server(s);
    if (s->repair != 2 || ina__get32(buf + INA_HDR_LEN + 32) != s->repair_stamp || o < 0) {
        s->c.drops[INA_SCHED_DROP_ORDER]++; /* not asked for: nothing is relayed unasked */
        return;
    }
    s->tx.relay = buf;
    s->tx.relay_len = len;
    s->tx.relay_dst = s->p.server[o];
    s->c.replays_relayed++;
    s->repair = 0;
    s->srv[o].lag_since_ns = 0; /* give it a probe to take it before asking again */
}

/* ---- Input ------------------------------------------------------------------------ */

static void on_req(struct ina_sched *s, const struct ina_hdr *h, const uint8_t *body,
                   uint64_t now)
{
    struct ina_sched_rank *k = &s->ranks[h->rank];
    if (k->state != INA_SCHED_NONE && h->slot == k->uid) {
        s->c.request_dups++;
        if (k->state != INA_SCHED_PENDING && k->status != INA_ERR_CLOSED)
            send_grant(s, h->rank); /* the GRANT was lost (a LEAVE has no answer) */
        return;
    }
    if (k->state != INA_SCHED_NONE && (int32_t)(h->slot - k->uid) < 0) {
        s->c.drops[INA_SCHED_DROP_ORDER]++;
        return;
    }
    if (k->state == INA_SCHED_GRANTED) {
        s->c.implicit_dones++; /* it asks again: the last update was answered, DONE lost */
        end_grant(s, k, 1);
    }
    if (ina__get32(body + 4) & INA_SCHED_REQ_LEAVE) { /* it leaves: no answer (§15.9) */
        k->state = INA_SCHED_ANSWERED;
        k->uid = h->slot;
        k->status = INA_ERR_CLOSED;
        s->c.leaves++;
        depart(s, h->rank, "left");
        schedule(s, now);
        return;
    }
    heard_from(s, h->rank);
    /* The server has reached at least the version the update was computed on (updates sent
     * unscheduled, or before this scheduler started, are in it): A catches up. A fetch
     * request has no base yet. */
    k->fetch = h->seq == INA_SCHED_BASE_AT_GRANT;
    k->can_aggregate = (ina__get32(body + 4) & INA_SCHED_REQ_AGGREGATE) != 0;
    k->member = 0;
    k->group_size = 1;
    k->group_index = 0;
    if (!k->fetch && (int32_t)(h->seq - s->floor) > 0)
        s->floor = h->seq;
    s->c.fetch_requests += k->fetch;
    k->state = INA_SCHED_PENDING;
    k->uid = h->slot;
    k->base = h->seq;
    k->bytes = ina__get32(body);
    k->since_ns = now;
    s->c.requests++;
    schedule(s, now);
}

static void on_done(struct ina_sched *s, const struct ina_hdr *h, const uint8_t *body,
                    uint64_t now)
{
    struct ina_sched_rank *k = &s->ranks[h->rank];
    if (k->state != INA_SCHED_GRANTED || h->slot != k->uid || h->seq != k->stamp) {
        s->c.drops[INA_SCHED_DROP_ORDER]++; /* a copy, or for a grant that expired */
        return;
    }
    int32_t status = (int32_t)ina__get32(body);
    s->c.dones++;
    k->done_ns = now ? now : 1;
    heard_from(s, h->rank);
    if (k->member) { /* its part went into the group's update (or failed to): no outcome */
        s->c.member_dones++;
        s->c.member_failed += status != INA_SCHED_DONE_MEMBER;
        end_grant(s, k, 0);
        learn_rate(s, h->rank, ina__get32(body + 4), ina__get32(body + 8), now);
        schedule(s, now);
        return;
    }
    if (status == 0)
        s->c.done_applied++;
    else
        s->c.done_stale++;
    end_grant(s, k, status == 0);
    uint32_t version = ina__get32(body + 12); /* the server's version after this update */
    if ((int32_t)(version - s->floor) > 0)
        s->floor = version;
    learn_rate(s, h->rank, ina__get32(body + 4), ina__get32(body + 8), now);
    schedule(s, now);
}

/* PS_STATE or PS_REPLAY: from one of the job's servers (PS_REPLAY: the authority), of this
 * job (§15.9). */
static void server_input(struct ina_sched *s, const struct ina_hdr *h, const uint8_t *buf,
                         size_t len, const struct sockaddr_in *src, uint64_t now)
{
    int i = -1;
    for (unsigned k = 0; k < s->p.nservers; k++)
        if (s->p.server[k].sin_addr.s_addr == src->sin_addr.s_addr &&
            s->p.server[k].sin_port == src->sin_port)
            i = (int)k;
    if (i < 0 || (h->kind == INA_K_PS_REPLAY && (unsigned)i != s->auth)) {
        s->c.drops[INA_SCHED_DROP_SERVER]++;
        return;
    }
    if (h->kind == INA_K_PS_STATE ? len != INA_HDR_LEN + INA_PS_STATE_LEN
                                  : len < INA_HDR_LEN + 32 + INA_PS_UPDATE_PREFIX) {
        s->c.drops[INA_SCHED_DROP_LENGTH]++;
        return;
    }
    if (strncmp((const char *)buf + INA_HDR_LEN, s->p.job, sizeof(s->p.job)) != 0) {
        s->c.drops[INA_SCHED_DROP_NAME]++;
        return;
    }
    if (h->kind == INA_K_PS_STATE)
        on_state(s, (unsigned)i, buf + INA_HDR_LEN, now);
    else
        on_replay(s, buf, len);
}

void ina__sched_input(struct ina_sched *s, const uint8_t *buf, size_t len,
                     const struct sockaddr_in *src, uint64_t now_ns)
{
    struct ina_hdr h;
    s->c.rx_packets++;
    switch (ina__hdr_decode(buf, len, &h)) {
    case INA_PARSE_OK: break;
    case INA_PARSE_SHORT: s->c.drops[INA_SCHED_DROP_SHORT]++; return;
    case INA_PARSE_MAGIC: s->c.drops[INA_SCHED_DROP_MAGIC]++; return;
    case INA_PARSE_VERSION: s->c.drops[INA_SCHED_DROP_VERSION]++; return;
    default: s->c.drops[INA_SCHED_DROP_LENGTH]++; return;
    }
    const uint8_t *body = buf + INA_HDR_LEN;
    size_t blen = len - INA_HDR_LEN;
    if (!s->start_ns)
        s->start_ns = now_ns ? now_ns : 1;
    if (h.kind == INA_K_PS_STATE || h.kind == INA_K_PS_REPLAY) {
        server_input(s, &h, buf, len, src, now_ns);
        return;
    }
    if (h.kind != INA_K_SCHED_REQ && h.kind != INA_K_SCHED_DONE) {
        s->c.drops[INA_SCHED_DROP_KIND]++;
        return;
    }
    if (blen != (h.kind == INA_K_SCHED_REQ ? INA_SCHED_REQ_LEN : INA_SCHED_DONE_LEN)) {
        s->c.drops[INA_SCHED_DROP_LENGTH]++;
        return;
    }
    if (h.rank >= s->p.world) {
        s->c.drops[INA_SCHED_DROP_RANK]++;
        return;
    }
    struct ina_sched_rank *k = &s->ranks[h.rank];
    if (h.kind == INA_K_SCHED_REQ &&
        strncmp((const char *)body + 8, s->p.job, sizeof(s->p.job)) != 0) {
        s->c.drops[INA_SCHED_DROP_NAME]++;
        return;
    }
    if (h.kind == INA_K_SCHED_REQ && !k->bound) {
        k->bound = 1; /* the first REQ of a rank fixes its address (as a JOIN would) */
        k->addr = *src;
        ina__log(INA_LOG_INFO, "rank_bound", INA_KV_I("rank", h.rank),
                INA_KV_I("port", ntohs(src->sin_port)), INA_KV_I("world", ina__sched_live_ranks(s)));
    }
    if (!k->bound || k->addr.sin_addr.s_addr != src->sin_addr.s_addr ||
        k->addr.sin_port != src->sin_port) {
        s->c.drops[INA_SCHED_DROP_SOURCE]++;
        return;
    }
    if (h.kind == INA_K_SCHED_REQ)
        on_req(s, &h, body, now_ns);
    else
        on_done(s, &h, body, now_ns);
}

void ina__sched_tick(struct ina_sched *s, uint64_t now_ns)
{
    if (!s->start_ns)
        s->start_ns = now_ns ? now_ns : 1;
    for (unsigned r = 0; r < s->p.world; r++) {
        struct ina_sched_rank *k = &s->ranks[r];
        if (k->state == INA_SCHED_GRANTED && now_ns - k->since_ns > s->p.grant_timeout_ns)
            expire(s, r, now_ns);
    }
    if (s->p.nservers)
        servers_tick(s, now_ns);
    schedule(s, now_ns);
}

#define SCHED_COUNTERS(X)                                                                  \
    X(rx_packets) X(tx_packets) X(tx_errors) X(requests) X(request_dups) X(grants)          \
    X(refused_stale) X(dones) X(done_applied) X(done_stale) X(implicit_dones)              \
    X(grants_expired) X(bound_violations) X(straggler_waits) X(fetch_requests) X(aged_grants)     \
    X(groups) X(group_members) X(member_dones) X(member_failed) X(holds) X(holds_joined)     \
    X(hold_us) X(hold_predicted_us) X(leaves) X(ranks_departed)                               \
    X(ranks_returned) X(syncs_sent) X(states) X(stamps_voided) X(voids_late) X(void_relays)  \
    X(replays_relayed) X(replica_checks) X(replica_mismatch) X(replica_diverged)             \
    X(server_failovers) X(recoveries) X(stamps_resynced)

void ina__sched_counters_print(const struct ina_sched *s, FILE *f)
{
    const struct ina_sched_counters *c = &s->c;
    fprintf(f, "ina-sched counters:\n");
#define X(name) fprintf(f, "  %-16s %llu\n", #name, (unsigned long long)c->name);
    SCHED_COUNTERS(X)
#undef X
    for (int d = 0; d < INA_SCHED_DROP__COUNT; d++)
        fprintf(f, "  drop_%-11s %llu\n", ina__sched_drop_name(d), (unsigned long long)c->drops[d]);
    for (unsigned r = 0; r < s->p.world; r++)
        if (s->ranks[r].samples)
            fprintf(f, "  rank %-3u rate %.0f B/s%s%s\n", r, s->ranks[r].rate,
                    s->ranks[r].straggler ? " (straggler)" : "",
                    s->ranks[r].departed ? " (departed)" : "");
}
