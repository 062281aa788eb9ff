/* control.c: the switch's control plane: job registration, slot allocation, sessions, teardown. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/log.h"
#include "common/version.h"
#include "engine/internal.h"

int ina__switch_init(struct ina_switch *sw, const struct ina_switch_params *p)
{
    memset(sw, 0, sizeof(*sw));
    if (p->nslots == 0 || p->nslots > (1u << 24) || p->max_elems == 0 ||
        p->max_elems > (ina__switch_tags(p) ? INA_MAX_ELEMS_TAGGED : INA_MAX_ELEMS) ||
        (p->integrity && !p->has_secret))
        return -EINVAL;
    sw->p = *p;
    sw->hot_own.limit = p->hot_memory ? p->hot_memory : INA_SW_DEFAULT_HOT_MEMORY;
    sw->slots = calloc(p->nslots, sizeof(*sw->slots));
    sw->set_words = ina__switch_set_words(p);
    sw->values = calloc((size_t)p->nslots * 2 * sw->set_words, sizeof(int32_t));
    sw->slot_owner = calloc(p->nslots, sizeof(*sw->slot_owner));
    sw->rng = p->seed;
    sw->session_counter = ina__random_u32(sw);
    sw->ended_nonce = calloc(INA_SW_ENDED_KEEP, sizeof(*sw->ended_nonce));
    sw->ended = calloc(INA_SW_ENDED_KEEP, sizeof(*sw->ended));
    if (p->cookie_key_set) {
        sw->cookie_key = p->cookie_key;
    } else if (p->has_secret) {
        uint32_t k[8];
        for (unsigned i = 0; i < 8; i++)
            k[i] = ina__random_u32(sw);
        ina__hmac_key_init(&sw->cookie_key, k, sizeof(k));
    }
    /* A buffer holds a DATA or RESULT (a HOT_RESULT has a prefix) and its
     * tag, or the longest control datagram: a child's TREE_JOIN with the
     * secret's proof. */
    const size_t ctl = INA_TREE_JOIN_LEN + INA_COOKIE_LEN + INA_AUTH_LEN;
    const size_t data = INA_HOT_PREFIX_LEN + 4 * (size_t)p->max_elems + INA_MAC_LEN;
    int rc = ina__txq_init(&sw->txq, INA_SW_TX_BATCH + INA_SW_TX_RESERVE_BUFS,
                          INA_HDR_LEN + (data > ctl ? data : ctl),
                          INA_SW_TX_BATCH * INA_MAX_WORKERS + INA_SW_TX_RESERVE_MSGS);
    if (!sw->slots || !sw->values || !sw->slot_owner || !sw->ended_nonce || !sw->ended ||
        rc != 0) {
        ina__switch_free(sw);
        return -ENOMEM;
    }
    return 0;
}

void ina__switch_free(struct ina_switch *sw)
{
    for (int i = 0; sw->slots && i < INA_SW_MAX_JOBS; i++) {
        ina__job_detach_rings(sw, &sw->jobs[i]);
        ina__hot_free(&sw->jobs[i]);
    }
    free(sw->slots);
    free(sw->values);
    free(sw->slot_owner);
    free(sw->ended_nonce);
    free(sw->ended);
    ina__txq_free(&sw->txq);
    memset(sw, 0, sizeof(*sw));
}

/*
 * Admission policy: the job's quota is its proposal (the smallest of its
 * ranks'), capped by max_job_slots and by the pool; if no contiguous run that
 * long is free, halve it, down to min_job_slots. Smaller windows only slow a
 * job down (fewer packets in flight), so a busy pool shares out rather than
 * refuses. @return the window granted, 0 if even the minimum does not fit.
 */
static uint32_t admit(struct ina_switch *sw, struct ina_job *job)
{
    uint32_t want = UINT32_MAX;
    for (int r = 0; r < job->world; r++)
        if (job->members[r].weight && job->members[r].window < want)
            want = job->members[r].window; /* 0: a child that has no room (§12.3) */
    return want ? ina__pool_take(sw, want, &job->slot_base) : 0;
}

/* A recently refused job that this JOIN (same name, lane, rank and nonce) belongs to. */
static const struct ina_job *refused_job_of(const struct ina_switch *sw, const struct ina_hdr *h,
                                            const struct ina_join *j, uint64_t now_ns)
{
    for (unsigned k = 0; k < INA_SW_REFUSED_KEEP && k < sw->nrefused; k++) {
        const struct ina_job *t = &sw->refused[k];
        if (now_ns - sw->refused_at[k] < INA_SW_REFUSED_NS && t->lane == j->lane &&
            h->rank < t->world && t->members[h->rank].joined &&
            t->members[h->rank].nonce == j->nonce && strcmp(t->name, j->name) == 0)
            return t;
    }
    return NULL;
}

/*
 * Lanes proposed at JOIN (INA_FLAG_LANES_AUTO, PROTOCOL.md §5.6): the lanes
 * a job's lane 0 would run now. A rank that fixed its lanes (a JOIN without
 * the flag) decides, and the ranks that fixed them must agree (on_join
 * checks); otherwise the smallest proposal wins, so that no rank runs more
 * lanes than its host has cores for.
 */
static uint8_t job_lanes(const struct ina_job *job)
{
    unsigned fixed = 0, low = INA_MAX_PARTS;
    for (int r = 0; r < job->world; r++) {
        const struct ina_member *m = &job->members[r];
        if (!m->joined || !m->weight)
            continue; /* a rank a child stands for: the child's registration speaks for it */
        if (!m->lanes_auto)
            fixed = m->nlanes;
        else if (m->nlanes < low)
            low = m->nlanes;
    }
    return (uint8_t)(fixed ? fixed : low);
}

/* All ranks are in: agree on parameters, take slots, start the session
 * (or wait for slots, or refuse). */
