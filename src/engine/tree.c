/* tree.c: ina-switch as a child of a parent switch (--parent): registration, the parent's answers, leaving. */
#include <arpa/inet.h>
#include <string.h>

#include "common/log.h"
#include "engine/internal.h"

/*
 * Why a tree: a software switch has one NIC. A child on each node (or rack)
 * adds its own workers' packets per slot and sends one partial sum per round
 * up to a parent, so that one stream per node crosses the node's NIC
 * (PROTOCOL.md §12). The child is an ordinary switch towards its workers;
 * towards the parent it is one member of the parent's job, standing for the
 * set of ranks that joined it.
 *
 * Membership: the child does not know how many of the job's ranks are its
 * own. It registers the set that has joined so far (TREE_JOIN), again each
 * time the set grows, and the parent starts the job once the sets of its
 * members cover every rank. The parent's JOIN_ACK starts the child's job.
 *
 * Data: the child's window and slots are the parent's: a worker's (slot,
 * round) is the child's and the parent's. A round complete at the child goes
 * up (dataplane.c: ina__tree_up_data); the parent's RESULT completes it and
 * goes down to every local rank (ina__tree_dp_result). Recovery between
 * child and parent is driven by the workers' retransmissions: a duplicate
 * into a round that waits for the parent sends the partial sum again. So the
 * child keeps no timers of its own for the data.
 */

#define TREE_JOIN_FIRST_MS 100
#define TREE_JOIN_MAX_MS 1000
#define TREE_MAX_REDIRECTS 4 /* a parent redirects once; more is a loop */

/* A nonzero random 64-bit nonce for one registration. */
static uint64_t random_nonce(struct ina_switch *sw)
{
    uint64_t v = 0;
    while (v == 0)
        v = (uint64_t)ina__random_u32(sw) << 32 | ina__random_u32(sw);
    return v;
}

/* The parent of a (name, lane): the parents split the jobs as a switch's
 * dataplane threads do, so every child sends a job to the same one. */
static const struct sockaddr_in *parent_of(const struct ina_switch *sw, const struct ina_job *job)
{
    return &sw->p.parents[ina__lane_shard(job->name, job->lane, sw->p.nparents)];
}

static void send_tree_join(struct ina_switch *sw, const struct ina_job *job)
{
    if (!ina__txq_room(&sw->txq, 1))
        return; /* the next tick sends it */
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_TREE_JOIN);
    h.rank = job->up.rep;
    if (ina__job_lanes_proposed(job))
        h.flags = INA_FLAG_LANES_AUTO; /* our ranks' smallest proposal, as a proposal (§5.6) */
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = job->up.nonce;
    j.world_size = (uint16_t)job->world;
    j.elems = job->up.elems;
    j.window = job->up.window;
    j.sw_version = INA_VERSION_NUMBER;
    j.lane = job->lane;
    j.nlanes = job->nlanes;
    uint16_t wait = UINT16_MAX;
    for (int r = 0; r < job->world; r++)
        if (job->members[r].weight && job->members[r].wait_100ms < wait)
            wait = job->members[r].wait_100ms; /* every rank must be willing to wait */
    j.wait_100ms = wait;
    memcpy(j.name, job->name, sizeof(j.name));
    uint8_t *buf = ina__txq_buf(&sw->txq);
    ina__hdr_encode(buf, &h);
    ina__join_encode(buf + INA_HDR_LEN, &j);
    memcpy(buf + INA_HDR_LEN + INA_JOIN_BODY_LEN, job->up.set, INA_TREE_SET_LEN);
    size_t len = INA_HDR_LEN + INA_TREE_JOIN_LEN;
    if (sw->p.has_secret) {
        /* The parent's secret is ours (one secret per tree); its cookie
         * proves this TREE_JOIN fresh (zeros until it sent one). */
        memcpy(buf + len, job->up.cookie, INA_COOKIE_LEN);
        len += INA_COOKIE_LEN;
        ina__hmac_sha256(&sw->p.secret, buf, len, buf + len);
        len += INA_AUTH_LEN;
    }
    ina__txq_push(&sw->txq, buf, len, &job->up.addr);
}

/*
 * Slots for the job from our pool, held from the first registration on, so
 * that the parent learns before it starts the job whether we have room: a
 * proposal of window 0 (no room) makes it refuse the job with NOSPACE for
 * every rank alike (§12.3), never a job some ranks joined and others not.
 * The halving of the admission policy applies (ina__pool_take).
 */
static void reserve(struct ina_switch *sw, struct ina_job *job, uint32_t want)
{
    uint32_t got = ina__pool_take(sw, want, &job->slot_base);
    for (uint32_t i = 0; i < got; i++)
        sw->slot_owner[job->slot_base + i] = job->id;
    job->up.reserved = got;
}

