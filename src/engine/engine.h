/* engine.h: the switch's state machine: the slot pool, the job table, and the per-datagram entry point. */
#ifndef INA_ENGINE_H
#define INA_ENGINE_H

/*
 * The switch is a pure state machine fed one datagram at a time by
 * ina__switch_input(); it queues what it must send into sw->txq. Sockets live
 * with its drivers: ina-switch (src/switch/main.c) and libina's host
 * aggregator (src/lib/fallback.c); tests and fuzzers drive this API
 * directly, without a network.
 *
 * Memory is fixed at creation: nslots slots, each two sets (the shadow copy)
 * of set_words int32 values: max_elems, or twice that where the 16-bit wire
 * is offered (a round of count words has 2 * count binary32 lanes, §8.10.4).
 * A job holds a contiguous range of `window` slots.
 */

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/addr.h"
#include "common/mac.h"
#include "common/sha256.h"
#include "common/shm_ring.h"
#include "common/kv_wire.h"
#include "common/wire.h"
#include "ina.h"
#include "engine/counters.h"
#include "engine/dp_ops.h"
#include "engine/txq.h"

#define INA_BITMAP_WORDS ((INA_MAX_WORKERS + 63) / 64)
#define INA_SW_MAX_JOBS 64   /* per shard */
#define INA_SW_MAX_SHARDS 64 /* dataplane threads; job ids stay below 2^12 */
#define INA_SW_EVICT_FLAG 0x8000u /* operator mailbox: evict rather than abort (metrics.h) */
#define INA_SW_REFUSED_KEEP 8     /* refused jobs remembered, to repeat a lost NOSPACE */
#define INA_SW_REFUSED_NS 5000000000ull /* ... for this long */
/* A JOINING rank that sent no JOIN for this long is gone (workers re-send
 * at least every second): its registration is forgotten. */
#define INA_SW_JOIN_SILENT_NS 3500000000ull
/* Job names whose ranks disagreed (world size, lanes) lately, and how long
 * a JOIN for such a name is refused with MISMATCH too, so that ranks that
 * join a little later fail at once rather than wait for ones that never come. */
#define INA_SW_MISMATCH_KEEP 8
#define INA_SW_MISMATCH_NS 3000000000ull
#define INA_SW_MAX_PARENTS 16     /* --parent addresses (a sharded parent tier) */
/* With a shared secret, a JOIN must echo a cookie this switch handed out
 * (JOIN_COOKIE) at most this long ago: a captured JOIN cannot be replayed
 * later (PROTOCOL.md §4.4). A little from the future is taken too: the
 * threads of one switch read the clock at different moments. */
#define INA_SW_COOKIE_NS 4000000000ull
#define INA_SW_COOKIE_AHEAD_NS 1000000000ull
/* Registrations of sessions that ended (or were refused) that the switch
 * remembers, so that a JOIN naming one again is refused rather than
 * starting the session anew (PROTOCOL.md §5.2 step 3‴). */
#define INA_SW_ENDED_KEEP 4096
/* Draining (SIGTERM, drain.c): a job counts as between operations once none
 * of its rounds is partly received and no DATA came for this long. */
#define INA_SW_DRAIN_QUIET_NS 200000000ull
#define INA_SW_DEFAULT_HOT_MEMORY ((size_t)64 << 20) /* --hot-memory */
/* Dead ranks (PROTOCOL.md §5.4): a job none of whose rounds completed for
 * this long, while some rank resends and another sends nothing and is missing
 * from a partly received round, has the silent one probed (a DOORBELL to its
 * address) at most this often; an ICMP port unreachable for that address
 * ends the job (rank_dead). */
#define INA_SW_STUCK_NS 1000000000ull
#define INA_SW_PROBE_EVERY_NS 500000000ull

/*
 * --hot-memory: the bytes of every job's hot table together (hot.c, PROTOCOL.md
 * §14.3), charged when an install starts and released when the table goes. One
 * budget serves every dataplane thread of an ina-switch (main.c owns it): it is
 * taken on the control path only (HOT_INSTALL, a job's end), with one atomic
 * compare-and-swap, never per packet.
 */
