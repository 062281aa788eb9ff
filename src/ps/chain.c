/* chain.c: chain replication between two ina-ps (PROTOCOL.md §15.8): forwards, their
 * acknowledgements, retransmission and the deadline; the worker's answer waits for the replica. */
#include "ps/chain.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/log.h"

static struct ina_ps_chain_fwd *q_at(struct ina_ps_chain_job *cj, unsigned i)
{
    return &cj->q[(cj->head + i) % INA_PS_CHAIN_WINDOW];
}

/* Forget the job's forwards (its session ended, or the chain is detached). */
static void cj_reset(struct ina_ps *ps, struct ina_ps_chain_job *cj)
{
    for (unsigned i = 0; i < cj->n; i++)
        free(q_at(cj, i)->buf);
    free(cj->q);
    ina__ps_uncharge(ps, &cj->bytes, cj->bytes);
    cj->q = NULL;
    cj->head = cj->n = 0;
    cj->session = 0;
    cj->broken = 0;
}

static uint64_t rto_ns(const struct ina_ps_chain *ch)
{
    if (ch->srtt_ns == 0)
        return INA_PS_CHAIN_RTO_INIT_NS;
    uint64_t r = ch->srtt_ns + 4 * ch->rttvar_ns;
    if (r < 2 * ch->srtt_ns)
        r = 2 * ch->srtt_ns;
    return r < INA_PS_CHAIN_RTO_MIN_NS ? INA_PS_CHAIN_RTO_MIN_NS
           : r > INA_PS_CHAIN_RTO_MAX_NS ? INA_PS_CHAIN_RTO_MAX_NS : r;
}

/* When the oldest forward e is due again: the RTO, doubled per try already made, at most
 * RTO_MAX, from its last send or from when it became the oldest, whichever is later. */
static uint64_t due_ns(const struct ina_ps_chain *ch, const struct ina_ps_chain_job *cj,
                       const struct ina_ps_chain_fwd *e)
{
    unsigned shift = e->tries > 1 ? (e->tries - 1 < 4 ? e->tries - 1 : 4) : 0;
    uint64_t t = rto_ns(ch) << shift;
    uint64_t from = e->sent_ns > cj->head_ns ? e->sent_ns : cj->head_ns;
    return from + (t > INA_PS_CHAIN_RTO_MAX_NS ? INA_PS_CHAIN_RTO_MAX_NS : t);
}

/* Jacobson's estimator, from first tries only (Karn). */
static void rtt_sample(struct ina_ps_chain *ch, uint64_t r)
{
    if (ch->srtt_ns == 0) {
        ch->srtt_ns = r ? r : 1;
        ch->rttvar_ns = r / 2;
        return;
    }
    uint64_t dev = r > ch->srtt_ns ? r - ch->srtt_ns : ch->srtt_ns - r;
    ch->rttvar_ns = (3 * ch->rttvar_ns + dev) / 4;
    ch->srtt_ns = (7 * ch->srtt_ns + r) / 8;
    if (ch->srtt_ns == 0)
        ch->srtt_ns = 1;
}

/* Queue one (re)send of e to the replica. @return 0 when the reply queue is full. */
static int fwd_send(struct ina_ps *ps, struct ina_ps_chain *ch, struct ina_ps_chain_fwd *e)
{
    uint8_t *b = ina__ps_tx_buf(ps, e->len);
    if (!b)
        return 0;
    memcpy(b, e->buf, e->len);
    ina__ps_tx_push(ps, b, e->len, &ch->to);
    e->sent_ns = ch->now_ns ? ch->now_ns : 1;
    e->tries++;
    return 1;
}

/* The oldest forward is acknowledged (or given up): answer its worker with the outcome. */
static void release_head(struct ina_ps *ps, struct ina_ps_job *job, struct ina_ps_chain_job *cj)
{
    struct ina_ps_chain_fwd e = *q_at(cj, 0);
    cj->head = (cj->head + 1) % INA_PS_CHAIN_WINDOW;
    cj->n--; /* first: the ack hook then sees the stamp as no longer pending */
    cj->head_ns = ps->chain->now_ns; /* the next one's resend timer starts now at the earliest */
    free(e.buf);
    ina__ps_uncharge(ps, &cj->bytes, e.len);
    const struct ina_ps_lastupd *lu = &job->last[e.rank];
    if (lu->uid == e.uid && lu->stamp == e.stamp && lu->status != INA_PS_UPDATE_HELD) {
        ina__ps_send_update_ack(ps, job, lu, &job->members[e.rank].addr);
        ps->c.chain_released++;
    }
}

