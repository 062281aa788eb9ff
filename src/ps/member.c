/* member.c: ina-sched's link at ina-ps (PROTOCOL.md §15.9): PS_SYNC answered with PS_STATE,
 * voided stamps and their record, replays of taken updates, departed ranks, the model digest. */
#include "ps/member.h"

#include "ps/chain.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static int from_sched(const struct ina_ps *ps, const struct sockaddr_in *src)
{
    return src->sin_addr.s_addr == ps->sched->addr.sin_addr.s_addr &&
           src->sin_port == ps->sched->addr.sin_port;
}

/* The link's state of job, reset when the job slot holds a new session. */
static struct ina_ps_sched_job *sched_job(struct ina_ps *ps, const struct ina_ps_job *job)
{
    struct ina_ps_sched_job *sj = &ps->sched->jobs[job->id - 1];
    if (sj->session != job->session) {
        sj->session = job->session;
        sj->head = sj->nruns = 0;
        sj->runs_total = 0;
        for (int r = 0; r < INA_MAX_WORKERS; r++)
            sj->kept[r].valid = 0; /* the buffers are kept for reuse */
    }
    return sj;
}

static struct ina_ps_job *stale_job_named(struct ina_ps *ps, const uint8_t *name)
{
    if (!memchr(name, 0, 32))
        return NULL;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        struct ina_ps_job *j = &ps->jobs[i];
        if (j->state == INA_PS_ACTIVE && j->p.mode == INA_PS_MODE_STALE &&
            strcmp(j->p.name, (const char *)name) == 0)
            return j;
    }
    return NULL;
}

/* ---- Voided stamps ------------------------------------------------------------------ */

static struct ina_ps_void_run *run_at(struct ina_ps_sched_job *sj, unsigned i)
{
    return &sj->runs[(sj->head + i) % INA_PS_VOID_RUNS];
}

/* Stamp g was voided: extend the newest run, or start one (forgetting the oldest). */
static void record_void(struct ina_ps_sched_job *sj, uint32_t g)
{
    if (sj->nruns) {
        struct ina_ps_void_run *last = run_at(sj, sj->nruns - 1);
        if (last->first + last->n == g) {
            last->n++;
            return;
        }
    }
    if (sj->nruns == INA_PS_VOID_RUNS) {
        sj->head = (sj->head + 1) % INA_PS_VOID_RUNS;
        sj->nruns--;
    }
    *run_at(sj, sj->nruns++) = (struct ina_ps_void_run){.first = g, .n = 1};
    sj->runs_total++;
}

/* The fate of stamp g (an INA_PS_FATE_*); *run: for VOIDED, the voided stamps from g on. */
static uint32_t fate_of(struct ina_ps_job *job, struct ina_ps_sched_job *sj, uint32_t g,
                        uint32_t *run)
{
    *run = 0;
    int32_t ahead = (int32_t)(g - job->next_stamp);
    if (ahead >= 0) {
        const struct ina_ps_held *k = &job->held[g % INA_PS_HOLD];
        return ahead > 0 && ahead < INA_PS_HOLD && k->used && ina__get32(k->body) == g
                   ? INA_PS_FATE_HELD
                   : INA_PS_FATE_WAITING;
    }
    for (unsigned i = 0; i < sj->nruns; i++) {
        const struct ina_ps_void_run *v = run_at(sj, i);
        if (g - v->first < v->n) {
            *run = v->n - (g - v->first);
            return INA_PS_FATE_VOIDED;
        }
    }
    /* Not voided in the runs remembered: taken, unless older than what they cover. */
    if (sj->runs_total > INA_PS_VOID_RUNS && (int32_t)(g - run_at(sj, 0)->first) < 0)
        return INA_PS_FATE_UNKNOWN;
    return INA_PS_FATE_TAKEN;
}

