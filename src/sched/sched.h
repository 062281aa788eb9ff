/* sched.h: ina-sched, MLfabric's transfer scheduler: grants, stamps, learned rates, stragglers. */
#ifndef INA_SCHED_H
#define INA_SCHED_H

/*
 * A pure state machine like ina-ps: ina__sched_input() takes one datagram,
 * ina__sched_tick() runs the clock, replies queue in s->tx (main.c sends
 * them). One scheduler serves one job (--job NAME, --world N, --max-delay D)
 * in front of its ina-ps server and replica (docs/MLFABRIC.md, PROTOCOL.md
 * §15.3).
 *
 * Workers ask before they send an update (REQ: id, base version, bytes).
 * A grant carries a stamp: the update's place in the one global order that
 * the primary and the replica both apply. With A = updates known applied and
 * O = grants outstanding, the model version the update meets is at most
 * A + O, so a request of base b is granted only when A + O - b <= D (never
 * refused by the server); it is refused at once (STALE) when A - b > D (it
 * can never fit again). A fetch request (base INA_SCHED_BASE_AT_GRANT) asks
 * before the worker pulls the model: its base will be at least A at the
 * grant, so it fits when O <= D and is never refused. Scheduling the fetch
 * as well as the update is what makes no transfer wasted (MLfabric manages
 * every transfer of the job, the model's too). Among the feasible requests the scheduler grants
 * first the one predicted to finish first: bytes / the rank's learned rate
 * (EWMA of bytes / duration from DONE, weighted by the time since the rank's last sample:
 * a rank heard from rarely, a straggler, adapts in one sample when its link
 * recovers). A rank whose rate is below
 * straggler_ratio x the median is a straggler: its requests wait while a
 * feasible request of another rank waits. Any request that has waited
 * max_wait_ns goes first: a straggler is slowed and a slow rank passed over
 * by shortest-first, but no rank is starved.
 *
 * Opportunistic aggregation (aggregate > 1): fetch requests of ranks that can
 * sum their updates in an ina-switch (REQ flag) and are granted together form
 * a group of up to `aggregate` members that shares one stamp; the members sum
 * their updates in the switch and the leader (member 0) sends the one update.
 * The group is one version, so it counts once in O and in the bound; the
 * other members' DONEs end their requests without touching O or A. A group
 * short of `aggregate` members is held for the next groupable request when
 * that is predicted to come soon enough that the slot makes more gradients per
 * second (agg_hold_ns at most).
 *
 * Membership and failures (servers configured, PROTOCOL.md §15.9): a grant is
 * a lease. One that expires (its worker died or left) stays in O while the
 * authority (the primary, or the replica once the primary is silent) voids
 * its stamp (PS_SYNC VOID); the void is then repeated at the other server
 * and the rank is marked departed there, and the world shrinks. The
 * scheduler probes both servers (PS_SYNC STATE): their versions, next stamps
 * and model digests (a replica at the same stamp must have the same digest),
 * and a replica that lags on a stamp is repaired: a voided stamp is voided
 * there too, a taken one whose worker died before the replica had it is
 * replayed from the primary. A scheduler that starts while the job runs
 * rebuilds A and the next stamp from the authority, waits until every live
 * rank asks again (or a lease), and voids the stamps the old one granted to
 * no live worker. Ranks join (their first REQ) and leave (REQ flag LEAVE).
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

#include "common/kv_wire.h"
#include "ina.h"

#define INA_SCHED_DEFAULT_PORT 48880
#define INA_SCHED_TX_MSGS 256
#define INA_SCHED_TX_MAX (INA_HDR_LEN + INA_PS_SYNC_LEN) /* the longest reply queued: PS_SYNC */
#define INA_SCHED_PROBE_NS 100000000ull  /* PS_SYNC STATE to each server this often */
#define INA_SCHED_RESEND_NS 20000000ull  /* an unanswered VOID, fate question or REPLAY again */
#define INA_SCHED_REPAIR_NS 300000000ull /* a replica stuck on a taken stamp this long: replay */
#define INA_SCHED_EAGER_NS 1000000000ull /* after the authority voided stamps, a lagging
                                            replica is asked about at once, this long */