/* The replica missed the deadline: the primary answers alone from now on (this session). */
static void chain_break(struct ina_ps *ps, struct ina_ps_job *job, struct ina_ps_chain_job *cj,
                        const char *why)
{
    ina__log(INA_LOG_WARN, "chain_broken", INA_KV_I("job", job->id), INA_KV_S("name", job->p.name),
            INA_KV_I("stamp", cj->n ? q_at(cj, 0)->stamp : job->next_stamp),
            INA_KV_I("pending", cj->n), INA_KV_S("reason", why));
    ps->c.chain_broken++;
    cj->broken = 1;
    while (cj->n)
        release_head(ps, job, cj);
}

/* ---- Hooks ---------------------------------------------------------------------------- */

/*
 * A forward's buffer of flen bytes, and the job's ring on first use, both charged to
 * --max-memory: the UPDATEs are the workers', and a slow replica must not let them take
 * the host's memory. @return the buffer, or NULL with *why "max_memory" or "out_of_memory".
 */
static uint8_t *fwd_alloc(struct ina_ps *ps, struct ina_ps_chain_job *cj, size_t flen,
                          const char **why)
{
    const size_t ring = INA_PS_CHAIN_WINDOW * sizeof(*cj->q);
    *why = "max_memory";
    if (!cj->q) {
        if (ina__ps_charge(ps, &cj->bytes, ring) != 0)
            return NULL;
        if (!(cj->q = calloc(INA_PS_CHAIN_WINDOW, sizeof(*cj->q)))) {
            ina__ps_uncharge(ps, &cj->bytes, ring);
            *why = "out_of_memory";
            return NULL;
        }
    }
    if (ina__ps_charge(ps, &cj->bytes, flen) != 0)
        return NULL;
    uint8_t *buf = malloc(flen);
    if (!buf) {
        ina__ps_uncharge(ps, &cj->bytes, flen);
        *why = "out_of_memory";
    }
    return buf;
}

/* Primary: a stamped UPDATE was taken; forward it. */
static void chain_taken(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                        const uint8_t *body, size_t len)
{
    struct ina_ps_chain *ch = ps->chain;
    if (!ch->to_set)
        return;
    struct ina_ps_chain_job *cj = &ch->jobs[job->id - 1];
    if (cj->session != job->session) {
        cj_reset(ps, cj);
        cj->session = job->session;
    }
    if (cj->broken) {
        ps->c.chain_unforwarded++;
        return;
    }
    size_t flen = INA_HDR_LEN + INA_PS_CHAIN_FWD_PREFIX + len;
    const char *why = cj->n == INA_PS_CHAIN_WINDOW ? "window_full"
                      : flen > INA_MAX_DATAGRAM      ? "update_too_long"
                                                     : NULL;
    uint8_t *buf = why ? NULL : fwd_alloc(ps, cj, flen, &why);
    if (!buf) {
        if (strcmp(why, "max_memory") == 0)
            ps->c.memory_refusals++;
        chain_break(ps, job, cj, why);
        ps->c.chain_unforwarded++;
        return;
    }
    struct ina_hdr fh = *h; /* the UPDATE's header: the primary's job, session, token */
    fh.kind = INA_K_PS_CHAIN_FWD;
    ina__hdr_encode(buf, &fh);
    memset(buf + INA_HDR_LEN, 0, INA_PS_CHAIN_FWD_PREFIX);
    memcpy(buf + INA_HDR_LEN, job->p.name, strnlen(job->p.name, INA_PS_CHAIN_FWD_PREFIX - 1));
    memcpy(buf + INA_HDR_LEN + INA_PS_CHAIN_FWD_PREFIX, body, len);
    const struct ina_ps_lastupd *lu = &job->last[h->rank];
    struct ina_ps_chain_fwd *e = q_at(cj, cj->n++);
    *e = (struct ina_ps_chain_fwd){.stamp = lu->stamp, .uid = h->slot, .rank = h->rank,
                                   .status = lu->status, .version = lu->version, .buf = buf,
                                   .len = flen, .first_ns = ch->now_ns};
    ps->c.chain_forwarded++;
    fwd_send(ps, ch, e); /* if the queue is full, the next tick sends it */
}

