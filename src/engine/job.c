/* job.c: the job table's primitives: sessions' randomness, the slot pool, a job's control datagrams, its end (abort, refusal, leaving a parent). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/log.h"
#include "common/version.h"
#include "engine/internal.h"

/*
 * What control.c (joins, admission, the tick), tree.c (a child's membership at
 * its parent), dataplane.c (a round's MISMATCH, an evicted job's MIGRATE) and
 * drain.c all do to a job: below them all, so that none of them calls another
 * back. Nothing here parses a datagram.
 */

/* One log line about a job: its id, name, lane and session, and why. */
void ina__log_job(enum ina_log_level level, const struct ina_job *job, const char *event,
                  const char *reason)
{
    char session[12];
    snprintf(session, sizeof(session), "%08x", job->session);
    ina__log(level, event, INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("lane", job->lane), INA_KV_S("session", session),
            INA_KV_I("world", job->world), INA_KV_S("reason", reason));
}

static const char *reason_name(int reason)
{
    switch (reason) {
    case INA_ERR_ABORTED: return "rank_aborted";
    case INA_ERR_TIMEOUT: return "idle_timeout";
    case INA_ERR_MISMATCH: return "mismatch";
    case INA_ERR_NOSPACE: return "no_space";
    case INA_ERR_PROTO: return "protocol_error";
    case INA_ERR_SHUTDOWN: return "shutdown";
    default: return "other";
    }
}

/* A session id or token: from getrandom, or from the seeded generator
 * (splitmix64) of a switch whose runs must be reproducible (p.seed). */
uint32_t ina__random_u32(struct ina_switch *sw)
{
    if (sw->p.seed) {
        uint64_t x = (sw->rng += 0x9E3779B97F4A7C15ull);
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        return (uint32_t)((x ^ (x >> 31)) >> 16);
    }
    uint32_t v = 0;
    /* getrandom never fails for 4 bytes once the pool is initialised; fall
     * back to a weak source rather than to a constant if it ever does. */
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = (uint32_t)random() ^ (uint32_t)rand();
    return v;
}

/* First fit over the owner map: O(nslots), run once per job start. */
int ina__pool_alloc(struct ina_switch *sw, uint32_t n, uint32_t *base)
{
    uint32_t run = 0;
    for (uint32_t i = 0; i < sw->p.nslots; i++) {
        run = sw->slot_owner[i] ? 0 : run + 1;
        if (run == n) {
            *base = i + 1 - n;
            return 0;
        }
    }
    return -1;
}

/*
 * Put the job's slots in the state "round -2 and -1 complete", so that the
 * first packets (seq 0 into set 0, seq 1 into set 1) are each "the next
 * round" of a finished set. Values need no clearing: a new round overwrites.
 */
void ina__job_reset_slots(struct ina_switch *sw, const struct ina_job *job)
{
    for (uint32_t i = 0; i < job->window; i++) {
        struct ina_slot *s = &sw->slots[job->slot_base + i];
        memset(s, 0, sizeof(*s));
        for (unsigned set = 0; set < 2; set++) {
            struct ina_slot_set *ss = &s->set[set];
            ss->seq = (uint32_t)set - 2u;
            ss->complete = 1;
            ss->nrecv = (uint16_t)job->need;
            /* Every rank "contributed" (keeps the invariant: a packet for
             * round -2/-1 is a duplicate of a complete, empty round). */
            for (int r = 0; r < job->world; r++)
                ss->bitmap[r >> 6] |= 1ull << (r & 63);
        }
    }
}

/* Unmap the rings of every rank of job that attached them; count those a
 * SIGBUS replaced (the fault guard, shm_ring.h), each once, here. */
void ina__job_detach_rings(struct ina_switch *sw, struct ina_job *job)
{
    for (int r = 0; r < INA_MAX_WORKERS; r++) {
        struct ina_member *m = &job->members[r];
        if (m->shm) {
            sw->c.shm_faults += (uint64_t)ina__ring_faulted(m->shm);
            ina__ring_unmap(m->shm);
            free(m->shm);
            m->shm = NULL;
        }
        m->shm_live = 0;
    }
}

