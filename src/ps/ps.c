/* ps.c: ina-ps's protocol engine: jobs and sessions, PUSH/COMMIT/PULL/ASSIGN, synchronous steps, timeouts. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ps/ps.h"
#include "common/log.h"

static const char *const drop_names[] = {
#define INA__PS_DROP_NAME(name, text) #name,
    INA_PS_DROP_MAP(INA__PS_DROP_NAME)
#undef INA__PS_DROP_NAME
};

const char *ina__ps_drop_name(enum ina_ps_drop d)
{
    return (unsigned)d < INA_PS_DROP__COUNT ? drop_names[d] : "?";
}

static uint32_t random_u32(void)
{
    uint32_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = (uint32_t)random() ^ (uint32_t)rand();
    return v;
}

int ina__ps_init(struct ina_ps *ps, const struct ina_ps_params *p)
{
    memset(ps, 0, sizeof(*ps));
    if (p->nshards == 0 || p->shard >= p->nshards || p->max_memory == 0)
        return -EINVAL;
    ps->p = *p;
    ps->tx.mem = malloc(INA_PS_TX_BYTES);
    if (!ps->tx.mem)
        return -ENOMEM;
    ps->session_counter = random_u32();
    for (int i = 0; i < INA_PS_MAX_JOBS; i++)
        ps->jobs[i].id = (uint16_t)(i + 1);
    return 0;
}

static void job_free(struct ina_ps *ps, struct ina_ps_job *job)
{
    if (ps->sched_ops)
        ps->sched_ops->job_end(ps, job); /* its replay copies (member.c) */
    ina__ps_store_free(ps, &job->store);
    ina__ps_uncharge(ps, &job->aux_bytes, job->aux_bytes); /* bitmaps, held copies, scratch */
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < INA_MAX_WORKERS; r++)
            free(job->rs[p][r].bits);
    free(job->scratch);
    for (int i = 0; i < INA_PS_HOLD; i++)
        free(job->held[i].body);
    uint16_t id = job->id;
    memset(job, 0, sizeof(*job));
    job->id = id;
}

void ina__ps_free(struct ina_ps *ps)
{
    for (int i = 0; i < INA_PS_MAX_JOBS; i++)
        if (ps->jobs[i].state != INA_PS_FREE)
            job_free(ps, &ps->jobs[i]);
    free(ps->tx.mem);
    memset(ps, 0, sizeof(*ps));
}

/* ---- Replies -------------------------------------------------------------- */

/* Room for a reply of len bytes, or NULL (counted as TXQ at the next flush). */
static uint8_t *tx_buf(struct ina_ps *ps, size_t len)
{
    if (ps->tx.n >= INA_PS_TX_MSGS || ps->tx.used + len > INA_PS_TX_BYTES) {
        ps->tx.overflows++;
        return NULL;
    }
    return ps->tx.mem + ps->tx.used;
}

static void tx_push(struct ina_ps *ps, uint8_t *buf, size_t len, const struct sockaddr_in *dst)
{
    unsigned i = ps->tx.n++;
    ps->tx.iov[i].iov_base = buf;
    ps->tx.iov[i].iov_len = len;
    ps->tx.dst[i] = *dst;
    ps->tx.used += (len + 7) & ~(size_t)7;
}

/* A reply header of job (or none) with the fields the request carried. */
static void reply_hdr(struct ina_hdr *h, const struct ina_ps_job *job, uint8_t kind)
{
    ina__hdr_init(h, kind);
    h->rank = INA_RANK_SWITCH;
    if (job) {
        h->job = job->id;
        h->session = job->session;
        h->token = job->token;
    }
}

/* A header-only reply (the acks) echoing slot, seq and flags. */
static void send_ack(struct ina_ps *ps, const struct ina_ps_job *job, uint8_t kind, uint32_t slot,
                     uint32_t seq, const struct sockaddr_in *dst)
{
    uint8_t *b = tx_buf(ps, INA_HDR_LEN);
    if (!b)
        return;
    struct ina_hdr h;
    reply_hdr(&h, job, kind);
    h.slot = slot;
    h.seq = seq;
    ina__hdr_encode(b, &h);
    tx_push(ps, b, INA_HDR_LEN, dst);
}

static void send_nak(struct ina_ps *ps, uint64_t nonce, int reason, const struct sockaddr_in *dst)
{
    uint8_t *b = tx_buf(ps, INA_HDR_LEN + INA_NAK_BODY_LEN);
    if (!b)
        return;
    struct ina_hdr h;
    reply_hdr(&h, NULL, INA_K_PS_JOIN_NAK);
    ina__hdr_encode(b, &h);
    ina__nak_encode(b + INA_HDR_LEN, nonce, reason);
    tx_push(ps, b, INA_HDR_LEN + INA_NAK_BODY_LEN, dst);
}

/* The first rank that has not committed the oldest open step (0xFFFF: none). */
static unsigned first_missing(const struct ina_ps_job *job)
{
    unsigned p = job->applied & 1;
    if (job->ncommitted[p] == 0)
        return 0xFFFF;
    for (int r = 0; r < job->world; r++)
        if (!(job->rs[p][r].step1 == job->applied + 1 && job->rs[p][r].committed))
            return (unsigned)r;
    return 0xFFFF;
}

static void log_job(enum ina_log_level level, const struct ina_ps_job *job, const char *event,
                    const char *reason)
{
    ina__log(level, event, INA_KV_I("job", job->id), INA_KV_S("name", job->p.name),
            INA_KV_I("world", job->world), INA_KV_I("step", job->applied),
            INA_KV_S("reason", reason));
}

