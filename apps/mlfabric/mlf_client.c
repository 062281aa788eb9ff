/* mlf_client.c: the worker's side of MLfabric (PROTOCOL.md §15.4): every wait has a deadline. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "ina.h"
#include "mlf_agg.h"
#include "mlf_client.h"

static int same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

static void send_to(struct mlf_client *c, const uint8_t *b, size_t len, const struct sockaddr_in *d)
{
    sendto(c->fd, b, len, 0, (const struct sockaddr *)d, sizeof(*d));
}

/* The wait before the next resend of a datagram still unanswered after waiting `wait`:
 * doubled, at most MLF_RTO_MAX x RTO. Many workers that resend at a fixed RTO into a
 * server's queue longer than the RTO (unscheduled sending: every worker at once) resend
 * copies of what is still queued, fill the queue, lose fragments of every large datagram
 * and collapse; backing off keeps the offered load near what the link carries. */
#define MLF_RTO_MAX 16

static uint64_t backoff(const struct mlf_client *c, uint64_t wait)
{
    return 2 * wait < MLF_RTO_MAX * c->rto_ns ? 2 * wait : MLF_RTO_MAX * c->rto_ns;
}

/* Receive one datagram until the absolute deadline. @return its length, 0 at the deadline. */
static size_t recv_until(struct mlf_client *c, uint8_t *b, size_t cap, struct sockaddr_in *from,
                         uint64_t deadline)
{
    for (;;) {
        uint64_t now = ina__clock_ns();
        if (now >= deadline)
            return 0;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int ms = (int)((deadline - now + 999999) / 1000000);
        if (poll(&p, 1, ms) <= 0)
            continue;
        socklen_t sl = sizeof(*from);
        ssize_t n = recvfrom(c->fd, b, cap, MSG_DONTWAIT, (struct sockaddr *)from, &sl);
        if (n >= INA_HDR_LEN)
            return (size_t)n;
    }
}

static void fill_hdr(const struct mlf_client *c, const struct mlf_server *s, struct ina_hdr *h,
                     uint8_t kind)
{
    ina__hdr_init(h, kind);
    h->job = s->job;
    h->session = s->session;
    h->token = s->token;
    h->rank = (uint16_t)c->rank;
}

/* A server stops answering: the replica takes over, if it has every update. */
static int fail_over(struct mlf_client *c, int dead)
{
    c->srv[dead].alive = 0;
    if (dead != c->primary)
        return 0;
    int other = 1 - dead;
    if (c->nsrv < 2 || !c->srv[other].alive || !c->replica_synced) {
        fprintf(stderr, "mlf[%d]: the primary server is silent and no synchronised replica is left\n",
                c->rank);
        return INA_ERR_TIMEOUT;
    }
    c->primary = other;
    c->st.failovers++;
    fprintf(stderr, "mlf[%d]: warning: primary server silent for %llu ms: failing over to the replica\n",
            c->rank, (unsigned long long)(c->failover_ns / 1000000));
    return 0;
}

