/* sparse.c: block-sparse all-reduce on the worker: the schedule of places, building packets, taking results. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/sparse_wire.h"
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/dtype.h"
#include "lib/req.h"
#include "lib/sparse_scan.h"
#include "lib/stream.h"

/*
 * The design in brief (PROTOCOL.md §17 has every rule):
 *
 * The op's blocks (B elements each) are cut into columns of M consecutive
 * blocks. A column is a chain of rounds: its first round carries no block,
 * only each rank's first non-zero block of the column (its "next"); the
 * switch keeps the minimum, so the RESULT names the column's first block
 * that some rank has. The next round carries that block from the ranks that
 * have it, with each rank's next non-zero block after it, and so on until
 * every rank's next is END. Blocks no rank has are never sent: the worker
 * writes zeros there, for the RESULT proves them zero on every rank.
 *
 * A packet holds up to C places, one column each. The stream stays what it
 * is for dense ops (packet g in slot g mod W, one round per slot at a time,
 * every rank sending every packet, the switch completing a round when all N
 * contributions are in), which keeps every loss-recovery rule of §6 and §9.
 * Packet p of the op takes, in this order, the columns of packet p - W (same
 * slot, whose RESULT is in by then) that continue, then columns not started
 * yet, in column order. The op ends at the first packet p with nothing to
 * carry on, no column left to start, and only empty packets among p-W+1..p-1
 * (those could still pass a column on). Every rank sees the same RESULTs, so
 * every rank builds the same schedule.
 *
 * Floats: each rank also announces the exponent of its block at its next;
 * the switch keeps the largest among the ranks at the minimum next, which is
 * the agreed exponent the next round's block is scaled with. The exponent
 * round of §7.2 thus rides on the position round: sums are the dense
 * two-round sums, bit for bit (at threshold 0).
 *
 * The 16-bit wire (§17.11): a SUM or AVG that would go dense on ops 10 or 11
 * goes sparse on 12 or 13, each block ceil(B / 2) words of 16-bit elements
 * with its own scale in its place's info exponent (no agreed exponent: the
 * RESULT's info carries the sum's scale), so more places fit a packet.
 */

/* Whether a sparse op of dtype goes as 16-bit blocks (§17.11): as it would dense. */
static int sparse_h16(const struct ina_ctx *ctx, ina_dtype dtype)
{
    return ina__wire16_fmt(ctx, dtype) >= 0;
}

/* Places per packet (C) for blocks of 32-bit (h16 0) or 16-bit elements. */
static unsigned ctx_places(const struct ina_ctx *ctx, int h16)
{
    return ina__sparse_places(ina__sparse_block_words((unsigned)ctx->sparse_block, h16), ctx->elems);
}

/* Blocks of a part of count elements that starts phase elements into a block. */
static uint64_t nblocks_of(const struct ina_ctx *ctx, size_t count, size_t phase)
{
    uint64_t b = (uint64_t)ctx->sparse_block;
    return ((uint64_t)phase + (uint64_t)count + b - 1) / b;
}

int ina__sparse_possible(const struct ina_ctx *ctx, size_t count, size_t phase, ina_dtype dtype,
                         ina_op op)
{
    if (!(ctx->switch_caps & INA_FLAG_CAP_SPARSE) || count == 0)
        return 0;
    if (op != INA_SUM && op != INA_AVG) /* MAX, MIN: a missing block would be a 0 to compare */
        return 0;
    if (ctx_places(ctx, sparse_h16(ctx, dtype)) == 0) /* a packet holds no block of this length */
        return 0;
    return nblocks_of(ctx, count, phase) < INA_SPARSE_END;
}

/* Every slot's two place arrays, once per context: room for the most places
 * a packet can have (16-bit blocks, where the switch offers them). */
static int places_alloc(struct ina_ctx *ctx)
{
    if (ctx->sp_places)
        return 0;
    unsigned c = ctx_places(ctx, (ctx->switch_caps & INA_FLAG_CAP_H16) != 0);
    ctx->sp_places = calloc((size_t)ctx->window * 2 * c, sizeof(*ctx->sp_places));
    if (!ctx->sp_places)
        return -ENOMEM;
    for (uint32_t i = 0; i < ctx->window; i++) {
        ctx->slots[i].sp_cur = ctx->sp_places + (size_t)i * 2 * c;
        ctx->slots[i].sp_prev = ctx->slots[i].sp_cur + c;
    }
    return 0;
}