struct ina_hot_budget {
    _Atomic size_t used;
    size_t limit;
};

/* One set (copy) of one slot. Invariant: complete <=> nrecv == job world size
 * for the round `seq`; bitmap has exactly nrecv bits set. */
struct ina_slot_set {
    uint32_t seq;     /* round held by this set; set index == seq & 1 */
    uint16_t count;   /* elements in this round (all ranks must agree) */
    uint16_t nrecv;   /* contributions so far */
    int16_t exp;      /* max exponent over contributions */
    uint8_t complete; /* all contributions in: values hold the sum */
    uint8_t up;       /* a child (tree.c): every local contribution is in, and the
                         partial sum went to the parent; complete once its RESULT is in */
    uint8_t tag;      /* operation tag of this round (all ranks must agree) */
    uint8_t op;       /* wire op (INA_OP_*) of this round (all ranks must agree) */
    uint8_t hot;      /* a HOT_DATA round (kind 5): the RESULT is a HOT_RESULT */
    uint8_t raw;      /* the 16-bit wire (ops 10, 11) at a child: values hold the parent's
                         RESULT words as received, not binary32 lanes (§8.10.7) */
    uint32_t hot_epoch, hot_base; /* its hot-table epoch and first position */
    uint64_t bitmap[INA_BITMAP_WORDS]; /* ranks that contributed to `seq` */
};

struct ina_slot {
    struct ina_slot_set set[2];
};

/* WAITING: every rank joined, no room in the pool yet, and the job asked to wait. */
enum ina_job_state { INA_JOB_FREE = 0, INA_JOB_JOINING, INA_JOB_WAITING, INA_JOB_ACTIVE };

struct ina_member {
    struct sockaddr_in addr;
    uint64_t nonce; /* incarnation: random per ina_init() */
    uint16_t elems; /* proposed */
    uint32_t window; /* proposed */
    uint16_t fallback_port; /* rank 0's offer of a host aggregator (JOIN), 0 = none */
    uint16_t wait_100ms;    /* how long it may wait for slots */
    uint8_t joined, left;
    uint8_t nlanes;     /* its JOIN's nlanes: fixed, or (lanes_auto) a proposal */
    uint8_t lanes_auto; /* its JOIN had INA_FLAG_LANES_AUTO (lane 0): it takes the job's count */
    /* While the job is JOINING or WAITING, a registration lives only as long
     * as its rank is waiting: its last JOIN (re-sent at least every second)
     * and the deadline the rank gave (JOIN header seq, 0 = none) bound it. */
    uint64_t join_seen_ns, join_deadline_ns;
    /* Ranks this member's DATA stands for (PROTOCOL.md §12): 1 for a worker, the
     * size of its set for a child switch (TREE_JOIN), 0 for a rank that a child
     * stands for (its `rep`, the set's lowest rank, is the member that sends). */
    uint16_t weight, rep;
    struct ina_shm *shm; /* rings the rank attached (PROTOCOL.md §5.9), NULL = UDP only */
    uint8_t shm_live;    /* its up ring has delivered a datagram: RESULTs go down the ring */
    /* Operator counters (ina-switch --metrics), written only by the owning
     * dataplane thread: DATA datagrams from this rank's registered address. */
    uint64_t rx_packets, rx_bytes;
    /* Liveness (control.c: check_liveness): rx_packets when the job last
     * completed a round, the last probe, the last ICMP port unreachable. */
    uint64_t live_rx, probe_ns, unreach_ns;
};

/* Per-job counters, like struct ina_sw_counters but for one job's session;
 * plain increments by the owning dataplane thread (no lock, no atomics). */
struct ina_job_counters {
    uint64_t rx_packets, rx_bytes; /* DATA datagrams with the job's id */
    uint64_t contributions, completions;
    uint64_t retransmits; /* retransmitted duplicates: answered (results_resent) or DUP_PENDING */
    uint64_t drops[INA_DROP__COUNT]; /* drops of datagrams carrying this job's id */
};