int mlf_join(struct mlf_client *c, uint64_t timeout_ns)
{
    uint8_t b[INA_HDR_LEN + INA_PS_JOIN_BODY_LEN], r[65536];
    if (getrandom(&c->join.nonce, sizeof(c->join.nonce), 0) != sizeof(c->join.nonce))
        c->join.nonce = ina__clock_ns() ^ (uint64_t)c->rank << 48;
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_JOIN);
    h.rank = (uint16_t)c->rank;
    ina__hdr_encode(b, &h);
    ina__ps_join_encode(b + INA_HDR_LEN, &c->join);
    uint64_t end = ina__clock_ns() + timeout_ns;
    int joined[2] = {0, 0};
    c->primary = 0;
    c->replica_synced = 1;
    while (joined[0] + joined[1] < c->nsrv) {
        for (int i = 0; i < c->nsrv; i++)
            if (!joined[i])
                send_to(c, b, sizeof(b), &c->srv[i].addr);
        uint64_t until = ina__clock_ns() + 200000000ull;
        if (until > end)
            until = end;
        struct sockaddr_in from;
        size_t n;
        while ((n = recv_until(c, r, sizeof(r), &from, until)) > 0) {
            struct ina_hdr a;
            if (ina__hdr_decode(r, n, &a) != INA_PARSE_OK)
                continue;
            for (int i = 0; i < c->nsrv; i++) {
                if (!same_addr(&from, &c->srv[i].addr))
                    continue;
                if (a.kind == INA_K_PS_JOIN_NAK) {
                    fprintf(stderr, "mlf[%d]: server %d refused the join: %s\n", c->rank, i,
                            ina_strerror((int32_t)ina__get32(r + INA_HDR_LEN + 8)));
                    return INA_ERR_REJECTED;
                }
                struct ina_ps_join j;
                if (a.kind == INA_K_PS_JOIN_ACK && n >= INA_HDR_LEN + INA_PS_JOIN_BODY_LEN &&
                    ina__ps_join_decode(r + INA_HDR_LEN, n - INA_HDR_LEN, &j) == 0 &&
                    j.nonce == c->join.nonce) {
                    c->srv[i].job = a.job;
                    c->srv[i].session = a.session;
                    c->srv[i].token = a.token;
                    c->srv[i].alive = 1;
                    joined[i] = 1;
                }
            }
        }
        if (ina__clock_ns() >= end) {
            fprintf(stderr, "mlf[%d]: no JOIN_ACK from every server within %llu ms (are all ranks "
                            "and ina-ps running?)\n",
                    c->rank, (unsigned long long)(timeout_ns / 1000000));
            return INA_ERR_TIMEOUT;
        }
    }
    return 0;
}

/* The answer a request waits for, from server s (decoded into a): 1 it, 0 not it, or a
 * negative error that ends the wait. */
typedef int (*mlf_answer_fn)(const struct mlf_client *c, const struct ina_hdr *a, size_t n,
                             const void *want);

/*
 * Send req (len bytes) to server s, again while it is unanswered (backing off), until a
 * datagram from s that is_answer() takes comes into r (cap bytes): @return its length; 0 at
 * the deadline (timeout_ns); or is_answer()'s error.
 */
static long exchange(struct mlf_client *c, const struct mlf_server *s, const uint8_t *req,
                     size_t len, uint64_t timeout_ns, mlf_answer_fn is_answer, const void *want,
                     uint8_t *r, size_t cap)
{
    uint64_t give_up = ina__clock_ns() + timeout_ns, wait = c->rto_ns;
    while (ina__clock_ns() < give_up) {
        send_to(c, req, len, &s->addr);
        uint64_t until = ina__clock_ns() + wait;
        struct sockaddr_in from;
        size_t n;
        while ((n = recv_until(c, r, cap, &from, until)) > 0) {
            struct ina_hdr a;
            if (ina__hdr_decode(r, n, &a) != INA_PARSE_OK || !same_addr(&from, &s->addr))
                continue;
            int rc = is_answer(c, &a, n, want);
            if (rc != 0)
                return rc > 0 ? (long)n : rc;
        }
        c->st.retransmits++;
        wait = backoff(c, wait);
    }
    return 0;
}

/* PS_PULL_RESP of the pull whose id want points to, with every key's values. */
static int pull_answer(const struct mlf_client *c, const struct ina_hdr *a, size_t n,
                       const void *want)
{
    return a->kind == INA_K_PS_PULL_RESP && a->slot == *(const uint32_t *)want &&
           n == INA_HDR_LEN + (size_t)c->nkeys * c->join.dim * 4;
}

int mlf_pull(struct mlf_client *c, float *model, uint32_t *version)
{
    size_t d = c->join.dim;
    uint8_t b[INA_HDR_LEN + 8 * 4096], r[65536];
    if (c->nkeys > 4096 || INA_HDR_LEN + c->nkeys * d * 4 > sizeof(r))
        return -EINVAL;
    for (;;) {
        struct mlf_server *s = &c->srv[c->primary];
        struct ina_hdr h;
        fill_hdr(c, s, &h, INA_K_PS_PULL);
        h.slot = ++c->pull_id;
        h.count = (uint16_t)c->nkeys;
        ina__hdr_encode(b, &h);
        for (uint32_t k = 0; k < c->nkeys; k++)
            ina__put64(b + INA_HDR_LEN + 8 * k, k);
        size_t len = INA_HDR_LEN + 8 * (size_t)c->nkeys;
        long n = exchange(c, s, b, len, c->failover_ns, pull_answer, &h.slot, r, sizeof(r));
        struct ina_hdr a;
        if (n > 0 && ina__hdr_decode(r, (size_t)n, &a) == INA_PARSE_OK) {
            for (size_t i = 0; i < c->nkeys * d; i++)
                model[i] = ina__getf(r + INA_HDR_LEN + 4 * i);
            *version = a.seq; /* STALE: the version its values are of (§15.1) */
            c->st.pulls++;
            return 0;
        }
        int rc = fail_over(c, c->primary);
        if (rc != 0)
            return rc;
    }
}

