/* ps.h: ina-ps, the parameter server shard: jobs, the parameter store, steps, and the per-datagram entry point. */
#ifndef INA_PS_H
#define INA_PS_H

/*
 * Like ina-switch, a shard is a pure state machine fed one datagram at a
 * time by ina__ps_input(); it queues its replies in ps->tx. Sockets live in
 * main.c, so tests and the fuzzer drive this API without a network.
 *
 * A job's shard keeps, for every key it owns that was ever updated, a
 * record: the parameter (dim floats), the optimizer state (dim floats for
 * Adagrad), the version (steps included) and two step accumulators. Steps
 * are synchronous (PROTOCOL.md §14.2): the PUSHes of step s from all N ranks
 * are summed into the accumulator of parity s & 1, and once every rank has
 * COMMITted s, the sums are applied with the job's optimizer, once, in step
 * order. At most two steps are open at a time (s = applied, applied + 1).
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

#include "common/fault.h"
#include "common/kmap.h"
#include "common/kv_wire.h"
#include "common/optim.h"
#include "ina.h"

#define INA_PS_DEFAULT_PORT 48870
#define INA_PS_MAX_JOBS 16
#define INA_PS_MAX_PACKETS (1u << 20) /* PUSH packets of one rank, step and shard */
#define INA_PS_BITMAP_MIN 512u        /* bits of a packet bitmap when it is first made */
#define INA_PS_TX_MSGS 1024            /* replies queued at most */
#define INA_PS_TX_BYTES (4u << 20)     /* their bytes at most */
/* Room one input may need: a full datagram, plus an ABORT or a COMMIT_ACK to every rank. */
#define INA_PS_TX_RESERVE_MSGS (2 * INA_MAX_WORKERS + 4)
#define INA_PS_TX_RESERVE_BYTES (65536 + 2 * INA_MAX_WORKERS * 64)

#define INA_PS_DELAY_BUCKETS 8

#define INA_PS_DROP_MAP(X)                                                          \
    X(SHORT, "shorter than the 32-byte header")                                     \
    X(MAGIC, "wrong magic")                                                         \
    X(VERSION, "unsupported protocol version")                                      \
    X(LENGTH, "datagram length disagrees with count, dim or body")                  \
    X(KIND, "not a kind ina-ps serves")                                             \
    X(NO_JOB, "job id unknown or not active")                                       \
    X(SESSION, "session id is not the job's current session")                       \
    X(TOKEN, "wrong job token")                                                     \
    X(RANK, "rank outside the job")                                                 \
    X(SOURCE, "source address is not the registered address of that rank")          \
    X(FUTURE, "step more than one ahead of the oldest open step")                   \
    X(EARLY, "COMMIT before all its PUSH packets arrived")                          \
    X(INDEX, "PUSH packet index beyond the limit")                                  \
    X(JOIN, "malformed or refused join/leave")                                      \
    X(TXQ, "reply queue full (an ina-ps bug; the reply is lost)")                    \
    X(ORDER, "UPDATE out of order: update id or stamp not the next, base version ahead") \
    X(MODE, "kind not served in the job's mode (PUSH/COMMIT in a STALE job, UPDATE in a SYNC one)") \
    X(CHAIN_SOURCE, "chain datagram not from the --chain-from (CHAIN_FWD) or --chain-to (CHAIN_ACK) address") \
    X(CHAIN_JOB, "CHAIN_FWD of no active STALE job of that name, a rank outside it, or another primary session") \
    X(CHAIN_LENGTH, "chain datagram length disagrees with its count, the job's dim or its body")  \
    X(CHAIN_ACK, "CHAIN_ACK that answers no forward: credentials, stamp or next stamp out of range") \
    X(SCHED_SOURCE, "PS_SYNC or PS_REPLAY not from the --sched address (or no --sched)")  \
    X(SCHED_JOB, "PS_REPLAY of no active STALE job of that name, or of a rank not joined")  \
    X(SCHED_LENGTH, "PS_SYNC or PS_REPLAY length disagrees with its body, count or the job's dim, or a bad action")