/* End the job for every rank: ABORT(reason, the first rank missing from the open step). */
static void job_abort(struct ina_ps *ps, struct ina_ps_job *job, int reason, const char *why)
{
    log_job(INA_LOG_WARN, job, "job_aborted", why);
    ps->c.jobs_aborted++;
    unsigned missing = first_missing(job);
    for (int r = 0; r < job->world; r++) {
        if (!job->members[r].joined)
            continue;
        uint8_t *b = tx_buf(ps, INA_HDR_LEN + INA_PS_ABORT_BODY_LEN);
        if (!b)
            break;
        struct ina_hdr h;
        reply_hdr(&h, job, INA_K_PS_ABORT);
        ina__hdr_encode(b, &h);
        uint8_t *body = b + INA_HDR_LEN;
        memset(body, 0, INA_PS_ABORT_BODY_LEN);
        ina__nak_encode(body, 0, reason);
        ina__put16(body + 12, (uint16_t)missing);
        ina__put32(body + 16, job->applied);
        tx_push(ps, b, INA_HDR_LEN + INA_PS_ABORT_BODY_LEN, &job->members[r].addr);
    }
    job_free(ps, job);
}

/* ---- Join and leave --------------------------------------------------------- */

static void send_join_ack(struct ina_ps *ps, const struct ina_ps_job *job, int r)
{
    uint8_t *b = tx_buf(ps, INA_HDR_LEN + INA_PS_JOIN_SPLIT_LEN);
    if (!b)
        return;
    struct ina_hdr h;
    reply_hdr(&h, job, INA_K_PS_JOIN_ACK);
    ina__hdr_encode(b, &h);
    struct ina_ps_join j = job->p;
    j.nonce = job->members[r].nonce;
    j.sw_version = INA_VERSION_NUMBER;
    size_t blen = ina__ps_join_encode_split(b + INA_HDR_LEN, &j);
    tx_push(ps, b, INA_HDR_LEN + blen, &job->members[r].addr);
}

/* The parameters every rank of a job must declare alike. */
static int join_same(const struct ina_ps_join *a, const struct ina_ps_join *b)
{
    return a->world == b->world && a->dim == b->dim && a->optim == b->optim &&
           a->mode == b->mode && a->max_delay == b->max_delay && a->init == b->init && a->lr == b->lr && a->eps == b->eps &&
           a->init_acc == b->init_acc && a->init_scale == b->init_scale &&
           a->init_seed == b->init_seed && a->nshards == b->nshards &&
           a->hot_keys == b->hot_keys && a->profile_steps == b->profile_steps &&
           a->reprofile_steps == b->reprofile_steps && a->start == b->start &&
           a->split == b->split && a->range_first == b->range_first &&
           a->range_last == b->range_last;
}

/* A weighted split's range (PROTOCOL.md §14.2.2 step 4): not empty, and the first shard's
 * starts at 0, the last shard's ends at 2^32 - 1 (the ranks agree on every shard's range,
 * each shard checks its own, so together they cover every hash). */
static int split_valid(const struct ina_ps_join *j)
{
    if (j->split == INA_PS_SPLIT_MOD)
        return 1;
    return j->range_first <= j->range_last && (j->shard != 0 || j->range_first == 0) &&
           (j->shard + 1u != j->nshards || j->range_last == UINT32_MAX);
}

static int join_valid(const struct ina_ps *ps, const struct ina_hdr *h, const struct ina_ps_join *j,
                      int *reason)
{
    *reason = INA_ERR_REJECTED;
    if (j->mode != INA_PS_MODE_SYNC && j->mode != INA_PS_MODE_STALE) {
        *reason = INA_ERR_NOTSUP; /* other modes: reserved for a later version */
        return 0;
    }
    if (j->mode == INA_PS_MODE_STALE && j->hot_keys != 0) {
        *reason = INA_ERR_NOTSUP; /* a hot set is summed in synchronous steps only */
        return 0;
    }
    if (j->mode == INA_PS_MODE_SYNC && j->start != j->world) {
        *reason = INA_ERR_NOTSUP; /* a synchronous step needs every rank from the start */
        return 0;
    }
    if (j->optim > INA_OPTIM_ADAGRAD || j->init > INA_INIT_UNIFORM || j->split > INA_PS_SPLIT_RANGE) {
        *reason = INA_ERR_NOTSUP;
        return 0;
    }
    return j->world >= 1 && j->world <= INA_MAX_WORKERS && h->rank < j->world &&
           j->name[0] != '\0' && j->start <= j->world && j->dim >= 1 && j->dim <= INA_PS_MAX_DIM &&
           j->shard == ps->p.shard && j->nshards == ps->p.nshards && isfinite(j->lr) &&
           isfinite(j->eps) && isfinite(j->init_acc) && isfinite(j->init_scale) &&
           (j->optim != INA_OPTIM_ADAGRAD || (j->eps > 0 && j->init_acc >= 0)) &&
           split_valid(j);
}

static struct ina_ps_job *job_by_name(struct ina_ps *ps, const char *name)
{
    for (int i = 0; i < INA_PS_MAX_JOBS; i++)
        if (ps->jobs[i].state != INA_PS_FREE && strcmp(ps->jobs[i].p.name, name) == 0)
            return &ps->jobs[i];
    return NULL;
}

static void job_start(struct ina_ps *ps, struct ina_ps_job *job, uint64_t now_ns)
{
    do
        job->session = ++ps->session_counter;
    while (job->session == 0);
    job->token = random_u32();
    job->state = INA_PS_ACTIVE;
    job->last_rx_ns = now_ns;
    ps->c.jobs_started++;
    log_job(INA_LOG_INFO, job, "job_started",
            job->njoined == job->world ? "all_ranks_joined" : "start_ranks_joined");
    for (int r = 0; r < job->world; r++)
        if (job->members[r].joined)
            send_join_ack(ps, job, r);
}