int mlf_fetch(struct mlf_client *c, float *model, uint32_t *version)
{
    c->agg_fetch_rc = 1; /* no group fetch for this grant (yet) */
    if (!c->granted || c->group_size < 2 || !c->agg_switch || !c->agg_pull_switch)
        return mlf_pull(c, model, version);
    struct mlf_agg_group g = {.switch_addr = c->agg_switch, .job = c->join.name,
                              .stamp = c->grant_stamp, .size = c->group_size,
                              .index = c->group_index, .timeout_ms = c->agg_timeout_ms};
    int leader = c->group_index == 0;
    int rc = mlf_agg_open(&g, &c->agg_ctx);
    if (leader) {
        int prc = mlf_pull(c, model, version);
        if (prc != 0) { /* no server left: the worker fails as without a group */
            mlf_agg_close(c->agg_ctx);
            c->agg_ctx = NULL;
            return prc;
        }
    }
    if (rc == 0)
        rc = mlf_agg_bcast(c->agg_ctx, leader, model, (size_t)c->nkeys * c->join.dim, version);
    c->agg_fetch_rc = rc;
    if (rc == 0) {
        c->st.shared_pulls += !leader;
        return 0;
    }
    mlf_agg_close(c->agg_ctx);
    c->agg_ctx = NULL;
    fprintf(stderr, "mlf[%d]: warning: the group of stamp %u did not share the model (%s): "
                    "pulling it from the server\n",
            c->rank, g.stamp, ina_strerror(rc));
    return leader ? 0 : mlf_pull(c, model, version); /* the leader pulled it already */
}

/* A REQ (§15.3): the next request id, base, bytes and flags. */
static void encode_req(struct mlf_client *c, uint8_t *b, uint32_t base, uint32_t bytes,
                       uint32_t flags)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_SCHED_REQ);
    h.rank = (uint16_t)c->rank;
    h.slot = ++c->req_id;
    h.seq = base;
    ina__hdr_encode(b, &h);
    memset(b + INA_HDR_LEN, 0, INA_SCHED_REQ_LEN);
    ina__put32(b + INA_HDR_LEN, bytes);
    ina__put32(b + INA_HDR_LEN + 4, flags);
    memcpy(b + INA_HDR_LEN + 8, c->join.name, 32);
}

/*
 * REQ until GRANT. A scheduler silent for sched_timeout_ns may be restarting: the worker
 * sends nothing unscheduled, so the bound holds and the replica stays in step, and keeps
 * asking (a restarted ina-sched takes the same REQ, §15.9) until sched_fallback_ns.
 * @return 1 granted (*stamp), 0 refused (stale), -1 no scheduler (fall back).
 */