enum ina_ps_drop {
#define INA__PS_DROP_ENUM(name, text) INA_PS_DROP_##name,
    INA_PS_DROP_MAP(INA__PS_DROP_ENUM)
#undef INA__PS_DROP_ENUM
    INA_PS_DROP__COUNT
};

/* Chain replication (chain.c, PROTOCOL.md §15.8): name, help. In the exit report and /metrics. */
#define INA_PS_CHAIN_COUNTERS(X)                                                                  \
    X(chain_forwarded, "Stamped UPDATEs forwarded to the replica (--chain-to)")                   \
    X(chain_fwd_retransmits, "CHAIN_FWDs sent again: no CHAIN_ACK within the retransmission timeout") \
    X(chain_acks, "CHAIN_ACKs taken from the replica (forwards acknowledged)")                    \
    X(chain_ack_dups, "CHAIN_ACKs for stamps already acknowledged")                               \
    X(chain_held_answers, "UPDATE_ACKs answered HELD: the replica had not acknowledged yet")      \
    X(chain_released, "UPDATE_ACK outcomes sent once the replica acknowledged the stamp")        \
    X(chain_mismatch, "Replica outcomes that differ from the primary's (a bug; must stay 0)")    \
    X(chain_broken, "Jobs whose replica missed --chain-timeout-ms: the primary answers alone")    \
    X(chain_unforwarded, "Stamped UPDATEs not forwarded: the job's chain was broken")             \
    X(chain_fwd_received, "CHAIN_FWDs accepted from --chain-from (then taken as UPDATEs)")        \
    X(chain_acks_sent, "CHAIN_ACKs sent to the primary (--chain-from)")

/* Membership and failures (member.c, PROTOCOL.md §15.9): name, help. */
#define INA_PS_MEMBER_COUNTERS(X)                                                                 \
    X(ranks_joined_late, "Ranks that joined a STALE job already running (PS_JOIN start < world)")  \
    X(ranks_refused, "PS_JOINs refused: the rank of a running STALE job with start < world was taken") \
    X(ranks_departed, "Ranks marked left by ina-sched (PS_SYNC DEPART): their grant was voided")    \
    X(stamps_voided, "Stamps voided at ina-sched's PS_SYNC VOID: no update was here for them")      \
    X(updates_voided, "UPDATEs answered VOIDED: their stamp had been voided before they came")      \
    X(sched_syncs, "PS_SYNCs taken from --sched (each answered with a PS_STATE)")                  \
    X(replays_sent, "PS_REPLAYs sent to --sched: a taken update, for a replica that lacks it")     \
    X(replays_taken, "PS_REPLAYs from --sched taken as their rank's UPDATE")

struct ina_ps_counters {
    /* chain replication's (chain.c) and membership's (member.c) first; reported by name */
#define INA__PS_CHAIN_FIELD(name, help) uint64_t name;
    INA_PS_CHAIN_COUNTERS(INA__PS_CHAIN_FIELD)
    INA_PS_MEMBER_COUNTERS(INA__PS_CHAIN_FIELD)
#undef INA__PS_CHAIN_FIELD
    uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes, tx_errors;
    uint64_t pushes;        /* PUSH packets added */
    uint64_t push_entries;  /* (key, values) entries added */
    uint64_t push_dups;     /* PUSH copies not added again (retransmissions) */
    uint64_t commits;       /* ranks' steps committed */
    uint64_t steps_applied; /* steps applied (summed updates, once per step) */
    uint64_t keys_applied;  /* key updates applied */
    uint64_t pulls, pull_keys;
    uint64_t assigns, assign_entries, assign_stale; /* ASSIGN entries ignored as older than the key */
    uint64_t jobs_started, jobs_ended, jobs_aborted, jobs_refused;
    uint64_t memory_refusals; /* keys, packet bitmaps, held UPDATEs or forwards refused: --max-memory */
    /* Bounded staleness (MODE_STALE, PROTOCOL.md §15.2). */
    uint64_t updates_applied;  /* UPDATEs applied (delay <= D) */
    uint64_t updates_stale;    /* UPDATEs refused with INA_ERR_STALE (delay > D) */
    uint64_t update_dups;      /* UPDATE copies answered again, not applied again */
    uint64_t delay_violations; /* applied with delay > D: an ina-ps bug, must stay 0 */
    uint64_t delay_max;        /* the largest delay applied */
    uint64_t updates_held;     /* stamped UPDATEs kept until their turn came */
    uint64_t updates_aggregated; /* applied UPDATEs that were the sum of a group (members >= 2) */
    uint64_t aggregated_members; /* the members' updates in them */
    uint64_t delay_hist[INA_PS_DELAY_BUCKETS]; /* applied updates by delay (last: >= 7) */
    uint64_t drops[INA_PS_DROP__COUNT];
};