/* The op streams sparse from now on. */
static void go_sparse(struct ina_ctx *ctx, struct ina_req *req)
{
    ina__req_plan_sparse(ctx, req); /* its codec; npackets known when the schedule ends */
    ctx->stats.sparse_ops++;
}

int ina__sparse_prepare(struct ina_ctx *ctx, struct ina_req *req, size_t phase, int autodecide)
{
    if (places_alloc(ctx) != 0)
        return -ENOMEM;
    uint64_t b = (uint64_t)ctx->sparse_block;
    uint64_t nblocks = nblocks_of(ctx, req->count, phase);
    struct ina_sparse_op *sp = malloc(sizeof(*sp) + (size_t)((nblocks + 63) / 64) * sizeof(uint64_t));
    if (!sp)
        return -ENOMEM;
    sp->block = (uint32_t)b;
    sp->phase = (uint32_t)phase;
    sp->h16 = (uint32_t)sparse_h16(ctx, req->dtype);
    sp->places = ctx_places(ctx, (int)sp->h16);
    /* Columns of M blocks: long enough that a column's first round (no
     * block) costs little, short enough that there are about 2 columns per
     * place of the window, so that columns of unequal lengths even out. */
    uint64_t m = nblocks / (2 * (uint64_t)ctx->window * sp->places);
    sp->colblocks = (uint32_t)(m < 1 ? 1 : m > INA_SPARSE_MAX_COLBLOCKS ? INA_SPARSE_MAX_COLBLOCKS : m);
    sp->nblocks = nblocks;
    sp->ncols = (nblocks + sp->colblocks - 1) / sp->colblocks;
    sp->next_col = 0;
    sp->last_nonempty = -1;
    sp->ended = 0;
    sp->nnz = ina__sparse_scan(req->dtype, req->src, req->count, (size_t)b, phase,
                               ctx->sparse_threshold, sp->map);
    req->sp = sp;
    if (!autodecide) {
        go_sparse(ctx, req);
        return 0;
    }
    /* The probe carries this rank's density of non-zero blocks, in units of
     * 2^-20 (so that a sum over 256 ranks fits an int32). */
    req->undecided = 1;
    req->npackets = UINT64_MAX;
    req->probe_val = (int32_t)(sp->nnz * INA_SPARSE_PROBE_ONE / nblocks);
    return 0;
}

void ina__sparse_decide(struct ina_ctx *ctx, struct ina_req *req, int32_t sum)
{
    /* Every rank got the same sum: every rank decides alike (given the same
     * crossover, which a job's ranks must share, as its other settings). */
    double limit = ctx->sparse_crossover * INA_SPARSE_PROBE_ONE;
    if ((double)sum < limit) {
        go_sparse(ctx, req);
        return;
    }
    req->undecided = 0;
    free(req->sp);
    req->sp = NULL;
    ina__req_plan_dense(ctx, req);
    ctx->stats.sparse_auto_dense++;
}

/* ---- The schedule ------------------------------------------------------------------ */

static inline uint64_t col_end(const struct ina_sparse_op *sp, uint64_t col)
{
    uint64_t e = (col + 1) * sp->colblocks;
    return e < sp->nblocks ? e : sp->nblocks;
}

/* The first element of block b (b <= nblocks: nblocks gives count). Blocks
 * lie on the whole operation's grid: a part that starts phase elements into
 * a block has a short block 0 (sparse_scan.h). */
static inline size_t block_start(const struct ina_req *req, uint64_t b)
{
    if (b == 0)
        return 0;
    size_t e = (size_t)b * req->sp->block - req->sp->phase;
    return e < req->count ? e : req->count;
}

static inline size_t block_elems(const struct ina_req *req, uint64_t b)
{
    return block_start(req, b + 1) - block_start(req, b);
}

static inline const uint8_t *block_src(const struct ina_req *req, uint64_t b)
{
    return req->src + block_start(req, b) * req->esize;
}

/* This rank's next non-zero block of col from block `from` on, or END. */
static uint32_t my_next(const struct ina_req *req, uint64_t col, uint64_t from)
{
    uint64_t end = col_end(req->sp, col), b = ina__map_next(req->sp->map, from, end);
    return b < end ? (uint32_t)b : INA_SPARSE_END;
}

/* The exponent this rank announces for its block b (quantized floats only; 16-bit
 * blocks announce none: their info carries the scale of the block sent, §17.11). */