static void on_join(struct ina_ps *ps, const struct ina_hdr *h, const uint8_t *body, size_t len,
                    const struct sockaddr_in *src, uint64_t now_ns)
{
    struct ina_ps_join j;
    int reason;
    if (ina__ps_join_decode(body, len, &j) != 0) {
        ps->c.drops[INA_PS_DROP_JOIN]++;
        return;
    }
    if (j.start == 0)
        j.start = j.world; /* 0: every rank starts the job (as before §15.9) */
    if (!join_valid(ps, h, &j, &reason)) {
        ps->c.drops[INA_PS_DROP_JOIN]++;
        ina__log(INA_LOG_WARN, "join_refused", INA_KV_S("name", j.name), INA_KV_I("rank", h->rank),
                INA_KV_I("shard", j.shard), INA_KV_I("nshards", j.nshards),
                INA_KV_S("reason", reason == INA_ERR_NOTSUP ? "not_supported" : "bad_parameters"));
        send_nak(ps, j.nonce, reason, src);
        return;
    }
    struct ina_ps_job *job = job_by_name(ps, j.name);
    if (job && !join_same(&job->p, &j)) {
        ps->c.drops[INA_PS_DROP_JOIN]++;
        ina__log(INA_LOG_WARN, "join_refused", INA_KV_S("name", j.name), INA_KV_I("rank", h->rank),
                INA_KV_S("reason", "parameters_differ"));
        send_nak(ps, j.nonce, INA_ERR_MISMATCH, src);
        return;
    }
    struct ina_ps_member *m = job ? &job->members[h->rank] : NULL;
    if (job && job->state == INA_PS_ACTIVE) {
        if (m->nonce == j.nonce && m->addr.sin_addr.s_addr == src->sin_addr.s_addr &&
            m->addr.sin_port == src->sin_port) {
            send_join_ack(ps, job, h->rank); /* the ACK was lost */
            return;
        }
        if (!m->joined) { /* a STALE job started with fewer ranks: this one joins it running */
            m->joined = 1;
            m->nonce = j.nonce;
            m->addr = *src;
            job->njoined++;
            ps->c.ranks_joined_late++;
            ina__log(INA_LOG_INFO, "rank_joined", INA_KV_I("job", job->id),
                    INA_KV_S("name", job->p.name), INA_KV_I("rank", h->rank),
                    INA_KV_I("version", job->applied), INA_KV_I("ranks", job->njoined));
            send_join_ack(ps, job, h->rank);
            return;
        }
        if (m->addr.sin_addr.s_addr != src->sin_addr.s_addr) {
            ps->c.drops[INA_PS_DROP_JOIN]++; /* a stranger cannot end a running job */
            send_nak(ps, j.nonce, INA_ERR_REJECTED, src);
            return;
        }
        if (job->p.start < job->world) {
            /* An elastic job outlives its ranks: a restarted worker takes a free rank, so
             * that no update of the old one can be mistaken for the new one's (§15.9). */
            ps->c.drops[INA_PS_DROP_JOIN]++;
            ps->c.ranks_refused++;
            ina__log(INA_LOG_WARN, "join_refused", INA_KV_S("name", j.name),
                    INA_KV_I("rank", h->rank), INA_KV_S("reason", "rank_in_use"));
            send_nak(ps, j.nonce, INA_ERR_REJECTED, src);
            return;
        }
        job_abort(ps, job, INA_ERR_ABORTED, "rank_restarted");
        job = NULL;
    }
    if (!job) {
        for (int i = 0; i < INA_PS_MAX_JOBS && !job; i++)
            if (ps->jobs[i].state == INA_PS_FREE)
                job = &ps->jobs[i];
        if (!job) {
            ps->c.jobs_refused++;
            send_nak(ps, j.nonce, INA_ERR_NOSPACE, src);
            return;
        }
        /* The scratch first: the store then takes what is left of --max-memory. */
        int rc = ina__ps_charge(ps, &job->aux_bytes, j.dim * sizeof(float)) != 0
                     ? INA_ERR_PS_FULL
                     : ina__ps_store_init(ps, &job->store, j.dim, ina__optim_has_state(j.optim));
        if (rc == 0 && !(job->scratch = malloc(j.dim * sizeof(float)))) {
            ina__ps_store_free(ps, &job->store);
            rc = -ENOMEM;
        }
        if (rc != 0)
            ina__ps_uncharge(ps, &job->aux_bytes, job->aux_bytes);
        if (rc != 0) {
            ps->c.jobs_refused++;
            send_nak(ps, j.nonce, rc == -ENOMEM ? INA_ERR_PS_FULL : rc, src);
            return;
        }
        job->state = INA_PS_JOINING;
        job->p = j;
        job->world = j.world;
        job->optim = (struct ina_optim){.kind = j.optim, .lr = j.lr, .eps = j.eps,
                                        .init_acc = j.init_acc};
        job->created_ns = now_ns;
        m = &job->members[h->rank];
    }
    if (!m->joined)
        job->njoined++;
    m->joined = 1;
    m->nonce = j.nonce;
    m->addr = *src;
    if (job->njoined == job->p.start && job->state == INA_PS_JOINING)
        job_start(ps, job, now_ns);
}

static void on_leave(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                     const uint8_t *body, size_t len)
{
    if (h->flags & INA_FLAG_ABORT) {
        int32_t reason = len >= 4 ? (int32_t)ina__get32(body) : INA_ERR_ABORTED;
        (void)reason; /* the others learn ABORTED; the rank that failed knows its own reason */
        job_abort(ps, job, INA_ERR_ABORTED, "rank_aborted");
        return;
    }
    ina__ps_rank_left(ps, job, h->rank);
}

/* FNV-1a, 64 bits, over n bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

uint64_t ina__ps_job_digest(const struct ina_ps_job *job)
{
    const struct ina_ps_store *st = &job->store;
    uint64_t sum = 0;
    for (uint32_t r = 0; r < st->n; r++) {
        uint8_t b[8];
        ina__put64(b, st->keys[r]);
        uint64_t h = fnv1a(0xCBF29CE484222325ull, b, 8);
        for (unsigned j = 0; j < st->dim; j++) {
            ina__putf(b, st->vals[(size_t)r * st->dim + j]);
            h = fnv1a(h, b, 4);
        }
        if (st->state)
            for (unsigned j = 0; j < st->dim; j++) {
                ina__putf(b, st->state[(size_t)r * st->dim + j]);
                h = fnv1a(h, b, 4);
            }
        sum += h; /* a sum: the same whatever order the keys were stored in */
    }
    return sum;
}

/* Each joined rank's updates applied, "r:n,r:n,...", into buf (INA_MAX_WORKERS * 24 bytes). */
static void applied_list(const struct ina_ps_job *job, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int r = 0; r < job->world && n + 24 < cap; r++)
        if (job->members[r].joined)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d:%llu", n ? "," : "", r,
                                  (unsigned long long)job->members[r].updates_applied);
}

