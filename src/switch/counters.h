/* counters.h: the switch's counters, drops by cause, as one X-macro table. */
#ifndef INA_SW_COUNTERS_H
#define INA_SW_COUNTERS_H

#include <stdint.h>
#include <stdio.h>

/* Why the switch dropped a datagram. Every drop increments exactly one. */
#define INA_DROP_MAP(X)                                                         \
    X(SHORT, "shorter than the 32-byte header")                                 \
    X(MAGIC, "wrong magic")                                                     \
    X(VERSION, "unsupported protocol version")                                  \
    X(LENGTH, "datagram length disagrees with count or body")                   \
    X(KIND, "unknown or misdirected packet kind")                               \
    X(NO_JOB, "job id unknown or not active")                                   \
    X(SESSION, "session id is not the job's current session (stale)")           \
    X(TOKEN, "wrong job token")                                                 \
    X(RANK, "rank outside the job")                                             \
    X(SOURCE, "source address is not the registered address of that rank")      \
    X(SLOT, "slot index outside the job's window")                              \
    X(COUNT, "element count larger than the job's packet size")                 \
    X(OP, "unsupported aggregation op")                                         \
    X(SET, "set bit disagrees with seq")                                        \
    X(STALE, "round older than the slot's current round")                       \
    X(FUTURE, "round too far ahead of the slot (protocol violation)")           \
    X(NOT_READY, "next round arrived before the previous one completed")        \
    X(MISMATCH, "ranks sent different counts or op tags for one round")        \
    X(DUP_PENDING, "duplicate of a contribution while its round is incomplete") \
    X(JOIN, "malformed or refused join/leave")                                  \
    X(EVICTED, "round at or past the bound of an evicted job (it moved away)")                                  \
    X(AUTH, "JOIN without a valid proof of the shared secret (--secret-file)")   \
    X(SHM, "shared-memory ring refused, full or corrupt (the datagram is lost)") \
    X(TXQ, "transmit queue full before a flush (a switch bug; the datagram is lost)") \
    X(UPSTREAM, "from the parent (--parent), fitting no job or round that awaits it")

enum ina_drop {
#define INA__DROP_ENUM(name, text) INA_DROP_##name,
    INA_DROP_MAP(INA__DROP_ENUM)
#undef INA__DROP_ENUM
    INA_DROP__COUNT
};

struct ina_sw_counters {
    uint64_t rx_packets, rx_bytes;
    uint64_t tx_packets, tx_bytes, tx_errors;
    uint64_t contributions;   /* DATA packets added into a slot */
    uint64_t completions;     /* rounds completed (results multicast) */
    uint64_t results_resent;  /* duplicates answered with a finished result */
    uint64_t jobs_started, jobs_ended, jobs_aborted;
    uint64_t jobs_refused;    /* no room: slot pool or job table full */
    uint64_t join_redirects;  /* JOINs sent to the dataplane thread that owns the lane */
    uint64_t jobs_shrunk;     /* admitted with fewer slots than proposed (pool busy) */
    uint64_t jobs_waited;     /* had to wait for free slots before starting */
    uint64_t jobs_evicted;    /* moved by the operator to their host fallback */
    uint64_t shm_attached;    /* ranks that attached shared-memory rings (--shm) */
    uint64_t shm_rx_packets;  /* datagrams taken from rings (also in rx_packets) */
    uint64_t shm_tx_packets;  /* results put into rings (not in tx_packets) */
    uint64_t doorbells;       /* DOORBELL datagrams sent to sleeping workers */
    uint64_t joins_withdrawn; /* registrations withdrawn by their rank (WITHDRAW) */
    uint64_t joins_expired;   /* registrations forgotten: the rank's deadline passed or it fell silent */
    /* A tree of switches (PROTOCOL.md §12). As a parent: */
    uint64_t tree_joins;      /* TREE_JOINs of child switches registered */
    /* As a child (--parent): */
    uint64_t up_packets;      /* partial sums sent to the parent */
    uint64_t up_resent;       /* ... sent again: a worker retransmitted into a round awaiting it */
    uint64_t up_results;      /* the parent's RESULTs taken and passed down */
    uint64_t drops[INA_DROP__COUNT];
};

const char *ina_drop_name(enum ina_drop d);
const char *ina_drop_text(enum ina_drop d);
/* sum += c, field by field (the totals of several dataplane threads). */
void ina_sw_counters_add(struct ina_sw_counters *sum, const struct ina_sw_counters *c);
void ina_sw_counters_print(const struct ina_sw_counters *c, FILE *f);

#endif