static void job_start(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns)
{
    uint32_t elems = sw->p.max_elems;
    uint64_t wait_ns = UINT64_MAX;
    job->tree = 0;
    for (int r = 0; r < job->world; r++) {
        if (!job->members[r].weight)
            continue; /* its child proposed for it */
        job->tree |= job->members[r].weight > 1;
        if (job->members[r].elems < elems)
            elems = job->members[r].elems;
        uint64_t w = (uint64_t)job->members[r].wait_100ms * 100000000ull;
        if (w < wait_ns)
            wait_ns = w; /* every rank must be willing to wait */
    }
    uint32_t window = admit(sw, job);
    if (window == 0) {
        if (job->state == INA_JOB_JOINING && wait_ns > 0) {
            job->state = INA_JOB_WAITING; /* retried when slots are freed, and per tick */
            job->wait_until_ns = now_ns + wait_ns;
            sw->c.jobs_waited++;
            ina__log_job(INA_LOG_INFO, job, "job_waiting", "no_free_slots");
            return;
        }
        if (job->state == INA_JOB_WAITING && now_ns < job->wait_until_ns)
            return;
        ina__job_refuse(sw, job, INA_ERR_NOSPACE, now_ns);
        return;
    }
    job->elems = (uint16_t)elems;
    job->window = window;
    job->nlanes = job_lanes(job); /* registrations may have been forgotten since */
    for (uint32_t i = 0; i < window; i++)
        sw->slot_owner[job->slot_base + i] = job->id;
    /* Session ids never repeat within a switch's life (counter), and are
     * unpredictable across restarts (random start). 0 means "none". */
    do
        job->session = ++sw->session_counter;
    while (job->session == 0);
    job->token = ina__random_u32(sw);
    job->state = INA_JOB_ACTIVE;
    memset(&job->mcast, 0, sizeof(job->mcast));
    if (sw->p.mcast_base) {
        job->mcast.sin_family = AF_INET;
        job->mcast.sin_addr.s_addr = htonl(sw->p.mcast_base + job->id);
        job->mcast.sin_port = htons(sw->p.mcast_port);
    }
    /* The session key, from the secret of this moment: the ranks derive it
     * from the JOIN_ACK, and a SIGHUP reload later does not change it. */
    job->tagged = (uint8_t)ina__switch_tags(&sw->p);
    if (job->tagged)
        ina__mac_key_derive(&job->mac, &sw->p.secret, job->id, job->session, job->token);
    job->last_rx_ns = now_ns;
    job->need = job->world;
    ina__job_reset_slots(sw, job);
    if (sw->dp)
        sw->dp->job_start(sw->dp_ctx, sw, job); /* before any rank hears of the job */
    sw->c.jobs_started++;
    ina__log_job(INA_LOG_INFO, job, "job_started", "all_ranks_joined");
    ina__job_send_acks(sw, job);
}

static struct ina_job *job_by_name(struct ina_switch *sw, const char *name, unsigned lane)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++)
        if (sw->jobs[i].state != INA_JOB_FREE && sw->jobs[i].lane == lane &&
            strcmp(sw->jobs[i].name, name) == 0)
            return &sw->jobs[i];
    return NULL;
}

static struct ina_job *job_new(struct ina_switch *sw, const struct ina_join *j, uint64_t now_ns)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        if (job->state != INA_JOB_FREE)
            continue;
        memset(job, 0, sizeof(*job));
        job->id = (uint16_t)(sw->p.shard * INA_SW_MAX_JOBS + (unsigned)i + 1);
        job->state = INA_JOB_JOINING;
        snprintf(job->name, sizeof(job->name), "%s", j->name);
        job->world = j->world_size;
        job->lane = j->lane;
        job->nlanes = j->nlanes;
        job->created_ns = now_ns;
        job->child = sw->p.nparents > 0;
        return job;
    }
    return NULL;
}

static int join_params_valid(const struct ina_switch *sw, const struct ina_hdr *h,
                             const struct ina_join *j)
{
    (void)sw; /* proposals above the switch's limits are capped, not refused (job_start) */
    /* Window 0: only from a child that has no room for the job (a TREE_JOIN, §12.3). */
    int window_ok = j->window == 0 ? h->kind == INA_K_TREE_JOIN : (j->window & (j->window - 1)) == 0;
    return j->world_size >= 1 && j->world_size <= INA_MAX_WORKERS && h->rank < j->world_size &&
           j->name[0] != '\0' && j->elems >= 1 && j->elems <= INA_MAX_ELEMS && window_ok &&
           j->nlanes <= INA_MAX_PARTS && j->lane < j->nlanes &&
           (!(h->flags & INA_FLAG_LANES_AUTO) || j->lane == 0);
}

/* Whether a JOIN disagrees with the job on the lanes. A proposal never does:
 * it takes the count the job agrees on. A fixed count must equal that of a
 * running job, or of the members registered with a fixed count. */
static int lanes_conflict(const struct ina_job *job, const struct ina_hdr *h,
                          const struct ina_join *j)
{
    if (h->flags & INA_FLAG_LANES_AUTO)
        return 0;
    if (job->state == INA_JOB_ACTIVE)
        return job->nlanes != j->nlanes;
    for (int r = 0; r < job->world; r++) {
        const struct ina_member *m = &job->members[r];
        if (m->joined && m->weight && !m->lanes_auto && m->nlanes != j->nlanes)
            return 1;
    }
    return 0;
}

/* The JOIN (TREE_JOIN, WITHDRAW) carries the HMAC of the secret over its
 * header and its first covered body bytes: a JOIN's body and cookie (a
 * TREE_JOIN's set too), a WITHDRAW's body. */
static int join_auth_ok(const struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                        size_t bodylen, size_t covered)
{
    if (bodylen < covered + INA_AUTH_LEN)
        return 0;
    uint8_t hb[INA_HDR_LEN], mac[INA_SHA256_LEN];
    ina__hdr_encode(hb, h); /* the decoded header re-encodes to the same 32 bytes */
    struct ina_hmac m;
    ina__hmac_init(&m, &sw->p.secret);
    ina__hmac_update(&m, hb, sizeof(hb));
    ina__hmac_update(&m, body, covered);
    ina__hmac_final(&m, mac);
    return ina__mem_equal_ct(mac, body + covered, INA_AUTH_LEN);
}

/*
 * A JOIN cookie (PROTOCOL.md §4.4): the time it was made (ms of this
 * switch's clock, 8 bytes), then 24 bytes of an HMAC under this switch's own
 * random key over that time, the JOIN's source address and port, kind, rank,
 * nonce, lane and name. Stateless, as a TCP SYN cookie: the switch keeps
 * nothing per challenge, yet knows a cookie it made, for whom, and when.
 */
static void cookie_make(const struct ina_switch *sw, uint8_t *cookie, uint64_t t_ms,
                        const struct ina_hdr *h, const uint8_t *body,
                        const struct sockaddr_in *src)
{
    uint8_t in[8 + 4 + 2 + 1 + 2 + 8 + 1 + 32], mac[INA_SHA256_LEN];
    ina__put32(in, (uint32_t)(t_ms >> 32));
    ina__put32(in + 4, (uint32_t)t_ms);
    memcpy(in + 8, &src->sin_addr.s_addr, 4); /* network order, as the port */
    memcpy(in + 12, &src->sin_port, 2);
    in[14] = h->kind;
    ina__put16(in + 15, h->rank);
    memcpy(in + 17, body, 8);       /* nonce */
    in[25] = body[26];              /* lane */
    memcpy(in + 26, body + 32, 32); /* name */
    ina__hmac_sha256(&sw->cookie_key, in, sizeof(in), mac);
    memcpy(cookie, in, 8);
    memcpy(cookie + 8, mac, INA_COOKIE_LEN - 8);
}

/* The JOIN's cookie is one this switch made for it, and fresh. */
static int cookie_fresh(const struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                        const uint8_t *cookie, const struct sockaddr_in *src, uint64_t now_ns)
{
    uint64_t t_ms = (uint64_t)ina__get32(cookie) << 32 | ina__get32(cookie + 4);
    if (t_ms > UINT64_MAX / 1000000u)
        return 0;
    uint64_t t_ns = t_ms * 1000000u;
    if (t_ns > now_ns ? t_ns - now_ns > INA_SW_COOKIE_AHEAD_NS : now_ns - t_ns > INA_SW_COOKIE_NS)
        return 0; /* stale (or all zeros: the worker has none yet) */
    uint8_t want[INA_COOKIE_LEN];
    cookie_make(sw, want, t_ms, h, body, src);
    return ina__mem_equal_ct(want, cookie, INA_COOKIE_LEN);
}