/* Replica: the outcome of a forward, to the primary. */
static void send_chain_ack(struct ina_ps *ps, struct ina_ps_chain *ch, const struct ina_ps_job *job,
                           const struct ina_ps_lastupd *u)
{
    const struct ina_ps_chain_job *cj = &ch->jobs[job->id - 1];
    if (cj->rsession != job->session)
        return; /* no forward of this session came (cannot happen: only forwards reach here) */
    uint8_t *b = ina__ps_tx_buf(ps, INA_HDR_LEN + INA_PS_CHAIN_ACK_LEN);
    if (!b)
        return;
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_CHAIN_ACK);
    h.job = cj->pjob;
    h.session = cj->psession;
    h.token = cj->ptoken;
    h.rank = INA_RANK_SWITCH;
    h.slot = u->uid;
    h.seq = u->version;
    ina__hdr_encode(b, &h);
    ina__ps_update_ack_encode(b + INA_HDR_LEN, u->status, u->version, u->delay, u->stamp);
    ina__put32(b + INA_HDR_LEN + INA_PS_UPDATE_ACK_LEN, job->next_stamp);
    ina__ps_tx_push(ps, b, INA_HDR_LEN + INA_PS_CHAIN_ACK_LEN, &ch->from);
    ps->c.chain_acks_sent++;
}

/* An UPDATE_ACK about to go to dst. */
static int chain_ack(struct ina_ps *ps, const struct ina_ps_job *job, const struct ina_ps_lastupd *u,
                     const struct sockaddr_in *dst)
{
    struct ina_ps_chain *ch = ps->chain;
    if (ch->from_set && ina__addr_eq(dst, &ch->from)) {
        /* Replica: the answer to a forward. HELD (it waits for earlier stamps) is not sent:
         * the primary resends until the outcome comes. */
        if (u->status != INA_PS_UPDATE_HELD)
            send_chain_ack(ps, ch, job, u);
        return 1;
    }
    if (!ch->to_set || u->stamp == INA_STAMP_NONE || u->status == INA_PS_UPDATE_HELD)
        return 0;
    const struct ina_ps_chain_job *cj = &ch->jobs[job->id - 1];
    if (cj->session != job->session || !ina__ps_chain_pending(cj, u->stamp))
        return 0;
    /* Primary: the replica does not have this stamp yet. The worker hears HELD (the server is
     * alive, wait) and gets the outcome when the CHAIN_ACK comes. */
    struct ina_ps_lastupd held = {.uid = u->uid, .status = INA_PS_UPDATE_HELD,
                                  .version = job->applied, .stamp = u->stamp};
    ina__ps_send_update_ack(ps, job, &held, dst);
    ps->c.chain_held_answers++;
    return 1;
}

static struct ina_ps_job *chain_job_named(struct ina_ps *ps, const uint8_t *name)
{
    if (!memchr(name, 0, INA_PS_CHAIN_FWD_PREFIX))
        return NULL;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        struct ina_ps_job *j = &ps->jobs[i];
        if (j->state == INA_PS_ACTIVE && strcmp(j->p.name, (const char *)name) == 0)
            return j;
    }
    return NULL;
}