/* A STALE job ends: its version, stamp, digest and each rank's updates applied, so that a
 * replica's end can be compared with its primary's (§15.9). */
static void log_stale_end(const struct ina_ps_job *job)
{
    char applied[INA_MAX_WORKERS * 24], digest[20];
    applied_list(job, applied, sizeof(applied));
    snprintf(digest, sizeof(digest), "%016llx", (unsigned long long)ina__ps_job_digest(job));
    ina__log(INA_LOG_INFO, "stale_job_ended", INA_KV_I("job", job->id), INA_KV_S("name", job->p.name),
            INA_KV_I("version", job->applied), INA_KV_I("stamp", job->next_stamp),
            INA_KV_S("digest", digest), INA_KV_S("applied", applied));
}

void ina__ps_jobs_print(const struct ina_ps *ps, FILE *f)
{
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        const struct ina_ps_job *job = &ps->jobs[i];
        if (job->state != INA_PS_ACTIVE || job->p.mode != INA_PS_MODE_STALE)
            continue;
        char applied[INA_MAX_WORKERS * 24];
        applied_list(job, applied, sizeof(applied));
        fprintf(f, "  job %s version %u stamp %u digest %016llx applied %s\n", job->p.name,
                job->applied, job->next_stamp, (unsigned long long)ina__ps_job_digest(job), applied);
    }
}

int ina__ps_rank_left(struct ina_ps *ps, struct ina_ps_job *job, unsigned r)
{
    struct ina_ps_member *m = &job->members[r];
    if (!m->left) {
        m->left = 1;
        job->nleft++;
    }
    if (job->nleft < job->njoined)
        return 0;
    log_job(INA_LOG_INFO, job, "job_ended", "all_ranks_left");
    if (job->p.mode == INA_PS_MODE_STALE)
        log_stale_end(job);
    ps->c.jobs_ended++;
    job_free(ps, job);
    return 1;
}

/* ---- Steps -------------------------------------------------------------------- */

/* Rank r's entry for step s (parity s & 1), reset when the parity moves on to s. */
static struct ina_ps_rankstep *rankstep(struct ina_ps_job *job, unsigned r, uint32_t s)
{
    struct ina_ps_rankstep *rs = &job->rs[s & 1][r];
    if (rs->step1 != s + 1) {
        rs->step1 = s + 1;
        rs->nrecv = 0;
        rs->committed = 0;
        if (rs->bits)
            memset(rs->bits, 0, rs->nbits / 8);
    }
    return rs;
}

/* Apply every open step whose N commits are in, oldest first, once each. */
static void try_apply(struct ina_ps *ps, struct ina_ps_job *job)
{
    for (;;) {
        uint32_t s = job->applied;
        unsigned p = s & 1;
        if (job->ncommitted[p] != (uint32_t)job->world)
            return;
        struct ina_ps_store *st = &job->store;
        size_t d = st->dim;
        for (uint32_t i = 0; i < st->ntouched[p]; i++) {
            uint32_t r = st->touched[p][i];
            ina__optim_apply(&job->optim, st->vals + r * d, st->state ? st->state + r * d : NULL,
                            st->acc + (2 * (size_t)r + p) * d, d);
            st->acc_step[2 * r + p] = 0;
            st->ver[r] = s + 1;
        }
        ps->c.keys_applied += st->ntouched[p];
        st->ntouched[p] = 0;
        job->ncommitted[p] = 0;
        job->step_open_ns[p] = 0;
        job->applied = s + 1;
        ps->c.steps_applied++;
        job->steps_applied++;
        for (int r = 0; r < job->world; r++)
            send_ack(ps, job, INA_K_PS_COMMIT_ACK, 0, s, &job->members[r].addr);
    }
}

/* @return 0 if step s is open (applied <= s < applied + 2); 1 if already applied; -1 too far ahead. */
static int step_window(const struct ina_ps_job *job, uint32_t s)
{
    int32_t d = (int32_t)(s - job->applied);
    return d < 0 ? 1 : d < 2 ? 0 : -1;
}

/*
 * Mark packet index i (< INA_PS_MAX_PACKETS) of rank step rs. The bitmap grows to the
 * first INA_PS_BITMAP_MIN * 2^m bits above i, charged to --max-memory before it is
 * allocated (PROTOCOL.md §14.2.4): an index far beyond what the rank sent costs the job,
 * not the shard. @return 1 if i was marked already, 0 if now, -1 if the growth does not
 * fit --max-memory (nothing allocated), -2 if the allocation failed.
 */
static int bit_test_set(struct ina_ps *ps, struct ina_ps_job *job, struct ina_ps_rankstep *rs,
                        uint32_t i)
{
    if (i >= rs->nbits) {
        uint32_t n = rs->nbits ? rs->nbits : INA_PS_BITMAP_MIN;
        while (n <= i)
            n *= 2;
        size_t more = (n - rs->nbits) / 8;
        if (ina__ps_charge(ps, &job->aux_bytes, more) != 0)
            return -1;
        uint64_t *b = realloc(rs->bits, n / 8);
        if (!b) {
            ina__ps_uncharge(ps, &job->aux_bytes, more);
            return -2;
        }
        memset((uint8_t *)b + rs->nbits / 8, 0, more);
        rs->bits = b;
        rs->nbits = n;
    }
    uint64_t m = 1ull << (i & 63);
    if (rs->bits[i >> 6] & m)
        return 1;
    rs->bits[i >> 6] |= m;
    return 0;
}