#define INA_SCHED_RATE_WEIGHT 0.3        /* a rate sample's weight at least (EWMA) */
#define INA_SCHED_REASK_NS 2000000ull   /* a rank whose DONE came this recently is about to
                                           ask again (for a group being held, §15.7) */
#define INA_SCHED_VOIDS 64               /* stamps being voided at once (>= the largest window) */

#define INA_SCHED_DROP_MAP(X)                                                     \
    X(SHORT, "shorter than the 32-byte header")                                   \
    X(MAGIC, "wrong magic")                                                       \
    X(VERSION, "unsupported protocol version")                                    \
    X(LENGTH, "body length is not the kind's")                                    \
    X(KIND, "not a kind ina-sched serves")                                        \
    X(NAME, "job name is not this scheduler's")                                   \
    X(RANK, "rank outside the job")                                               \
    X(SOURCE, "source address is not the one that rank first used")              \
    X(ORDER, "request id older than the rank's current one, DONE for no grant, or a PS_REPLAY not asked for") \
    X(TXQ, "reply queue full (the reply is lost)")                                \
    X(SERVER, "PS_STATE or PS_REPLAY not from a server of --ps/--replica (PS_REPLAY: not the authority)")

enum ina_sched_drop {
#define INA__SCHED_DROP_ENUM(name, text) INA_SCHED_DROP_##name,
    INA_SCHED_DROP_MAP(INA__SCHED_DROP_ENUM)
#undef INA__SCHED_DROP_ENUM
    INA_SCHED_DROP__COUNT
};

struct ina_sched_counters {
    uint64_t rx_packets, tx_packets, tx_errors;
    uint64_t requests;       /* REQs taken (new update ids) */
    uint64_t request_dups;   /* REQ copies (answered again, or ignored while pending) */
    uint64_t grants;         /* updates granted a stamp */
    uint64_t refused_stale;  /* REQs refused: A - base > D, the server would refuse them */
    uint64_t dones;          /* DONE reports taken */
    uint64_t done_applied, done_stale; /* their outcome at the server */
    uint64_t implicit_dones; /* grants ended by the rank's next REQ (its DONE was lost) */
    uint64_t grants_expired; /* grants with neither DONE nor next REQ within the timeout */
    uint64_t bound_violations; /* grants made with A + O - base > D: a bug, must stay 0 */
    uint64_t straggler_waits;  /* times a straggler's feasible request yielded */
    uint64_t fetch_requests;   /* REQs asked before the pull (base at grant) */
    uint64_t aged_grants;      /* requests granted first after waiting max_wait_ns */
    uint64_t groups;           /* grants of two members or more (one stamp each) */
    uint64_t group_members;    /* members granted in those groups */
    uint64_t member_dones;     /* DONEs of members other than a group's leader */
    uint64_t member_failed;    /* of those: the member's part did not reach the switch's sum */
    uint64_t holds;            /* groups held for one more member (--agg-hold-ms) */
    uint64_t holds_joined;     /* of those: granted with more members than when first held */
    uint64_t hold_us;          /* the time they were held, measured (microseconds, summed) */
    uint64_t hold_predicted_us; /* the wait predicted when each hold began (summed) */
    /* Membership and failures (§15.9). */
    uint64_t leaves;           /* REQs with flag LEAVE: the rank left */
    uint64_t ranks_departed;   /* ranks whose grant expired (the world shrank) */
    uint64_t ranks_returned;   /* departed ranks heard from again */
    uint64_t syncs_sent;       /* PS_SYNCs sent to the servers */
    uint64_t states;           /* PS_STATEs taken */
    uint64_t stamps_voided;    /* expired grants' stamps the authority voided */
    uint64_t voids_late;       /* expired grants whose update had come after all (taken) */
    uint64_t void_relays;      /* voids repeated at the other server (answered voided) */
    uint64_t replays_relayed;  /* PS_REPLAYs passed from the authority to the other server */
    uint64_t replica_checks;   /* both servers seen at the same stamp and version */
    uint64_t replica_mismatch; /* ... with different model digests: never */
    uint64_t replica_diverged; /* the other server took a stamp the authority voided: never */
    uint64_t server_failovers; /* the authority went silent: the other became it */
    uint64_t recoveries;       /* started on a running job: state rebuilt from a server */
    uint64_t stamps_resynced;  /* the authority's next stamp was ahead of ours: ours moved */
    uint64_t drops[INA_SCHED_DROP__COUNT];
};