/* JOIN_COOKIE: join again, echoing this (fresh) cookie under the proof. */
static void send_cookie(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                        const struct sockaddr_in *src, uint64_t now_ns)
{
    uint8_t reply[INA_JOIN_COOKIE_BODY_LEN];
    memcpy(reply, body, 8); /* the JOIN's nonce */
    cookie_make(sw, reply + 8, now_ns / 1000000u, h, body, src);
    sw->c.join_challenges++;
    ina__send_ctl(sw, NULL, INA_K_JOIN_COOKIE, reply, sizeof(reply), src);
}

static int set_has(const uint8_t *set, unsigned r) { return (set[r >> 3] >> (r & 7)) & 1; }

/*
 * A TREE_JOIN's set: nonempty, every rank below the world size, and its
 * lowest rank is the header's (the member that will send for all of them).
 * @return its size, or 0 if invalid.
 */
static int tree_set_valid(const struct ina_hdr *h, const struct ina_join *j, const uint8_t *set)
{
    int n = 0, lowest = -1;
    for (unsigned r = 0; r < 8 * INA_TREE_SET_LEN; r++) {
        if (!set_has(set, r))
            continue;
        if (r >= j->world_size)
            return 0;
        if (lowest < 0)
            lowest = (int)r;
        n++;
    }
    return lowest == h->rank ? n : 0;
}

/* Forget the registration a member made: rep's entry and every rank it stood for. */
static void unregister(struct ina_job *job, unsigned rep)
{
    for (int r = 0; r < job->world; r++) {
        struct ina_member *m = &job->members[r];
        if (m->joined && m->rep == rep) {
            memset(m, 0, sizeof(*m));
            job->njoined--;
        }
    }
}

/*
 * Record a registration of a JOINING job: one rank (a worker's JOIN, set =
 * {rank}) or a child switch's set (TREE_JOIN). A child re-registers as its
 * set grows, with the same nonce from the same address: its earlier entry
 * goes first. A rank already registered by someone else is taken over (only
 * from the same host, or once that registration is over: on_join checked,
 * rank_held_elsewhere); if a child stood for it, the whole of that child's
 * set goes, and the child re-registers what is left when it retransmits.
 */
static void join_record(struct ina_job *job, const struct ina_hdr *h, const struct ina_join *j,
                        const uint8_t *set, int weight, const struct sockaddr_in *src,
                        uint64_t now_ns)
{
    const unsigned rep = h->rank;
    for (int r = 0; r < job->world; r++) {
        const struct ina_member *m = &job->members[r];
        if (m->joined && m->weight && m->nonce == j->nonce && ina__addr_eq(&m->addr, src))
            unregister(job, (unsigned)r); /* the same member's earlier registration */
    }
    for (int r = 0; r < job->world; r++) {
        const struct ina_member *m = &job->members[r];
        int mine = set ? set_has(set, (unsigned)r) : (unsigned)r == rep;
        if (mine && m->joined)
            unregister(job, m->rep); /* whoever registered it before: all of its ranks */
    }
    for (int r = 0; r < job->world; r++) {
        int mine = set ? set_has(set, (unsigned)r) : (unsigned)r == rep;
        if (!mine)
            continue;
        struct ina_member *m = &job->members[r];
        if (!m->joined)
            job->njoined++;
        m->joined = 1;
        m->rep = (uint16_t)rep;
        m->weight = (unsigned)r == rep ? (uint16_t)weight : 0;
        /* The ranks a child stands for keep its nonce and address, so that a
         * JOIN naming one of them meets the rules of §5.2 step 5 as the child. */
        m->nonce = j->nonce;
        m->addr = *src;
        /* Alive while it re-sends (JOIN or TREE_JOIN, at least every second),
         * until the deadline it said in seq (ms; 0 = none; §5.2). */
        m->join_seen_ns = now_ns;
        m->join_deadline_ns = h->seq ? now_ns + (uint64_t)h->seq * 1000000ull : 0;
        if ((unsigned)r != rep)
            continue;
        m->elems = j->elems;
        m->window = j->window;
        m->fallback_port = set ? 0 : j->fallback_port;
        m->wait_100ms = j->wait_100ms;
        m->nlanes = j->nlanes;
        m->lanes_auto = (h->flags & INA_FLAG_LANES_AUTO) != 0;
    }
    job->nlanes = job_lanes(job); /* while JOINING: the count the job would run now */
}

/* "IP:port" of a JOIN's source, for the log. */
static const char *from_str(const struct sockaddr_in *src, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &src->sin_addr, ip, sizeof(ip));
    snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(src->sin_port));
    return buf;
}

/* One log line for a JOIN the switch refused, and why (PROTOCOL.md §5.2). */
static void log_join_refused(const struct ina_hdr *h, const struct ina_join *j,
                             const struct sockaddr_in *src, const char *reason)
{
    char from[INET_ADDRSTRLEN + 8], version[INA_VERSION_STR_LEN];
    ina__log(INA_LOG_WARN, "join_refused", INA_KV_S("name", j->name), INA_KV_I("lane", j->lane),
            INA_KV_I("rank", h->rank), INA_KV_I("world", j->world_size),
            INA_KV_S("from", from_str(src, from, sizeof(from))),
            INA_KV_S("version", ina__version_str(j->sw_version, version, sizeof(version))),
            INA_KV_S("reason", reason));
}

/* JOIN_NAK REJECTED with the cause the switch saw (§4.2), logged as join_refused. */
static void refuse_join(struct ina_switch *sw, const struct ina_hdr *h, const struct ina_join *j,
                        unsigned cause, const struct sockaddr_in *src)
{
    log_join_refused(h, j, src, ina__reject_cause_name(cause));
    ina__send_nak_cause(sw, j->nonce, INA_ERR_REJECTED, cause, src);
}

/*
 * A member whose JOIN says another version than this switch's: a stale
 * worker (or child switch) is the first suspect when the job then fails, so
 * name it, once per job (on its lane 0: every lane's JOIN says the same).
 */
static void warn_version_skew(struct ina_job *job, const struct ina_hdr *h,
                              const struct ina_join *j, const struct sockaddr_in *src)
{
    if (j->sw_version == INA_VERSION_NUMBER || job->version_warned || job->lane != 0)
        return;
    job->version_warned = 1;
    char from[INET_ADDRSTRLEN + 8], version[INA_VERSION_STR_LEN];
    ina__log(INA_LOG_WARN, "version_skew", INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("rank", h->rank), INA_KV_S("from", from_str(src, from, sizeof(from))),
            INA_KV_S("version", ina__version_str(j->sw_version, version, sizeof(version))),
            INA_KV_S("switch_version", ina_version_string()));
}