/*
 * A session ended, or a job was refused: remember its registrations (each
 * member that registered itself: a worker, or a child for its set), so that
 * a JOIN naming one again is known for a replay (PROTOCOL.md §5.2 step 3‴).
 * A worker's nonce is new for each join, so no live worker ever sends one of
 * these again: without a secret this is what keeps a finished session dead,
 * with one it covers the few seconds a captured JOIN's cookie stays fresh.
 */
void ina__ended_remember(struct ina_switch *sw, const struct ina_job *job)
{
    for (int r = 0; r < job->world; r++) {
        const struct ina_member *m = &job->members[r];
        if (!m->joined || !m->weight)
            continue; /* a rank a child stands for: the child's registration is remembered */
        unsigned k = sw->nended++ % INA_SW_ENDED_KEEP;
        sw->ended_nonce[k] = m->nonce;
        memcpy(sw->ended[k].name, job->name, sizeof(sw->ended[k].name));
        sw->ended[k].rank = (uint16_t)r;
        sw->ended[k].lane = job->lane;
    }
}

/* Whether a JOIN names a remembered registration: its (name, lane, rank, nonce). */
int ina__ended_has(const struct ina_switch *sw, const struct ina_hdr *h, const struct ina_join *j)
{
    if (j->nonce == 0)
        return 0; /* (0: an entry forgotten, or never written) */
    for (unsigned k = 0; k < INA_SW_ENDED_KEEP; k++)
        if (sw->ended_nonce[k] == j->nonce && sw->ended[k].rank == h->rank &&
            sw->ended[k].lane == j->lane && strcmp(sw->ended[k].name, j->name) == 0)
            return 1;
    return 0;
}

/* Forget a remembered nonce: its rank joins again with it, legitimately. */
void ina__ended_forget(struct ina_switch *sw, uint64_t nonce)
{
    for (unsigned k = 0; k < INA_SW_ENDED_KEEP; k++)
        if (sw->ended_nonce[k] == nonce)
            sw->ended_nonce[k] = 0;
}

void ina__job_free(struct ina_switch *sw, struct ina_job *job)
{
    if (job->state == INA_JOB_ACTIVE)
        ina__ended_remember(sw, job); /* however it ended: that session does not start again */
    ina__job_detach_rings(sw, job);
    if (job->state == INA_JOB_ACTIVE && sw->dp)
        sw->dp->job_end(sw->dp_ctx, sw, job);
    ina__hot_free(job);
    /* Its slots: an active job's window, or what a child reserved while it
     * waits for its parent (tree.c). */
    uint32_t held = job->state == INA_JOB_ACTIVE ? job->window : job->child ? job->up.reserved : 0;
    if (held) {
        for (uint32_t i = 0; i < held; i++)
            sw->slot_owner[job->slot_base + i] = 0;
        sw->slots_freed = 1; /* a WAITING job may fit now */
    }
    uint16_t id = job->id;
    memset(job, 0, sizeof(*job));
    job->id = id;
}

/*
 * The capabilities a JOIN_ACK of job announces (beyond v1). A job with a child
 * switch among its members, or in which this switch is a child, offers no op
 * 3: a child cannot give op 3's bound at two levels (PROTOCOL.md §12); nor ops
 * 7 and 8: a child forwards dense partial sums only (§17.1). And all
 * ranks of a job must choose their ops alike. A child offers op 4 and the
 * 16-bit wire (ops 10, 11: binary32 lanes, §8.10.7) only if its parent does,
 * and says how many levels lie above it. --int-ops-only and the eBPF
 * dataplane have no binary32 adds: no op 4, no 16-bit wire.
 */