static void on_push(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                    const uint8_t *body, size_t len, const struct sockaddr_in *src, uint64_t now)
{
    struct ina_ps_store *st = &job->store;
    size_t el = ina__ps_entry_len(st->dim);
    if (len != (size_t)h->count * el) {
        ps->c.drops[INA_PS_DROP_LENGTH]++;
        return;
    }
    int w = step_window(job, h->seq);
    if (w > 0) { /* a retransmission after its step was applied: it was added then */
        ps->c.push_dups++;
        send_ack(ps, job, INA_K_PS_PUSH_ACK, h->slot, h->seq, src);
        return;
    }
    if (w < 0) {
        ps->c.drops[INA_PS_DROP_FUTURE]++;
        return;
    }
    if (h->slot >= INA_PS_MAX_PACKETS) {
        ps->c.drops[INA_PS_DROP_INDEX]++;
        return;
    }
    struct ina_ps_rankstep *rs = rankstep(job, h->rank, h->seq);
    int seen = bit_test_set(ps, job, rs, h->slot);
    if (seen < 0) {
        if (seen == -1)
            ps->c.memory_refusals++;
        job_abort(ps, job, INA_ERR_PS_FULL, seen == -1 ? "max_memory" : "out_of_memory");
        return;
    }
    if (seen) {
        ps->c.push_dups++;
        send_ack(ps, job, INA_K_PS_PUSH_ACK, h->slot, h->seq, src);
        return;
    }
    unsigned p = h->seq & 1;
    size_t d = st->dim;
    for (unsigned e = 0; e < h->count; e++) {
        const uint8_t *q = body + e * el;
        uint32_t r = ina__ps_store_get(ps, job, ina__get64(q));
        if (r == INA_KMAP_NONE) {
            job_abort(ps, job, INA_ERR_PS_FULL, "max_memory");
            return;
        }
        float *acc = st->acc + (2 * (size_t)r + p) * d;
        if (st->acc_step[2 * r + p] != h->seq + 1) {
            st->acc_step[2 * r + p] = h->seq + 1;
            memset(acc, 0, d * sizeof(float));
            st->touched[p][st->ntouched[p]++] = r; /* touched_cap == cap >= n */
        }
        for (size_t j = 0; j < d; j++)
            acc[j] += ina__getf(q + 8 + 4 * j);
    }
    rs->nrecv++;
    ps->c.pushes++;
    ps->c.push_entries += h->count;
    job->pushes++;
    (void)now;
    send_ack(ps, job, INA_K_PS_PUSH_ACK, h->slot, h->seq, src);
}

static void on_commit(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                      const struct sockaddr_in *src, uint64_t now)
{
    int w = step_window(job, h->seq);
    if (w > 0) {
        send_ack(ps, job, INA_K_PS_COMMIT_ACK, 0, h->seq, src);
        return;
    }
    if (w < 0) {
        ps->c.drops[INA_PS_DROP_FUTURE]++;
        return;
    }
    struct ina_ps_rankstep *rs = rankstep(job, h->rank, h->seq);
    if (rs->committed)
        return; /* a repeat: answered when the step is applied */
    if (rs->nrecv != h->slot) {
        ps->c.drops[INA_PS_DROP_EARLY]++; /* a conforming worker waits for its PUSH acks */
        return;
    }
    unsigned p = h->seq & 1;
    rs->committed = 1;
    if (job->ncommitted[p]++ == 0)
        job->step_open_ns[p] = now;
    ps->c.commits++;
    try_apply(ps, job);
}

static void on_pull(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                    const uint8_t *body, size_t len, const struct sockaddr_in *src)
{
    struct ina_ps_store *st = &job->store;
    size_t d = st->dim;
    int with_state = (h->flags & INA_FLAG_PS_STATE) != 0;
    size_t out = INA_HDR_LEN + (size_t)h->count * d * 4 * (with_state ? 2 : 1);
    if (len != 8 * (size_t)h->count || out > INA_MAX_DATAGRAM) {
        ps->c.drops[INA_PS_DROP_LENGTH]++;
        return;
    }
    uint8_t *b = tx_buf(ps, out);
    if (!b)
        return;
    struct ina_hdr rh;
    reply_hdr(&rh, job, INA_K_PS_PULL_RESP);
    rh.slot = h->slot;
    /* A STALE job answers with the model version the values are of (§15.2). */
    rh.seq = job->p.mode == INA_PS_MODE_STALE ? job->applied : h->seq;
    rh.count = h->count;
    rh.flags = h->flags & INA_FLAG_PS_STATE;
    ina__hdr_encode(b, &rh);
    uint8_t *v = b + INA_HDR_LEN, *sv = v + (size_t)h->count * d * 4;
    for (unsigned i = 0; i < h->count; i++) {
        uint64_t key = ina__get64(body + 8 * i);
        uint32_t r = ina__kmap_get(&st->index, key);
        for (size_t j = 0; j < d; j++) {
            float x = r != INA_KMAP_NONE
                          ? st->vals[r * d + j]
                          : ina__param_init(job->p.init, job->p.init_scale, job->p.init_seed, key,
                                           (unsigned)j);
            ina__putf(v + 4 * (i * d + j), x);
            if (with_state)
                ina__putf(sv + 4 * (i * d + j),
                         r != INA_KMAP_NONE && st->state ? st->state[r * d + j] : job->p.init_acc);
        }
    }
    ps->c.pulls++;
    ps->c.pull_keys += h->count;
    job->pulls++;
    tx_push(ps, b, out, src);
}

/*
 * ASSIGN (hot-set reinstall, PROTOCOL.md §14.4): the values and state of keys
 * as of the start of step T, written back by the workers that held them.
 * Idempotent and versioned: an entry is taken only if the key's value does
 * not include a step >= T already, so a late copy can never undo an update.
 */
static void on_assign(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                      const uint8_t *body, size_t len, const struct sockaddr_in *src)
{
    struct ina_ps_store *st = &job->store;
    size_t d = st->dim, el = ina__ps_assign_len((unsigned)d);
    if (len != (size_t)h->count * el) {
        ps->c.drops[INA_PS_DROP_LENGTH]++;
        return;
    }
    for (unsigned e = 0; e < h->count; e++) {
        const uint8_t *q = body + e * el;
        uint32_t r = ina__ps_store_get(ps, job, ina__get64(q));
        if (r == INA_KMAP_NONE) {
            job_abort(ps, job, INA_ERR_PS_FULL, "max_memory");
            return;
        }
        if (st->ver[r] > h->seq) {
            ps->c.assign_stale++;
            continue;
        }
        for (size_t j = 0; j < d; j++) {
            st->vals[r * d + j] = ina__getf(q + 8 + 4 * j);
            if (st->state)
                st->state[r * d + j] = ina__getf(q + 8 + 4 * (d + j));
        }
        st->ver[r] = h->seq;
        ps->c.assign_entries++;
    }
    ps->c.assigns++;
    send_ack(ps, job, INA_K_PS_ASSIGN_ACK, h->slot, h->seq, src);
}