/*
 * A child's membership in the parent's job (ina-switch --parent, tree.c): the
 * child registers the set of ranks that joined it with TREE_JOIN and stands
 * for them as member `rep` of the parent's job.
 */
struct ina_uplink {
    struct sockaddr_in addr; /* the parent that serves this (name, lane); REDIRECTs move its port */
    uint64_t nonce;          /* this registration's, random; 0 = not registered */
    uint8_t set[INA_TREE_SET_LEN]; /* the ranks registered last (bit r of byte r >> 3) */
    uint16_t rep;            /* the set's lowest rank: our rank in the parent's job */
    uint16_t elems;          /* what we proposed */
    uint32_t window;         /* (0: we have no room, so the parent refuses the job) */
    uint32_t reserved;       /* slots held from our pool for the job (at slot_base), 0 = none */
    uint64_t next_send_ns;   /* TREE_JOIN retransmission, 100 ms doubling to 1 s */
    uint32_t interval_ms;
    int redirects;
    /* With a secret: the parent's last cookie (JOIN_COOKIE), echoed in every
     * TREE_JOIN, and whether the one answer to it that may go at once (not
     * waiting for the schedule) went since the last scheduled send. */
    uint8_t cookie[INA_COOKIE_LEN];
    int cookie_answered;
    /* From the parent's JOIN_ACK: its job, session, token and capabilities. */
    int active;              /* 1 once the parent started the job */
    uint16_t job;
    uint32_t session, token;
    uint16_t flags;
    int gone;                /* the parent ended the job: send it nothing more */
};

struct ina_job {
    enum ina_job_state state;
    uint16_t id; /* shard * INA_SW_MAX_JOBS + index + 1: unique across shards */
    char name[32];
    uint8_t lane, nlanes; /* a job is one lane of a (name, nlanes) group; see wire.h. Lane 0
                             of ranks that propose their lanes: the count it would run now
                             (control.c: job_lanes), final once ACTIVE */
    uint32_t session, token;
    int world;
    int njoined, nleft;
    uint16_t elems;
    uint32_t window, slot_base;
    int need;  /* ranks whose contributions complete a round: world, or a child's set */
    int tree;  /* a member is a child switch (weight > 1): no op 3, no fallback, no eviction */
    int child; /* this switch is a child for the job: rounds complete at the parent */
    struct ina_uplink up; /* child only */
    uint64_t created_ns, last_rx_ns;
    uint64_t wait_until_ns; /* WAITING: give up (NOSPACE) after this */
    int evicted;            /* the operator moved it away (control.c: ina__switch_evict_job) */
    uint64_t evict_bound;   /* then: first stream position (round * W + slot) not served */
    struct sockaddr_in mcast; /* group finished sums go to; sin_family 0 = unicast to each rank */
    /* Tags (PROTOCOL.md §4.6): with a secret, a session that multicasts its
     * results or runs with integrity is tagged: the switch tags its RESULTs,
     * ABORTs and MIGRATEs with the session key, derived at job start (a
     * secret reloaded later does not change it), and with integrity its DATA
     * must carry the key's tag too. */
    uint8_t tagged;
    struct ina_mac_key mac;
    struct ina_job_counters c;
    struct ina_hot *hot; /* the job's hot table (hot.c), NULL until rank 0 installs one */
    int version_warned;  /* a member joined with another version: logged once (version_skew) */
    uint64_t live_completions, stuck_since_ns; /* liveness: c.completions, and since when */
    struct ina_member members[INA_MAX_WORKERS];
};