static int ask_sched(struct mlf_client *c, uint32_t base, uint32_t bytes, uint32_t *stamp)
{
    uint8_t b[INA_HDR_LEN + INA_SCHED_REQ_LEN], r[512];
    encode_req(c, b, base, bytes, c->agg_switch ? INA_SCHED_REQ_AGGREGATE : 0);
    uint64_t start = ina__clock_ns(), waiting = 0;
    uint64_t give_up = start + (c->sched_fallback_ns > c->sched_timeout_ns ? c->sched_fallback_ns
                                                                          : c->sched_timeout_ns);
    while (ina__clock_ns() < give_up) {
        if (!waiting && ina__clock_ns() - start >= c->sched_timeout_ns && ina__clock_ns() < give_up) {
            waiting = ina__clock_ns();
            c->st.sched_waits++;
            fprintf(stderr, "mlf[%d]: warning: no grant from ina-sched within %llu ms (it is "
                            "busy, or gone): sending nothing unscheduled (the bound holds), "
                            "asking again for up to %llu ms\n",
                    c->rank, (unsigned long long)(c->sched_timeout_ns / 1000000),
                    (unsigned long long)((give_up - start) / 1000000));
        }
        send_to(c, b, sizeof(b), &c->sched);
        uint64_t until = ina__clock_ns() + (c->rto_ns > 10000000ull ? 2 * c->rto_ns : 20000000ull);
        if (until > give_up)
            until = give_up;
        struct sockaddr_in from;
        size_t n;
        /* A grant waits for the window: keep listening, resend rarely. */
        while ((n = recv_until(c, r, sizeof(r), &from, until)) > 0) {
            struct ina_hdr a;
            if (ina__hdr_decode(r, n, &a) != INA_PARSE_OK || a.kind != INA_K_SCHED_GRANT ||
                a.slot != c->req_id || !same_addr(&from, &c->sched) ||
                n != INA_HDR_LEN + INA_SCHED_GRANT_LEN)
                continue;
            if (waiting) {
                c->st.reattaches++;
                fprintf(stderr, "mlf[%d]: ina-sched answers again after %llu ms: scheduled "
                                "again\n",
                        c->rank, (unsigned long long)((ina__clock_ns() - start) / 1000000));
            }
            if ((int32_t)ina__get32(r + INA_HDR_LEN) != 0)
                return 0;
            *stamp = ina__get32(r + INA_HDR_LEN + 4);
            uint32_t size = ina__get32(r + INA_HDR_LEN + 16), index = ina__get32(r + INA_HDR_LEN + 20);
            if (size < 1 || size > INA_MAX_WORKERS || index >= size)
                size = 1, index = 0; /* malformed: sent alone (the sum of its group fails) */
            c->group_size = (uint16_t)size;
            c->group_index = (uint16_t)index;
            return 1;
        }
    }
    return -1;
}

/* ina-sched is silent: every later update goes unscheduled (a warning, once). */
static void lose_sched(struct mlf_client *c)
{
    c->use_sched = 0;
    c->granted = 0;
    c->st.fallbacks++;
    uint64_t t = c->sched_fallback_ns > c->sched_timeout_ns ? c->sched_fallback_ns
                                                            : c->sched_timeout_ns;
    fprintf(stderr, "mlf[%d]: warning: no answer from ina-sched within %llu ms: sending "
                    "unscheduled from now on%s\n",
            c->rank, (unsigned long long)(t / 1000000),
            c->nsrv > 1 ? " (the replica is no longer kept in step)" : "");
}

static size_t update_len(const struct mlf_client *c)
{
    return INA_HDR_LEN + INA_PS_UPDATE_PREFIX + c->nkeys * ina__ps_entry_len(c->join.dim);
}

int mlf_begin(struct mlf_client *c)
{
    if (!c->use_sched || !c->fetch || c->granted)
        return 0;
    uint32_t stamp;
    int g = ask_sched(c, INA_SCHED_BASE_AT_GRANT, (uint32_t)update_len(c), &stamp);
    if (g < 0) {
        lose_sched(c);
        return 0;
    }
    if (g == 0) {
        fprintf(stderr, "mlf[%d]: ina-sched refused a fetch request (it never should: "
                        "PROTOCOL.md §15.3)\n", c->rank);
        return INA_ERR_PROTO;
    }
    c->granted = 1;
    c->grant_stamp = stamp;
    c->grant_ns = ina__clock_ns();
    return 0;
}

static void tell_done(struct mlf_client *c, uint32_t stamp, const struct mlf_result *res,
                      uint32_t bytes, uint64_t ns)
{
    uint8_t b[INA_HDR_LEN + INA_SCHED_DONE_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_SCHED_DONE);
    h.rank = (uint16_t)c->rank;
    h.slot = c->req_id;
    h.seq = stamp;
    ina__hdr_encode(b, &h);
    uint64_t us = ns / 1000;
    ina__put32(b + INA_HDR_LEN, (uint32_t)res->status);
    ina__put32(b + INA_HDR_LEN + 4, bytes);
    ina__put32(b + INA_HDR_LEN + 8, us > 0xFFFFFFFFu ? 0xFFFFFFFFu : us ? (uint32_t)us : 1);
    ina__put32(b + INA_HDR_LEN + 12, res->version);
    send_to(c, b, sizeof(b), &c->sched);
}