static int16_t my_exp(const struct ina_req *req, uint32_t b)
{
    if (req->codec->exps == INA_EXPS_NONE || req->sp->h16)
        return 0;
    if (b == INA_SPARSE_END)
        return INA_EXP_ZERO;
    return ina__block_exp(req->dtype, block_src(req, b), block_elems(req, b));
}

static void place_at(const struct ina_req *req, struct ina_sp_place *pl, uint32_t col,
                     uint32_t pos, int first, int16_t e)
{
    pl->col = col;
    pl->pos = pos;
    pl->first = (uint8_t)first;
    pl->e = e;
    pl->has = !first && ina__map_test(req->sp->map, pos);
    pl->mynext = my_next(req, col, (uint64_t)pos + !first);
    pl->myexp = my_exp(req, pl->mynext);
    pl->rnext = INA_SPARSE_END;
    pl->rexp = 0;
}

int ina__sparse_plan(struct ina_ctx *ctx, struct ina_req *req, struct ina_wslot *ws, uint64_t p)
{
    struct ina_sparse_op *sp = req->sp;
    const uint64_t w = ctx->window;
    if (p == 0) {
        sp->next_col = 0;
        sp->last_nonempty = -1;
        sp->ended = 0;
    }
    /* The slot's previous packet is p - W of this op (for p >= W): its
     * places that continue come first. */
    const struct ina_sp_place *pred = ws->sp_rebuild ? ws->sp_prev : ws->sp_cur;
    unsigned npred = ws->sp_rebuild ? ws->sp_nprev : ws->sp_ncur, ncont = 0;
    if (p >= w)
        for (unsigned j = 0; j < npred; j++)
            ncont += pred[j].rnext != INA_SPARSE_END;
    if (ncont == 0 && sp->next_col == sp->ncols && sp->last_nonempty <= (int64_t)p - (int64_t)w) {
        sp->ended = 1;
        req->npackets = p;
        return 0;
    }
    if (!ws->sp_rebuild) {
        struct ina_sp_place *t = ws->sp_prev;
        ws->sp_prev = ws->sp_cur;
        ws->sp_cur = t;
        ws->sp_nprev = ws->sp_ncur;
    }
    ws->sp_rebuild = 0;
    ws->sp_u_before = sp->next_col;
    ws->sp_lastne_before = sp->last_nonempty;
    unsigned n = 0;
    if (p >= w)
        for (unsigned j = 0; j < ws->sp_nprev; j++) {
            const struct ina_sp_place *q = &ws->sp_prev[j];
            if (q->rnext != INA_SPARSE_END)
                place_at(req, &ws->sp_cur[n++], q->col, q->rnext, 0, q->rexp);
        }
    while (n < sp->places && sp->next_col < sp->ncols) {
        uint64_t c = sp->next_col++;
        place_at(req, &ws->sp_cur[n++], (uint32_t)c, (uint32_t)(c * sp->colblocks), 1, 0);
    }
    ws->sp_ncur = (uint16_t)n;
    if (n)
        sp->last_nonempty = (int64_t)p;
    return 1;
}

void ina__sparse_rewind(struct ina_ctx *ctx, struct ina_req *req, uint64_t p)
{
    /* Packet p is in flight (migrate.c checked that every position past the
     * bound is): the op's schedule goes back to where it was before p. */
    struct ina_wslot *ws = &ctx->slots[(req->g_first + p) & (ctx->window - 1)];
    req->sp->next_col = ws->sp_u_before;
    req->sp->last_nonempty = ws->sp_lastne_before;
    req->sp->ended = 0;
    req->npackets = UINT64_MAX;
}

/* ---- Packets ------------------------------------------------------------------------ */