struct ina_sched_params {
    char job[32];
    unsigned world;
    uint32_t max_delay;       /* D */
    unsigned window;          /* grants outstanding at most (the server link's share) */
    uint64_t grant_timeout_ns;
    double straggler_ratio;   /* rate below ratio x median: a straggler (0: never) */
    uint64_t max_wait_ns;     /* a request waiting this long goes first (0: no limit) */
    double initial_rate;      /* bytes/s assumed before a rank's first DONE */
    uint64_t rate_halflife_ns; /* a rate sample dt after the rank's last weighs at least
                                  1 - 2^(-dt / halflife) (0: every sample INA_SCHED_RATE_WEIGHT) */
    unsigned aggregate;       /* members of a group at most (1: no aggregation) */
    uint64_t agg_hold_ns;     /* a group short of `aggregate` may be held this long at most for
                                 the next groupable request, when that pays (0: never) */
    /* The job's servers (§15.9): the primary, then the replica. 0 servers: leases expire as
     * before (counted as applied), nothing is asked of a server. */
    unsigned nservers;
    struct sockaddr_in server[2];
    uint64_t failover_ns;     /* a server silent this long is dead */
};

enum ina_sched_req_state { INA_SCHED_NONE = 0, INA_SCHED_PENDING, INA_SCHED_GRANTED, INA_SCHED_ANSWERED };

struct ina_sched_rank {
    struct sockaddr_in addr;
    uint8_t bound;            /* addr fixed by the first REQ */
    uint8_t straggler;
    enum ina_sched_req_state state;
    uint32_t uid, base, bytes; /* the current request (a fetch request: base = A at its grant) */
    uint8_t fetch;            /* the current request is a fetch request */
    uint8_t can_aggregate;    /* its REQ set INA_SCHED_REQ_AGGREGATE */
    uint8_t member;           /* granted as a group member other than the leader: its grant
                                 is not counted in O */
    uint16_t group_size, group_index; /* of its grant: 1, 0 when alone */
    uint32_t stamp;           /* its stamp when granted */
    int32_t status;           /* its answer: 0 granted, INA_ERR_STALE */
    uint32_t bound_at_grant;  /* A + O at the grant */
    uint64_t since_ns;        /* request arrival, or grant time */
    double rate;              /* learned bytes/s (0: none yet) */
    uint64_t samples;
    uint64_t sample_ns;       /* when the last one came */
    uint64_t done_ns;         /* when its last DONE came (it asks again right after) */
    uint8_t departed;         /* its grant expired, or it left: out of the world until heard */
    uint8_t depart_voided;    /* its stamp was voided: the servers are told it has gone */
};

/* One of the job's servers, as its PS_STATEs describe it (§15.9). */
struct ina_sched_server {
    uint8_t have_state;       /* a PS_STATE of the job came (no_job: one saying there is none) */
    uint8_t no_job;
    uint64_t last_rx_ns, last_probe_ns;
    uint32_t q;               /* PS_SYNC request ids */
    uint32_t version, next_stamp, held, flags, session;
    uint16_t world, start;
    uint64_t digest;
    uint8_t joined[32], left[32];
    uint32_t lag_stamp;       /* the other server's next stamp while it lags the authority */
    uint64_t lag_since_ns;
};

enum ina_sched_void_state { INA_SCHED_VOID_FREE = 0, INA_SCHED_VOID_ASK, INA_SCHED_VOID_RELAY };