void ina__tree_register(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns)
{
    uint8_t set[INA_TREE_SET_LEN];
    memset(set, 0, sizeof(set));
    int rep = -1;
    uint32_t elems = sw->p.max_elems, window = UINT32_MAX;
    for (int r = 0; r < job->world; r++) {
        const struct ina_member *m = &job->members[r];
        if (!m->joined)
            continue;
        set[r >> 3] |= (uint8_t)(1u << (r & 7));
        if (rep < 0)
            rep = r;
        if (m->weight && m->elems < elems)
            elems = m->elems;
        if (m->weight && m->window < window)
            window = m->window;
    }
    if (rep < 0)
        return;
    if (!job->up.reserved && window)
        reserve(sw, job, window); /* again at every tick until it succeeds */
    if (window > job->up.reserved)
        window = job->up.reserved; /* both powers of 2 (or 0: no room) */
    if (job->up.nonce && memcmp(set, job->up.set, sizeof(set)) == 0 &&
        job->up.elems == elems && job->up.window == window)
        return; /* nothing new to say: the tick repeats it until the parent answers */
    if (!job->up.nonce) {
        job->up.nonce = random_nonce(sw);
        job->up.addr = *parent_of(sw, job);
        memset(job->up.cookie, 0, sizeof(job->up.cookie));
    }
    memcpy(job->up.set, set, sizeof(set));
    job->up.rep = (uint16_t)rep;
    job->up.elems = (uint16_t)elems;
    job->up.window = window;
    job->up.interval_ms = TREE_JOIN_FIRST_MS;
    job->up.next_send_ns = now_ns + TREE_JOIN_FIRST_MS * 1000000ull;
    send_tree_join(sw, job);
}

void ina__tree_tick(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns)
{
    if (!job->up.reserved)
        ina__tree_register(sw, job, now_ns); /* room now? then say so at once */
    if (!job->up.nonce || now_ns < job->up.next_send_ns)
        return;
    job->up.cookie_answered = 0;
    send_tree_join(sw, job);
    job->up.interval_ms = job->up.interval_ms * 2 > TREE_JOIN_MAX_MS ? TREE_JOIN_MAX_MS
                                                                     : job->up.interval_ms * 2;
    job->up.next_send_ns = now_ns + (uint64_t)job->up.interval_ms * 1000000ull;
}

/* The ACTIVE job whose membership at the parent this datagram names. */
static struct ina_job *job_of_parent(struct ina_switch *sw, const struct ina_hdr *h,
                                     const struct sockaddr_in *src)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        if (job->state == INA_JOB_ACTIVE && job->child && job->up.active && !job->up.gone &&
            job->up.job == h->job && job->up.session == h->session &&
            job->up.token == h->token && ina__addr_eq(src, &job->up.addr))
            return job;
    }
    return NULL;
}

/* The JOINING job whose registration this answer names (its nonce), from its
 * parent's address (and port, unless a REDIRECT moves it). */
static struct ina_job *job_of_nonce(struct ina_switch *sw, uint64_t nonce,
                                    const struct sockaddr_in *src, int any_port)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        if (job->state == INA_JOB_JOINING && job->child && job->up.nonce == nonce &&
            src->sin_addr.s_addr == job->up.addr.sin_addr.s_addr &&
            (any_port || src->sin_port == job->up.addr.sin_port))
            return job;
    }
    return NULL;
}

/*
 * The parent started the job: take its session as our membership, the
 * parameters it granted, and the first window of the slots we reserved (the
 * same window: a worker's slot is the parent's).
 */
static void on_parent_ack(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                          size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns)
{
    struct ina_join j;
    struct ina_job *job;
    if (ina__join_decode(body, bodylen, &j) != 0 || !(job = job_of_nonce(sw, j.nonce, src, 0))) {
        sw->c.drops[INA_DROP_UPSTREAM]++; /* a repeated ACK, or not from our parent */
        return;
    }
    if (sw->p.has_secret) {
        /* The parent proves it knows the secret, as a switch does to a worker. */
        uint8_t mac[INA_SHA256_LEN], hb[INA_HDR_LEN];
        if (bodylen < INA_JOIN_BODY_LEN + INA_AUTH_LEN) {
            ina__log_job(INA_LOG_WARN, job, "parent_refused", "no_proof_of_secret");
            ina__job_refuse(sw, job, INA_ERR_REJECTED, now_ns);
            return;
        }
        struct ina_hmac m;
        ina__hdr_encode(hb, h);
        ina__hmac_init(&m, &sw->p.secret);
        ina__hmac_update(&m, hb, sizeof(hb));
        ina__hmac_update(&m, body, INA_JOIN_BODY_LEN);
        ina__hmac_final(&m, mac);
        if (!ina__mem_equal_ct(mac, body + INA_JOIN_BODY_LEN, INA_AUTH_LEN)) {
            sw->c.drops[INA_DROP_AUTH]++; /* a forgery: keep waiting for the parent */
            return;
        }
    }
    job->up.active = 1;
    job->up.job = h->job;
    job->up.session = h->session;
    job->up.token = h->token;
    job->up.flags = h->flags;
    /* Our ranks proposed their lanes: the count the parent agreed is the job's. */
    const int agreed = (h->flags & INA_FLAG_LANES_AUTO) && ina__job_lanes_proposed(job) &&
                       j.nlanes >= 1 && j.nlanes <= INA_MAX_PARTS;
    if (j.world_size != job->world || j.lane != job->lane || (!agreed && j.nlanes != job->nlanes) ||
        j.elems == 0 || j.elems > job->up.elems || j.window == 0 ||
        (j.window & (j.window - 1)) != 0 || j.window > job->up.window) {
        /* A parent that grants what nobody proposed: end it for every rank. */
        ina__log_job(INA_LOG_WARN, job, "parent_ack_refused", "bad_parameters");
        ina__job_leave_parent(sw, job, 1, INA_ERR_ABORTED);
        ina__job_refuse(sw, job, INA_ERR_PROTO, now_ns);
        return;
    }
    job->nlanes = j.nlanes;
    job->elems = j.elems;
    job->window = j.window; /* the first window of what we reserved; the rest goes back */
    for (uint32_t i = job->window; i < job->up.reserved; i++)
        sw->slot_owner[job->slot_base + i] = 0;
    if (job->window < job->up.reserved)
        sw->slots_freed = 1;
    do
        job->session = ++sw->session_counter;
    while (job->session == 0);
    job->token = ina__random_u32(sw);
    job->state = INA_JOB_ACTIVE;
    job->need = job->njoined; /* the ranks of our set; the parent's job has them all */
    job->last_rx_ns = now_ns;
    ina__job_reset_slots(sw, job);
    sw->c.jobs_started++;
    ina__log_job(INA_LOG_INFO, job, "job_started", "parent_started");
    ina__job_send_acks(sw, job);
}

