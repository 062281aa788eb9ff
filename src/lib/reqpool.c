/* reqpool.c: a context's requests come from slabs on a free list: no allocation per operation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/ctx.h"
#include "lib/req.h"

/*
 * Why a pool: a small all-reduce (one packet, tens of microseconds) should
 * cost its round trip and little else, and a pipeline of many of them in
 * flight (ina-glm's micro-batches) would otherwise call malloc and free per
 * operation. Requests are carved from slabs of INA_REQ_SLAB and kept on a
 * per-context free list; a slab is added only when more requests are live
 * than ever before (at most INA_MAX_REQS, so the pool is bounded), and the
 * slabs are freed with the context. The pool belongs to one context, which
 * is used from one thread at a time (ina.h), so it takes no lock.
 *
 * Lifetime rules are the API's (ina.h): a request is valid from
 * ina_allreduce_start() until ina_wait() (or ina_finalize()) releases it.
 * After that its memory is another request's: a stale handle is a caller
 * error that a pool cannot catch, as a freed pointer could not be before.
 */

struct ina_req_slab {
    struct ina_req_slab *next;
    struct ina_req reqs[INA_REQ_SLAB];
};

static int pool_grow(struct ina_ctx *ctx)
{
    struct ina_req_slab *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->next = ctx->req_slabs;
    ctx->req_slabs = s;
    ctx->req_slab_allocs++;
    for (int i = INA_REQ_SLAB - 1; i >= 0; i--) {
        s->reqs[i].next = ctx->req_free;
        ctx->req_free = &s->reqs[i];
    }
    return 0;
}

int ina__req_pool_init(struct ina_ctx *ctx)
{
    return ctx->req_slabs ? 0 : pool_grow(ctx);
}

struct ina_req *ina__req_alloc(struct ina_ctx *ctx)
{
    if (!ctx->req_free && pool_grow(ctx) != 0)
        return NULL;
    struct ina_req *r = ctx->req_free;
    ctx->req_free = r->next;
    memset(r, 0, sizeof(*r));
    return r;
}

void ina__req_release(struct ina_ctx *ctx, struct ina_req *req)
{
    if (!req)
        return;
    free(req->sp); /* what a sparse request owns: its state and its probe */
    req->sp = NULL;
    if (req->probe) {
        ina__req_release(ctx, req->probe);
        req->probe = NULL;
    }
    req->ctx = NULL; /* until reused, a stale ina_test()/ina_wait() gets -EINVAL */
    req->next = ctx->req_free;
    ctx->req_free = req;
}

void ina__req_pool_free(struct ina_ctx *ctx)
{
    while (ctx->req_slabs) {
        struct ina_req_slab *s = ctx->req_slabs;
        ctx->req_slabs = s->next;
        free(s);
    }
    ctx->req_free = NULL;
}