static uint16_t join_ack_flags(const struct ina_switch *sw, const struct ina_job *job)
{
    uint16_t f = (sw->p.int_ops_only ? 0
                                     : INA_FLAG_CAP_BFP | INA_FLAG_CAP_F32 | INA_FLAG_CAP_SPARSE |
                                           INA_FLAG_CAP_H16) |
                 (sw->p.shm && !sw->p.mcast_base ? INA_FLAG_CAP_SHM : 0) |
                 INA_FLAG_CAP_FIX | /* integer arithmetic: offered even with --int-ops-only */
                 (sw->p.hot_max && !sw->p.int_ops_only ? INA_FLAG_CAP_HOT : 0) |
                 (sw->p.integrity ? INA_FLAG_INTEGRITY : 0);
    if (sw->p.bpf_ops_only) /* the eBPF program implements ops 0..3 of DATA only */
        f &= (uint16_t)~(INA_FLAG_CAP_F32 | INA_FLAG_CAP_SPARSE | INA_FLAG_CAP_FIX |
                         INA_FLAG_CAP_HOT | INA_FLAG_CAP_H16);
    if (job && (job->tree || job->child)) /* a tree passes dense rounds only (§12, §14.3, §17.1) */
        f &= (uint16_t)~(INA_FLAG_CAP_BFP | INA_FLAG_CAP_SPARSE | INA_FLAG_CAP_HOT);
    if (job && job->child) {
        if (!(job->up.flags & INA_FLAG_CAP_F32))
            f &= (uint16_t)~INA_FLAG_CAP_F32;
        if (!(job->up.flags & INA_FLAG_CAP_FIX)) /* a child adds what its parent can */
            f &= (uint16_t)~INA_FLAG_CAP_FIX;
        if (!(job->up.flags & INA_FLAG_CAP_H16))
            f &= (uint16_t)~INA_FLAG_CAP_H16;
        unsigned above = ina__flag_levels(job->up.flags) + 1;
        f |= (uint16_t)((above > 3 ? 3 : above) << INA_FLAG_LEVELS_SHIFT);
    }
    return f;
}

/* Queue a control datagram (header + body) to one address; with auth, append
 * the HMAC of the shared secret over both (INA_AUTH_LEN bytes). flags: header
 * flag bits beyond the JOIN_ACK's capabilities (INA_FLAG_LANES_AUTO). */
void ina__send_ctl_auth(struct ina_switch *sw, const struct ina_job *job, uint8_t kind,
                        const uint8_t *body, size_t bodylen, const struct sockaddr_in *dst,
                        int auth, uint16_t flags)
{
    if (!ina__txq_room(&sw->txq, 1))
        return; /* the caller guaranteed room for one datagram; never reached */
    struct ina_hdr h;
    ina__hdr_init(&h, kind);
    h.rank = INA_RANK_SWITCH;
    if (kind == INA_K_JOIN_ACK)
        h.flags = join_ack_flags(sw, job);
    h.flags |= flags;
    if (job) {
        h.job = job->id;
        h.session = job->session;
        h.token = job->token;
    }
    uint8_t *buf = ina__txq_buf(&sw->txq);
    ina__hdr_encode(buf, &h);
    memcpy(buf + INA_HDR_LEN, body, bodylen);
    size_t len = INA_HDR_LEN + bodylen;
    if (auth) {
        ina__hmac_sha256(&sw->p.secret, buf, len, buf + len);
        len += INA_AUTH_LEN;
    }
    if (job && job->tagged && kind == INA_K_MIGRATE)
        len = ina__mac_append(&job->mac, buf, len); /* only the switch's (§4.6) */
    ina__txq_push(&sw->txq, buf, len, dst);
}

void ina__send_ctl(struct ina_switch *sw, const struct ina_job *job, uint8_t kind,
                   const uint8_t *body, size_t bodylen, const struct sockaddr_in *dst)
{
    ina__send_ctl_auth(sw, job, kind, body, bodylen, dst, 0, 0);
}

/* A JOIN_NAK's body but MISMATCH's: it says this switch's version, so that a
 * refused worker can name both (PROTOCOL.md §4.2). */
static void nak_encode(uint8_t *body, uint64_t nonce, int reason)
{
    ina__nak_encode(body, nonce, reason);
    ina__put32(body + INA_NAK_VERSION, INA_VERSION_NUMBER);
}

