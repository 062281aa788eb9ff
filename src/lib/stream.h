/* stream.h: the streaming window: its slots and burst buffers, the stream (stream.c), block-sparse packets (sparse.c), and an eviction's move (migrate.c). */
#ifndef INA_LIB_STREAM_H
#define INA_LIB_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/rx_burst.h"
#include "common/udp_gso.h"
#include "ina.h"

struct ina_ctx;
struct ina_req;

#define INA_BURST 64   /* datagrams built per send burst */
#define INA_RX_MSGS 16 /* messages per recvmmsg; each may be a GRO train of many datagrams */
#define INA_FAST_RTX_GAP 3 /* results this far past a missing one mean it was lost */
#define INA_FAST_RTX_MIN_MS 2 /* timer of a packet resent after a proven loss */
#define INA_FAST_RTX_NOSAMPLE_MS 10 /* the same before any RTT sample */
#define INA_MIN_RTT_WINDOW 256 /* RTT samples per window of the min-RTT filter */

/* One place of a sparse packet: a column's block in this round. */
struct ina_sp_place {
    uint32_t col;    /* the column (blocks [col*M, min((col+1)*M, nblocks))) */
    uint32_t pos;    /* the block this round carries */
    uint32_t mynext; /* this rank's next non-zero block of the column after pos
                        (FIRST: from pos on), or INA_SPARSE_END */
    uint32_t rnext;  /* from the RESULT: the minimum over the ranks */
    int16_t e;       /* the agreed exponent of block pos (quantized floats) */
    int16_t myexp;   /* this rank's exponent of its block mynext */
    int16_t rexp;    /* from the RESULT: the agreed exponent of block rnext */
    uint8_t first;   /* the column's first round: no block, next >= pos */
    uint8_t has;     /* this rank sends its block pos */
};

/* The state of one block-sparse operation (a request with sparse = 1). */
struct ina_sparse_op {
    uint32_t block;      /* B: elements per block */
    uint32_t h16;        /* its blocks go as 16-bit elements (ops 12, 13, §17.11): ceil(B / 2) words */
    uint32_t places;     /* C: places per packet */
    uint32_t colblocks;  /* M: blocks per column */
    uint32_t phase;      /* a part's offset into its first block (block 0 is B - phase long) */
    uint64_t nblocks;    /* ceil((phase + count) / B) */
    uint64_t ncols;      /* K = ceil(nblocks / M) */
    uint64_t next_col;   /* U: the next column not started */
    int64_t last_nonempty; /* op-local index of the last packet with places, -1: none */
    int ended;           /* the packet that ends the op was found: npackets is final */
    uint64_t nnz;        /* this rank's non-zero blocks */
    uint64_t map[];      /* bit b: this rank's block b is not zero (sparse_scan.h) */
};

/* Worker-side state of one slot of the window. */
struct ina_wslot {
    uint32_t round;    /* round (seq) of the next use of this slot */
    uint32_t seq;      /* round of the in-flight packet */
    uint8_t inflight;  /* a packet is out, waiting for its result */
    uint8_t short_timer; /* on the short timer: tail probe, or resent by fast retransmit */
    uint16_t tries;
    uint32_t rto_ms;     /* this packet's current timeout (doubles per retry) */
    uint64_t sent_ns;    /* first transmission, for RTT samples (Karn: only if tries == 0) */
    int16_t exp_used;    /* exponent the in-flight packet's data was scaled with */
    int16_t exp_agreed;  /* max exponent returned by the last completed packet */
    uint64_t g;          /* stream index of the in-flight / last completed packet */
    uint64_t done_g;     /* stream index of the last completed packet, +1 (0 = none) */
    uint64_t p;          /* op-local packet index of the in-flight packet */
    struct ina_req *req; /* op of the in-flight packet */
    uint64_t deadline_ns;
    /* Block-sparse packets (sparse.c): the places of this slot's packet in
     * flight or last sent (cur) and of the one before it (prev), whose
     * RESULT says which columns continue. sp_rebuild: cur was taken back by
     * an eviction (migrate.c) and is built again from prev. u_before and
     * lastne_before: the op's next column and last non-empty packet before
     * cur was built, to rewind to. */
    struct ina_sp_place *sp_cur, *sp_prev;
    uint16_t sp_ncur, sp_nprev;
    uint8_t sp_rebuild;
    uint64_t sp_u_before;
    int64_t sp_lastne_before;
};