/* Resolve the stamps g .. g + n - 1 while the job's next stamp is one of them. */
static void void_stamps(struct ina_ps *ps, struct ina_ps_job *job, struct ina_ps_sched_job *sj,
                        uint32_t g, uint32_t n)
{
    uint32_t voided = 0;
    while (job->state == INA_PS_ACTIVE && job->next_stamp - g < n) {
        uint32_t at = job->next_stamp;
        int r = ina__ps_resolve_next(ps, job);
        if (r < 0)
            break; /* a held update waits for room to be answered: ina-sched asks again */
        if (r == 1) {
            record_void(sj, at);
            voided++;
        }
    }
    if (voided)
        ina__log(INA_LOG_INFO, "stamps_voided", INA_KV_I("job", job->id),
                INA_KV_S("name", job->p.name), INA_KV_I("from", g), INA_KV_I("voided", voided),
                INA_KV_I("next_stamp", job->next_stamp));
}

/* ---- Replays ---------------------------------------------------------------------------- */

/* A stamped update was taken: keep it as a PS_REPLAY, in case the replica lacks it. */
static void sched_taken(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                        const uint8_t *body, size_t len)
{
    struct ina_ps_kept *k = &sched_job(ps, job)->kept[h->rank];
    size_t need = INA_HDR_LEN + 32 + len;
    k->valid = 0;
    if (need > INA_MAX_DATAGRAM)
        return;
    if (k->cap < need) { /* once per rank: its updates all have the same size */
        /* Charged to the job like its other input-driven memory (§14.2.8), freed
         * with it (sched_job_end): not kept when it does not fit --max-memory. */
        if (ina__ps_charge(ps, &job->aux_bytes, need - k->cap) != 0)
            return; /* not kept: a replica that lacks it stays behind, as before §15.9 */
        uint8_t *b = realloc(k->buf, need);
        if (!b) {
            ina__ps_uncharge(ps, &job->aux_bytes, need - k->cap);
            return;
        }
        k->buf = b;
        k->cap = need;
    }
    struct ina_hdr rh = *h;
    rh.kind = INA_K_PS_REPLAY;
    ina__hdr_encode(k->buf, &rh);
    memset(k->buf + INA_HDR_LEN, 0, 32);
    memcpy(k->buf + INA_HDR_LEN, job->p.name, strnlen(job->p.name, 31));
    memcpy(k->buf + INA_HDR_LEN + 32, body, len);
    k->len = need;
    k->stamp = ina__get32(body);
    k->valid = 1;
}

/* Send the update taken with stamp g to ina-sched again. @return 1 if sent. */
static int send_replay(struct ina_ps *ps, const struct ina_ps_job *job,
                       struct ina_ps_sched_job *sj, uint32_t g)
{
    for (int r = 0; r < job->world; r++) {
        const struct ina_ps_kept *k = &sj->kept[r];
        if (!k->valid || k->stamp != g)
            continue;
        uint8_t *b = ina__ps_tx_buf(ps, k->len);
        if (!b)
            return 0;
        memcpy(b, k->buf, k->len);
        ina__ps_tx_push(ps, b, k->len, &ps->sched->addr);
        ps->c.replays_sent++;
        return 1;
    }
    return 0; /* its rank sent a later update since: that worker is alive, and delivers it */
}

/* ---- PS_SYNC and PS_STATE ----------------------------------------------------------------- */

