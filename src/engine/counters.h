/* counters.h: the switch's counters, drops by cause, as one X-macro table. */
#ifndef INA_SW_COUNTERS_H
#define INA_SW_COUNTERS_H

#include <stdint.h>
#include <stdio.h>

#include "engine/drop_causes.h"

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
    uint64_t jobs_drained;    /* ended by a drain (SIGTERM): ABORT or JOIN_NAK SHUTDOWN */
    uint64_t joins_refused_draining; /* JOINs of new jobs refused while draining */
    uint64_t secret_reloads;  /* --secret-file read again on SIGHUP (thread 0 counts) */
    uint64_t shm_attached;    /* ranks that attached shared-memory rings (--shm) */
    uint64_t shm_rx_packets;  /* datagrams taken from rings (also in rx_packets) */
    uint64_t shm_tx_packets;  /* results put into rings (not in tx_packets) */
    uint64_t doorbells;       /* DOORBELLs sent to sleeping workers, and liveness probes */
    uint64_t shm_faults;      /* rings whose object shrank under the switch (SIGBUS absorbed) */
    uint64_t joins_withdrawn; /* registrations withdrawn by their rank (WITHDRAW) */
    uint64_t joins_expired;   /* registrations forgotten: the rank's deadline passed or it fell silent */
    uint64_t join_challenges; /* JOINs answered with a fresh cookie (secret: none, or a stale one) */
    uint64_t joins_replayed;  /* JOINs refused: their registration's session had ended (a replay) */
    uint64_t joins_refused_taken; /* JOINs refused: a rank of theirs is registered, alive, elsewhere */
    uint64_t hot_installs;    /* hot tables (epochs) activated (PROTOCOL.md §14.3) */
    uint64_t hot_keyed;       /* keyed hot entries added into slots */
    uint64_t hot_bitmap;      /* values of bitmap HOT_DATA added into slots */
    uint64_t hot_refusals;    /* HOT_INSTALLs refused NOSPACE, samples refused: --hot-memory is full */
    uint64_t hot_samples;     /* (key, count) pairs of HOT_SAMPLEs counted */
    uint64_t hot_sample_drops; /* ... not counted: --hot-memory had no room for them */
    /* A tree of switches (PROTOCOL.md §12). As a parent: */
    uint64_t tree_joins;      /* TREE_JOINs of child switches registered */
    /* As a child (--parent): */
    uint64_t up_packets;      /* partial sums sent to the parent */
    uint64_t up_resent;       /* ... sent again: a worker retransmitted into a round awaiting it */
    uint64_t up_results;      /* the parent's RESULTs taken and passed down */
    /* Block-sparse rounds (wire ops 7, 8; PROTOCOL.md §17): datagrams and
     * their UDP payload bytes in (DATA from a job's ranks, duplicates
     * included) and out (RESULTs queued, one per copy), and the blocks they
     * carried: bytes on the wire against a dense run, from here. */
    uint64_t sparse_rx_packets, sparse_rx_bytes, sparse_rx_blocks;
    uint64_t sparse_tx_packets, sparse_tx_bytes, sparse_tx_blocks;
    uint64_t drops[INA_DROP__COUNT];
};

const char *ina__drop_name(enum ina_drop d);
const char *ina__drop_text(enum ina_drop d);
/* sum += c, field by field (the totals of several dataplane threads). */
void ina__sw_counters_add(struct ina_sw_counters *sum, const struct ina_sw_counters *c);
void ina__sw_counters_print(const struct ina_sw_counters *c, FILE *f);

#endif