/* Stamps being voided: at the authority (ASK), then at the other server (RELAY). */
struct ina_sched_void {
    uint8_t state;
    uint8_t in_o;             /* an expired grant's stamp: in O until the authority resolves it */
    uint16_t rank;            /* whose grant it was; 0xFFFF: a restart's orphans */
    uint32_t stamp, n;
    uint64_t sent_ns;
};

enum ina_sched_recovery {
    INA_SCHED_RUNNING = 0,
    INA_SCHED_RECOVER_STATE, /* waiting for the authority's first PS_STATE */
    INA_SCHED_RECOVER_RANKS, /* a running job: waiting for its live ranks to ask again */
    INA_SCHED_RECOVER_VOID,  /* voiding the stamps the old scheduler may have granted */
};

struct ina_sched_tx {
    unsigned n;
    uint64_t overflows;
    uint8_t buf[INA_SCHED_TX_MSGS][INA_SCHED_TX_MAX];
    size_t len[INA_SCHED_TX_MSGS];
    struct sockaddr_in dst[INA_SCHED_TX_MSGS];
    /* A PS_REPLAY to pass on, as received (it points into the datagram given to input):
     * send it before the next input. */
    const uint8_t *relay;
    size_t relay_len;
    struct sockaddr_in relay_dst;
};

struct ina_sched {
    struct ina_sched_params p;
    uint32_t next_stamp;
    uint32_t applied;     /* A: updates known applied (DONE), expired grants counted as applied */
    uint32_t floor;       /* the largest server version reported (REQ base, DONE version) */
    uint32_t outstanding; /* O */
    struct ina_sched_rank ranks[INA_MAX_WORKERS];
    /* §15.9 */
    struct ina_sched_server srv[2];
    unsigned auth;          /* the server whose word is final (0 the primary; 1 after failover) */
    enum ina_sched_recovery recovering;
    uint64_t start_ns;      /* the first input or tick */
    struct ina_sched_void voids[INA_SCHED_VOIDS];
    uint32_t checked_stamp; /* the stamp of the last replica check (one per stamp) */
    uint8_t checked;
    /* repairing the other server, stuck at stamp repair_stamp: 1 its fate asked of the
     * authority, 2 a replay asked; repair_ns the last ask */
    uint8_t repair;
    uint32_t repair_stamp;
    uint64_t repair_ns;
    uint64_t repair_eager_ns; /* until then, no probe's wait before asking (voids just made) */
    /* The group being held for one more member (§15.7): since when (0: none), the predicted
     * wait and its members when the hold began. */
    uint64_t hold_since_ns, hold_predicted_ns;
    unsigned hold_members;
    struct ina_sched_counters c;
    struct ina_sched_tx tx;
};

/* @return 0 or -EINVAL (world 0 or above INA_MAX_WORKERS, window 0 or above INA_SCHED_VOIDS,
 * empty job name, aggregate 0 or above world, more than 2 servers or one without a port, no
 * failover_ns with servers). */
int ina__sched_init(struct ina_sched *s, const struct ina_sched_params *p);
void ina__sched_input(struct ina_sched *s, const uint8_t *buf, size_t len,
                     const struct sockaddr_in *src, uint64_t now_ns);
/* Expire grants past the timeout, then grant what fits. */
void ina__sched_tick(struct ina_sched *s, uint64_t now_ns);
/* A: the versions known applied (our count of applied grants, caught up by what workers
 * and DONEs reported). */
uint32_t ina__sched_known_applied(const struct ina_sched *s);
/* Ranks bound and not departed: the world the scheduler schedules now (§15.9). */
unsigned ina__sched_live_ranks(const struct ina_sched *s);
/* After main.c sent the queue: count what did not fit (drop TXQ), empty it. */
void ina__sched_tx_reset(struct ina_sched *s);
const char *ina__sched_drop_name(enum ina_sched_drop d);
void ina__sched_counters_print(const struct ina_sched *s, FILE *f);

#endif
