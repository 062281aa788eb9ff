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
 * (EWMA of bytes / duration from DONE). A rank whose rate is below
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
 * other members' DONEs end their requests without touching O or A.
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

#include "common/kv_wire.h"
#include "ina.h"

#define INA_SCHED_DEFAULT_PORT 48880
#define INA_SCHED_TX_MSGS 256

#define INA_SCHED_DROP_MAP(X)                                                     \
    X(SHORT, "shorter than the 32-byte header")                                   \
    X(MAGIC, "wrong magic")                                                       \
    X(VERSION, "unsupported protocol version")                                    \
    X(LENGTH, "body length is not the kind's")                                    \
    X(KIND, "not a kind ina-sched serves")                                        \
    X(NAME, "job name is not this scheduler's")                                   \
    X(RANK, "rank outside the job")                                               \
    X(SOURCE, "source address is not the one that rank first used")              \
    X(ORDER, "request id older than the rank's current one, or DONE for no grant") \
    X(TXQ, "reply queue full (the reply is lost)")

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
    unsigned aggregate;       /* members of a group at most (1: no aggregation) */
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
};

struct ina_sched_tx {
    unsigned n;
    uint64_t overflows;
    uint8_t buf[INA_SCHED_TX_MSGS][INA_HDR_LEN + INA_SCHED_GRANT_LEN];
    struct sockaddr_in dst[INA_SCHED_TX_MSGS];
};

struct ina_sched {
    struct ina_sched_params p;
    uint32_t next_stamp;
    uint32_t applied;     /* A: updates known applied (DONE), expired grants counted as applied */
    uint32_t floor;       /* the largest server version reported (REQ base, DONE version) */
    uint32_t outstanding; /* O */
    struct ina_sched_rank ranks[INA_MAX_WORKERS];
    struct ina_sched_counters c;
    struct ina_sched_tx tx;
};

/* @return 0 or -EINVAL (world 0 or above INA_MAX_WORKERS, window 0, empty job name,
 * aggregate 0 or above world). */
int ina__sched_init(struct ina_sched *s, const struct ina_sched_params *p);
void ina__sched_input(struct ina_sched *s, const uint8_t *buf, size_t len,
                     const struct sockaddr_in *src, uint64_t now_ns);
/* Expire grants past the timeout, then grant what fits. */
void ina__sched_tick(struct ina_sched *s, uint64_t now_ns);
/* After main.c sent the queue: count what did not fit (drop TXQ), empty it. */
void ina__sched_tx_reset(struct ina_sched *s);
const char *ina__sched_drop_name(enum ina_sched_drop d);
void ina__sched_counters_print(const struct ina_sched *s, FILE *f);

#endif
