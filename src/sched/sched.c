/* sched.c: ina-sched's engine: REQ/GRANT/DONE, the delay-bounded, shortest-finish-first grant rule. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    if (p->world == 0 || p->world > INA_MAX_WORKERS || p->window == 0 || p->job[0] == '\0' ||
        !memchr(p->job, 0, sizeof(p->job)) || !(p->initial_rate > 0) ||
        !(p->straggler_ratio >= 0 && p->straggler_ratio < 1) || p->aggregate > p->world)
        return -EINVAL;
    s->p = *p;
    return 0;
}

void ina__sched_tx_reset(struct ina_sched *s)
{
    s->c.drops[INA_SCHED_DROP_TXQ] += s->tx.overflows;
    s->tx.overflows = 0;
    s->tx.n = 0;
}

/* GRANT to rank r: its current request's answer (a grant with its stamp, or a refusal). */
static void send_grant(struct ina_sched *s, unsigned r)
{
    if (s->tx.n >= INA_SCHED_TX_MSGS) {
        s->tx.overflows++;
        return;
    }
    const struct ina_sched_rank *k = &s->ranks[r];
    uint8_t *b = s->tx.buf[s->tx.n];
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
    s->tx.dst[s->tx.n++] = k->addr;
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
        if (s->ranks[r].samples >= 2)
            rates[n++] = s->ranks[r].rate;
    if (n < 2 || s->p.straggler_ratio <= 0)
        return;
    qsort(rates, n, sizeof(double), cmp_double);
    double median = n % 2 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
    for (unsigned r = 0; r < s->p.world; r++) {
        struct ina_sched_rank *k = &s->ranks[r];
        uint8_t was = k->straggler;
        k->straggler = k->samples >= 2 && k->rate < s->p.straggler_ratio * median;
        if (k->straggler != was)
            ina__log(INA_LOG_INFO, k->straggler ? "straggler" : "straggler_recovered",
                    INA_KV_I("rank", r), INA_KV_I("rate_kbps", (long long)(k->rate / 1000)),
                    INA_KV_I("median_kbps", (long long)(median / 1000)));
    }
}

static void learn_rate(struct ina_sched *s, unsigned r, uint32_t bytes, uint32_t usec)
{
    struct ina_sched_rank *k = &s->ranks[r];
    if (usec == 0 || bytes == 0)
        return;
    double rate = (double)bytes * 1e6 / usec;
    k->rate = k->samples ? 0.7 * k->rate + 0.3 * rate : rate;
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
static uint32_t known_applied(const struct ina_sched *s)
{
    return (int32_t)(s->floor - s->applied) > 0 ? s->floor : s->applied;
}

/* A request's base: a fetch request's is A when it is granted (the worker pulls after the
 * grant and the server has applied at least A by then). */
static uint32_t req_base(const struct ina_sched *s, const struct ina_sched_rank *k)
{
    return k->fetch && k->state == INA_SCHED_PENDING ? known_applied(s) : k->base;
}

/* The request's delay at the server is at most A + O - base (one version per grant ahead);
 * for a fetch request that is O. */
static int fits(const struct ina_sched *s, const struct ina_sched_rank *k)
{
    return known_applied(s) + s->outstanding - req_base(s, k) <= s->p.max_delay;
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
        k->bound_at_grant = known_applied(s) + s->outstanding;
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
    return s->p.max_delay - (known_applied(s) + s->outstanding - req_base(s, k));
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
 * Refuse what can never fit, then grant while the window has room: among the
 * feasible requests the first by before(); if it can aggregate, the next
 * groupable requests by before() join it, up to `aggregate` members.
 */
static void schedule(struct ina_sched *s, uint64_t now)
{
    for (unsigned r = 0; r < s->p.world; r++) {
        struct ina_sched_rank *k = &s->ranks[r];
        if (k->state == INA_SCHED_PENDING && !k->fetch &&
            known_applied(s) - k->base > s->p.max_delay) {
            k->state = INA_SCHED_ANSWERED;
            k->status = INA_ERR_STALE;
            k->bound_at_grant = known_applied(s);
            s->c.refused_stale++;
            send_grant(s, r);
        }
    }
    while (s->outstanding < s->p.window) {
        unsigned stragglers = 0, members[INA_MAX_WORKERS], n = 0;
        int best = best_request(s, NULL, &stragglers, now);
        if (best < 0)
            return;
        if (!s->ranks[best].straggler)
            s->c.straggler_waits += stragglers;
        if (aged(s, &s->ranks[best], now))
            s->c.aged_grants++;
        members[n++] = (unsigned)best;
        if (groupable(s, &s->ranks[best])) {
            uint8_t picked[INA_MAX_WORKERS] = {0};
            picked[best] = 1;
            int next;
            while (n < s->p.aggregate && (next = best_request(s, picked, NULL, now)) >= 0) {
                picked[next] = 1;
                members[n++] = (unsigned)next;
            }
        }
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

/* ---- Input ------------------------------------------------------------------------ */

static void on_req(struct ina_sched *s, const struct ina_hdr *h, const uint8_t *body,
                   uint64_t now)
{
    struct ina_sched_rank *k = &s->ranks[h->rank];
    if (k->state != INA_SCHED_NONE && h->slot == k->uid) {
        s->c.request_dups++;
        if (k->state != INA_SCHED_PENDING)
            send_grant(s, h->rank); /* the GRANT was lost */
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
    if (k->member) { /* its part went into the group's update (or failed to): no outcome */
        s->c.member_dones++;
        s->c.member_failed += status != INA_SCHED_DONE_MEMBER;
        end_grant(s, k, 0);
        learn_rate(s, h->rank, ina__get32(body + 4), ina__get32(body + 8));
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
    learn_rate(s, h->rank, ina__get32(body + 4), ina__get32(body + 8));
    schedule(s, now);
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
                INA_KV_I("port", ntohs(src->sin_port)));
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
    for (unsigned r = 0; r < s->p.world; r++) {
        struct ina_sched_rank *k = &s->ranks[r];
        if (k->state == INA_SCHED_GRANTED && now_ns - k->since_ns > s->p.grant_timeout_ns) {
            s->c.grants_expired++;
            ina__log(INA_LOG_WARN, "grant_expired", INA_KV_I("rank", r), INA_KV_I("uid", k->uid),
                    INA_KV_I("stamp", k->stamp));
            end_grant(s, k, 1); /* it may still be applied: counted as applied (the safe side) */
        }
    }
    schedule(s, now_ns);
}

#define SCHED_COUNTERS(X)                                                                  \
    X(rx_packets) X(tx_packets) X(tx_errors) X(requests) X(request_dups) X(grants)          \
    X(refused_stale) X(dones) X(done_applied) X(done_stale) X(implicit_dones)              \
    X(grants_expired) X(bound_violations) X(straggler_waits) X(fetch_requests) X(aged_grants)     \
    X(groups) X(group_members) X(member_dones) X(member_failed)

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
            fprintf(f, "  rank %-3u rate %.0f B/s%s\n", r, s->ranks[r].rate,
                    s->ranks[r].straggler ? " (straggler)" : "");
}