/* JOIN_NAK MISMATCH that tells the receiver what the other party declared. */
static void send_nak_mismatch(struct ina_switch *sw, uint64_t nonce, unsigned other_world,
                              unsigned other_nlanes, const struct sockaddr_in *dst)
{
    uint8_t body[INA_NAK_BODY_LEN];
    ina__nak_encode(body, nonce, INA_ERR_MISMATCH);
    ina__put16(body + INA_NAK_MISMATCH_WORLD, (uint16_t)other_world);
    body[INA_NAK_MISMATCH_NLANES] = (uint8_t)other_nlanes;
    ina__send_ctl(sw, NULL, INA_K_JOIN_NAK, body, sizeof(body), dst);
}

/* A name whose ranks disagreed less than INA_SW_MISMATCH_NS ago (job_mismatch). */
static int recently_mismatched(const struct ina_switch *sw, const struct ina_join *j,
                               uint64_t now_ns, unsigned *world, unsigned *nlanes)
{
    for (unsigned k = 0; k < INA_SW_MISMATCH_KEEP && k < sw->nmismatched; k++) {
        if (now_ns - sw->mismatched[k].at_ns < INA_SW_MISMATCH_NS &&
            sw->mismatched[k].lane == j->lane && strcmp(sw->mismatched[k].name, j->name) == 0) {
            *world = sw->mismatched[k].world;
            *nlanes = sw->mismatched[k].nlanes;
            return 1;
        }
    }
    return 0;
}

/*
 * A JOIN whose world size or lane count differs from the job registered
 * under its name. The job cannot run, so every rank must hear it: the
 * newcomer and, while the job is still joining, every registered rank get
 * JOIN_NAK MISMATCH naming the other side's values, the job is freed, and
 * the name is remembered for INA_SW_MISMATCH_NS, so that ranks joining
 * shortly after fail at once too. A running job only refuses the newcomer:
 * a stray JOIN must not end it.
 */
static void job_mismatch(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                         const struct ina_join *j, const struct sockaddr_in *src, uint64_t now_ns)
{
    const char *what = job->world != j->world_size ? "world_size_mismatch" : "lanes_mismatch";
    sw->c.drops[INA_DROP_JOIN]++;
    log_join_refused(h, j, src, what);
    send_nak_mismatch(sw, j->nonce, (unsigned)job->world, job->nlanes, src);
    if (job->state == INA_JOB_ACTIVE)
        return;
    for (int r = 0; r < job->world; r++)
        if (job->members[r].joined && job->members[r].weight)
            send_nak_mismatch(sw, job->members[r].nonce, j->world_size, j->nlanes,
                              &job->members[r].addr);
    unsigned k = sw->nmismatched++ % INA_SW_MISMATCH_KEEP;
    snprintf(sw->mismatched[k].name, sizeof(sw->mismatched[k].name), "%s", j->name);
    sw->mismatched[k].lane = j->lane;
    sw->mismatched[k].nlanes = j->nlanes;
    sw->mismatched[k].world = j->world_size;
    sw->mismatched[k].at_ns = now_ns;
    ina__log_job(INA_LOG_WARN, job, "job_dropped", what);
    ina__ended_remember(sw, job);
    ina__job_free(sw, job);
}

/* JOIN_WAIT: registered; the job still waits for ranks (state 0) or for slots (1). */
static void reply_join_wait(struct ina_switch *sw, const struct ina_job *job, int rank)
{
    uint8_t body[INA_JOIN_WAIT_BODY_LEN];
    memset(body, 0, sizeof(body));
    const struct ina_member *m = &job->members[rank];
    ina__put32(body, (uint32_t)(m->nonce >> 32));
    ina__put32(body + 4, (uint32_t)m->nonce);
    ina__put16(body + 8, (uint16_t)job->world);
    ina__put16(body + 10, (uint16_t)job->njoined);
    body[12] = job->state == INA_JOB_WAITING;
    for (int r = 0; r < job->world; r++)
        if (job->members[r].joined)
            body[16 + (r >> 3)] |= (uint8_t)(1u << (r & 7));
    ina__send_ctl(sw, NULL, INA_K_JOIN_WAIT, body, sizeof(body), &m->addr);
}

/* Forget the registration that holds rank r (withdrawn, or its rank is
 * gone): the rank's own, or a child's set with every rank of it. A job left
 * with no registered rank is freed, so that its name is free again; a child
 * tells its parent of its smaller set. */
static void member_unregister(struct ina_switch *sw, struct ina_job *job, int r, const char *why,
                              uint64_t now_ns)
{
    ina__log(INA_LOG_INFO, "join_forgotten", INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("lane", job->lane), INA_KV_I("rank", r),
            INA_KV_I("ranks", job->members[r].weight), INA_KV_S("reason", why));
    unregister(job, job->members[r].rep);
    if (job->state == INA_JOB_WAITING)
        job->state = INA_JOB_JOINING; /* no longer complete: it waits for that rank again */
    if (job->njoined == 0) {
        ina__log_job(INA_LOG_INFO, job, "job_dropped", "no_rank_waiting");
        ina__job_free(sw, job);
        return;
    }
    job->nlanes = job_lanes(job);
    if (job->child)
        ina__tree_register(sw, job, now_ns);
}

/*
 * A registration lives only while its rank is waiting to join: until the
 * deadline it gave in its JOIN, and while it re-sends JOIN (at least every
 * second). A rank that gave up without a WITHDRAW (killed, or the WITHDRAW
 * was lost) is forgotten here, so that no session starts with a member that
 * is not there. @return registrations forgotten (the job may be freed).
 */
/* Why a member's registration is over (its deadline passed, or it fell
 * silent), or NULL while it lives. */
static const char *registration_over(const struct ina_member *m, uint64_t now_ns)
{
    return m->join_deadline_ns && now_ns > m->join_deadline_ns ? "deadline_passed"
           : now_ns - m->join_seen_ns > INA_SW_JOIN_SILENT_NS   ? "rank_silent"
                                                                : NULL;
}

static int expire_registrations(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns)
{
    int n = 0;
    for (int r = 0; r < job->world && job->state != INA_JOB_FREE; r++) {
        const struct ina_member *m = &job->members[r];
        if (!m->joined || !m->weight)
            continue; /* (a rank a child stands for lives as long as the child's registration) */
        const char *why = registration_over(m, now_ns);
        if (why) {
            sw->c.joins_expired++;
            n++;
            member_unregister(sw, job, r, why, now_ns);
        }
    }
    return n;
}


/*
 * A registration (a JOIN: the set {rank}; a TREE_JOIN: its set) may take over
 * a rank registered before only from the member that holds it (the same
 * nonce and address:port: a child whose set changed), from the same host (a
 * restart there: new nonce, new port), or once that member's registration is
 * over. Never from a member alive on another host: names are not secret,
 * and without this anyone could claim a joining job's ranks, start it with
 * itself and lock the real ranks out (PROTOCOL.md §5.2 step 6′).
 * @return the first rank the newcomer may not take, or -1.
 */