/* Replica: CHAIN_FWD. */
static void fwd_input(struct ina_ps *ps, struct ina_ps_chain *ch, const struct ina_hdr *h,
                      const uint8_t *body, size_t len, const struct sockaddr_in *src, uint64_t now)
{
    if (!ch->from_set || !ina__addr_eq(src, &ch->from)) {
        ps->c.drops[INA_PS_DROP_CHAIN_SOURCE]++;
        return;
    }
    if (len < INA_PS_CHAIN_FWD_PREFIX + INA_PS_UPDATE_PREFIX) {
        ps->c.drops[INA_PS_DROP_CHAIN_LENGTH]++;
        return;
    }
    struct ina_ps_job *job = chain_job_named(ps, body);
    if (!job || job->p.mode != INA_PS_MODE_STALE || h->rank >= job->world) {
        ps->c.drops[INA_PS_DROP_CHAIN_JOB]++;
        return;
    }
    size_t ulen = len - INA_PS_CHAIN_FWD_PREFIX;
    if (ulen - INA_PS_UPDATE_PREFIX != (size_t)h->count * ina__ps_entry_len(job->store.dim)) {
        ps->c.drops[INA_PS_DROP_CHAIN_LENGTH]++;
        return;
    }
    struct ina_ps_chain_job *cj = &ch->jobs[job->id - 1];
    if (cj->rsession != job->session) { /* the first forward of this job: pin its primary */
        cj->rsession = job->session;
        cj->pjob = h->job;
        cj->psession = h->session;
        cj->ptoken = h->token;
    } else if (cj->pjob != h->job || cj->psession != h->session || cj->ptoken != h->token) {
        ps->c.drops[INA_PS_DROP_CHAIN_JOB]++;
        return;
    }
    ps->c.chain_fwd_received++;
    job->last_rx_ns = now;
    struct ina_hdr uh = *h; /* the worker's UPDATE, in this server's job */
    uh.kind = INA_K_PS_UPDATE;
    uh.job = job->id;
    uh.session = job->session;
    uh.token = job->token;
    /* Its UPDATE_ACKs go to the primary's address: chain_ack() makes them CHAIN_ACKs. */
    ina__ps_on_update(ps, job, &uh, body + INA_PS_CHAIN_FWD_PREFIX, ulen, &ch->from);
}

/* Primary: CHAIN_ACK. */
static void ack_input(struct ina_ps *ps, struct ina_ps_chain *ch, const struct ina_hdr *h,
                      const uint8_t *body, size_t len, const struct sockaddr_in *src, uint64_t now)
{
    if (!ch->to_set || !ina__addr_eq(src, &ch->to)) {
        ps->c.drops[INA_PS_DROP_CHAIN_SOURCE]++;
        return;
    }
    if (len != INA_PS_CHAIN_ACK_LEN) {
        ps->c.drops[INA_PS_DROP_CHAIN_LENGTH]++;
        return;
    }
    struct ina_ps_job *job = h->job >= 1 && h->job <= INA_PS_MAX_JOBS ? &ps->jobs[h->job - 1] : NULL;
    struct ina_ps_chain_job *cj = job ? &ch->jobs[job->id - 1] : NULL;
    int32_t status = (int32_t)ina__get32(body);
    uint32_t version = ina__get32(body + 4), g = ina__get32(body + 12), next = ina__get32(body + 16);
    if (!job || job->state != INA_PS_ACTIVE || h->session != job->session ||
        h->token != job->token || cj->session != job->session || cj->broken ||
        (int32_t)(next - g) <= 0) {
        ps->c.drops[INA_PS_DROP_CHAIN_ACK]++;
        return;
    }
    if (cj->n == 0 || (int32_t)(g - q_at(cj, 0)->stamp) < 0) {
        ps->c.chain_ack_dups++; /* a copy, or the ack of a stamp a later ack covered */
        return;
    }
    struct ina_ps_chain_fwd *e = NULL;
    for (unsigned i = 0; i < cj->n && !e; i++)
        if (q_at(cj, i)->stamp == g)
            e = q_at(cj, i);
    if (!e || e->uid != h->slot) {
        ps->c.drops[INA_PS_DROP_CHAIN_ACK]++; /* a stamp never forwarded */
        return;
    }
    ps->c.chain_acks++;
    if (e->status != status || e->version != version) {
        ps->c.chain_mismatch++;
        ina__log(INA_LOG_WARN, "chain_mismatch", INA_KV_I("job", job->id), INA_KV_I("stamp", g),
                INA_KV_I("status", e->status), INA_KV_I("replica_status", status),
                INA_KV_I("version", e->version), INA_KV_I("replica_version", version));
    }
    if (e->tries == 1 && e->sent_ns && now >= e->sent_ns)
        rtt_sample(ch, now - e->sent_ns);
    /* The replica has taken every stamp below next: those forwards are done. */
    while (cj->n && (int32_t)(q_at(cj, 0)->stamp - next) < 0)
        release_head(ps, job, cj);
}