struct ina_switch_params {
    uint32_t nslots;    /* pool size */
    uint32_t max_elems; /* int32 values per slot set */
    uint64_t join_timeout_ns; /* a JOINING job missing ranks this long is dropped */
    uint64_t idle_timeout_ns; /* an ACTIVE job silent this long is reclaimed */
    /* Admission (control.c: job_start): a job gets min(its proposal,
     * max_job_slots) slots, halved while no contiguous run that long is free,
     * down to min_job_slots (0 = no shrinking). 0 max = the whole pool. */
    uint32_t max_job_slots, min_job_slots;
    /* If set, the only job name this instance serves (a worker's embedded
     * host aggregator, libina fallback.c); other JOINs are REJECTED. */
    char only_job[32];
    uint32_t mcast_base;      /* host order, e.g. 239.255.73.0: job j's group is base + j; 0 = off */
    uint16_t mcast_port;      /* UDP port of the groups */
    /* Sharding (main.c runs one instance per dataplane thread, each with its
     * own socket and slots): this instance's index, how many there are, and
     * each one's UDP port, for REDIRECTs. nshards 0 reads as 1. */
    unsigned shard, nshards;
    uint16_t shard_ports[INA_SW_MAX_SHARDS];
    /* Shared secret (--secret-file): a JOIN must carry its HMAC, and the
     * JOIN_ACK carries one too (docs/PROTOCOL.md 4.4). has_secret 0 = off. */
    int has_secret;
    struct ina_hmac_key secret;
    /* The key of this switch's JOIN cookies (with a secret): random at
     * ina__switch_init unless set here, as main.c does so that every
     * dataplane thread takes the cookies of the others (a REDIRECT moves a
     * worker between them, its cookie still good). */
    int cookie_key_set;
    struct ina_hmac_key cookie_key;
    /* --integrity (needs the secret): every DATA and RESULT carries the tag
     * of its session key (PROTOCOL.md §4.6); a JOIN must ask for it, and a
     * JOIN that asks is refused without it. With a secret and --multicast,
     * RESULTs, ABORTs and MIGRATEs are tagged even without it. */
    int integrity;
    /* --int-ops-only: offer and accept only the integer ops (wire ops 0..2),
     * as a switch without shifters or floating point would (a hardware
     * pipeline, an eBPF dataplane): workers then send floats quantized, in
     * two rounds. */
    int int_ops_only;
    /* Offer only ops 0..3, those the eBPF program implements (--dataplane
     * ebpf): no float adds (op 4: no floating point in BPF), no fixed point
     * (op 5) and no block-sparse ops (7, 8); op 3's shifts it can do. */
    int bpf_ops_only;
    /* --shm: offer shared-memory rings to workers on this host (§5.9). */
    int shm;
    /* --shm-unsealed: also map POSIX shm objects (§5.9's first version), whose
     * size a worker can change under the mapping: only under the fault guard. */
    int shm_unsealed;
    /* Nonzero: session ids and tokens come from a generator seeded with this
     * (--record, and tests that replay a recorded trace: the same joins then
     * get the same sessions and tokens). 0: getrandom, unpredictable. */
    uint64_t seed;
    /* --hot-keys: most keys of one job's hot table (PROTOCOL.md §14.3); 0 = no hot table. */
    uint32_t hot_max;
    /* --hot-memory: the budget of all hot tables, shared by several instances (main.c's
     * threads); NULL: this instance's own (sw->hot_own), of hot_memory bytes (0: the
     * default, INA_SW_DEFAULT_HOT_MEMORY). */
    struct ina_hot_budget *hot_budget;
    size_t hot_memory;
    /* --parent: this switch is a child (PROTOCOL.md §12, tree.c): each job's
     * partial sums go to parents[shard(name, lane) mod nparents]. 0 = a root. */
    unsigned nparents;
    struct sockaddr_in parents[INA_SW_MAX_PARENTS];
};

