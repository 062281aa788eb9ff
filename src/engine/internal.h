/* internal.h: what the engine's files share among themselves; private to src/engine (engine.h is its interface). */
#ifndef INA_ENGINE_INTERNAL_H
#define INA_ENGINE_INTERNAL_H

/*
 * The files of the engine, each calling only those below it (no cycle:
 * scripts/check-layers.py):
 *
 *   input.c      the entry point: a datagram to the control plane or the dataplane
 *   control.c    joins, admission, sessions, the operator's requests, the tick
 *   drain.c      the graceful stop
 *   tree.c       this switch as a child of a parent
 *   dataplane.c  the slot rules of DATA; a child's partial sums and the parent's results
 *   job.c        a job's primitives: the pool, its control datagrams, its end
 *   hot.c, sparse.c, combine.c, counters.c, txq.c: leaves
 */

#include "engine/engine.h"
#include "common/kmap.h"
#include "common/log.h"

/* A dropped datagram, counted by cause; one that names an active job is counted for it too. */
static inline void ina__drop(struct ina_switch *sw, enum ina_drop why) { sw->c.drops[why]++; }
static inline void ina__drop_job(struct ina_switch *sw, struct ina_job *job, enum ina_drop why)
{
    sw->c.drops[why]++;
    job->c.drops[why]++;
}

/* ---- job.c: below control.c, tree.c, dataplane.c and drain.c -------------------------- */

/* One log line about a job: its id, name, lane and session, the event and why. */
void ina__log_job(enum ina_log_level level, const struct ina_job *job, const char *event,
                  const char *reason);
/* A session id, token or nonce: getrandom, or the seeded generator (p.seed). */
uint32_t ina__random_u32(struct ina_switch *sw);
/* First fit of n free slots. @return 0 (the run's start in *base) or -1. */
int ina__pool_alloc(struct ina_switch *sw, uint32_t n, uint32_t *base);
/* Admission policy: a run of free slots of want (capped by the pool and
 * max_job_slots), halved while none is free, down to min_job_slots.
 * @return the run's length (its start in *base), 0 if even the least does not fit. */
uint32_t ina__pool_take(struct ina_switch *sw, uint32_t want, uint32_t *base);
/* The job's slots in their initial state: rounds -2 and -1 complete (§6.3). */
void ina__job_reset_slots(struct ina_switch *sw, const struct ina_job *job);
/* Unmap the rings of every rank of job that attached them (counting faults). */
void ina__job_detach_rings(struct ina_switch *sw, struct ina_job *job);
/* The registrations of sessions that ended or were refused (PROTOCOL.md §5.2
 * step 3‴): remember a job's, ask whether a JOIN names one, forget a nonce. */
void ina__ended_remember(struct ina_switch *sw, const struct ina_job *job);
int ina__ended_has(const struct ina_switch *sw, const struct ina_hdr *h, const struct ina_join *j);
void ina__ended_forget(struct ina_switch *sw, uint64_t nonce);
/* Release the job's slots, rings and hot table; its entry becomes FREE. */
void ina__job_free(struct ina_switch *sw, struct ina_job *job);
/* Queue a control datagram (header + body) of job (NULL: none) to dst; with
 * auth, the HMAC of the shared secret appended; flags: header flag bits beyond
 * a JOIN_ACK's capabilities. ina__send_ctl: no auth, no flags. */
void ina__send_ctl_auth(struct ina_switch *sw, const struct ina_job *job, uint8_t kind,
                        const uint8_t *body, size_t bodylen, const struct sockaddr_in *dst,
                        int auth, uint16_t flags);
void ina__send_ctl(struct ina_switch *sw, const struct ina_job *job, uint8_t kind,
                   const uint8_t *body, size_t bodylen, const struct sockaddr_in *dst);
/* A JOIN_NAK with reason, echoing nonce, naming this switch's version. */
/* The same, REJECTED with the cause the switch saw (INA_REJECT_*, PROTOCOL.md §4.2). */
void ina__send_nak_cause(struct ina_switch *sw, uint64_t nonce, int reason, unsigned cause,
                         const struct sockaddr_in *dst);
void ina__send_nak(struct ina_switch *sw, uint64_t nonce, int reason,
                   const struct sockaddr_in *dst);