static int rank_held_elsewhere(const struct ina_job *job, const struct ina_hdr *h,
                               const struct ina_join *j, const uint8_t *set,
                               const struct sockaddr_in *src, uint64_t now_ns)
{
    for (int r = 0; r < job->world; r++) {
        int mine = set ? set_has(set, (unsigned)r) : (unsigned)r == h->rank;
        if (!mine || !job->members[r].joined)
            continue;
        const struct ina_member *holder = &job->members[job->members[r].rep];
        if ((holder->nonce == j->nonce && ina__addr_eq(&holder->addr, src)) ||
            holder->addr.sin_addr.s_addr == src->sin_addr.s_addr ||
            registration_over(holder, now_ns))
            continue;
        return r;
    }
    return -1;
}

/*
 * JOIN from a worker, or TREE_JOIN from a child switch that stands for a set
 * of ranks (PROTOCOL.md §5.2, §12.3). Both follow the same steps; the child is
 * the member `rep` (its set's lowest rank) with weight = the set's size.
 */
static void on_join(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                    size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns)
{
    struct ina_join j;
    const int tree = h->kind == INA_K_TREE_JOIN;
    if (h->version != INA_WIRE_VERSION) {
        /* Another protocol version: answer so the worker can say why, if
         * the nonce (the body's first 8 bytes in every version) is there.
         * The caller counts the drop (VERSION). */
        if (bodylen >= 8)
            ina__send_nak(sw, (uint64_t)ina__get32(body) << 32 | ina__get32(body + 4),
                          INA_ERR_PROTO, src);
        return;
    }
    if (ina__join_decode(body, bodylen, &j) != 0 || (tree && bodylen < INA_TREE_JOIN_LEN)) {
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    const uint8_t *set = tree ? body + INA_JOIN_BODY_LEN : NULL;
    const size_t covered = tree ? INA_TREE_JOIN_LEN : INA_JOIN_BODY_LEN;
    if (sw->p.has_secret) {
        /* Proof of the secret over the body and the cookie after it... */
        if (!join_auth_ok(sw, h, body, bodylen, covered + INA_COOKIE_LEN)) {
            sw->c.drops[INA_DROP_AUTH]++;
            refuse_join(sw, h, &j, INA_REJECT_AUTH, src);
            return;
        }
        /* ...and of freshness: the cookie is one we handed out lately, for
         * this JOIN. Else (the first JOIN, or a replay) a new cookie. */
        if (!cookie_fresh(sw, h, body, body + covered, src, now_ns)) {
            send_cookie(sw, h, body, src, now_ns);
            return;
        }
    }
    if (((h->flags & INA_FLAG_INTEGRITY) != 0) != (sw->p.integrity != 0) ||
        (tree && sw->p.integrity)) {
        /* Integrity must be on at both ends (a child switch cannot carry it). */
        sw->c.drops[INA_DROP_JOIN]++;
        log_join_refused(h, &j, src, "integrity_mismatch");
        ina__send_nak(sw, j.nonce, INA_ERR_NOTSUP, src);
        return;
    }
    int weight = 1;
    if (!join_params_valid(sw, h, &j) || (tree && !(weight = tree_set_valid(h, &j, set))) ||
        (tree && sw->p.mcast_base)) {
        /* (A child passes RESULTs on by unicast: it cannot join a group.) */
        sw->c.drops[INA_DROP_JOIN]++;
        refuse_join(sw, h, &j, INA_REJECT_PARAMETERS, src);
        return;
    }
    unsigned nshards = sw->p.nshards ? sw->p.nshards : 1;
    unsigned shard = ina__lane_shard(j.name, j.lane, nshards);
    if (shard != sw->p.shard) {
        /* Another dataplane thread owns this (job, lane): send the worker there. */
        uint8_t redirect[INA_NAK_BODY_LEN];
        ina__nak_encode(redirect, j.nonce, 0);
        ina__put16(redirect + 12, sw->p.shard_ports[shard]);
        sw->c.join_redirects++;
        ina__send_ctl(sw, NULL, INA_K_REDIRECT, redirect, sizeof(redirect), src);
        return;
    }
    if (sw->p.only_job[0] && strcmp(j.name, sw->p.only_job) != 0) {
        sw->c.drops[INA_DROP_JOIN]++; /* a worker's private aggregator serves one job */
        refuse_join(sw, h, &j, INA_REJECT_OTHER_JOB, src);
        return;
    }
    if (tree && sw->dp) {
        /* A child stands for several ranks (weight > 1), which the in-kernel
         * dataplane does not count: it serves workers only (docs/EBPF.md). */
        sw->c.drops[INA_DROP_JOIN]++;
        refuse_join(sw, h, &j, INA_REJECT_TREE, src);
        return;
    }
    const struct ina_job *refused = refused_job_of(sw, h, &j, now_ns);
    if (refused) {
        ina__send_refusal(sw, refused, h->rank); /* its NOSPACE was lost: say it again */
        return;
    }
    struct ina_job *job = job_by_name(sw, j.name, j.lane);
    unsigned mworld, mnlanes;
    const int mismatched = !job && recently_mismatched(sw, &j, now_ns, &mworld, &mnlanes);
    if (!mismatched && ina__ended_has(sw, h, &j)) {
        /* A session ends once: this is a replay (or a copy from the past). */
        sw->c.drops[INA_DROP_JOIN]++;
        sw->c.joins_replayed++;
        refuse_join(sw, h, &j, INA_REJECT_SESSION_ENDED, src);
        return;
    }
    if (job && (job->world != j.world_size || lanes_conflict(job, h, &j))) {
        job_mismatch(sw, job, h, &j, src, now_ns);
        return;
    }
    if (mismatched) {
        sw->c.drops[INA_DROP_JOIN]++;
        log_join_refused(h, &j, src, "ranks_disagree");
        send_nak_mismatch(sw, j.nonce, mworld, mnlanes, src);
        return;
    }
    struct ina_member *m = job ? &job->members[h->rank] : NULL;
    if (sw->draining && !(job && job->state == INA_JOB_ACTIVE && m->nonce == j.nonce &&
                          ina__addr_eq(&m->addr, src))) {
        /* Draining: only a running job's own lost ACK is answered (below). */
        sw->c.drops[INA_DROP_JOIN]++;
        sw->c.joins_refused_draining++;
        log_join_refused(h, &j, src, "draining");
        ina__send_nak(sw, j.nonce, INA_ERR_SHUTDOWN, src);
        return;
    }
    if (job && job->state == INA_JOB_ACTIVE) {
        if (m->nonce == j.nonce && ina__addr_eq(&m->addr, src) && m->weight == weight) {
            ina__send_ack(sw, job, h->rank); /* our ACK was lost: say it again */
            return;
        }
        /* A new incarnation of a rank: the running session cannot go on
         * (that rank lost its state), so end it and collect a new one. Only
         * from the host the rank registered from: job names are not secret,
         * and a stranger must not be able to end a running job. */
        if (m->addr.sin_addr.s_addr != src->sin_addr.s_addr) {
            sw->c.drops[INA_DROP_JOIN]++;
            refuse_join(sw, h, &j, INA_REJECT_RUNNING_ELSEWHERE, src);
            return;
        }
        /* Every member hears who took the rank, and from where: a restart,
         * or another job started with this one's name (PROTOCOL.md §4.2). */
        ina__job_abort_cause(sw, job, INA_ERR_ABORTED, "rank_restarted", INA_ABORT_RANK_TAKEN,
                             h->rank, src);
        ina__ended_forget(sw, j.nonce); /* (the same nonce from a new port: it joins on) */
        job = NULL;
    }
    if (!job) {
        job = job_new(sw, &j, now_ns);
        if (!job) {
            sw->c.jobs_refused++; /* job table full */
            log_join_refused(h, &j, src, "job_table_full");
            ina__send_nak(sw, j.nonce, INA_ERR_NOSPACE, src);
            return;
        }
    }
    if (rank_held_elsewhere(job, h, &j, set, src, now_ns) >= 0) {
        sw->c.drops[INA_DROP_JOIN]++;
        sw->c.joins_refused_taken++;
        refuse_join(sw, h, &j, INA_REJECT_JOINING_ELSEWHERE, src);
        return;
    }
    join_record(job, h, &j, set, weight, src, now_ns);
    if (tree)
        sw->c.tree_joins++;
    char version[INA_VERSION_STR_LEN];
    ina__log(INA_LOG_DEBUG, "rank_joined", INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("lane", job->lane), INA_KV_I("rank", h->rank), INA_KV_I("ranks", weight),
            INA_KV_I("joined", job->njoined), INA_KV_I("world", job->world),
            INA_KV_S("version", ina__version_str(j.sw_version, version, sizeof(version))));
    warn_version_skew(job, h, &j, src);
    /* Start only with every rank alive and waiting: forget the ones that
     * are not (this rank's registration is fresh, so it stays). A child
     * never starts a job: its parent does (§12.3). */
    if (job->child)
        ina__tree_register(sw, job, now_ns);
    else if (job->njoined == job->world && job->state == INA_JOB_JOINING &&
             expire_registrations(sw, job, now_ns) == 0)
        job_start(sw, job, now_ns);
    if (job->state == INA_JOB_JOINING || job->state == INA_JOB_WAITING)
        reply_join_wait(sw, job, h->rank);
}

/*
 * WITHDRAW (PROTOCOL.md §5.2): a rank that gives up joining (its deadline
 * passed, or its ina_init() failed) takes its registration back, so that the
 * job does not start with it and its name is free again. The body is the
 * rank's JOIN body; the name, lane, rank, nonce and source address must match
 * the registration (and, with a secret, the HMAC must be right).
 */
static void on_withdraw(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                        size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns)
{
    struct ina_join j;
    if (ina__join_decode(body, bodylen, &j) != 0 ||
        (sw->p.has_secret && !join_auth_ok(sw, h, body, bodylen, INA_JOIN_BODY_LEN))) {
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    struct ina_job *job = job_by_name(sw, j.name, j.lane);
    if (!job || (job->state != INA_JOB_JOINING && job->state != INA_JOB_WAITING) ||
        h->rank >= job->world || !job->members[h->rank].joined ||
        job->members[h->rank].weight != 1 || /* a worker's own registration */
        job->members[h->rank].nonce != j.nonce || !ina__addr_eq(&job->members[h->rank].addr, src)) {
        sw->c.drops[INA_DROP_JOIN]++; /* not registered (any more), or not that rank's */
        return;
    }
    sw->c.joins_withdrawn++;
    member_unregister(sw, job, h->rank, "withdrawn", now_ns);
}

/*
 * LEAVE (PROTOCOL.md §5.4). From a child (§12.6) it may carry a NAK body whose
 * reason tells why it aborts (MISMATCH, TIMEOUT, NOSPACE): every rank then
 * hears that reason rather than ABORTED.
 */
static void on_leave(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                     size_t bodylen, const struct sockaddr_in *src)
{
    struct ina_job *job = ina__job_by_id(sw, h->job);
    if (!job || job->state != INA_JOB_ACTIVE) {
        sw->c.drops[INA_DROP_NO_JOB]++; /* also a late duplicate LEAVE after the job ended */
        return;
    }
    if (job->session != h->session || job->token != h->token || h->rank >= job->world ||
        !job->members[h->rank].weight || !ina__addr_eq(src, &job->members[h->rank].addr)) {
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    if (h->flags & INA_FLAG_ABORT) {
        /* That rank failed (deadline, disagreement) or quit mid-operation:
         * the others cannot finish either. End it for all, free the slots. */
        uint64_t nonce;
        int32_t reason = INA_ERR_ABORTED;
        if (ina__nak_decode(body, bodylen, &nonce, &reason) != 0 ||
            (reason != INA_ERR_MISMATCH && reason != INA_ERR_TIMEOUT && reason != INA_ERR_NOSPACE))
            reason = INA_ERR_ABORTED;
        ina__job_abort(sw, job, reason);
        return;
    }
    struct ina_member *m = &job->members[h->rank];
    if (!m->left) {
        m->left = 1;
        job->nleft += m->weight;
    }
    /* The job ends when every rank has left: before that, a rank that lost
     * its last result may still retransmit and must be answered. */
    if (job->nleft == job->need) {
        ina__log_job(INA_LOG_INFO, job, "job_ended", "all_ranks_left");
        sw->c.jobs_ended++;
        if (job->child)
            ina__job_leave_parent(sw, job, 0, 0);
        ina__job_free(sw, job);
    }
}

/* Slots were freed: start WAITING jobs that fit now, oldest first. */
static void retry_waiting(struct ina_switch *sw, uint64_t now_ns)
{
    sw->slots_freed = 0;
    for (;;) {
        struct ina_job *oldest = NULL;
        for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
            struct ina_job *job = &sw->jobs[i];
            if (job->state == INA_JOB_WAITING && job->wait_until_ns > now_ns &&
                (!oldest || job->created_ns < oldest->created_ns))
                oldest = job;
        }
        if (!oldest || ina__switch_tx_full(sw))
            return;
        if (expire_registrations(sw, oldest, now_ns) > 0)
            continue; /* a rank is gone: the job waits for it again (or was freed) */
        job_start(sw, oldest, now_ns);
        if (oldest->state == INA_JOB_WAITING) {
            /* The oldest still does not fit: later ones wait behind it (FIFO,
             * so a large job is not starved by a stream of small ones). */
            return;
        }
    }
}

/*
 * Map the object an SHM_ATTACH names (PROTOCOL.md §5.9): a sealed memfd of the
 * worker's, or with --shm-unsealed a POSIX shm name of the first version.
 * @return 0 or -errno, the SHM_ACK's reason.
 */
static int shm_map(struct ina_switch *sw, struct ina_shm *shm, const char *name,
                   const uint8_t *body, size_t bodylen, uint32_t nslots, uint32_t slot_size)
{
    if (name[0] != '/') {
        if (bodylen < INA_SHM_ATTACH_BODY_LEN)
            return -EINVAL; /* no pid and descriptor */
        return ina__ring_attach(shm, name, ina__get32(body + 80), ina__get32(body + 84), nslots,
                              slot_size);
    }
    /* A POSIX shm object: any process of this user can shrink it under our
     * mapping. Refused unless the operator accepts that (the fault guard
     * then turns a shrink into an aborted job). */
    if (!sw->p.shm_unsealed)
        return -EPERM;
    int rc = ina__ring_attach_named(shm, name, nslots, slot_size);
    if (rc == 0)
        ina__ring_unlink(name); /* mapped by both sides: nothing left in /dev/shm if the worker dies */
    return rc;
}

/*
 * SHM_ATTACH (PROTOCOL.md §5.9): a rank of an active job on this host asks
 * for its DATA and RESULTs to go through its rings. Checked like a LEAVE
 * (job, session, token, rank, source address), then the object (shm_map).
 * Answered with SHM_ACK, reason 0 or why not; a repeated request (a lost ACK)
 * gets the same answer, one that names another object while the rank has
 * rings gets -EBUSY.
 */
static void on_shm_attach(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                          size_t bodylen, const struct sockaddr_in *src)
{
    struct ina_job *job = ina__job_by_id(sw, h->job);
    if (!job || job->state != INA_JOB_ACTIVE) {
        sw->c.drops[INA_DROP_NO_JOB]++;
        return;
    }
    if (job->session != h->session || job->token != h->token || h->rank >= job->world ||
        job->members[h->rank].weight != 1 || /* a worker, not a child switch */
        !ina__addr_eq(src, &job->members[h->rank].addr) || bodylen < INA_SHM_ATTACH_NAMED_LEN) {
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    uint64_t nonce = (uint64_t)ina__get32(body) << 32 | ina__get32(body + 4);
    uint32_t nslots = ina__get32(body + 8), slot_size = ina__get32(body + 12);
    char name[INA_SHM_NAME_MAX];
    memcpy(name, body + 16, sizeof(name));
    name[sizeof(name) - 1] = '\0';
    struct ina_member *m = &job->members[h->rank];
    int reason = 0;
    if (!sw->p.shm || sw->p.mcast_base) {
        reason = INA_ERR_NOTSUP; /* not offered (its JOIN_ACK said so) */
    } else if (m->shm && strcmp(m->shm->name, name) != 0) {
        /* Already attached to another object: one pair of rings per rank. Saying
         * yes would leave the worker sending into rings nobody reads. */
        reason = -EBUSY;
    } else if (!m->shm) {
        if (slot_size < ina__ring_slot_size(INA_HDR_LEN + 4 * (size_t)job->elems +
                                          (job->tagged ? INA_MAC_LEN : 0))) {
            reason = -EINVAL; /* a result would not fit a slot */
        } else if (!(m->shm = calloc(1, sizeof(*m->shm)))) {
            reason = -ENOMEM;
        } else if ((reason = shm_map(sw, m->shm, name, body, bodylen, nslots, slot_size)) != 0) {
            free(m->shm);
            m->shm = NULL;
        } else {
            sw->c.shm_attached++;
            ina__log_job(INA_LOG_DEBUG, job, "shm_attached", "rings");
        }
    }
    if (reason)
        sw->c.drops[INA_DROP_SHM]++;
    uint8_t ack[INA_NAK_BODY_LEN];
    ina__nak_encode(ack, nonce, reason);
    ina__send_ctl(sw, job, INA_K_SHM_ACK, ack, sizeof(ack), src);
}

/* HOT_INSTALL, HOT_FETCH, HOT_SAMPLE (PROTOCOL.md §14.3): checked like a LEAVE, then hot.c. */
static void on_hot(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                   size_t bodylen, const struct sockaddr_in *src)
{
    struct ina_job *job = ina__job_by_id(sw, h->job);
    if (!job || job->state != INA_JOB_ACTIVE) {
        sw->c.drops[INA_DROP_NO_JOB]++;
        return;
    }
    if (job->session != h->session || job->token != h->token || h->rank >= job->world ||
        !ina__addr_eq(src, &job->members[h->rank].addr)) {
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    ina__hot_control(sw, job, h, body, bodylen, src);
}

void ina__ctl_input(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                    size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns)
{
    switch (h->kind) {
    case INA_K_JOIN: on_join(sw, h, body, bodylen, src, now_ns); break;
    case INA_K_LEAVE: on_leave(sw, h, body, bodylen, src); break;
    case INA_K_WITHDRAW: on_withdraw(sw, h, body, bodylen, src, now_ns); break;
    case INA_K_TREE_JOIN: on_join(sw, h, body, bodylen, src, now_ns); break;
    case INA_K_RESULT:
    case INA_K_JOIN_ACK:
    case INA_K_JOIN_NAK:
    case INA_K_JOIN_WAIT:
    case INA_K_REDIRECT:
    case INA_K_ABORT:
    case INA_K_MIGRATE:
    case INA_K_JOIN_COOKIE:
        if (sw->p.nparents) {
            ina__tree_input(sw, h, body, bodylen, src, now_ns); /* from our parent */
            break;
        }
        sw->c.drops[INA_DROP_KIND]++;
        break;
    case INA_K_SHM_ATTACH: on_shm_attach(sw, h, body, bodylen, src); break;
    case INA_K_DOORBELL: break; /* it woke us; the main loop reads the rings */
    case INA_K_HOT_INSTALL:
    case INA_K_HOT_FETCH:
    case INA_K_HOT_SAMPLE: on_hot(sw, h, body, bodylen, src); break;
    default: sw->c.drops[INA_DROP_KIND]++; break;
    }
    if (sw->slots_freed)
        retry_waiting(sw, now_ns);
}

int ina__switch_abort_job(struct ina_switch *sw, uint16_t id)
{
    struct ina_job *job = ina__job_by_id(sw, id);
    if (!job || job->state == INA_JOB_FREE)
        return -ENOENT;
    ina__log_job(INA_LOG_WARN, job, "operator_abort", "requested");
    if (job->state == INA_JOB_ACTIVE) {
        ina__job_abort_why(sw, job, INA_ERR_ABORTED, "operator_abort");
    } else {
        /* Still joining: the ranks that joined wait for an ACK; refuse them. */
        sw->c.jobs_aborted++;
        ina__send_to_members(sw, job, INA_K_JOIN_NAK, INA_ERR_ABORTED);
        ina__ended_remember(sw, job);
        ina__job_free(sw, job);
    }
    return 0;
}

/* The round that set `set` of an absolute slot holds, wherever the slots are kept. */
static uint32_t slot_seq(struct ina_switch *sw, uint32_t abs_slot, unsigned set)
{
    return sw->dp ? sw->dp->slot_seq(sw->dp_ctx, abs_slot, set) : sw->slots[abs_slot].set[set].seq;
}

/*
 * Eviction (PROTOCOL.md §5.8): the bound is one past the furthest stream
 * position any rank has reached, round * W + slot over the job's slots.
 * Positions below it are served as always, so whatever a rank has sent can
 * complete; the ranks stop at the bound, wait for those results, leave, and
 * carry on from the bound at rank 0's host aggregator (libina stream.c).
 * DATA at or past the bound is dropped (EVICTED) and answered with the
 * notice again, so a lost notice is repaired by the ranks' retransmissions.
 */
int ina__switch_evict_job(struct ina_switch *sw, uint16_t id)
{
    struct ina_job *job = ina__job_by_id(sw, id);
    if (!job || job->state != INA_JOB_ACTIVE)
        return -ENOENT;
    if (job->evicted)
        return -EALREADY;
    if (job->tree || job->child) {
        ina__log_job(INA_LOG_WARN, job, "operator_evict", "refused_tree");
        return -ENOTSUP; /* a child could not move its ranks to rank 0's host (§12.8) */
    }
    /* Another dataplane serves DATA meanwhile: first make it pass every DATA
     * of the job up (bound 0), so that no slot moves while the bound is
     * computed; those datagrams come back through ina__switch_input once the
     * bound is set, and are served or refused by it. */
    if (sw->dp)
        sw->dp->job_evict(sw->dp_ctx, job, 0);
    int64_t top = -1;
    for (uint32_t j = 0; j < job->window; j++) {
        int32_t r0 = (int32_t)slot_seq(sw, job->slot_base + j, 0),
                r1 = (int32_t)slot_seq(sw, job->slot_base + j, 1);
        int64_t r = r0 > r1 ? r0 : r1; /* -1 or -2: never used */
        int64_t pos = r * (int64_t)job->window + j;
        if (r >= 0 && pos > top)
            top = pos;
    }
    job->evicted = 1;
    job->evict_bound = (uint64_t)(top + 1);
    if (sw->dp)
        sw->dp->job_evict(sw->dp_ctx, job, job->evict_bound);
    ina__log_job(INA_LOG_WARN, job, "operator_evict", "requested");
    sw->c.jobs_evicted++;
    if (ina__switch_tx_full(sw))
        return 0; /* the ranks learn it from the answer to their next DATA */
    ina__job_send_migrate(sw, job, -1);
    return 0;
}

/* Whether a round of job is partly received without rank r's contribution. */
static int round_waits_on(const struct ina_switch *sw, const struct ina_job *job, int r)
{
    for (uint32_t i = 0; i < job->window; i++)
        for (unsigned set = 0; set < 2; set++) {
            const struct ina_slot_set *ss = &sw->slots[job->slot_base + i].set[set];
            if (!ss->complete && ss->nrecv > 0 && !((ss->bitmap[r >> 6] >> (r & 63)) & 1))
                return 1;
        }
    return 0;
}

/* A DOORBELL to rank r's address (a live worker takes it for a wake-up): a closed port
 * answers with ICMP port unreachable (ina__switch_unreachable). */
static void probe_rank(struct ina_switch *sw, struct ina_job *job, int r, uint64_t now_ns)
{
    struct ina_member *m = &job->members[r];
    if (now_ns - m->probe_ns < INA_SW_PROBE_EVERY_NS || ina__switch_tx_full(sw))
        return;
    static const uint8_t no_body[1];
    m->probe_ns = now_ns;
    sw->c.doorbells++;
    ina__send_ctl(sw, job, INA_K_DOORBELL, no_body, 0, &m->addr);
}

/*
 * Dead ranks (PROTOCOL.md §5.4). Silence alone proves nothing: a live rank may
 * compute for minutes between operations while its peers wait. So the switch
 * only suspects (no round completed for INA_SW_STUCK_NS while a peer resends
 * and the suspect, missing from a partly received round, sent nothing), probes
 * the suspect, and ends the job on proof only: ICMP port unreachable from its
 * address, i.e. no socket there any more. Runs at the tick, off the data path:
 * the dataplane's only part is the counters it keeps anyway.
 */
static void check_liveness(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns)
{
    if (sw->dp || job->tree || job->child || job->evicted)
        return; /* (slots in the kernel; a child switch's members; a job moving away) */
    if (!job->stuck_since_ns || job->c.completions != job->live_completions) {
        job->live_completions = job->c.completions;
        job->stuck_since_ns = now_ns;
        for (int r = 0; r < job->world; r++)
            job->members[r].live_rx = job->members[r].rx_packets;
        return;
    }
    if (now_ns - job->stuck_since_ns < INA_SW_STUCK_NS)
        return;
    int resending = 0;
    for (int r = 0; r < job->world; r++)
        resending |= job->members[r].rx_packets != job->members[r].live_rx;
    if (!resending)
        return; /* nobody waits: between operations */
    for (int r = 0; r < job->world; r++) {
        struct ina_member *m = &job->members[r];
        if (!m->joined || m->left || m->weight != 1 || m->rx_packets != m->live_rx ||
            !round_waits_on(sw, job, r))
            continue;
        if (m->unreach_ns >= job->stuck_since_ns) {
            char at[INET_ADDRSTRLEN + 8];
            ina__log(INA_LOG_WARN, "rank_dead", INA_KV_I("job", job->id),
                     INA_KV_S("name", job->name), INA_KV_I("lane", job->lane), INA_KV_I("rank", r),
                     INA_KV_S("addr", from_str(&m->addr, at, sizeof(at))));
            const struct sockaddr_in addr = m->addr; /* (the abort frees the job) */
            ina__job_abort_cause(sw, job, INA_ERR_ABORTED, "rank_dead", INA_ABORT_RANK_DEAD,
                                 (unsigned)r, &addr);
            return;
        }
        probe_rank(sw, job, r, now_ns);
    }
}

void ina__switch_unreachable(struct ina_switch *sw, const struct sockaddr_in *dst,
                             uint64_t now_ns)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        for (int r = 0; job->state == INA_JOB_ACTIVE && r < job->world; r++)
            if (job->members[r].joined && ina__addr_eq(&job->members[r].addr, dst))
                job->members[r].unreach_ns = now_ns;
    }
}

void ina__switch_tick(struct ina_switch *sw, uint64_t now_ns)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        if ((job->state == INA_JOB_JOINING || job->state == INA_JOB_WAITING) &&
            expire_registrations(sw, job, now_ns) > 0)
            continue; /* a rank gave up or fell silent: the job waits for it again */
        if (job->state == INA_JOB_JOINING && sw->p.join_timeout_ns &&
            now_ns - job->created_ns > sw->p.join_timeout_ns) {
            ina__log_job(INA_LOG_WARN, job, "job_dropped", "join_timeout");
            ina__job_free(sw, job);
        } else if (job->state == INA_JOB_WAITING && now_ns >= job->wait_until_ns) {
            if (ina__switch_tx_full(sw))
                continue;
            job_start(sw, job, now_ns); /* a last try, then NOSPACE */
        } else if (job->state == INA_JOB_ACTIVE && sw->p.idle_timeout_ns &&
                   now_ns > job->last_rx_ns && /* another dataplane's clock may be ahead */
                   now_ns - job->last_rx_ns > sw->p.idle_timeout_ns) {
            if (ina__switch_tx_full(sw))
                continue; /* no room to send the ABORT: try again next tick */
            ina__job_abort(sw, job, INA_ERR_TIMEOUT);
        } else if (job->state == INA_JOB_ACTIVE) {
            if (ina__switch_tx_full(sw))
                continue;
            check_liveness(sw, job, now_ns);
        } else if (job->state == INA_JOB_JOINING && job->child) {
            if (ina__switch_tx_full(sw))
                continue;
            ina__tree_tick(sw, job, now_ns); /* TREE_JOIN again, until the parent answers */
        }
    }
    if (sw->slots_freed)
        retry_waiting(sw, now_ns);
}
