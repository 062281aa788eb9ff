/* switch.h: ina-switch state: the slot pool, the job table, and the per-datagram entry point. */
#ifndef INA_SWITCH_H
#define INA_SWITCH_H

/*
 * The switch is a pure state machine fed one datagram at a time by
 * ina_switch_input(); it queues what it must send into sw->txq. Sockets live
 * in main.c, so tests and fuzzers drive this API directly, without a network.
 *
 * Memory is fixed at creation: nslots slots, each two sets (the shadow copy)
 * of max_elems int32 values. A job holds a contiguous range of `window` slots.
 */

#include <netinet/in.h>
#include <stdint.h>

#include "common/wire.h"
#include "ina.h"
#include "switch/counters.h"
#include "switch/txq.h"

#define INA_BITMAP_WORDS ((INA_MAX_WORKERS + 63) / 64)
#define INA_SW_MAX_JOBS 64

/* One set (copy) of one slot. Invariant: complete <=> nrecv == job world size
 * for the round `seq`; bitmap has exactly nrecv bits set. */
struct ina_slot_set {
    uint32_t seq;     /* round held by this set; set index == seq & 1 */
    uint16_t count;   /* elements in this round (all ranks must agree) */
    uint16_t nrecv;   /* contributions so far */
    int16_t exp;      /* max exponent over contributions */
    uint8_t complete; /* all contributions in: values hold the sum */
    uint8_t tag;      /* operation tag of this round (all ranks must agree) */
    uint8_t op;       /* wire op (INA_OP_*) of this round (all ranks must agree) */
    uint64_t bitmap[INA_BITMAP_WORDS]; /* ranks that contributed to `seq` */
};

struct ina_slot {
    struct ina_slot_set set[2];
};

enum ina_job_state { INA_JOB_FREE = 0, INA_JOB_JOINING, INA_JOB_ACTIVE };

struct ina_member {
    struct sockaddr_in addr;
    uint64_t nonce; /* incarnation: random per ina_init() */
    uint16_t elems; /* proposed */
    uint32_t window; /* proposed */
    uint8_t joined, left;
};

struct ina_job {
    enum ina_job_state state;
    uint16_t id; /* index + 1 in the job table */
    char name[32];
    uint32_t session, token;
    int world;
    int njoined, nleft;
    uint16_t elems;
    uint32_t window, slot_base;
    uint64_t created_ns, last_rx_ns;
    struct sockaddr_in mcast; /* group finished sums go to; sin_family 0 = unicast to each rank */
    struct ina_member members[INA_MAX_WORKERS];
};

struct ina_switch_params {
    uint32_t nslots;    /* pool size */
    uint32_t max_elems; /* int32 values per slot set */
    int verbose;
    uint64_t join_timeout_ns; /* a JOINING job missing ranks this long is dropped */
    uint64_t idle_timeout_ns; /* an ACTIVE job silent this long is reclaimed */
    uint32_t mcast_base;      /* host order, e.g. 239.255.73.0: job j's group is base + j; 0 = off */
    uint16_t mcast_port;      /* UDP port of the groups */
};

struct ina_switch {
    struct ina_switch_params p;
    struct ina_slot *slots;  /* nslots */
    int32_t *values;         /* nslots * 2 * max_elems, host byte order */
    uint8_t *slot_owner;     /* nslots: job id owning the slot, 0 = free */
    struct ina_job jobs[INA_SW_MAX_JOBS];
    uint32_t session_counter;
    struct ina_sw_counters c;
    struct ina_txq txq;
};

/* Worst case one input queues: an ABORT to every rank plus a JOIN_ACK per rank. */
#define INA_SW_TX_RESERVE_BUFS (INA_MAX_WORKERS + 2)
#define INA_SW_TX_RESERVE_MSGS (2 * INA_MAX_WORKERS + 2)
#define INA_SW_TX_BATCH 64 /* finished sums queued (transmit buffers) before a flush is forced */

/* True when the caller must flush sw->txq before the next ina_switch_input(). */
static inline int ina_switch_tx_full(const struct ina_switch *sw)
{
    return sw->txq.nbuf + INA_SW_TX_RESERVE_BUFS > sw->txq.maxbuf ||
           sw->txq.nmsg + INA_SW_TX_RESERVE_MSGS > sw->txq.maxmsg;
}

/* @return 0, or -ENOMEM / -EINVAL. */
int ina_switch_init(struct ina_switch *sw, const struct ina_switch_params *p);
void ina_switch_free(struct ina_switch *sw);

/*
 * Process one datagram from src. Queues replies into sw->txq; the caller
 * must flush the queue first whenever ina_switch_tx_full() says so.
 */
void ina_switch_input(struct ina_switch *sw, const uint8_t *buf, size_t len,
                      const struct sockaddr_in *src, uint64_t now_ns);

/* Periodic housekeeping: expire joins and idle jobs. */
void ina_switch_tick(struct ina_switch *sw, uint64_t now_ns);

/* Internal, shared between control.c and dataplane.c. */
void ina__dp_data(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                  const uint8_t *payload, const struct sockaddr_in *src);
void ina__ctl_input(struct ina_switch *sw, const struct ina_hdr *h, const uint8_t *body,
                    size_t bodylen, const struct sockaddr_in *src, uint64_t now_ns);
void ina__job_reset_slots(struct ina_switch *sw, const struct ina_job *job);
void ina__job_abort(struct ina_switch *sw, struct ina_job *job, int reason);

static inline int ina_addr_eq(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

#endif
