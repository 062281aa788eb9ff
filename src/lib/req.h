/* req.h: an all-reduce's request: its arguments, how it travels (plan.c), its place in the stream; the pool, creation and planning of requests. */
#ifndef INA_LIB_REQ_H
#define INA_LIB_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "ina.h"

struct ina_ctx;
struct ina_codec;
struct ina_sparse_op;

/*
 * One all-reduce. The ops of a context form one FIFO stream of packets:
 * op A's packets all go out before op B's, so every rank, running the same
 * ops in the same order, uses each slot round for the same data.
 *
 * Packet p of an op (0 <= p < npackets = nblocks + lag) carries:
 *   - the data of block p - lag, if p >= lag;
 *   - for a float dtype, the exponent of block p, if p < nblocks.
 * For INT32 lag = 0 (no exponents); for the float dtypes lag =
 * min(window, nblocks): exponents travel one round ahead, as in SwitchML.
 */
struct ina_req {
    struct ina_ctx *ctx;
    struct ina_req *next;             /* stream FIFO (incomplete requests) */
    struct ina_req *live_prev, *live_next; /* every request not yet waited */
    const uint8_t *src;
    uint8_t *dst;
    size_t count;
    ina_dtype dtype;
    ina_op op;
    size_t esize;     /* bytes per element of dtype (dtype.h) */
    uint8_t wire_op;  /* INA_OP_* in every DATA packet of the op */
    /* How its blocks travel (codec.h; plan.c decides): the dtype's own
     * encoding (block floating point in two rounds or one, or INT32
     * unchanged), binary32 for the switch to add, order keys for its int32
     * max/min (§8.9), fixed point with the context's agreed scale (§13), or,
     * for a key-value push, as HOT_DATA (below). */
    const struct ina_codec *codec;
    int range_err; /* fixed point: a result element came back invalid (INA_ERR_RANGE) */
    uint64_t lost; /* this rank's elements its blocks' scales lost (codec.h's lost) */
    /* ina__codec_hot (kv/kv_hot.c, PROTOCOL.md §14.3): the float32 hot vector of a
     * key-value push goes as HOT_DATA of this hot-table epoch; a sparse block
     * goes as (key, value) pairs, hot_keys[i] being the key of position i. */
    uint32_t hot_epoch;
    const uint64_t *hot_keys;
    size_t block_elems; /* elements per dense block: the context's k, or 2k on the 16-bit
                           wire (two elements per word, PROTOCOL.md §8.10.1) */
    uint64_t nblocks, lag, npackets;
    uint64_t ndone; /* packets whose result arrived */
    uint64_t tag_seed; /* hash of (op number, count, dtype, op): seeds the packet tags (wire.h) */
    int done, status;
    /* Lanes (lanes.c): an operation of a multi-lane context is a parent whose
     * parts are requests of the lane contexts; a part points to its parent. */
    struct ina_req *parent;
    int remaining; /* parent: parts not finished yet (under the lanes mutex) */
    uint64_t g_first; /* stream position of packet 0, once sent (g_sent set) */
    int g_sent;
    /* Block-sparse (sparse.c). sparse: the op streams sparse (npackets is
     * UINT64_MAX until its end is found); undecided: INA_SPARSE_AUTO, until
     * its probe (a one-packet INT32 request ahead of it in the stream, which
     * this request owns) brings the ranks' summed density; probe_for: this
     * request is such a probe, of that op. */
    int sparse, undecided;
    int sparse_mode; /* a lanes parent: the mode (INA_SPARSE_*) its parts ask for */
    struct ina_sparse_op *sp;
    struct ina_req *probe, *probe_for;
    int32_t probe_val, probe_sum;
};

/* reqpool.c: requests from a per-context free list of slabs (no allocation
 * per operation, no lock: a context is used by one thread at a time).
 * init preallocates the first slab; alloc returns a zeroed request, or NULL
 * without memory; release puts one back, freeing what it owns (sparse state, probe); pool_free frees every slab. */
#define INA_REQ_SLAB 128
int ina__req_pool_init(struct ina_ctx *ctx);
struct ina_req *ina__req_alloc(struct ina_ctx *ctx);
void ina__req_release(struct ina_ctx *ctx, struct ina_req *req);
void ina__req_pool_free(struct ina_ctx *ctx);

/* req.c: a request with the caller's arguments (what the stream needs is set by the
 * caller), or NULL without memory; link it into, or take it off, ctx's list of
 * requests not yet waited. */
struct ina_req *ina__req_new(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                             ina_dtype dtype, ina_op op);
void ina__live_link(struct ina_ctx *ctx, struct ina_req *req);
void ina__live_unlink(struct ina_ctx *ctx, struct ina_req *req);

/* req.c: allocate a request for checked arguments, link it, and queue it on
 * the stream (count 0: done at once). The request is elements [offset,
 * offset + count) of an operation of total elements: a part (lanes.c), or
 * the whole operation (0, count). @return NULL if out of memory. */
struct ina_req *ina__req_create(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                                size_t count, ina_dtype dtype, ina_op op, int sparse_mode,
                                size_t offset, size_t total);
/* req.c: a float32 SUM of the hot vector (count floats) of a key-value push,
 * sent as HOT_DATA of epoch through the switch's hot table. */
struct ina_req *ina__req_create_hot(struct ina_ctx *ctx, const float *grad, float *sum, size_t count,
                                    uint32_t epoch, const uint64_t *keys);

/* plan.c: how req travels as a dense operation (codec, wire op, rounds, lag, npackets),
 * or as a block-sparse one (its codec and wire op; npackets known at its end). */
void ina__req_plan_dense(struct ina_ctx *ctx, struct ina_req *req);
void ina__req_plan_sparse(struct ina_ctx *ctx, struct ina_req *req);

/* plan.c: 1 if float sums go to the switch as floats (asked for, and it offers INA_OP_ADD_F32). */
int ina__float_add_in_use(const struct ina_ctx *ctx);
/* Fractional bits of float sums in fixed point (asked for, and the switch
 * offers INA_OP_ADD_FIX), else 0. */
int ina__fixed_in_use(const struct ina_ctx *ctx);
/* The 16-bit format (enum ina_h16_fmt) a SUM or AVG of dtype travels in on the
 * 16-bit wire (PROTOCOL.md §8.10.1: the switch offers it, the context keeps
 * it, FLOAT32 only when asked for), or -1: the 32-bit paths. */
int ina__wire16_fmt(const struct ina_ctx *ctx, ina_dtype dtype);

#endif