#define MLF_AGG_GIVE_UP 3

/*
 * A group grant (§15.7): sum this rank's update with the other members' in the switch.
 * The leader then sends the sum (*grad, *base and *members replaced), or its own update
 * alone if the group could not be summed: @return 0. Any other member is done (its DONE
 * sent, *res its outcome): @return 1.
 */
static int group_update(struct mlf_client *c, const float **grad, uint32_t *base,
                        uint32_t stamp, uint64_t since, uint32_t bytes, uint32_t *members,
                        struct mlf_result *res)
{
    size_t n = (size_t)c->nkeys * c->join.dim;
    if (!c->agg_buf)
        c->agg_buf = malloc(n * sizeof(float)); /* once: every group's sum has this size */
    struct mlf_agg_group g = {.switch_addr = c->agg_switch, .job = c->join.name,
                              .stamp = stamp, .size = c->group_size, .index = c->group_index,
                              .timeout_ms = c->agg_timeout_ms};
    uint32_t b = *base;
    /* A rank that gave up on the switch may still get a group grant it asked for before:
     * it takes its part as a failed one (a member drops its update, a leader sends alone).
     * A group that shared its pull sums in the job it opened then; one whose sharing failed
     * is broken on every member: its sum is not tried. */
    int rc = !c->agg_buf           ? -ENOMEM
             : c->agg_fetch_rc < 0 ? c->agg_fetch_rc
             : c->agg_ctx          ? mlf_agg_reduce(c->agg_ctx, *grad, c->agg_buf, n, &b)
             : c->agg_switch       ? mlf_agg_sum(&g, *grad, c->agg_buf, n, &b)
                                   : INA_ERR_CLOSED;
    mlf_agg_close(c->agg_ctx);
    c->agg_ctx = NULL;
    c->agg_fetch_rc = 1;
    c->agg_fail_streak = rc == 0 ? 0 : c->agg_fail_streak + 1;
    if (rc != 0) {
        c->st.agg_failures++;
        fprintf(stderr, "mlf[%d]: warning: the group of stamp %u (%u members) was not summed "
                        "(%s): %s\n",
                c->rank, stamp, g.size, ina_strerror(rc),
                g.index ? "this rank's update is dropped" : "sending this rank's update alone");
    }
    if (c->agg_switch && c->agg_fail_streak >= MLF_AGG_GIVE_UP) { /* a dead switch */
        fprintf(stderr, "mlf[%d]: warning: %d groups in a row not summed: no more aggregation "
                        "(this rank's requests no longer ask to be grouped)\n",
                c->rank, MLF_AGG_GIVE_UP);
        c->agg_switch = NULL;
    }
    if (c->group_index > 0) {
        struct mlf_result done = {.status = rc == 0 ? INA_SCHED_DONE_MEMBER : rc,
                                  .version = *base};
        tell_done(c, stamp, &done, bytes, ina__clock_ns() - since);
        *res = (struct mlf_result){.status = rc, .version = *base};
        c->st.aggregated += rc == 0;
        return 1;
    }
    if (rc == 0) {
        if (c->agg_mean) /* the members' mean: one step of a k-times larger batch */
            for (size_t i = 0; i < n; i++)
                c->agg_buf[i] /= (float)g.size;
        *grad = c->agg_buf;
        *base = b;
        *members = g.size;
        c->st.groups_led++;
    }
    return 0;
}

/* A server that keeps answering HELD is alive, but an earlier stamp may never come (its
 * worker died holding the grant, and no scheduler voids it): after this many failover
 * periods it counts as dead; with a scheduler, not before --sched-fallback-ms either (the
 * scheduler may be restarting, and its successor voids that stamp, §15.9). */
#define HELD_LIMIT 4

static uint64_t held_limit_ns(const struct mlf_client *c)
{
    uint64_t t = HELD_LIMIT * c->failover_ns;
    return c->sched_fallback_ns > t && c->sched.sin_port ? c->sched_fallback_ns : t;
}

/* Every key's entry (key, then dim floats of grad) from p on: an UPDATE's or a PUSH's. */
static void put_entries(const struct mlf_client *c, uint8_t *p, const float *grad)
{
    size_t d = c->join.dim, el = ina__ps_entry_len((unsigned)d);
    for (uint32_t k = 0; k < c->nkeys; k++, p += el) {
        ina__put64(p, k);
        for (size_t j = 0; j < d; j++)
            ina__putf(p + 8 + 4 * j, grad[k * d + j]);
    }
}