/* A REJECTED one is 20 bytes, byte 16 the cause (0: not said; §4.2). */
void ina__send_nak_cause(struct ina_switch *sw, uint64_t nonce, int reason, unsigned cause,
                         const struct sockaddr_in *dst)
{
    uint8_t body[INA_NAK_REJECTED_LEN] = {0};
    nak_encode(body, nonce, reason);
    body[INA_NAK_CAUSE] = (uint8_t)cause;
    ina__send_ctl(sw, NULL, INA_K_JOIN_NAK, body,
                  reason == INA_ERR_REJECTED ? INA_NAK_REJECTED_LEN : INA_NAK_BODY_LEN, dst);
}

void ina__send_nak(struct ina_switch *sw, uint64_t nonce, int reason, const struct sockaddr_in *dst)
{
    ina__send_nak_cause(sw, nonce, reason, INA_REJECT_UNSAID, dst);
}

/* One ABORT with reason to every member that joined; cause (INA_ABORT_*, 0: none) says
 * which rank, and at which address, made it (a 28-byte body, PROTOCOL.md §4.2). */
static void send_abort(struct ina_switch *sw, struct ina_job *job, int reason, unsigned cause,
                       unsigned rank, const struct sockaddr_in *at)
{
    if (!ina__txq_room(&sw->txq, (unsigned)job->world))
        return;
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_ABORT);
    h.rank = INA_RANK_SWITCH;
    h.job = job->id;
    h.session = job->session;
    h.token = job->token;
    uint8_t *buf = ina__txq_buf(&sw->txq), *body = buf + INA_HDR_LEN;
    ina__hdr_encode(buf, &h);
    ina__nak_encode(body, 0, reason);
    size_t len = INA_HDR_LEN + INA_NAK_BODY_LEN;
    if (cause) {
        memset(body + INA_NAK_BODY_LEN, 0, INA_ABORT_CAUSE_LEN - INA_NAK_BODY_LEN);
        body[INA_ABORT_CAUSE] = (uint8_t)cause;
        ina__put16(body + INA_ABORT_RANK, (uint16_t)rank);
        memcpy(body + INA_ABORT_ADDR, &at->sin_addr.s_addr, 4); /* already network order */
        ina__put16(body + INA_ABORT_PORT, ntohs(at->sin_port));
        len = INA_HDR_LEN + INA_ABORT_CAUSE_LEN;
    }
    if (job->tagged) /* an ABORT of a session with tags: only the switch's (§4.6) */
        len = ina__mac_append(&job->mac, buf, len);
    for (int r = 0; r < job->world; r++) {
        if (!job->members[r].joined || !job->members[r].weight)
            continue; /* a rank a child stands for hears it from the child */
        ina__txq_push(&sw->txq, buf, len, &job->members[r].addr);
    }
}

/* Queue one datagram for every member that has joined (ABORT/NAK fan-out). */
void ina__send_to_members(struct ina_switch *sw, struct ina_job *job, uint8_t kind, int reason)
{
    if (kind != INA_K_JOIN_NAK) {
        send_abort(sw, job, reason, INA_ABORT_UNSAID, 0, NULL);
        return;
    }
    /* A NAK echoes each member's own nonce: one datagram per member. */
    for (int r = 0; r < job->world; r++)
        if (job->members[r].joined && job->members[r].weight)
            ina__send_nak(sw, job->members[r].nonce, reason, &job->members[r].addr);
}

void ina__job_abort_cause(struct ina_switch *sw, struct ina_job *job, int reason,
                          const char *why, unsigned cause, unsigned rank,
                          const struct sockaddr_in *at)
{
    ina__log_job(INA_LOG_INFO, job, "job_aborted", why);
    if (reason == INA_ERR_SHUTDOWN)
        sw->c.jobs_drained++; /* the switch's own stop, not a job's failure */
    else
        sw->c.jobs_aborted++;
    send_abort(sw, job, reason, cause, rank, at);
    if (job->child)
        ina__job_leave_parent(sw, job, 1, reason); /* the parent ends it for every other child */
    ina__job_free(sw, job);
}