struct ina_switch {
    struct ina_switch_params p;
    struct ina_slot *slots;  /* nslots */
    int32_t *values;         /* nslots * 2 * set_words, host byte order */
    uint32_t set_words;      /* values per slot set (ina__switch_set_words) */
    uint16_t *slot_owner;    /* nslots: job id owning the slot, 0 = free */
    struct ina_job jobs[INA_SW_MAX_JOBS];
    uint32_t session_counter;
    int slots_freed; /* an ACTIVE job ended since WAITING jobs were last retried */
    /* Jobs refused with NOSPACE lately (control.c: job_refuse): a rank whose
     * NAK was lost retries its JOIN with the same nonce and gets the NAK again
     * (and its fallback) rather than a new job that can never fill. */
    struct ina_job refused[INA_SW_REFUSED_KEEP];
    uint64_t refused_at[INA_SW_REFUSED_KEEP];
    unsigned nrefused;
    /* Names whose ranks disagreed lately (control.c: job_mismatch). */
    struct {
        char name[32];
        uint8_t lane, nlanes;
        uint16_t world;
        uint64_t at_ns;
    } mismatched[INA_SW_MISMATCH_KEEP];
    unsigned nmismatched;
    /* Registrations of the last INA_SW_ENDED_KEEP sessions that ended or
     * were refused (control.c: ended_remember), the oldest overwritten: a
     * JOIN that names one again is a replay, refused (PROTOCOL.md §5.2 step
     * 3‴). The nonces apart, for a fast scan. */
    uint64_t *ended_nonce;
    struct ina_ended {
        char name[32];
        uint16_t rank;
        uint8_t lane;
    } *ended;
    unsigned nended;
    struct ina_hmac_key cookie_key; /* p.cookie_key, or a random one */
    struct ina_sw_counters c;
    struct ina_txq txq;
    uint64_t rng; /* p.seed's generator state */
    /* Who applies the slot rules to DATA: NULL = this process (dataplane.c);
     * otherwise that dataplane, told of jobs through these hooks (dp_ops.h). */
    const struct ina_dp_ops *dp;
    void *dp_ctx;
    /* Graceful drain (SIGTERM; PROTOCOL.md §5.10, drain.c): JOINs of new
     * jobs are refused; ACTIVE jobs end with ABORT SHUTDOWN between
     * operations, or at the deadline. */
    int draining;
    uint64_t drain_deadline_ns;
    struct ina_hot_budget hot_own; /* the hot tables' budget when p.hot_budget is NULL */
};

/* Worst case one input queues: an ABORT to every rank plus a JOIN_ACK per rank,
 * and a child's datagrams to its parent (a partial sum, a LEAVE twice, a TREE_JOIN). */
#define INA_SW_TX_RESERVE_BUFS (INA_MAX_WORKERS + 6)
#define INA_SW_TX_RESERVE_MSGS (2 * INA_MAX_WORKERS + 6)
#define INA_SW_TX_BATCH 64 /* finished sums queued (transmit buffers) before a flush is forced */

/* Whether this switch's sessions are tagged (PROTOCOL.md §4.6): then k is at
 * most INA_MAX_ELEMS_TAGGED. */
static inline int ina__switch_tags(const struct ina_switch_params *p)
{
    return p->has_secret && (p->mcast_base || p->integrity);
}

/* Whether this switch offers the 16-bit wire (ops 10..13, PROTOCOL.md §8.10):
 * it needs binary32 adds, which --int-ops-only and the eBPF dataplane lack. */
static inline int ina__switch_h16(const struct ina_switch_params *p)
{
    return !p->int_ops_only && !p->bpf_ops_only;
}

/* Values per slot set: 2 * max_elems binary32 lanes where the 16-bit wire is
 * offered (a set of a 16-bit round holds two lanes per word), else max_elems. */
static inline uint32_t ina__switch_set_words(const struct ina_switch_params *p)
{
    return ina__switch_h16(p) ? 2 * p->max_elems : p->max_elems;
}

/* True when the caller must flush sw->txq before the next ina__switch_input(). */
static inline int ina__switch_tx_full(const struct ina_switch *sw)
{
    return sw->txq.nbuf + INA_SW_TX_RESERVE_BUFS > sw->txq.maxbuf ||
           sw->txq.nmsg + INA_SW_TX_RESERVE_MSGS > sw->txq.maxmsg;
}

/* Count what the transmit queue lost to a missing flush (drop TXQ; never
 * expected, see txq.h). Called on every flush attempt, whether or not it
 * empties the queue, so that a queue stuck full still shows. */
