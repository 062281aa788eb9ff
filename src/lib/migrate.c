/* migrate.c: a job that loses its slots (operator eviction) moves, mid-stream, to rank 0's host aggregator. */
#include <arpa/inet.h>
#include <string.h>

#include "lib/ctx.h"
#include "lib/req.h"
#include "lib/session.h"
#include "lib/stream.h"
#include "lib/transport.h"

/*
 * Why at a stream position, not at an operation: ranks can be anywhere in
 * their streams when the switch evicts the job, and an operation may be
 * half done. The switch names a bound: one past the furthest stream position
 * any rank had reached. It keeps serving every position below the bound and
 * refuses the rest. Every rank sends up to the bound, waits for those
 * results, and then carries on from the bound in a new session at rank 0's
 * aggregator (fallback.c). No result at or past the bound was delivered
 * anywhere, so no input has been overwritten there, in place or not, and
 * nothing needs replaying: the stream simply continues on another
 * transport. Exponents agreed below the bound stay valid above it.
 * (PROTOCOL.md §5.8.)
 */

/* Put the stream back to position g: what was sent from g on was refused. */
static void rewind_to(struct ina_ctx *ctx, uint64_t g)
{
    for (uint32_t i = 0; i < ctx->window; i++) {
        struct ina_wslot *ws = &ctx->slots[i];
        if (ws->inflight && ws->g >= g) {
            ws->inflight = 0; /* the old session refuses it; it is sent again later */
            if (ws->req->sparse)
                ws->sp_rebuild = 1; /* its places are planned again from sp_prev */
        }
    }
    if (ctx->next_g <= g)
        return; /* nothing was sent past the bound: the stream just stops there */
    ctx->next_g = g;
    struct ina_req *resume = NULL;
    uint64_t p = 0;
    for (struct ina_req *r = ctx->head; r; r = r->next) {
        if (!r->g_sent)
            continue;
        /* A sparse op whose end is not known yet reaches past any bound. */
        int open_end = r->sparse && !r->sp->ended;
        if (r->g_first >= g) {
            r->g_sent = 0; /* started past the bound: starts again */
        } else if ((open_end || r->g_first + r->npackets > g) && !resume) {
            resume = r; /* straddles the bound: resume inside it */
            p = g - r->g_first;
            if (r->sparse)
                ina__sparse_rewind(ctx, r, p); /* its schedule goes back to p */
        }
    }
    for (struct ina_req *r = ctx->head; r && !resume; r = r->next)
        if (!r->g_sent)
            resume = r; /* else the first op not started */
    ctx->send_req = resume;
    ctx->send_p = p;
}

/* Every position from g to the stream's end must still be in flight: the
 * switch refuses what is past its bound, so none of it can have a result.
 * A bound below a result already received is a switch that contradicts
 * itself (or a forgery): rewinding would send finished positions again. */
static int bound_is_consistent(const struct ina_ctx *ctx, uint64_t g)
{
    if (g >= ctx->next_g)
        return 1;
    uint64_t past = 0;
    for (uint32_t i = 0; i < ctx->window; i++)
        if (ctx->slots[i].inflight && ctx->slots[i].g >= g)
            past++;
    return past == ctx->next_g - g;
}

int ina__migrate_on_notice(struct ina_ctx *ctx, const uint8_t *body, size_t len)
{
    if (len < INA_MIGRATE_BODY_LEN)
        return 0;
    uint64_t bound = (uint64_t)ina__get32(body + 24) << 32 | ina__get32(body + 28);
    uint64_t g = ctx->wire_base + bound;
    if (ctx->migrate_pending)
        return 0; /* the notice again: answer to a packet sent past the bound */
    if (bound > UINT64_MAX - ctx->wire_base || !bound_is_consistent(ctx, g))
        return INA_ERR_PROTO;
    memset(&ctx->fallback_target, 0, sizeof(ctx->fallback_target));
    uint16_t port = ina__get16(body + 20);
    if (port) {
        ctx->fallback_target.sin_family = AF_INET;
        memcpy(&ctx->fallback_target.sin_addr.s_addr, body + 16, 4);
        ctx->fallback_target.sin_port = htons(port);
    }
    ctx->migrate_pending = 1;
    ctx->migrate_g = g;
    rewind_to(ctx, g);
    return 0;
}

static int below_bound_in_flight(const struct ina_ctx *ctx)
{
    for (uint32_t i = 0; i < ctx->window; i++)
        if (ctx->slots[i].inflight && ctx->slots[i].g < ctx->migrate_g)
            return 1;
    return 0;
}

/* Every packet below the bound has its result: leave, join the aggregator,
 * and continue the stream from the bound there. */
int ina__migrate_step(struct ina_ctx *ctx)
{
    if (!ctx->head || below_bound_in_flight(ctx) || ctx->next_g < ctx->migrate_g)
        return 0; /* nothing to send past the bound yet, or still below it */
    uint32_t elems = ctx->elems, window = ctx->window;
    ina__session_leave(ctx, 0); /* the switch frees the slots when every rank has left */
    ctx->session = 0;           /* left: a failure below must not abort it for the others */
    if (ctx->fallback_mode != INA_FALLBACK_HOST || !ctx->fallback_target.sin_port) {
        ctx->migrate_pending = 0;
        return INA_ERR_NOSPACE; /* nowhere to go */
    }
    /* Ops are planned from the switch's capabilities (plan.c), and ranks move
     * at different times: keep the first session's, which every rank has,
     * so that an op created just after one rank moved matches the others'.
     * The aggregator implements every op. */
    uint16_t caps = ctx->switch_caps;
    ina__transport_session_end(ctx); /* rings and group were the old session's: UDP there */
    int rc = ina__session_join_host(ctx, (int)elems, (int)window);
    ctx->switch_caps = caps;
    if (rc == 0 && (ctx->elems != elems || ctx->window != window))
        rc = INA_ERR_PROTO; /* the stream's slots and blocks must stay as they were */
    ctx->migrate_pending = 0;
    if (rc != 0) {
        ctx->session = 0; /* nothing to leave there (or a half-joined one: the join timed out) */
        return rc;
    }
    ctx->wire_base = ctx->migrate_g;
    for (uint32_t i = 0; i < ctx->window; i++)
        ctx->slots[i].round = 0; /* the new session's rounds start at 0 */
    ctx->last_progress_ns = ina__now_ns();
    return 0;
}
