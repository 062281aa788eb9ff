/* chain.h: chain replication between two ina-ps (PROTOCOL.md §15.8): the primary forwards every
 * stamped UPDATE it takes to the replica, and answers the worker once the replica has it. */
#ifndef INA_PS_CHAIN_H
#define INA_PS_CHAIN_H

/*
 * A primary (--chain-to) forwards each stamped UPDATE it takes, applied or refused, in stamp
 * order, as a CHAIN_FWD (kind 55): the UPDATE's header and body with the job's name put
 * before the body. It keeps every forward until the replica's CHAIN_ACK (kind 56), which
 * acknowledges every stamp below the replica's next one, and sends the oldest again when
 * its timer expires (an RTO learned from the acks, doubled per try); until
 * then the worker's UPDATE_ACK is answered HELD, and the outcome goes out once the replica
 * has taken the stamp. A forward unacknowledged for --chain-timeout-ms breaks the job's
 * chain: the primary answers alone from then on (logged, counted).
 *
 * A replica (--chain-from) accepts CHAIN_FWD only from that address, for an active STALE
 * job of that name, and takes it through ps.c's own UPDATE handler (§15.2), so it applies
 * exactly what the primary applied; the UPDATE_ACK that handler queues to the primary's
 * address becomes a CHAIN_ACK.
 *
 * The state lives here; ps.c only calls the hooks of struct ina_ps_chain_ops (ps.h).
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

#include "ps/ps.h"

#define INA_PS_CHAIN_WINDOW 512 /* forwards awaiting their CHAIN_ACK, per job */
/* Resend timer: max(srtt + 4 rttvar, 2 srtt) within [MIN, MAX], doubled per try, at most MAX. */
#define INA_PS_CHAIN_RTO_MIN_NS 10000000ull     /* 10 ms */
#define INA_PS_CHAIN_RTO_INIT_NS 100000000ull   /* 100 ms, before the first sample */
#define INA_PS_CHAIN_RTO_MAX_NS 250000000ull    /* 250 ms */
#define INA_PS_CHAIN_DEFAULT_TIMEOUT_NS 1000000000ull

/* One forward awaiting its CHAIN_ACK. */
struct ina_ps_chain_fwd {
    uint32_t stamp, uid;
    uint16_t rank;
    int32_t status;    /* the primary's outcome, compared with the replica's */
    uint32_t version;
    uint8_t *buf;      /* the CHAIN_FWD datagram (malloc) */
    size_t len;
    uint64_t first_ns; /* first send (the deadline runs from here) */
    uint64_t sent_ns;  /* last send; 0 = not sent yet (the reply queue was full) */
    unsigned tries;
};

/* Per job slot (ps->jobs[i]). */
struct ina_ps_chain_job {
    /* primary: the forwards of the job's session `session` not yet acknowledged, in order */
    uint32_t session; /* 0: none */
    int broken;       /* the replica missed the deadline: no more forwards this session */
    struct ina_ps_chain_fwd *q; /* ring of INA_PS_CHAIN_WINDOW (malloc on first use) */
    size_t bytes;               /* the ring's and the forwards' bytes, charged to --max-memory */
    unsigned head, n;
    uint64_t head_ns; /* when the oldest became the oldest (its resend timer starts then) */
    /* replica: the primary's credentials, pinned by the first forward of replica session
     * `rsession` (the job's session here) */
    uint32_t rsession;
    uint16_t pjob;
    uint32_t psession, ptoken;
};

/* Is stamp s among the job's forwards awaiting their CHAIN_ACK? */
static inline int ina__ps_chain_pending(const struct ina_ps_chain_job *cj, uint32_t s)
{
    if (cj->n == 0)
        return 0;
    uint32_t first = cj->q[cj->head].stamp;
    uint32_t last = cj->q[(cj->head + cj->n - 1) % INA_PS_CHAIN_WINDOW].stamp;
    return (int32_t)(s - first) >= 0 && (int32_t)(s - last) <= 0;
}

struct ina_ps_chain {
    int to_set, from_set;
    struct sockaddr_in to, from; /* --chain-to (the replica), --chain-from (the primary) */
    uint64_t timeout_ns;         /* --chain-timeout-ms */
    uint64_t now_ns;             /* the latest time given to input or tick */
    uint64_t srtt_ns, rttvar_ns; /* smoothed CHAIN_ACK round trip (0: no sample yet) */
    struct ina_ps_chain_job jobs[INA_PS_MAX_JOBS];
};

/* Attach chain replication to ps (either address may be NULL, not both). @return 0, -EINVAL. */
int ina__ps_chain_init(struct ina_ps_chain *ch, struct ina_ps *ps, const struct sockaddr_in *to,
                      const struct sockaddr_in *from, uint64_t timeout_ns);
/* Retransmissions and deadlines; call often (each loop, before input). */
void ina__ps_chain_tick(struct ina_ps *ps, uint64_t now_ns);
/* Milliseconds until the next resend or deadline (at most 100): main.c's poll timeout. */
int ina__ps_chain_poll_ms(const struct ina_ps *ps, uint64_t now_ns);
/* Detach and free (before ina__ps_free). */
void ina__ps_chain_free(struct ina_ps *ps);

#endif