/* A SYNC job's answer: kind, slot and seq (the step), of this job's session. */
struct sync_want {
    uint8_t kind;
    uint32_t slot, seq;
};

/* The answer want describes; a PS_ABORT of the job ends the wait (INA_ERR_ABORTED). */
static int sync_answer(const struct mlf_client *c, const struct ina_hdr *a, size_t n,
                       const void *want)
{
    const struct sync_want *w = want;
    const struct mlf_server *s = &c->srv[c->primary];
    (void)n;
    if (a->session != s->session || a->token != s->token)
        return 0;
    if (a->kind == INA_K_PS_ABORT) {
        fprintf(stderr, "mlf[%d]: the server ended the job (PS_ABORT)\n", c->rank);
        return INA_ERR_ABORTED;
    }
    return a->kind == w->kind && a->slot == w->slot && a->seq == w->seq;
}

/* req to the primary until its answer (kind, slot 0, the step as seq): 0, INA_ERR_TIMEOUT
 * at the deadline, or INA_ERR_ABORTED. */
static int sync_request(struct mlf_client *c, const uint8_t *req, size_t len, uint8_t kind,
                        uint64_t timeout_ns)
{
    uint8_t r[512];
    struct sync_want w = {.kind = kind, .slot = 0, .seq = c->step};
    long rc = exchange(c, &c->srv[c->primary], req, len, timeout_ns, sync_answer, &w, r,
                       sizeof(r));
    return rc > 0 ? 0 : rc == 0 ? INA_ERR_TIMEOUT : (int)rc;
}

/* Synchronous training (--sync): the gradient as step c->step of ina-ps's SYNC mode, one
 * PS_PUSH datagram and its PS_COMMIT (PROTOCOL.md §14.2.4); the COMMIT_ACK comes once every
 * rank committed the step and the server applied their sum: the barrier. */
static int sync_update(struct mlf_client *c, const float *grad, struct mlf_result *res)
{
    size_t len = INA_HDR_LEN + c->nkeys * ina__ps_entry_len(c->join.dim);
    static __thread uint8_t b[INA_MAX_DATAGRAM];
    if (len > sizeof(b))
        return -EINVAL;
    struct mlf_server *s = &c->srv[c->primary];
    struct ina_hdr h;
    fill_hdr(c, s, &h, INA_K_PS_PUSH);
    h.slot = 0; /* packet index: the step's only PUSH */
    h.seq = c->step;
    h.count = (uint16_t)c->nkeys;
    ina__hdr_encode(b, &h);
    put_entries(c, b + INA_HDR_LEN, grad);
    c->st.tx_bytes[c->primary] += len;
    int rc = sync_request(c, b, len, INA_K_PS_PUSH_ACK, c->failover_ns);
    if (rc != 0)
        return rc;
    uint8_t commit[INA_HDR_LEN];
    fill_hdr(c, s, &h, INA_K_PS_COMMIT);
    h.slot = 1; /* PUSH packets sent for this step */
    h.seq = c->step;
    ina__hdr_encode(commit, &h);
    /* The server ignores a COMMIT it has (its answer comes when the step is applied) and
     * answers one of an applied step at once, so resending recovers a lost COMMIT_ACK. */
    rc = sync_request(c, commit, sizeof(commit), INA_K_PS_COMMIT_ACK, c->barrier_ns);
    if (rc == INA_ERR_TIMEOUT)
        fprintf(stderr, "mlf[%d]: step %u was not applied within %llu ms (a rank that did not "
                        "commit it?)\n",
                c->rank, c->step, (unsigned long long)(c->barrier_ns / 1000000));
    if (rc != 0)
        return rc;
    c->step++;
    c->st.applied++;
    *res = (struct mlf_result){.status = 0, .version = c->step, .delay = 0};
    return 0;
}

/* An UPDATE of a STALE job (§15.2): ask (unless a fetch grant is held), send to the
 * servers, wait for their answers, tell ina-sched. */