/* The records of one job (store.c). Arrays indexed by record; grown by doubling. */
struct ina_ps_store {
    struct ina_kmap index; /* key -> record */
    uint32_t n, cap;
    unsigned dim;
    int has_state;
    uint64_t *keys;
    uint32_t *ver;      /* steps whose update the value includes (ASSIGN: the step it is as of) */
    uint32_t *acc_step; /* [2 * cap]: step + 1 accumulated in acc[parity], 0 = none */
    float *vals, *state, *acc; /* cap*dim, cap*dim (Adagrad) or NULL, 2*cap*dim */
    uint32_t *touched[2];      /* records with a sum in acc[parity] */
    uint32_t ntouched[2], touched_cap[2];
    size_t bytes; /* memory held, counted against --max-memory */
};

/* MODE_STALE: a rank's last UPDATE and its answer, repeated to a copy (PROTOCOL.md §15.2). */
struct ina_ps_lastupd {
    uint32_t uid;     /* its update id (0: none yet) */
    int32_t status;   /* 0 applied, INA_ERR_STALE refused */
    uint32_t version; /* the job's version after it */
    uint32_t delay;   /* versions it lagged */
    uint32_t stamp;
};

/* MODE_STALE: a stamped UPDATE that came before its turn, kept until the stamps before it are in. */
#define INA_PS_HOLD 16 /* stamps ahead of the next one that are kept (further ones: drop ORDER) */
struct ina_ps_held {
    uint8_t used;
    struct ina_hdr h;
    struct sockaddr_in src;
    uint8_t *body; /* a copy of the datagram's body (malloc) */
    size_t len;
};

/* One rank's progress on one open step (parity). */
struct ina_ps_rankstep {
    uint32_t step1;   /* step + 1 this entry describes, 0 = none */
    uint32_t nrecv;   /* PUSH packets added */
    uint8_t committed;
    uint64_t *bits;   /* PUSH packet indices received (kept for the parity's next step) */
    uint32_t nbits;   /* capacity in bits: 0, or INA_PS_BITMAP_MIN doubled, charged */
};

struct ina_ps_member {
    struct sockaddr_in addr;
    uint64_t nonce;
    uint8_t joined, left;
    uint64_t rx_packets, rx_bytes;
    uint64_t updates_applied; /* MODE_STALE: this rank's UPDATEs applied (the exit report) */
};

enum ina_ps_job_state { INA_PS_FREE = 0, INA_PS_JOINING, INA_PS_ACTIVE };

struct ina_ps_job {
    enum ina_ps_job_state state;
    uint16_t id; /* index + 1 */
    struct ina_ps_join p; /* the job's parameters (first JOIN; the others must agree) */
    struct ina_optim optim;
    int world, njoined, nleft;
    uint32_t session, token;
    uint64_t created_ns, last_rx_ns;
    uint32_t applied;     /* steps applied so far = the oldest open step */
    uint32_t ncommitted[2];
    uint64_t step_open_ns[2]; /* first COMMIT of the open step of that parity, 0 = none */
    struct ina_ps_rankstep rs[2][INA_MAX_WORKERS];
    struct ina_ps_store store;
    struct ina_ps_member members[INA_MAX_WORKERS];
    uint64_t rx_packets, pushes, pulls, steps_applied;
    /* MODE_STALE: the model version is `applied` (updates applied so far). */
    uint32_t next_stamp;  /* the stamp the next stamped UPDATE must carry */
    struct ina_ps_lastupd last[INA_MAX_WORKERS];
    struct ina_ps_held held[INA_PS_HOLD]; /* by stamp % INA_PS_HOLD */
    float *scratch;       /* one entry's gradient (dim floats) */
    /* Memory of the job besides its store, charged to --max-memory like the store: the
     * packet bitmaps, the held UPDATEs' copies and scratch. */
    size_t aux_bytes;
};