/* ---- Bounded staleness (MODE_STALE, PROTOCOL.md §15.2) ----------------------------- */

static void send_update_ack(struct ina_ps *ps, const struct ina_ps_job *job,
                            const struct ina_ps_lastupd *u, const struct sockaddr_in *dst)
{
    if (ps->chain_ops && ps->chain_ops->ack(ps, job, u, dst))
        return; /* chain replication: HELD until the replica has it, or a CHAIN_ACK (§15.8) */
    uint8_t *b = tx_buf(ps, INA_HDR_LEN + INA_PS_UPDATE_ACK_LEN);
    if (!b)
        return;
    struct ina_hdr h;
    reply_hdr(&h, job, INA_K_PS_UPDATE_ACK);
    h.slot = u->uid;
    h.seq = u->version;
    ina__hdr_encode(b, &h);
    ina__ps_update_ack_encode(b + INA_HDR_LEN, u->status, u->version, u->delay, u->stamp);
    tx_push(ps, b, INA_HDR_LEN + INA_PS_UPDATE_ACK_LEN, dst);
}

/* A stamped update kept until its turn: UPDATE_ACK status HELD (the version now, delay 0),
 * so that its sender knows this server is alive and waits rather than fails over. */
static void send_update_held(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                             uint32_t stamp, const struct sockaddr_in *dst)
{
    struct ina_ps_lastupd held = {.uid = h->slot, .status = INA_PS_UPDATE_HELD,
                                  .version = job->applied, .stamp = stamp};
    send_update_ack(ps, job, &held, dst);
}

/* Apply one UPDATE's entries as a gradient with the job's optimizer: the model's next version. */
static int update_apply(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                        const uint8_t *entries)
{
    struct ina_ps_store *st = &job->store;
    size_t d = st->dim, el = ina__ps_entry_len(st->dim);
    for (unsigned e = 0; e < h->count; e++) {
        const uint8_t *q = entries + e * el;
        uint32_t r = ina__ps_store_get(ps, job, ina__get64(q));
        if (r == INA_KMAP_NONE)
            return -1;
        for (size_t j = 0; j < d; j++)
            job->scratch[j] = ina__getf(q + 8 + 4 * j);
        ina__optim_apply(&job->optim, st->vals + r * d, st->state ? st->state + r * d : NULL,
                        job->scratch, d);
        st->ver[r] = job->applied + 1;
    }
    ps->c.keys_applied += h->count;
    return 0;
}

/* An update of this delay may be applied: at most D versions behind, or any delay when D is
 * INA_PS_DELAY_UNBOUNDED (unbounded asynchronous training, §15.1). */
static int within_bound(const struct ina_ps_job *job, uint32_t delay)
{
    return job->p.max_delay == INA_PS_DELAY_UNBOUNDED || delay <= job->p.max_delay;
}

/*
 * UPDATE: slot = the rank's update id (1, 2, ... one at a time), seq = the
 * model version the update was computed on (its base), body = stamp, reserved,
 * then count (key, dim values) entries. The delay is the versions applied
 * since the base; at most max_delay: applied, the version moves on by one;
 * else refused with INA_ERR_STALE. Stamped updates are taken in stamp order
 * only (one that comes early is held, up to INA_PS_HOLD stamps ahead), so
 * every server fed the same stamped stream applies the same sequence (a
 * replica stays bit-identical). A copy of the rank's last update gets the
 * same answer again.
 * @return 1 if the update took the next stamp (held ones may follow), else 0.
 */
static int update_one(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                      const uint8_t *body, size_t len, const struct sockaddr_in *src)
{
    struct ina_ps_store *st = &job->store;
    if (len < INA_PS_UPDATE_PREFIX ||
        len - INA_PS_UPDATE_PREFIX != (size_t)h->count * ina__ps_entry_len(st->dim)) {
        ps->c.drops[INA_PS_DROP_LENGTH]++;
        return 0;
    }
    struct ina_ps_lastupd *u = &job->last[h->rank];
    uint32_t stamp = ina__get32(body), members = ina__get32(body + 4);
    if (members > INA_PS_UPDATE_MAX_MEMBERS) {
        ps->c.drops[INA_PS_DROP_LENGTH]++; /* a malformed body */
        return 0;
    }
    if (h->slot == u->uid && u->uid != 0) {
        ps->c.update_dups++;
        send_update_ack(ps, job, u, src);
        return 0;
    }
    int32_t ahead = (int32_t)(job->applied - h->seq), early = (int32_t)(stamp - job->next_stamp);
    if (stamp != INA_STAMP_NONE && early > 0 && early < INA_PS_HOLD && h->slot == u->uid + 1) {
        struct ina_ps_held *k = &job->held[stamp % INA_PS_HOLD];
        if (k->used) {
            ps->c.update_dups++; /* a copy of the one held (or a forgery): it waits its turn */
            if (k->h.rank == h->rank && k->h.slot == h->slot)
                send_update_held(ps, job, h, stamp, src);
            return 0;
        }
        if (ina__ps_charge(ps, &job->aux_bytes, len) != 0) {
            ps->c.memory_refusals++; /* not kept, no answer: the sender resends it */
            return 0;
        }
        if (!(k->body = malloc(len))) {
            ina__ps_uncharge(ps, &job->aux_bytes, len);
            return 0; /* not kept: the sender resends it */
        }
        memcpy(k->body, body, len);
        k->h = *h;
        k->src = *src;
        k->len = len;
        k->used = 1;
        ps->c.updates_held++;
        send_update_held(ps, job, h, stamp, src);
        return 0;
    }
    if (stamp != INA_STAMP_NONE && early < 0 && h->slot == u->uid + 1 && ps->sched_ops &&
        ps->sched_ops->voided(ps, job, stamp)) {
        /* Its stamp was voided before it came (§15.9): never applied; a copy gets this again,
         * and the rank goes on with its next id. */
        *u = (struct ina_ps_lastupd){.uid = h->slot, .status = INA_PS_UPDATE_VOIDED,
                                     .version = job->applied, .stamp = stamp};
        ps->c.updates_voided++;
        send_update_ack(ps, job, u, src);
        return 0;
    }
    if (h->slot != u->uid + 1 || ahead < 0 || (stamp != INA_STAMP_NONE && early != 0)) {
        ps->c.drops[INA_PS_DROP_ORDER]++; /* the sender resends until its turn comes */
        return 0;
    }
    uint32_t delay = job->applied - h->seq;
    struct ina_ps_lastupd n = {.uid = h->slot, .delay = delay, .stamp = stamp};
    if (within_bound(job, delay)) {
        /* The bound, checked again where the model changes (counted, never expected). */
        if (!within_bound(job, job->applied - h->seq))
            ps->c.delay_violations++;
        if (update_apply(ps, job, h, body + INA_PS_UPDATE_PREFIX) != 0) {
            job_abort(ps, job, INA_ERR_PS_FULL, "max_memory");
            return -1;
        }
        job->applied++;
        ps->c.updates_applied++;
        job->members[h->rank].updates_applied++;
        if (members >= 2) { /* a group's sum (§15.7): one update, one version */
            ps->c.updates_aggregated++;
            ps->c.aggregated_members += members;
        }
        ps->c.delay_hist[delay < INA_PS_DELAY_BUCKETS ? delay : INA_PS_DELAY_BUCKETS - 1]++;
        if (delay > ps->c.delay_max)
            ps->c.delay_max = delay;
    } else {
        n.status = INA_ERR_STALE;
        ps->c.updates_stale++;
    }
    if (stamp != INA_STAMP_NONE)
        job->next_stamp++;
    n.version = job->applied;
    *u = n;
    if (stamp != INA_STAMP_NONE && ps->chain_ops) /* forwarded to the replica (§15.8) */
        ps->chain_ops->taken(ps, job, h, body, len);
    if (stamp != INA_STAMP_NONE && ps->sched_ops) /* kept for a replay (§15.9) */
        ps->sched_ops->taken(ps, job, h, body, len);
    send_update_ack(ps, job, u, src);
    return stamp != INA_STAMP_NONE;
}