static void send_state(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *rq,
                       const uint8_t *name, uint32_t action, uint32_t arg, uint32_t result,
                       uint32_t run)
{
    uint8_t *b = ina__ps_tx_buf(ps, INA_HDR_LEN + INA_PS_STATE_LEN);
    if (!b)
        return;
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_STATE);
    h.rank = INA_RANK_SWITCH;
    h.slot = rq->slot;
    uint8_t *p = b + INA_HDR_LEN;
    memset(p, 0, INA_PS_STATE_LEN);
    memcpy(p, name, 32);
    ina__put32(p + 32, action);
    ina__put32(p + 36, arg);
    ina__put32(p + 40, result);
    ina__put32(p + 44, run);
    if (job) {
        h.job = job->id;
        h.session = job->session;
        h.token = job->token;
        h.seq = job->applied;
        ina__put32(p + 48, job->applied);
        ina__put32(p + 52, job->next_stamp);
        uint32_t held = 0;
        for (uint32_t i = 1; i < INA_PS_HOLD; i++) {
            const struct ina_ps_held *k = &job->held[(job->next_stamp + i) % INA_PS_HOLD];
            if (k->used && ina__get32(k->body) == job->next_stamp + i)
                held |= 1u << i;
        }
        ina__put32(p + 56, held);
        uint32_t flags = 0;
        if (ps->chain && ps->chain->to_set)
            flags |= INA_PS_STATE_CHAIN_PRIMARY;
        if (ps->chain && ps->chain->from_set)
            flags |= INA_PS_STATE_CHAIN_REPLICA;
        if (ps->chain && ps->chain->jobs[job->id - 1].session == job->session &&
            ps->chain->jobs[job->id - 1].broken)
            flags |= INA_PS_STATE_CHAIN_BROKEN;
        ina__put32(p + 60, flags);
        ina__put16(p + 64, (uint16_t)job->world);
        ina__put16(p + 66, job->p.start);
        ina__put64(p + 68, ina__ps_job_digest(job));
        for (int r = 0; r < job->world; r++) {
            if (job->members[r].joined)
                p[76 + r / 8] |= (uint8_t)(1u << (r % 8));
            if (job->members[r].left)
                p[108 + r / 8] |= (uint8_t)(1u << (r % 8));
        }
    }
    ina__hdr_encode(b, &h);
    ina__ps_tx_push(ps, b, INA_HDR_LEN + INA_PS_STATE_LEN, &ps->sched->addr);
}

static void sync_input(struct ina_ps *ps, const struct ina_hdr *h, const uint8_t *body, size_t len)
{
    if (len != INA_PS_SYNC_LEN || !memchr(body, 0, 32)) {
        ps->c.drops[INA_PS_DROP_SCHED_LENGTH]++;
        return;
    }
    uint32_t action = ina__get32(body + 32), arg = ina__get32(body + 36), n = ina__get32(body + 40);
    if (action > INA_PS_SYNC_DEPART ||
        (action == INA_PS_SYNC_VOID && (n == 0 || n > INA_PS_VOID_MAX))) {
        ps->c.drops[INA_PS_DROP_SCHED_LENGTH]++;
        return;
    }
    ps->c.sched_syncs++;
    struct ina_ps_job *job = stale_job_named(ps, body);
    if (!job) {
        send_state(ps, NULL, h, body, action, arg, INA_PS_FATE_NO_JOB, 0);
        return;
    }
    struct ina_ps_sched_job *sj = sched_job(ps, job);
    uint32_t run = 0, result = 0;
    switch (action) {
    case INA_PS_SYNC_VOID:
        void_stamps(ps, job, sj, arg, n);
        if (job->state != INA_PS_ACTIVE) { /* a held update's memory abort ended it */
            send_state(ps, NULL, h, body, action, arg, INA_PS_FATE_NO_JOB, 0);
            return;
        }
        result = fate_of(job, sj, arg, &run);
        break;
    case INA_PS_SYNC_REPLAY:
        result = fate_of(job, sj, arg, &run);
        run = result == INA_PS_FATE_TAKEN && send_replay(ps, job, sj, arg);
        break;
    case INA_PS_SYNC_DEPART:
        if (arg < (uint32_t)job->world && job->members[arg].joined && !job->members[arg].left) {
            ps->c.ranks_departed++;
            ina__log(INA_LOG_INFO, "rank_departed", INA_KV_I("job", job->id),
                    INA_KV_S("name", job->p.name), INA_KV_I("rank", arg),
                    INA_KV_I("version", job->applied));
            if (ina__ps_rank_left(ps, job, arg)) { /* every rank has gone: the job ended */
                send_state(ps, NULL, h, body, action, arg, INA_PS_FATE_NO_JOB, 0);
                return;
            }
        }
        break;
    default: result = fate_of(job, sj, arg, &run); break;
    }
    send_state(ps, job, h, body, action, arg, result, run);
}