/* One datagram of kind (ABORT, JOIN_NAK) with reason to every member that joined. */
void ina__send_to_members(struct ina_switch *sw, struct ina_job *job, uint8_t kind, int reason);
/* End an ACTIVE job as ina__job_abort_why does, its ABORT saying the cause (INA_ABORT_*):
 * rank, and the address at which the switch saw it (PROTOCOL.md §4.2). */
void ina__job_abort_cause(struct ina_switch *sw, struct ina_job *job, int reason,
                          const char *why, unsigned cause, unsigned rank,
                          const struct sockaddr_in *at);
/* The JOIN_ACK to rank r (again: its ACK was lost). */
void ina__send_ack(struct ina_switch *sw, const struct ina_job *job, int rank);
/* The NOSPACE of a refused job to its rank r, naming rank 0's fallback if offered. */
void ina__send_refusal(struct ina_switch *sw, const struct ina_job *job, int r);
/* The JOIN_ACK to every member that joined: the session started. */
void ina__job_send_acks(struct ina_switch *sw, const struct ina_job *job);
/* Whether every registered member of job proposed its lanes (INA_FLAG_LANES_AUTO,
 * lane 0): a child then passes the job's count up as a proposal too (§5.6). */
int ina__job_lanes_proposed(const struct ina_job *job);
/* NAK every member that joined (its own nonce) with reason; NOSPACE is remembered
 * for a while so that a rank whose NAK was lost hears it again. Frees the job. */
void ina__job_refuse(struct ina_switch *sw, struct ina_job *job, int reason, uint64_t now_ns);
/* Queue the job's MIGRATE notice to one rank (r >= 0) or every rank (r < 0). */
void ina__job_send_migrate(struct ina_switch *sw, const struct ina_job *job, int r);
/* A child leaves the parent's job (abort: with reason; the parent ends it for
 * every rank). Twice, best effort; nothing once the parent ended it. */
void ina__job_leave_parent(struct ina_switch *sw, struct ina_job *job, int abort, int reason);

/* A header of a child's datagram to its parent: the parent's job, session
 * and token, and the child's rank there (its set's lowest rank). */
static inline void ina__up_hdr(struct ina_hdr *h, const struct ina_job *job, uint8_t kind)
{
    ina__hdr_init(h, kind);
    h->job = job->up.job;
    h->rank = job->up.rep;
    h->session = job->up.session;
    h->token = job->up.token;
}

/* ---- dataplane.c: the slot rules --------------------------------------------------------- */

/* A DATA or HOT_DATA that passed the job checks (active, session, token, rank, source). */
void ina__dp_data(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                  const uint8_t *payload, size_t plen, const struct sockaddr_in *src);
/* Every local contribution of the round is in: send the partial sum to the
 * parent (again, on a worker's retransmission). */
void ina__tree_up_data(struct ina_switch *sw, const struct ina_job *job, uint32_t rel,
                       unsigned set, const struct ina_slot_set *ss);
/* The parent's RESULT (job, session, token and source checked by tree.c). */
void ina__tree_dp_result(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                         const uint8_t *payload);

/* ---- tree.c: this switch as a child of a parent (--parent, PROTOCOL.md §12) ------------- */

/* The job's set of joined ranks changed (or it is new): register it with the parent. */
void ina__tree_register(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns);
/* A datagram of a kind the parent sends (RESULT, JOIN_ACK, JOIN_NAK, REDIRECT,
 * ABORT, MIGRATE) reached a child. */
void ina__tree_input(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                     size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns);
/* Periodic: retransmit TREE_JOINs not answered yet. */
void ina__tree_tick(struct ina_switch *sw, struct ina_job *job, uint64_t now_ns);

/* ---- control.c -------------------------------------------------------------------------- */

/* Any datagram but DATA and HOT_DATA (JOIN, LEAVE, a parent's answers, ...). */
void ina__ctl_input(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                    size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns);

/* ---- the leaves -------------------------------------------------------------------------- */

/* combine.c: a later contribution into the round's values v (n elements,
 * host order) by the round's op; e: its block exponent (op 3). */
void ina__combine(struct ina_slot_set *ss, int32_t *v, const uint8_t *payload, size_t n,
                  int16_t e);