/*
 * Take the held updates whose turn has come, in stamp order. One that cannot be answered
 * now (the reply queue is full) stays held for the next datagram or tick: a worker that was
 * told HELD may have sent its copy to the replica already (§15.4), so this server must take
 * it too. @return 1 if the held update of stamp G was taken, 0 if none is held, -1 if it
 * waits for room.
 */
static int take_held(struct ina_ps *ps, struct ina_ps_job *job)
{
    int took = 0;
    for (;;) {
        struct ina_ps_held *slot = &job->held[job->next_stamp % INA_PS_HOLD];
        if (!slot->used)
            return took;
        if (ina__ps_tx_full(ps))
            return took ? took : -1;
        struct ina_ps_held k = *slot;
        *slot = (struct ina_ps_held){0};
        ina__ps_uncharge(ps, &job->aux_bytes, k.len); /* first: update_one may free the job */
        int r = ina__get32(k.body) == job->next_stamp /* else a forgery: not its turn */
                    ? update_one(ps, job, &k.h, k.body, k.len, &k.src)
                    : 0;
        free(k.body);
        if (r != 1)
            return took;
        took = 1;
    }
}

static void on_update(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                      const uint8_t *body, size_t len, const struct sockaddr_in *src)
{
    update_one(ps, job, h, body, len, src);
    take_held(ps, job); /* ours may have been the stamp they waited for */
}

int ina__ps_resolve_next(struct ina_ps *ps, struct ina_ps_job *job)
{
    int r = take_held(ps, job);
    if (r != 0 || job->state != INA_PS_ACTIVE) /* taken, no room, or the job just ended */
        return r > 0 ? 0 : -1;
    job->next_stamp++; /* no update of this stamp is here: void it */
    ps->c.stamps_voided++;
    take_held(ps, job);
    return 1;
}

/* ---- Input -------------------------------------------------------------------- */