/* Burst I/O descriptors, on the heap so a finalized context shell stays small. */
struct ina_io {
    struct iovec txiov[INA_BURST];      /* built datagrams, in order */
    struct ina_gso_batch gso;           /* packs them into UDP GSO messages */
    struct ina_rx rx;                        /* the receive bursts of both sockets, over rxmem */
    struct ina_rx_pkt rxpkts[INA_RX_MAX_PKTS]; /* a burst's datagrams */
};

/* stream.c */
int ina__stream_init(struct ina_ctx *ctx);
void ina__stream_free(struct ina_ctx *ctx);
void ina__stream_enqueue(struct ina_ctx *ctx, struct ina_req *req);
/* Advance the stream; wait at most timeout_ms for input (0 = poll only). */
void ina__stream_progress(struct ina_ctx *ctx, int timeout_ms);
void ina__stream_fail_all(struct ina_ctx *ctx, int err);
/* The reply handler: one datagram from the switch (RESULT, ABORT, or junk).
 * Never trusts its input: a fuzz target drives it directly. */
void ina__stream_on_datagram(struct ina_ctx *ctx, const uint8_t *buf, size_t len, uint64_t now);

/* Busy polling: 1 if a wait of ctx should spin now (busy_poll_ns, and for the auto spin
 * fewer than INA_AUTO_SPIN_MISSES misses in a row; stream.c says why). */
int ina__spin_now(const struct ina_ctx *ctx);
/* A wait of ctx ended: it got input (got) after waited_ns; spun: a spin was tried (then
 * waited_ns is not read). Teaches the auto spin whether spinning pays. */
void ina__spin_learn(struct ina_ctx *ctx, int spun, int got, uint64_t waited_ns);

/* stream.c: one turn of a bounded spin (busy polling): relax the CPU, read the clock into
 * *now, and give the CPU away every INA_BUSY_POLL_YIELD_NS (*yielded: when it last did;
 * busy_poll.h says why). Start with *now = *yielded = ina__now_ns().
 * @return 1 while *now < until, 0 when the spin is over. */
int ina__spin_turn(uint64_t *now, uint64_t *yielded, uint64_t until);

/* sparse.c: block-sparse operations (PROTOCOL.md §17). */
/* 1 if an op (or part) of count elements of dtype and op, starting phase
 * elements into a block of sparse_block, can stream sparse on ctx. */
int ina__sparse_possible(const struct ina_ctx *ctx, size_t count, size_t phase, ina_dtype dtype,
                         ina_op op);
/* Prepare req to stream sparse (mode ON), or to probe first (AUTO): scan
 * its input for non-zero blocks (block 0 short by phase elements: its
 * blocks lie on the grid of the whole operation). @return 0 or -ENOMEM. */
int ina__sparse_prepare(struct ina_ctx *ctx, struct ina_req *req, size_t phase, int autodecide);
/* The probe of an AUTO op completed with the ranks' summed density. */
void ina__sparse_decide(struct ina_ctx *ctx, struct ina_req *req, int32_t sum);
/* Plan packet p (op-local) of sparse req in slot ws, whose previous packet
 * has its result. @return 1 planned, 0 the op ends before p (npackets = p). */
int ina__sparse_plan(struct ina_ctx *ctx, struct ina_req *req, struct ina_wslot *ws, uint64_t p);
/* The payload of the packet planned in ws into out. @return its words. */
size_t ina__sparse_build(struct ina_ctx *ctx, const struct ina_wslot *ws, uint8_t *out);
/* A RESULT's payload for the packet in flight in ws: check it, write the
 * sums and the zeros it proves. @return 0, or INA_ERR_MISMATCH (nothing written). */
int ina__sparse_on_result(struct ina_ctx *ctx, struct ina_wslot *ws, const uint8_t *payload,
                          size_t count);
/* An eviction takes back every packet from op-local index p of req on (migrate.c). */
void ina__sparse_rewind(struct ina_ctx *ctx, struct ina_req *req, uint64_t p);

/* migrate.c: an eviction notice (MIGRATE) from the switch, and the move to
 * rank 0's host aggregator once every packet below the bound has its result.
 * @return 0, or the error that must fail the stream (the caller fails it). */
int ina__migrate_on_notice(struct ina_ctx *ctx, const uint8_t *body, size_t len);
int ina__migrate_step(struct ina_ctx *ctx);

#endif
