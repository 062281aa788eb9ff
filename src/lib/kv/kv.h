/* kv.h: libina's key-value client: shards, outstanding requests, operations, the hot replica. */
#ifndef INA_KV_H
#define INA_KV_H

/*
 * One ina_kv talks to S ina-ps shards (one connected UDP socket each) and,
 * with a hot set, to ina-switch through an ordinary context (hctx) whose
 * stream carries the hot vector (stream.c, codec_hot.c). Everything runs
 * in the caller's thread, inside ina_kv_* calls (kv.c: progress).
 *
 * Three files, each calling only the ones below it: kv.c (the API, the
 * operations) over kv_hot.c (the hot set) over kv_rpc.c (the connections:
 * shard sockets and requests, the switch context; progress, deadlines,
 * failure). Answers reach the file that sent the request through the
 * request's handler (kv_answered_fn).
 *
 * Requests to shards are datagrams kept until answered (struct kv_rpc),
 * resent on a doubling timer; every one is idempotent at the shard
 * (PROTOCOL.md §14.2), so a copy never changes a result. An operation
 * (struct ina_kv_req) owns some of them and completes when all are answered.
 */
#include <netinet/in.h>
#include <stdint.h>

#include "common/kmap.h"
#include "common/kv_wire.h"
#include "common/optim.h"
#include "lib/ctx.h"
#include "lib/req.h"
#include "lib/session.h"
#include "lib/stream.h"

#define INA_KV_MAX_SHARDS 64
/* Unanswered request bytes per shard (its congestion window): additive increase of a
 * datagram per window of answers, halved (once per loss event) when a request times
 * out, between 4 datagrams and INA_KV_WINDOW_MAX. N workers share a shard's link, and a
 * full switch queue in front of it drops the excess (incast): the window keeps the
 * queue short. */
#define INA_KV_WINDOW_MAX (512u * 1024)
#define INA_KV_WINDOW_INIT (64u * 1024)
#define INA_KV_MAX_REQS 1024
#define INA_KV_DEFAULT_DGRAM_LOOPBACK 65000
#define INA_KV_DEFAULT_DGRAM_NET 1472

struct kv_shard {
    int fd;
    struct sockaddr_in addr;
    uint16_t job;
    uint32_t session, token;
    size_t inflight_bytes;
    size_t cwnd;               /* window, bytes */
    uint64_t cut_ns;           /* last window cut: one per loss event */
    uint64_t last_reply_ns;    /* last answer from this shard (progress) */
    uint64_t refused_since_ns; /* ICMP port unreachable seen, 0 = none */
};

struct kv_rpc;
struct ina_kv;

/* What an answer (header h, body) to request r means, said by whoever sent r (kv.c's
 * operations, kv_hot.c's transition); the rpc layer calls it, then frees r. */
typedef void kv_answered_fn(struct ina_kv *kv, struct kv_rpc *r, const struct ina_hdr *h,
                            const uint8_t *body, size_t blen);

/* One request datagram awaiting its answer. */
struct kv_rpc {
    struct kv_rpc *next;   /* kv's list of outstanding requests */
    struct ina_kv_req *op; /* the operation it belongs to (NULL: the hot-set transition) */
    kv_answered_fn *answered; /* NULL: the answer only frees it (ASSIGN) */
    uint8_t shard, kind;
    uint16_t tries;
    uint32_t slot, seq;
    uint32_t off, n;       /* PULL: positions [off, off + n) of op->order's shard run */
    uint64_t first_ns, deadline_ns;
    uint32_t rto_ms;
    size_t len;
    uint8_t buf[];         /* the datagram, resent as is */
};

enum kv_op_kind { KV_PUSH, KV_PULL };

struct ina_kv_req {
    struct ina_kv *kv;
    enum kv_op_kind kind;
    int done, status;
    struct ina_kv_req *next;                 /* kv's FIFO of incomplete operations */
    struct ina_kv_req *live_prev, *live_next; /* every request not yet waited */
    const uint64_t *keys;
    const float *vals; /* PUSH */
    float *out;        /* PULL */
    size_t n;
    /* The cold entries by shard: order[sh_off[s] .. sh_off[s+1]) are indices into keys. */
    uint32_t *order, *sh_off;
    uint32_t *sent, *acked; /* per shard: packets (PUSH) or keys (PULL) sent / answered */
    uint8_t *commit;        /* PUSH, per shard: 0 not sent, 1 sent, 2 applied */
    int started;
    uint32_t step;          /* PUSH: its step */
    uint32_t nwait;         /* answers still missing */
    /* PUSH with a hot set: the hot vector and its sums (hctx's stream). */
    float *hot_grad, *hot_sum;
    struct ina_req *hot_req;
    uint32_t hot_epoch;
    int hot_applied;
};