void ina__ps_input(struct ina_ps *ps, const uint8_t *buf, size_t len, const struct sockaddr_in *src,
                  uint64_t now_ns)
{
    struct ina_hdr h;
    ps->c.rx_packets++;
    ps->c.rx_bytes += len;
    switch (ina__hdr_decode(buf, len, &h)) {
    case INA_PARSE_OK: break;
    case INA_PARSE_SHORT: ps->c.drops[INA_PS_DROP_SHORT]++; return;
    case INA_PARSE_MAGIC: ps->c.drops[INA_PS_DROP_MAGIC]++; return;
    case INA_PARSE_VERSION:
        if (h.kind == INA_K_PS_JOIN && len >= INA_HDR_LEN + 8)
            send_nak(ps, ina__get64(buf + INA_HDR_LEN), INA_ERR_PROTO, src);
        ps->c.drops[INA_PS_DROP_VERSION]++;
        return;
    default: ps->c.drops[INA_PS_DROP_LENGTH]++; return;
    }
    const uint8_t *body = buf + INA_HDR_LEN;
    size_t blen = len - INA_HDR_LEN;
    if (h.kind == INA_K_PS_JOIN) {
        on_join(ps, &h, body, blen, src, now_ns);
        return;
    }
    if ((h.kind == INA_K_PS_CHAIN_FWD || h.kind == INA_K_PS_CHAIN_ACK) && ps->chain_ops) {
        ps->chain_ops->input(ps, &h, body, blen, src, now_ns); /* chain.c (§15.8) */
        return;
    }
    if (h.kind == INA_K_PS_SYNC || h.kind == INA_K_PS_REPLAY) {
        if (ps->sched_ops)
            ps->sched_ops->input(ps, &h, body, blen, src, now_ns); /* member.c (§15.9) */
        else
            ps->c.drops[INA_PS_DROP_SCHED_SOURCE]++; /* no --sched: nobody may send these */
        return;
    }
    if (h.kind != INA_K_PS_PUSH && h.kind != INA_K_PS_COMMIT && h.kind != INA_K_PS_PULL &&
        h.kind != INA_K_PS_ASSIGN && h.kind != INA_K_PS_LEAVE && h.kind != INA_K_PS_UPDATE) {
        ps->c.drops[INA_PS_DROP_KIND]++;
        return;
    }
    struct ina_ps_job *job = h.job >= 1 && h.job <= INA_PS_MAX_JOBS ? &ps->jobs[h.job - 1] : NULL;
    if (!job || job->state != INA_PS_ACTIVE) {
        ps->c.drops[INA_PS_DROP_NO_JOB]++;
        return;
    }
    if (h.session != job->session) {
        ps->c.drops[INA_PS_DROP_SESSION]++;
        return;
    }
    if (h.token != job->token) {
        ps->c.drops[INA_PS_DROP_TOKEN]++;
        return;
    }
    if (h.rank >= job->world) {
        ps->c.drops[INA_PS_DROP_RANK]++;
        return;
    }
    struct ina_ps_member *m = &job->members[h.rank];
    if (m->addr.sin_addr.s_addr != src->sin_addr.s_addr || m->addr.sin_port != src->sin_port) {
        ps->c.drops[INA_PS_DROP_SOURCE]++;
        return;
    }
    m->rx_packets++;
    m->rx_bytes += len;
    job->rx_packets++;
    job->last_rx_ns = now_ns;
    int stale_job = job->p.mode == INA_PS_MODE_STALE;
    if ((h.kind == INA_K_PS_UPDATE) != stale_job &&
        (h.kind == INA_K_PS_UPDATE || h.kind == INA_K_PS_PUSH || h.kind == INA_K_PS_COMMIT ||
         h.kind == INA_K_PS_ASSIGN)) {
        ps->c.drops[INA_PS_DROP_MODE]++;
        return;
    }
    switch (h.kind) {
    case INA_K_PS_UPDATE: on_update(ps, job, &h, body, blen, src); break;
    case INA_K_PS_PUSH: on_push(ps, job, &h, body, blen, src, now_ns); break;
    case INA_K_PS_COMMIT: on_commit(ps, job, &h, src, now_ns); break;
    case INA_K_PS_PULL: on_pull(ps, job, &h, body, blen, src); break;
    case INA_K_PS_ASSIGN: on_assign(ps, job, &h, body, blen, src); break;
    default: on_leave(ps, job, &h, body, blen); break;
    }
}

void ina__ps_tick(struct ina_ps *ps, uint64_t now_ns)
{
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        struct ina_ps_job *job = &ps->jobs[i];
        if (job->state == INA_PS_JOINING && ps->p.join_timeout_ns &&
            now_ns - job->created_ns > ps->p.join_timeout_ns) {
            log_job(INA_LOG_WARN, job, "job_dropped", "join_timeout");
            job_free(ps, job);
        } else if (job->state == INA_PS_ACTIVE && ps->p.idle_timeout_ns &&
                   now_ns - job->last_rx_ns > ps->p.idle_timeout_ns) {
            if (ina__ps_tx_full(ps))
                continue;
            job_abort(ps, job, INA_ERR_TIMEOUT, "idle_timeout");
        } else if (job->state == INA_PS_ACTIVE && job->p.mode == INA_PS_MODE_STALE) {
            take_held(ps, job); /* those that waited for room in the reply queue */
        } else if (job->state == INA_PS_ACTIVE && ps->p.step_timeout_ns &&
                   job->step_open_ns[job->applied & 1] &&
                   now_ns - job->step_open_ns[job->applied & 1] > ps->p.step_timeout_ns) {
            if (ina__ps_tx_full(ps))
                continue;
            job_abort(ps, job, INA_ERR_TIMEOUT, "step_timeout");
        }
    }
}

#define PS_COUNTERS(X)                                                               \
    X(rx_packets) X(rx_bytes) X(tx_packets) X(tx_bytes) X(tx_errors) X(pushes)       \
    X(push_entries) X(push_dups) X(commits) X(steps_applied) X(keys_applied) X(pulls) \
    X(pull_keys) X(assigns) X(assign_entries) X(assign_stale) X(jobs_started)        \
    X(jobs_ended) X(jobs_aborted) X(jobs_refused) X(memory_refusals) X(updates_applied) \
    X(updates_stale) X(update_dups) X(delay_violations) X(delay_max) X(updates_held)        \
    X(updates_aggregated) X(aggregated_members)

void ina__ps_counters_print(const struct ina_ps_counters *c, FILE *f)
{
    fprintf(f, "ina-ps counters:\n");
#define X(name) fprintf(f, "  %-16s %llu\n", #name, (unsigned long long)c->name);
    PS_COUNTERS(X)
#undef X
#define X(name, help) fprintf(f, "  %-16s %llu\n", #name, (unsigned long long)c->name);
    INA_PS_CHAIN_COUNTERS(X)
    INA_PS_MEMBER_COUNTERS(X)
#undef X
    for (int d = 0; d < INA_PS_DELAY_BUCKETS; d++)
        fprintf(f, "  delay_%d%-9s %llu\n", d, d == INA_PS_DELAY_BUCKETS - 1 ? "+" : "",
                (unsigned long long)c->delay_hist[d]);
    for (int d = 0; d < INA_PS_DROP__COUNT; d++)
        fprintf(f, "  drop_%-11s %llu\n", ina__ps_drop_name(d), (unsigned long long)c->drops[d]);
}

/* ---- For chain.c (chain replication, PROTOCOL.md §15.8) ----------------------------- */

uint8_t *ina__ps_tx_buf(struct ina_ps *ps, size_t len) { return tx_buf(ps, len); }

void ina__ps_tx_push(struct ina_ps *ps, uint8_t *buf, size_t len, const struct sockaddr_in *dst)
{
    tx_push(ps, buf, len, dst);
}

void ina__ps_send_update_ack(struct ina_ps *ps, const struct ina_ps_job *job,
                             const struct ina_ps_lastupd *u, const struct sockaddr_in *dst)
{
    send_update_ack(ps, job, u, dst);
}

void ina__ps_on_update(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                       const uint8_t *body, size_t len, const struct sockaddr_in *src)
{
    on_update(ps, job, h, body, len, src);
}