static inline void ina__switch_tx_account(struct ina_switch *sw)
{
    sw->c.drops[INA_DROP_TXQ] += sw->txq.overflows;
    sw->txq.overflows = 0;
}

/* After a flush: count, then empty the queue. */
static inline void ina__switch_tx_reset(struct ina_switch *sw)
{
    ina__switch_tx_account(sw);
    ina__txq_reset(&sw->txq);
}

/* @return 0, or -ENOMEM / -EINVAL. */
int ina__switch_init(struct ina_switch *sw, const struct ina_switch_params *p);
void ina__switch_free(struct ina_switch *sw);

/*
 * Process one datagram from src. Queues replies into sw->txq; the caller
 * must flush the queue first whenever ina__switch_tx_full() says so.
 */
void ina__switch_input(struct ina_switch *sw, const uint8_t *buf, size_t len,
                      const struct sockaddr_in *src, uint64_t now_ns);

/*
 * Process one datagram taken from rank r's up ring of job (PROTOCOL.md §5.9)
 * as if it came from the rank's registered address. The first one proves the
 * rank uses its rings: from then on its RESULTs go down its ring, not by UDP.
 */
void ina__switch_input_ring(struct ina_switch *sw, struct ina_job *job, int r,
                           const uint8_t *buf, size_t len, uint64_t now_ns);

/* An ICMP port unreachable came back for a datagram to dst (the daemon's
 * socket, IP_RECVERR): every member of an ACTIVE job at dst is noted so;
 * the tick then ends a job that waits on it (PROTOCOL.md §5.4, dead rank). */
void ina__switch_unreachable(struct ina_switch *sw, const struct sockaddr_in *dst,
                             uint64_t now_ns);

/* Periodic housekeeping: expire joins and idle jobs, probe silent ranks. */
void ina__switch_tick(struct ina_switch *sw, uint64_t now_ns);

/* drain.c: start draining (refuse new jobs; JOINING and WAITING jobs get
 * JOIN_NAK SHUTDOWN now); running jobs may finish their operations until
 * now_ns + timeout_ns. Idempotent. */
void ina__switch_drain_start(struct ina_switch *sw, uint64_t now_ns, uint64_t timeout_ns);
/* drain.c: end (ABORT SHUTDOWN) every job between operations, and every job
 * once the deadline passed. @return the jobs still held (0: drained). */
int ina__switch_drain_step(struct ina_switch *sw, uint64_t now_ns);

/* Operator request (ina-ctl abort): end job `id` of this shard for every
 * rank (ABORT, or JOIN_NAK while it is still joining), as the dataplane
 * thread itself; the caller must flush first if ina__switch_tx_full().
 * @return 0, or -ENOENT if the id is not a job of this shard. */
int ina__switch_abort_job(struct ina_switch *sw, uint16_t id);
/* Operator eviction: the job keeps its slots only for what its ranks have
 * already sent, and moves to rank 0's host aggregator (PROTOCOL.md §5.8).
 * @return 0, -ENOENT (no such active job) or -EALREADY. */
int ina__switch_evict_job(struct ina_switch *sw, uint16_t id);
/* End an active job for every rank (ABORT with reason), as a MISMATCH or an
 * idle timeout does; why is what the log says (operator_abort, ring_corrupt,
 * ...; ina__job_abort: the reason's name). The caller must flush first if
 * ina__switch_tx_full(). For the dataplanes (src/switch/ebpf) and the daemon. */
void ina__job_abort(struct ina_switch *sw, struct ina_job *job, int reason);
void ina__job_abort_why(struct ina_switch *sw, struct ina_job *job, int reason, const char *why);

/* The job with wire id `id` in this shard's table, or NULL if the id is not this shard's. */
static inline struct ina_job *ina__job_by_id(struct ina_switch *sw, uint16_t id)
{
    unsigned i = (unsigned)id - 1u - sw->p.shard * INA_SW_MAX_JOBS;
    return id != 0 && i < INA_SW_MAX_JOBS ? &sw->jobs[i] : NULL;
}

#endif