static void chain_input(struct ina_ps *ps, const struct ina_hdr *h, const uint8_t *body, size_t len,
                        const struct sockaddr_in *src, uint64_t now_ns)
{
    struct ina_ps_chain *ch = ps->chain;
    ch->now_ns = now_ns;
    if (h->kind == INA_K_PS_CHAIN_FWD)
        fwd_input(ps, ch, h, body, len, src, now_ns);
    else
        ack_input(ps, ch, h, body, len, src, now_ns);
}

static const struct ina_ps_chain_ops chain_ops = {
    .input = chain_input, .taken = chain_taken, .ack = chain_ack};

/* ---- API ------------------------------------------------------------------------------ */

int ina__ps_chain_init(struct ina_ps_chain *ch, struct ina_ps *ps, const struct sockaddr_in *to,
                      const struct sockaddr_in *from, uint64_t timeout_ns)
{
    memset(ch, 0, sizeof(*ch));
    if ((!to && !from) || timeout_ns == 0)
        return -EINVAL;
    if (to) {
        ch->to = *to;
        ch->to_set = 1;
    }
    if (from) {
        ch->from = *from;
        ch->from_set = 1;
    }
    ch->timeout_ns = timeout_ns;
    ps->chain = ch;
    ps->chain_ops = &chain_ops;
    return 0;
}

void ina__ps_chain_tick(struct ina_ps *ps, uint64_t now_ns)
{
    struct ina_ps_chain *ch = ps->chain;
    if (!ch)
        return;
    ch->now_ns = now_ns;
    if (!ch->to_set)
        return;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        struct ina_ps_chain_job *cj = &ch->jobs[i];
        struct ina_ps_job *job = &ps->jobs[i];
        if (cj->session && (job->state != INA_PS_ACTIVE || job->session != cj->session)) {
            cj_reset(ps, cj); /* the job ended: nobody waits for these answers */
            continue;
        }
        if (cj->n == 0)
            continue;
        if (now_ns - q_at(cj, 0)->first_ns > ch->timeout_ns) {
            if (ina__ps_tx_full(ps))
                return;
            chain_break(ps, job, cj, "replica_timeout");
            continue;
        }
        /* Forwards the reply queue had no room for, then the oldest one if its timer ran
         * out. Only the oldest is resent: the replica holds the later ones it got until the
         * oldest comes, and its CHAIN_ACK then covers them all (next stamp). */
        for (unsigned k = 0; k < cj->n; k++) {
            struct ina_ps_chain_fwd *e = q_at(cj, k);
            if (e->sent_ns || ina__ps_tx_full(ps))
                continue;
            fwd_send(ps, ch, e);
        }
        struct ina_ps_chain_fwd *e = q_at(cj, 0);
        if (e->sent_ns && now_ns >= due_ns(ch, cj, e) && !ina__ps_tx_full(ps) &&
            fwd_send(ps, ch, e))
            ps->c.chain_fwd_retransmits++;
    }
}

int ina__ps_chain_poll_ms(const struct ina_ps *ps, uint64_t now_ns)
{
    const struct ina_ps_chain *ch = ps->chain;
    uint64_t wait = 100000000ull; /* main.c's own tick */
    if (!ch || !ch->to_set)
        return 100;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        const struct ina_ps_chain_job *cj = &ch->jobs[i];
        for (unsigned k = 0; k < cj->n; k++) {
            const struct ina_ps_chain_fwd *e = &cj->q[(cj->head + k) % INA_PS_CHAIN_WINDOW];
            uint64_t at = !e->sent_ns ? now_ns : k == 0 ? due_ns(ch, cj, e) : UINT64_MAX;
            if (k == 0 && e->first_ns + ch->timeout_ns < at)
                at = e->first_ns + ch->timeout_ns;
            uint64_t w = at > now_ns ? at - now_ns : 0;
            if (w < wait)
                wait = w;
        }
    }
    return (int)((wait + 999999) / 1000000);
}

void ina__ps_chain_free(struct ina_ps *ps)
{
    if (!ps->chain)
        return;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++)
        cj_reset(ps, &ps->chain->jobs[i]);
    ps->chain = NULL;
    ps->chain_ops = NULL;
}