struct ina_ps_params {
    unsigned shard, nshards;
    size_t max_memory;        /* bytes of all jobs together: stores, bitmaps, held copies, forwards */
    uint32_t initial_keys;    /* records preallocated per job */
    uint64_t join_timeout_ns; /* a JOINING job missing ranks this long is dropped */
    uint64_t idle_timeout_ns; /* an ACTIVE job silent this long is aborted (TIMEOUT) */
    uint64_t step_timeout_ns; /* an open step missing commits this long aborts the job */
};

/* Replies: one byte arena plus (datagram, destination) pairs, flushed by main.c. */
struct ina_ps_tx {
    uint8_t *mem;
    size_t used;
    unsigned n;
    uint64_t overflows;
    struct iovec iov[INA_PS_TX_MSGS];
    struct sockaddr_in dst[INA_PS_TX_MSGS];
};

struct ina_ps {
    struct ina_ps_params p;
    struct ina_ps_job jobs[INA_PS_MAX_JOBS];
    uint32_t session_counter;
    size_t mem_used;
    struct ina_ps_counters c;
    struct ina_ps_tx tx;
    /* Chain replication (chain.c): NULL when off. ps.c calls these hooks only; it links
     * without chain.c (the unit tests and the fuzzer include ps.c on its own). */
    const struct ina_ps_chain_ops *chain_ops;
    struct ina_ps_chain *chain;
    /* ina-sched's link (member.c, --sched): NULL when off; the same arrangement. */
    const struct ina_ps_sched_ops *sched_ops;
    struct ina_ps_sched *sched;
};

/* The hooks of ina-sched's link (PROTOCOL.md §15.9), set by ina__ps_sched_init(). */
struct ina_ps_sched_ops {
    /* A PS_SYNC or PS_REPLAY (header decoded, rx counted). */
    void (*input)(struct ina_ps *ps, const struct ina_hdr *h, const uint8_t *body, size_t len,
                  const struct sockaddr_in *src, uint64_t now_ns);
    /* A stamped UPDATE was just taken (as chain_ops->taken): kept for a PS_REPLAY. */
    void (*taken)(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                  const uint8_t *body, size_t len);
    /* @return 1 if stamp g (below the job's next stamp) was voided here. */
    int (*voided)(struct ina_ps *ps, struct ina_ps_job *job, uint32_t g);
    /* The job's slot is being freed: release what was kept for it (charged to its aux_bytes). */
    void (*job_end)(struct ina_ps *ps, struct ina_ps_job *job);
};

/* The hooks of chain replication (PROTOCOL.md §15.8), set by ina__ps_chain_init(). */
struct ina_ps_chain_ops {
    /* A CHAIN_FWD or CHAIN_ACK (header decoded, rx counted): the whole datagram is its own. */
    void (*input)(struct ina_ps *ps, const struct ina_hdr *h, const uint8_t *body, size_t len,
                  const struct sockaddr_in *src, uint64_t now_ns);
    /* A stamped UPDATE was just taken (applied or refused; job->last[h->rank] is its outcome),
     * before its UPDATE_ACK is queued. body, len: the UPDATE's body. */
    void (*taken)(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                  const uint8_t *body, size_t len);
    /* An UPDATE_ACK is about to be queued to dst. @return 1 if the hook took it over. */
    int (*ack)(struct ina_ps *ps, const struct ina_ps_job *job, const struct ina_ps_lastupd *u,
               const struct sockaddr_in *dst);
};

