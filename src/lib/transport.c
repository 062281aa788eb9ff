/* transport.c: a context's set of transports (transport.h): add, remove, and the hooks over all of them. */
#include "lib/ctx.h"
#include "lib/transport.h"

/* The sender: the transport of highest order that sends (the rings before the socket). */
static void pick_sender(struct ina_transports *x)
{
    x->tx = NULL;
    for (unsigned i = 0; i < x->n; i++)
        if (x->rx[i]->send_burst && (!x->tx || x->rx[i]->order > x->tx->order))
            x->tx = x->rx[i];
}

void ina__transport_add(struct ina_ctx *ctx, const struct ina_transport_ops *t)
{
    struct ina_transports *x = &ctx->xp;
    for (unsigned i = 0; i < x->n; i++)
        if (x->rx[i] == t)
            return;
    if (x->n == INA_XP_MAX)
        return; /* one of each kind: cannot happen */
    unsigned i = x->n++;
    for (; i > 0 && x->rx[i - 1]->order > t->order; i--)
        x->rx[i] = x->rx[i - 1];
    x->rx[i] = t;
    pick_sender(x);
}

void ina__transport_remove(struct ina_ctx *ctx, const struct ina_transport_ops *t)
{
    struct ina_transports *x = &ctx->xp;
    unsigned j = 0;
    for (unsigned i = 0; i < x->n; i++)
        if (x->rx[i] != t)
            x->rx[j++] = x->rx[i];
    x->n = j;
    pick_sender(x);
}

int ina__transport_readable(const struct ina_ctx *ctx)
{
    int r = -1;
    for (unsigned i = 0; i < ctx->xp.n; i++)
        if (ctx->xp.rx[i]->readable) {
            if (ctx->xp.rx[i]->readable(ctx))
                return 1;
            r = 0;
        }
    return r;
}

int ina__transport_may_sleep(struct ina_ctx *ctx)
{
    for (unsigned i = 0; i < ctx->xp.n; i++)
        if (ctx->xp.rx[i]->may_sleep && !ctx->xp.rx[i]->may_sleep(ctx))
            return 0;
    return 1;
}

void ina__transport_awake(struct ina_ctx *ctx)
{
    for (unsigned i = 0; i < ctx->xp.n; i++)
        if (ctx->xp.rx[i]->awake)
            ctx->xp.rx[i]->awake(ctx);
}

int ina__transport_pollfds(const struct ina_ctx *ctx, struct pollfd *pfd)
{
    int n = 0;
    for (unsigned i = 0; i < ctx->xp.n; i++) {
        int fd = ctx->xp.rx[i]->poll_fd ? ctx->xp.rx[i]->poll_fd(ctx) : -1;
        if (fd >= 0)
            pfd[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    return n;
}

void ina__transport_session_end(struct ina_ctx *ctx)
{
    /* A hook may remove its transport: walk a copy. */
    struct ina_transports x = ctx->xp;
    for (unsigned i = 0; i < x.n; i++)
        if (x.rx[i]->session_end)
            x.rx[i]->session_end(ctx);
}