struct ina_kv {
    uint32_t magic;
    ina_kv_config cfg;
    char job[32];
    unsigned nshards;
    struct kv_shard shard[INA_KV_MAX_SHARDS];
    /* ps_addrs with weights ("HOST:PORT@W"): shard s holds the key hashes
     * [split_first[s], split_first[s + 1]) (PROTOCOL.md §14.1); 0 = modulo split. */
    int split;
    uint64_t split_first[INA_KV_MAX_SHARDS + 1];
    size_t dgram;          /* largest datagram to a shard */
    uint32_t rto_ms;       /* first retransmission timeout of a request (INA_RTO_MS, 100) */
    struct ina_optim optim;
    int broken;            /* the error that broke the handle, 0 = none */
    char errmsg[INA_ERRMSG_LEN];

    struct kv_rpc *rpcs;   /* outstanding */
    unsigned nrpcs;
    uint32_t next_id;      /* request ids (PULL, ASSIGN) */
    struct ina_kv_req *head, *tail; /* incomplete operations, in order */
    struct ina_kv_req *live;
    int nreqs;
    uint32_t steps_started, steps_done;
    uint32_t hot_applied_step; /* steps whose hot sums were applied to the replica */

    /* Hot set (kv_hot.c). hctx: the switch session; NULL in all-PS mode. */
    struct ina_ctx *hctx;
    uint32_t epoch;        /* current hot set, 0 = none yet */
    uint32_t nhot;
    uint64_t *hot_keys;    /* position -> key */
    struct ina_kmap hot_map; /* key -> position */
    float *hot_vals, *hot_state;
    uint32_t next_transition; /* the step at whose start the hot set changes next */
    uint32_t sample_rate;      /* the profile counts 1 in R entries (INA_KV_SAMPLE) */
    struct ina_kmap prof_map;  /* key -> index into prof_count */
    uint32_t *prof_count;
    uint64_t *prof_keys;
    uint32_t prof_cap;

    ina_kv_stats stats;
};

#define INA_KV_LIVE 0x494E4B56u /* "INKV" */

/* The shard of key, by the job's split. */
static inline unsigned ina__kv_shard_of(const struct ina_kv *kv, uint64_t key)
{
    return kv->split ? ina__ps_shard_in(key, kv->split_first, kv->nshards)
                     : ina__ps_shard_of(key, kv->nshards);
}

/* kv_rpc.c */
int ina__kv_shards_open(struct ina_kv *kv);
int ina__kv_shards_join(struct ina_kv *kv);
void ina__kv_shards_close(struct ina_kv *kv, int abort);
/* The switch context of the hot set (hctx): open it (the switch must have a hot
 * table), or close it (with abort: end the job there for every rank). */
int ina__kv_switch_open(struct ina_kv *kv);
void ina__kv_switch_close(struct ina_kv *kv, int abort);
/* Queue a request datagram (header filled by the caller except session fields) to shard s;
 * its answer goes to answered. @return the rpc, or NULL (-ENOMEM: the handle fails). */
struct kv_rpc *ina__kv_rpc_send(struct ina_kv *kv, struct ina_kv_req *op, unsigned s, uint8_t kind,
                                uint32_t slot, uint32_t seq, uint16_t count, uint16_t flags,
                                const uint8_t *body, size_t blen, kv_answered_fn *answered);
/* Room in shard s's window for len more bytes. */
int ina__kv_window_room(const struct ina_kv *kv, unsigned s, size_t len);
/* This thread's receive buffer is there (allocated once; without memory the handle
 * fails). @return 1, or 0. */
int ina__kv_rx_ready(struct ina_kv *kv);
/* The connections' progress: receive (answers to their requests' handlers), the hot
 * context's stream, resend, enforce deadlines; wait up to timeout_ms for input. The
 * operations' own steps are kv.c's (its progress calls this between them). */
void ina__kv_rpc_progress(struct ina_kv *kv, int timeout_ms);
/* Fail the handle and every operation with err (and tell the shards and the switch). */
void ina__kv_fail(struct ina_kv *kv, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Wait until every outstanding request of op (NULL: the transition's) is answered (no
 * operation is in flight then: the hot-set transition). */
int ina__kv_wait_rpcs(struct ina_kv *kv, struct ina_kv_req *op);

/* kv_hot.c */
int ina__kv_hot_open(struct ina_kv *kv);
/* Count a sample of the keys of a push for the profile (every rank). */
void ina__kv_hot_profile(struct ina_kv *kv, const uint64_t *keys, size_t n);
/* At the start of step kv->steps_started: install the next hot set if due (blocking). */
int ina__kv_hot_transition(struct ina_kv *kv);
/* Apply the finished hot sums of pushes in step order. */
void ina__kv_hot_apply_ready(struct ina_kv *kv);

#endif