/* @return 0, -EINVAL or -ENOMEM. */
int ina__ps_init(struct ina_ps *ps, const struct ina_ps_params *p);
void ina__ps_free(struct ina_ps *ps);
/* Process one datagram from src. The caller flushes ps->tx when ina__ps_tx_full(). */
void ina__ps_input(struct ina_ps *ps, const uint8_t *buf, size_t len, const struct sockaddr_in *src,
                  uint64_t now_ns);
/* Timeouts: join, idle, step. */
void ina__ps_tick(struct ina_ps *ps, uint64_t now_ns);
static inline int ina__ps_tx_full(const struct ina_ps *ps)
{
    return ps->tx.n + INA_PS_TX_RESERVE_MSGS > INA_PS_TX_MSGS ||
           ps->tx.used + INA_PS_TX_RESERVE_BYTES > INA_PS_TX_BYTES;
}
/* After a flush: count what a missing flush lost (drop TXQ), then empty the queue. */
static inline void ina__ps_tx_reset(struct ina_ps *ps)
{
    ps->c.drops[INA_PS_DROP_TXQ] += ps->tx.overflows;
    ps->tx.overflows = 0;
    ps->tx.n = 0;
    ps->tx.used = 0;
}

const char *ina__ps_drop_name(enum ina_ps_drop d);
/* The model's digest (PROTOCOL.md §15.9): the sum over stored keys of FNV-1a 64 of the key
 * and its values (and state); equal at equal versions for a replica in step. */
uint64_t ina__ps_job_digest(const struct ina_ps_job *job);
/* The exit report's line of every active STALE job: "  job NAME version V stamp G digest D
 * applied r:n,..." (the log's stale_job_ended says the same of a job that ended). */
void ina__ps_jobs_print(const struct ina_ps *ps, FILE *f);
void ina__ps_counters_print(const struct ina_ps_counters *c, FILE *f);

/* For chain.c: ps.c's reply queue, UPDATE_ACK and UPDATE handler (§15.2), unchanged. */
uint8_t *ina__ps_tx_buf(struct ina_ps *ps, size_t len);
void ina__ps_tx_push(struct ina_ps *ps, uint8_t *buf, size_t len, const struct sockaddr_in *dst);
void ina__ps_send_update_ack(struct ina_ps *ps, const struct ina_ps_job *job,
                             const struct ina_ps_lastupd *u, const struct sockaddr_in *dst);
void ina__ps_on_update(struct ina_ps *ps, struct ina_ps_job *job, const struct ina_hdr *h,
                       const uint8_t *body, size_t len, const struct sockaddr_in *src);
/* For member.c (§15.9): resolve the job's next stamp G, if it is here (held: taken) or not
 * (voided, G += 1), then take the held updates whose turn has come.
 * @return 1 if G was voided, 0 if it was taken, -1 if nothing could be done now (no room
 * in the reply queue for the held update's answer). */
int ina__ps_resolve_next(struct ina_ps *ps, struct ina_ps_job *job);
/* Rank r has gone (PS_LEAVE or ina-sched's DEPART): the job ends once every rank that
 * joined has. @return 1 if the job ended. */
int ina__ps_rank_left(struct ina_ps *ps, struct ina_ps_job *job, unsigned r);

/* store.c */
/* --max-memory covers every allocation a job's datagrams cause (all jobs of the shard
 * together). Charge n more bytes to *owner (a store's, a job's or chain replication's
 * count). @return 0, or -1 with nothing charged when they do not fit. */
int ina__ps_charge(struct ina_ps *ps, size_t *owner, size_t n);
void ina__ps_uncharge(struct ina_ps *ps, size_t *owner, size_t n);
int ina__ps_store_init(struct ina_ps *ps, struct ina_ps_store *s, unsigned dim, int has_state);
void ina__ps_store_free(struct ina_ps *ps, struct ina_ps_store *s);
/* The record of key, created (initial value, version 0) if new and memory allows.
 * @return its index, or INA_KMAP_NONE when --max-memory is reached. */
uint32_t ina__ps_store_get(struct ina_ps *ps, struct ina_ps_job *job, uint64_t key);

#endif