static int stale_update(struct mlf_client *c, const float *grad, uint32_t base,
                        struct mlf_result *res)
{
    size_t len = update_len(c);
    uint8_t *b[2], r[512];
    static __thread uint8_t bufs[2][INA_MAX_DATAGRAM];
    if (len > sizeof(bufs[0]))
        return -EINVAL;
    uint32_t stamp = INA_STAMP_NONE, members = 0;
    uint64_t since = 0; /* DONE's duration: from the fetch grant, or from the first send */
    if (c->granted) {
        stamp = c->grant_stamp;
        since = c->grant_ns;
        c->granted = 0;
    } else if (c->use_sched) {
        int g = ask_sched(c, base, (uint32_t)len, &stamp);
        if (g == 0) { /* the scheduler knows the server would refuse it: not sent */
            c->st.sched_refused++;
            *res = (struct mlf_result){.status = INA_ERR_STALE, .version = base};
            return 0;
        }
        if (g < 0)
            lose_sched(c);
    }
    if (stamp != INA_STAMP_NONE && c->group_size > 1) {
        uint64_t t = since ? since : ina__clock_ns();
        if (group_update(c, &grad, &base, stamp, t, (uint32_t)len, &members, res))
            return 0;
        since = t;
    }
    /* Unstamped updates go to the primary only: two servers could take them in different orders. */
    if (stamp == INA_STAMP_NONE && c->nsrv > 1)
        c->replica_synced = 0;
    c->uid++;
    int targets[2], nt = 0;
    for (int i = 0; i < c->nsrv; i++)
        if (c->srv[i].alive && (i == c->primary || (stamp != INA_STAMP_NONE && c->replica_synced)))
            targets[nt++] = i;
    for (int t = 0; t < nt; t++) {
        struct mlf_server *s = &c->srv[targets[t]];
        b[t] = bufs[t];
        struct ina_hdr h;
        fill_hdr(c, s, &h, INA_K_PS_UPDATE);
        h.slot = c->uid;
        h.seq = base;
        h.count = (uint16_t)c->nkeys;
        ina__hdr_encode(b[t], &h);
        ina__put32(b[t] + INA_HDR_LEN, stamp);
        ina__put32(b[t] + INA_HDR_LEN + 4, members);
        put_entries(c, b[t] + INA_HDR_LEN + INA_PS_UPDATE_PREFIX, grad);
    }
    uint64_t start = ina__clock_ns(), heard[2] = {start, start};
    if (!since)
        since = start;
    /* primary_heard: the primary answered this update (HELD or an outcome). With the workers
     * replicating, the replica's copy waits for it: then whatever the replica has, the
     * primary has too, so a stamp the primary voids (§15.9) is voided at the replica as
     * well, never taken there. */
    int acked[2] = {0, 0}, held_by[2] = {0, 0}, have = 0, primary_heard = 0, voided = 0;
    int replica_due = 0; /* the round after the primary's first answer sends the replica's copy */
    uint64_t wait = c->rto_ns;
    for (;;) {
        int waiting = 0;
        for (int t = 0; t < nt && !voided; t++) {
            int i = targets[t];
            if (acked[t] || !c->srv[i].alive)
                continue;
            if (i != c->primary && (c->chain || !primary_heard)) {
                /* chain: the primary forwards it there (§15.8); send: after the primary's
                 * answer. Sent to directly once it is the primary (failover). */
                heard[t] = ina__clock_ns();
                waiting |= !c->chain;
                continue;
            }
            uint64_t now = ina__clock_ns();
            if (now - start > held_limit_ns(c) && now - heard[t] <= c->failover_ns)
                fprintf(stderr, "mlf[%d]: server %d has held update %u (stamp %u) for %llu ms: "
                                "an earlier stamp never came (a worker died holding a grant, "
                                "and no ina-sched voided it?)\n",
                        c->rank, i, c->uid, stamp,
                        (unsigned long long)((now - start) / 1000000));
            if (now - heard[t] > c->failover_ns || now - start > held_limit_ns(c)) {
                int rc = fail_over(c, i);
                if (rc != 0)
                    return rc;
                continue;
            }
            waiting = 1;
            if (held_by[t] && now - heard[t] < 2 * c->rto_ns)
                continue; /* it holds a copy: resend only to recover a lost answer */
            send_to(c, b[t], len, &c->srv[i].addr);
            c->st.tx_bytes[i] += len;
        }
        if (!waiting || voided)
            break;
        uint64_t until = ina__clock_ns() + wait;
        struct sockaddr_in from;
        size_t n;
        while ((n = recv_until(c, r, sizeof(r), &from, until)) > 0) {
            struct ina_hdr a;
            if (ina__hdr_decode(r, n, &a) != INA_PARSE_OK || a.kind != INA_K_PS_UPDATE_ACK ||
                a.slot != c->uid || n != INA_HDR_LEN + INA_PS_UPDATE_ACK_LEN)
                continue;
            int32_t status = (int32_t)ina__get32(r + INA_HDR_LEN);
            int held = status == INA_PS_UPDATE_HELD;
            for (int t = 0; t < nt; t++) {
                int i = targets[t];
                if (!same_addr(&from, &c->srv[i].addr) || acked[t])
                    continue;
                if (i == c->primary && !primary_heard) {
                    primary_heard = 1;
                    replica_due = nt > 1 && !c->chain; /* the replica's copy goes now */
                }
                if (held) { /* alive, waiting for the stamps before ours: keep waiting */
                    heard[t] = ina__clock_ns();
                    held_by[t] = 1;
                    continue;
                }
                acked[t] = 1;
                if (i == c->primary || !have) {
                    res->status = status;
                    res->version = ina__get32(r + INA_HDR_LEN + 4);
                    res->delay = ina__get32(r + INA_HDR_LEN + 8);
                    have = 1;
                }
                if (i == c->primary && status == INA_PS_UPDATE_VOIDED)
                    voided = 1; /* never taken, and never to be: the replica gets nothing */
            }
            int all = 1;
            for (int t = 0; t < nt; t++)
                all &= acked[t] || !c->srv[targets[t]].alive ||
                       (c->chain && targets[t] != c->primary);
            if (all || voided || replica_due)
                break;
        }
        if (!replica_due)
            c->st.retransmits++;
        wait = replica_due ? c->rto_ns : backoff(c, wait); /* the replica's copy: a new send */
        replica_due = 0;
    }
    c->st.retransmits--; /* the last round resent nothing */
    if (!have)
        return INA_ERR_TIMEOUT;
    if (c->trace)
        fprintf(stderr, "mlf[%d]: update %u stamp %u base %u: %s version %u delay %u\n", c->rank,
                c->uid, stamp, base,
                res->status == 0                      ? "applied"
                : res->status == INA_PS_UPDATE_VOIDED ? "voided"
                                                      : "refused",
                res->version, res->delay);
    if (res->status == INA_PS_UPDATE_VOIDED) {
        c->st.voided++; /* ina-sched voided the stamp: it knows; no DONE */
        return 0;
    }
    if (res->status == 0)
        c->st.applied++;
    else
        c->st.stale++;
    if (stamp != INA_STAMP_NONE)
        tell_done(c, stamp, res, (uint32_t)len, ina__clock_ns() - since);
    return 0;
}