size_t ina__sparse_build(struct ina_ctx *ctx, const struct ina_wslot *ws, uint8_t *out)
{
    const struct ina_req *req = ws->req;
    const struct ina_sparse_op *sp = req->sp;
    const unsigned n = ws->sp_ncur, b = sp->block;
    const unsigned bw = ina__sparse_block_words(b, (int)sp->h16); /* a block's words */
    ina__put32(out, ina__sparse_layout(b, n));
    uint8_t *blk = out + 4 * ina__sparse_words(bw, n, 0);
    unsigned nhas = 0;
    for (unsigned j = 0; j < n; j++) {
        const struct ina_sp_place *pl = &ws->sp_cur[j];
        uint8_t *d = out + 4 * (1 + INA_SPARSE_DESC_WORDS * (size_t)j);
        ina__put32(d, pl->pos);
        ina__put32(d + 4, pl->mynext);
        size_t len = pl->has ? block_elems(req, pl->pos) : 0;
        int16_t e = pl->e; /* 32-bit: the agreed exponent; 16-bit: the block's own scale */
        if (sp->h16 && pl->has)
            e = req->codec->scale(ctx, req, block_start(req, pl->pos), len);
        ina__put32(d + 8, ina__sparse_info(pl->has, pl->first, sp->h16 ? (pl->has ? e : 0) : pl->myexp));
        if (!pl->has)
            continue;
        uint16_t flags = 0; /* (no format of a sparse block sets one) */
        size_t plen = req->codec->encode(ctx, req, block_start(req, pl->pos), len, e, blk, &flags);
        memset(blk + plen, 0, 4 * (size_t)bw - plen); /* a part's first and last blocks may be short */
        blk += 4 * (size_t)bw;
        nhas++;
    }
    ctx->stats.sparse_blocks_sent += nhas;
    return ina__sparse_words(bw, n, nhas);
}

/* Write zeros over blocks [from, to) of the op's output. */
static void zero_blocks(const struct ina_req *req, uint64_t from, uint64_t to)
{
    if (from >= to)
        return;
    size_t e0 = block_start(req, from), e1 = block_start(req, to);
    memset(req->dst + e0 * req->esize, 0, (e1 - e0) * req->esize);
}

int ina__sparse_on_result(struct ina_ctx *ctx, struct ina_wslot *ws, const uint8_t *payload,
                          size_t count)
{
    struct ina_req *req = ws->req;
    const struct ina_sparse_op *sp = req->sp;
    const unsigned n = ws->sp_ncur, b = sp->block;
    const unsigned bw = ina__sparse_block_words(b, (int)sp->h16);
    /* First every check, then every write: a result that fails one changes nothing. */
    if (ina__sparse_check(payload, count, ctx->elems, (int)sp->h16) != 0 ||
        ina__get32(payload) != ina__sparse_layout(b, n))
        return INA_ERR_MISMATCH;
    for (unsigned j = 0; j < n; j++) {
        const struct ina_sp_place *pl = &ws->sp_cur[j];
        const uint8_t *d = payload + 4 * (1 + INA_SPARSE_DESC_WORDS * (size_t)j);
        uint32_t pos = ina__get32(d), next = ina__get32(d + 4), info = ina__get32(d + 8);
        int has = (info & INA_SPARSE_HAS) != 0;
        if (pos != pl->pos || ((info & INA_SPARSE_FIRST) != 0) != pl->first)
            return INA_ERR_MISMATCH; /* not the places this rank sent */
        if ((pl->has && !has) || (!pl->first && !has))
            return INA_ERR_MISMATCH; /* a block announced (by us, or as some next) is missing */
        if (next > pl->mynext || (next != INA_SPARSE_END && next >= col_end(sp, pl->col)))
            return INA_ERR_MISMATCH; /* a minimum above ours, or outside the column */
    }
    const uint8_t *blk = payload + 4 * ina__sparse_words(bw, n, 0);
    for (unsigned j = 0; j < n; j++) {
        struct ina_sp_place *pl = &ws->sp_cur[j];
        const uint8_t *d = payload + 4 * (1 + INA_SPARSE_DESC_WORDS * (size_t)j);
        uint32_t next = ina__get32(d + 4), info = ina__get32(d + 8);
        if (info & INA_SPARSE_HAS) {
            size_t len = block_elems(req, pl->pos);
            /* 16-bit: the sum's scale is this RESULT's (§17.11); else the agreed exponent */
            int16_t e = sp->h16 ? ina__sparse_info_exp(info) : pl->e;
            req->codec->decode(ctx, req, block_start(req, pl->pos), len, e, blk);
            if (!sp->h16 && req->codec->exps != INA_EXPS_NONE && pl->e == INA_EXP_NONFINITE)
                ctx->stats.nonfinite_blocks++;
            blk += 4 * (size_t)bw;
        }
        /* No rank has a block between this one and the minimum next. */
        zero_blocks(req, (uint64_t)pl->pos + !pl->first,
                     next == INA_SPARSE_END ? col_end(sp, pl->col) : next);
        pl->rnext = next;
        pl->rexp = ina__sparse_info_exp(info);
    }
    return 0;
}