/* A PS_REPLAY from ina-sched: its rank's UPDATE, taken by the rules of §15.2. */
static void replay_input(struct ina_ps *ps, const struct ina_hdr *h, const uint8_t *body,
                         size_t len)
{
    if (len < 32 + INA_PS_UPDATE_PREFIX) {
        ps->c.drops[INA_PS_DROP_SCHED_LENGTH]++;
        return;
    }
    struct ina_ps_job *job = stale_job_named(ps, body);
    if (!job || h->rank >= job->world || !job->members[h->rank].joined) {
        ps->c.drops[INA_PS_DROP_SCHED_JOB]++;
        return;
    }
    size_t ulen = len - 32;
    if (ulen - INA_PS_UPDATE_PREFIX != (size_t)h->count * ina__ps_entry_len(job->store.dim)) {
        ps->c.drops[INA_PS_DROP_SCHED_LENGTH]++;
        return;
    }
    ps->c.replays_taken++;
    struct ina_hdr uh = *h; /* the worker's UPDATE, in this server's job */
    uh.kind = INA_K_PS_UPDATE;
    uh.job = job->id;
    uh.session = job->session;
    uh.token = job->token;
    /* Its answer goes to the rank, as if it had sent it: a live worker takes it as the
     * replica's (the same outcome as the primary's), a dead one never reads it. */
    ina__ps_on_update(ps, job, &uh, body + 32, ulen, &job->members[h->rank].addr);
}

static void sched_input(struct ina_ps *ps, const struct ina_hdr *h, const uint8_t *body,
                        size_t len, const struct sockaddr_in *src, uint64_t now_ns)
{
    (void)now_ns;
    if (!from_sched(ps, src)) {
        ps->c.drops[INA_PS_DROP_SCHED_SOURCE]++;
        return;
    }
    if (h->kind == INA_K_PS_SYNC)
        sync_input(ps, h, body, len);
    else
        replay_input(ps, h, body, len);
}

/* An UPDATE came with a stamp already resolved: was it voided here (§15.2 step 2b)? */
static int sched_voided(struct ina_ps *ps, struct ina_ps_job *job, uint32_t g)
{
    uint32_t run;
    return fate_of(job, sched_job(ps, job), g, &run) == INA_PS_FATE_VOIDED;
}

/* The job's slot is freed (its memory uncharged there): free the replay copies with it. */
static void sched_job_end(struct ina_ps *ps, struct ina_ps_job *job)
{
    struct ina_ps_sched_job *sj = &ps->sched->jobs[job->id - 1];
    for (int r = 0; r < INA_MAX_WORKERS; r++) {
        free(sj->kept[r].buf);
        sj->kept[r] = (struct ina_ps_kept){0};
    }
}

static const struct ina_ps_sched_ops sched_ops = {.input = sched_input, .taken = sched_taken,
                                                  .voided = sched_voided,
                                                  .job_end = sched_job_end};

/* ---- API ------------------------------------------------------------------------------- */

int ina__ps_sched_init(struct ina_ps_sched *sc, struct ina_ps *ps, const struct sockaddr_in *addr)
{
    memset(sc, 0, sizeof(*sc));
    if (!addr || addr->sin_port == 0)
        return -EINVAL;
    sc->addr = *addr;
    ps->sched = sc;
    ps->sched_ops = &sched_ops;
    return 0;
}

void ina__ps_sched_free(struct ina_ps *ps)
{
    if (!ps->sched)
        return;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++)
        for (int r = 0; r < INA_MAX_WORKERS; r++)
            free(ps->sched->jobs[i].kept[r].buf);
    ps->sched = NULL;
    ps->sched_ops = NULL;
}