void ina__job_abort_why(struct ina_switch *sw, struct ina_job *job, int reason, const char *why)
{
    ina__job_abort_cause(sw, job, reason, why, INA_ABORT_UNSAID, 0, NULL);
}

void ina__job_abort(struct ina_switch *sw, struct ina_job *job, int reason)
{
    ina__job_abort_why(sw, job, reason, reason_name(reason));
}

void ina__send_ack(struct ina_switch *sw, const struct ina_job *job, int rank)
{
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = job->members[rank].nonce;
    j.world_size = (uint16_t)job->world;
    j.elems = job->elems;
    j.window = job->window;
    j.sw_version = INA_VERSION_NUMBER;
    j.lane = job->lane;
    j.nlanes = job->nlanes;
    if (job->mcast.sin_family) {
        j.mcast_group = ntohl(job->mcast.sin_addr.s_addr);
        j.mcast_port = ntohs(job->mcast.sin_port);
    }
    memcpy(j.name, job->name, sizeof(j.name));
    uint8_t body[INA_JOIN_BODY_LEN];
    ina__join_encode(body, &j);
    /* With a secret, the ACK proves the switch knows it: the MAC covers the
     * header (job, session, token) and the body (the rank's nonce). */
    /* A rank that proposed its lanes learns that body byte 27 is the job's
     * agreed count (PROTOCOL.md §5.6). */
    ina__send_ctl_auth(sw, job, INA_K_JOIN_ACK, body, sizeof(body), &job->members[rank].addr,
                       sw->p.has_secret,
                       job->members[rank].lanes_auto ? INA_FLAG_LANES_AUTO : 0);
}

/* Largest power of two <= n (n >= 1). */
static uint32_t pow2_floor(uint32_t n)
{
    uint32_t p = 1;
    while (p <= n / 2)
        p *= 2;
    return p;
}

uint32_t ina__pool_take(struct ina_switch *sw, uint32_t want, uint32_t *base)
{
    if (pow2_floor(sw->p.nslots) < want)
        want = pow2_floor(sw->p.nslots);
    if (sw->p.max_job_slots && pow2_floor(sw->p.max_job_slots) < want)
        want = pow2_floor(sw->p.max_job_slots);
    uint32_t floor = sw->p.min_job_slots ? pow2_floor(sw->p.min_job_slots) : want;
    if (floor > want)
        floor = want;
    for (uint32_t w = want; w >= floor && w >= 1; w /= 2) {
        if (ina__pool_alloc(sw, w, base) == 0) {
            if (w < want)
                sw->c.jobs_shrunk++;
            return w;
        }
        if (w == 1)
            break;
    }
    return 0;
}

/* Rank 0 offered a host aggregator, and every rank can be told of it: not
 * through a child switch, which could not pass it on to every rank alike. */
static int r0_offers_fallback(const struct ina_job *job)
{
    return job->members[0].joined && job->members[0].fallback_port && !job->tree && !job->child;
}

/* The NOSPACE of a refused job to its rank r, naming rank 0's fallback if offered. */
void ina__send_refusal(struct ina_switch *sw, const struct ina_job *job, int r)
{
    const struct ina_member *m = &job->members[r], *r0 = &job->members[0];
    uint8_t body[INA_NAK_FALLBACK_LEN];
    memset(body, 0, sizeof(body));
    nak_encode(body, m->nonce, INA_ERR_NOSPACE);
    size_t len = INA_NAK_BODY_LEN;
    if (r0_offers_fallback(job)) {
        memcpy(body + 16, &r0->addr.sin_addr.s_addr, 4); /* already network order */
        ina__put16(body + 20, r0->fallback_port);
        len = INA_NAK_FALLBACK_LEN;
    }
    ina__send_ctl(sw, NULL, INA_K_JOIN_NAK, body, len, &m->addr);
}

/* No room, and no (more) waiting: NOSPACE to every rank, with rank 0's
 * fallback aggregator if it offered one (libina then runs the job there);
 * the job is remembered a while to repeat a lost NOSPACE (refused_job_of). */