/* hot.c: the job's hot table (PROTOCOL.md §14.3): key -> position, one epoch at a time. */
struct ina_hot {
    uint32_t epoch; /* active epoch, 0 = none */
    uint32_t n;     /* its keys */
    uint64_t *keys; /* position -> key; not NULL once epoch > 0 */
    struct ina_kmap map; /* key -> position */
    /* the install in progress */
    uint32_t pend_epoch, pend_total, pend_filled;
    uint64_t *pend_keys, *pend_bits;
    /* --hot-memory: the budget, and what this table holds of it */
    struct ina_hot_budget *budget;
    size_t act_bytes, pend_bytes;
    /* The sample in progress (HOT_SAMPLE): every rank's sampled counts of the next epoch,
     * summed by key; the epoch activates when the last rank's last chunk is in (hot.c). */
    uint32_t smp_epoch, smp_want; /* 0 = none */
    uint32_t smp_done;            /* ranks whose sample is complete */
    struct hot_rank_sample *smp_rank; /* per rank, world entries */
    struct ina_kmap smp_map;      /* key -> index into smp */
    struct hot_cand *smp;         /* the keys sampled and their summed counts */
    uint32_t smp_cap;             /* room in smp */
    size_t smp_bytes;             /* its charge */
};

/* The charge of an active table of n keys: its key list and its index. An empty
 * table (a few hundred bytes) is part of the job's fixed footprint. */
static inline size_t ina__hot_table_bytes(uint32_t n)
{
    return n ? 8 * (size_t)n + ina__kmap_bytes(ina__kmap_cells(n)) : 0;
}

/* The charge of an install of total keys: its key list, its bitmap of positions
 * written, and the index it makes when it becomes active. */
static inline size_t ina__hot_install_bytes(uint32_t total)
{
    return total ? ina__hot_table_bytes(total) + 8 * ((size_t)total / 64 + 1) : 0;
}

/* A HOT_DATA packet, parsed. */
struct ina_hot_in {
    uint32_t epoch, base;
    int keyed, bitmap;
    uint32_t nkeyed;       /* keyed: entries (0 otherwise) */
    uint32_t nbitmap;      /* bitmap: values (0 otherwise) */
    const uint8_t *entries; /* dense: count values; keyed: nkeyed (key, value); bitmap: the
                               bitmap, then nkeyed values */
};
/* Parse the payload of a HOT_DATA. @return 0, or -1 if its length is wrong. */
int ina__hot_parse(const struct ina_hdr *h, const uint8_t *payload, size_t plen,
                   struct ina_hot_in *in);
/* A new contribution may use the table: its epoch is the active one, its block
 * inside the table, and every keyed key in the table within the block. */
int ina__hot_valid(const struct ina_job *job, const struct ina_hot_in *in, uint32_t count);
/* Values of a round from a first / later contribution (binary32 bit patterns). */
void ina__hot_load(const struct ina_job *job, int32_t *v, const struct ina_hot_in *in,
                   uint32_t count);
void ina__hot_add(const struct ina_job *job, int32_t *v, const struct ina_hot_in *in,
                  uint32_t count);
/* HOT_INSTALL and HOT_FETCH (control path). */
void ina__hot_control(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                      const uint8_t *body, size_t len, const struct sockaddr_in *src);
void ina__hot_free(struct ina_job *job);

/* sparse.c: block-sparse rounds (wire ops 7 and 8, PROTOCOL.md §17). The
 * payload of a DATA that passed ina__sparse_valid() is read without further
 * bounds checks; v is the round's slot set values (set_words words: a 16-bit
 * block of B elements takes B lanes there, ceil(B / 2) words on the wire). */
int ina__sparse_valid(const struct ina_job *job, const struct ina_hdr *h, const uint8_t *payload);
/* 1 if the payload has the round's layout and, place by place, its positions and FIRST bits. */
int ina__sparse_same(const int32_t *v, const uint8_t *payload);
/* The round's first contribution; later ones by op. @return the blocks it carried. */
unsigned ina__sparse_first(int32_t *v, const uint8_t *payload, uint8_t op);
unsigned ina__sparse_combine(int32_t *v, const uint8_t *payload, uint8_t op);
/* Ops 12, 13 (§17.11), every contribution in: each place's scale s into its info. */
void ina__sparse_h16_finish(int32_t *v, uint8_t op);
/* The RESULT payload of a finished round into out. @return its words; *nblocks its blocks. */
size_t ina__sparse_emit(uint8_t *out, const int32_t *v, uint8_t op, unsigned *nblocks);
/* Blocks (HAS places) in a checked payload. */
unsigned ina__sparse_blocks_in(const uint8_t *payload);

#endif