void ina__tree_input(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                     size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns)
{
    struct ina_job *job;
    uint64_t nonce;
    int32_t reason;
    switch (h->kind) {
    case INA_K_RESULT:
        if ((job = job_of_parent(sw, h, src)))
            ina__tree_dp_result(sw, job, h, body);
        else
            sw->c.drops[INA_DROP_UPSTREAM]++;
        return;
    case INA_K_ABORT:
        if (!(job = job_of_parent(sw, h, src))) {
            sw->c.drops[INA_DROP_UPSTREAM]++;
            return;
        }
        if (ina__nak_decode(body, bodylen, &nonce, &reason) != 0 || reason >= 0)
            reason = INA_ERR_ABORTED;
        job->up.gone = 1; /* the parent has ended it: no LEAVE back */
        ina__job_abort(sw, job, reason);
        return;
    case INA_K_JOIN_ACK:
        on_parent_ack(sw, h, body, bodylen, src, now_ns);
        return;
    case INA_K_JOIN_NAK:
    case INA_K_REDIRECT:
        if (ina__nak_decode(body, bodylen, &nonce, &reason) != 0 ||
            !(job = job_of_nonce(sw, nonce, src, h->kind == INA_K_REDIRECT))) {
            sw->c.drops[INA_DROP_UPSTREAM]++;
            return;
        }
        if (h->kind == INA_K_JOIN_NAK) {
            /* The parent refused the job: so do we, to every rank, with its
             * reason (NOSPACE without a fallback aggregator: §12.3). */
            ina__log_job(INA_LOG_WARN, job, "parent_refused", "join_nak");
            ina__job_refuse(sw, job, reason < 0 ? reason : INA_ERR_REJECTED, now_ns);
            return;
        }
        uint16_t port = ina__get16(body + 12);
        if (port == 0 || ++job->up.redirects > TREE_MAX_REDIRECTS) {
            ina__log_job(INA_LOG_WARN, job, "parent_refused", "redirect_loop");
            ina__job_refuse(sw, job, INA_ERR_PROTO, now_ns);
            return;
        }
        job->up.addr.sin_port = htons(port); /* another dataplane thread of the parent */
        job->up.interval_ms = TREE_JOIN_FIRST_MS;
        job->up.next_send_ns = now_ns + TREE_JOIN_FIRST_MS * 1000000ull;
        send_tree_join(sw, job);
        return;
    case INA_K_JOIN_WAIT: /* registered there; the parent's job still waits: nothing to do */
        return;
    case INA_K_JOIN_COOKIE:
        /* A parent with a secret wants a fresh cookie in our TREE_JOIN
         * (§4.4): take it and register again at once, but at most once
         * between two scheduled sends, so that a flood of (forged) cookies
         * cannot make us flood the parent. */
        if (!sw->p.has_secret || bodylen < INA_JOIN_COOKIE_BODY_LEN ||
            !(job = job_of_nonce(sw, (uint64_t)ina__get32(body) << 32 | ina__get32(body + 4), src,
                                 0))) {
            sw->c.drops[INA_DROP_UPSTREAM]++;
            return;
        }
        memcpy(job->up.cookie, body + 8, INA_COOKIE_LEN);
        if (!job->up.cookie_answered) {
            job->up.cookie_answered = 1;
            send_tree_join(sw, job);
        }
        return;
    default: /* MIGRATE: a parent does not evict a tree's job (§12.8) */
        sw->c.drops[INA_DROP_UPSTREAM]++;
        return;
    }
}