static void job_refuse(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns)
{
    ina__log_job(INA_LOG_WARN, job, "job_refused",
                 r0_offers_fallback(job) ? "no_free_slots_fallback" : "no_free_slots");
    sw->c.jobs_refused++;
    for (int r = 0; r < job->world; r++)
        if (job->members[r].joined && job->members[r].weight)
            ina__send_refusal(sw, job, r);
    unsigned k = sw->nrefused++ % INA_SW_REFUSED_KEEP;
    sw->refused[k] = *job;
    sw->refused_at[k] = now_ns;
    ina__ended_remember(sw, job); /* after the 5 s of repeated NAKs: refused for good */
    ina__job_free(sw, job);
}

void ina__job_refuse(struct ina_switch *sw, struct ina_job *job, int reason, uint64_t now_ns)
{
    if (reason == INA_ERR_NOSPACE) {
        job_refuse(sw, job, now_ns);
        return;
    }
    ina__log_job(INA_LOG_WARN, job, "job_refused", reason_name(reason));
    if (reason == INA_ERR_SHUTDOWN)
        sw->c.jobs_drained++; /* (the switch refuses every JOIN until it exits) */
    else
        ina__ended_remember(sw, job);
    ina__send_to_members(sw, job, INA_K_JOIN_NAK, reason);
    ina__job_free(sw, job);
}

void ina__job_send_acks(struct ina_switch *sw, const struct ina_job *job)
{
    for (int r = 0; r < job->world; r++)
        if (job->members[r].weight)
            ina__send_ack(sw, job, r);
}

int ina__job_lanes_proposed(const struct ina_job *job)
{
    int any = 0;
    for (int r = 0; r < job->world; r++) {
        const struct ina_member *m = &job->members[r];
        if (!m->joined || !m->weight)
            continue;
        if (!m->lanes_auto)
            return 0;
        any = 1;
    }
    return any && job->lane == 0;
}

void ina__job_send_migrate(struct ina_switch *sw, const struct ina_job *job, int r)
{
    uint8_t body[INA_MIGRATE_BODY_LEN];
    memset(body, 0, sizeof(body));
    ina__nak_encode(body, 0, INA_ERR_NOSPACE);
    if (r0_offers_fallback(job)) {
        memcpy(body + 16, &job->members[0].addr.sin_addr.s_addr, 4); /* network order */
        ina__put16(body + 20, job->members[0].fallback_port);
    }
    ina__put32(body + 24, (uint32_t)(job->evict_bound >> 32));
    ina__put32(body + 28, (uint32_t)job->evict_bound);
    for (int i = r < 0 ? 0 : r; i < (r < 0 ? job->world : r + 1); i++)
        if (job->members[i].joined)
            ina__send_ctl(sw, job, INA_K_MIGRATE, body, sizeof(body), &job->members[i].addr);
}

/* Leave the parent's job (abort: with reason; the parent ends it for every
 * rank): part of ending a job of which this switch is a child (tree.c). */
void ina__job_leave_parent(struct ina_switch *sw, struct ina_job *job, int abort, int reason)
{
    if (!job->up.active || job->up.gone || !ina__txq_room(&sw->txq, 2))
        return;
    job->up.gone = 1;
    struct ina_hdr h;
    ina__up_hdr(&h, job, INA_K_LEAVE);
    h.flags = abort ? INA_FLAG_ABORT : 0;
    uint8_t *buf = ina__txq_buf(&sw->txq);
    ina__hdr_encode(buf, &h);
    size_t len = INA_HDR_LEN;
    if (abort) { /* why: the parent tells every rank the same (§12.6) */
        ina__nak_encode(buf + INA_HDR_LEN, 0, reason);
        len += INA_NAK_BODY_LEN;
    }
    /* Twice, best effort, as a worker's LEAVE: a lost one costs the parent's
     * idle timeout (plain) or the other ranks' deadlines (abort). */
    ina__txq_push(&sw->txq, buf, len, &job->up.addr);
    ina__txq_push(&sw->txq, buf, len, &job->up.addr);
}