int mlf_update(struct mlf_client *c, const float *grad, uint32_t base, struct mlf_result *res)
{
    return c->sync ? sync_update(c, grad, res) : stale_update(c, grad, base, res);
}

void mlf_leave(struct mlf_client *c)
{
    mlf_agg_close(c->agg_ctx);
    c->agg_ctx = NULL;
    free(c->agg_buf);
    c->agg_buf = NULL;
    if (c->use_sched) { /* out of the scheduler's world at once (§15.9); no answer */
        uint8_t q[INA_HDR_LEN + INA_SCHED_REQ_LEN];
        encode_req(c, q, INA_SCHED_BASE_AT_GRANT, 0, INA_SCHED_REQ_LEAVE);
        send_to(c, q, sizeof(q), &c->sched);
        send_to(c, q, sizeof(q), &c->sched);
    }
    uint8_t b[INA_HDR_LEN + INA_PS_LEAVE_BODY_LEN];
    for (int i = 0; i < c->nsrv; i++) {
        if (!c->srv[i].alive)
            continue;
        struct ina_hdr h;
        fill_hdr(c, &c->srv[i], &h, INA_K_PS_LEAVE);
        ina__hdr_encode(b, &h);
        memset(b + INA_HDR_LEN, 0, sizeof(b) - INA_HDR_LEN);
        send_to(c, b, sizeof(b), &c->srv[i].addr);
    }
}
