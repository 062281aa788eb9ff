/* udp.c: the stream's UDP transports (transport.h): the socket connected to the switch, and the job's multicast group. */
#include <errno.h>
#include <stdlib.h>

#include "common/kv_wire.h"
#include "lib/ctx.h"
#include "lib/stream.h"
#include "lib/transport.h"

/*
 * The job's multicast group (PROTOCOL.md §7.5): anyone may send to it, so
 * the switch's own address and port (what the unicast socket is connected
 * to, which the kernel checks for that socket) must be the sender's. The
 * switch sends only results there (ABORT, MIGRATE and resent results go by
 * unicast). A GRO train comes from one sender.
 */
static int group_sender_ok(const struct ina_ctx *ctx, const struct sockaddr_in *a)
{
    return a->sin_family == AF_INET && a->sin_addr.s_addr == ctx->switch_addr.sin_addr.s_addr &&
           a->sin_port == ctx->switch_addr.sin_port;
}

static int group_kind_ok(const uint8_t *p, size_t len)
{
    return len >= INA_HDR_LEN && (p[3] == INA_K_RESULT || p[3] == INA_K_HOT_RESULT);
}

/* Receive and process one burst (rx_burst.h: each message may be a GRO train,
 * split into datagrams); group: fd is the multicast group's socket.
 * @return messages received. */
static int rx_burst_fd(struct ina_ctx *ctx, int fd, uint64_t now, int group)
{
    struct ina_io *io = ctx->io;
    const uint64_t truncated = io->rx.truncated;
    int n = ina__rx_burst(&io->rx, fd, io->rxpkts, INA_RX_MAX_PKTS);
    if (n == -ECONNREFUSED && !ctx->refused_since_ns)
        ctx->refused_since_ns = now; /* ICMP port unreachable: no switch at the address */
    /* The switch fills the down ring before it sends what follows by UDP (an
     * ABORT, a MIGRATE): drain the ring first, so that both are taken in the
     * order the switch sent them. Otherwise an ABORT read before the ring
     * fails an operation whose last RESULTs were already delivered. */
    if (io->rx.got > 0 && ctx->shm)
        ina__shm_recv(ctx, now);
    ctx->stats.stale_results += io->rx.truncated - truncated; /* longer than any result */
    for (int i = 0; i < n && !ctx->broken; i++) {
        const struct ina_rx_pkt *pk = &io->rxpkts[i];
        uint8_t *p = (uint8_t *)pk->data; /* the burst's buffer: ours to change */
        ina__fault_corrupt(&ctx->fault, p, pk->len); /* INA_FAULT=corrupt: rewritten on the way */
        if (group && (!group_sender_ok(ctx, pk->src) || !group_kind_ok(p, pk->len))) {
            ctx->stats.group_rejected++;
            continue;
        }
        ina__stream_on_datagram(ctx, p, pk->len, now);
    }
    return (int)io->rx.got;
}

/* Consecutive datagrams of equal size go out as one UDP GSO message (udp_gso.h). */
static void udp_send_burst(struct ina_ctx *ctx, const struct iovec *iov, const unsigned *order,
                           unsigned n)
{
    struct ina_gso_batch *b = &ctx->io->gso;
    for (unsigned i = 0; i < n; i++)
        ina__gso_batch_add(b, iov[order[i]].iov_base, iov[order[i]].iov_len, NULL);
    uint64_t lost = 0;
    ina__gso_batch_send(b, ctx->fd, &lost);
}

static int udp_rx_burst(struct ina_ctx *ctx, uint64_t now)
{
    return rx_burst_fd(ctx, ctx->fd, now, 0);
}

static int udp_poll_fd(const struct ina_ctx *ctx) { return ctx->fd; }

const struct ina_transport_ops ina__udp_ops = {
    .name = "udp", .order = 0, .send_burst = udp_send_burst, .rx_burst = udp_rx_burst,
    .poll_fd = udp_poll_fd};

static int group_rx_burst(struct ina_ctx *ctx, uint64_t now)
{
    return rx_burst_fd(ctx, ctx->mcast_fd, now, 1);
}

static int group_poll_fd(const struct ina_ctx *ctx) { return ctx->mcast_fd; }

/* The aggregator a job moves to (migrate.c) multicasts nothing: the socket stays
 * open until the context closes, unread. */
static void group_session_end(struct ina_ctx *ctx) { ina__transport_remove(ctx, &ina__group_ops); }

const struct ina_transport_ops ina__group_ops = {
    .name = "group", .order = 2, .rx_burst = group_rx_burst, .poll_fd = group_poll_fd,
    .session_end = group_session_end};

void ina__udp_start(struct ina_ctx *ctx)
{
    /* Results come back as trains of equal-sized datagrams: take each train
     * in one receive. Optional: without it datagrams arrive one by one. */
    const int gso = !getenv("INA_NO_GSO");
    if (ctx->fd >= 0 && gso)
        ina__udp_enable_gro(ctx->fd);
    ctx->io->gso.gso_off = !gso;
    ina__transport_add(ctx, &ina__udp_ops);
    if (ctx->mcast_group && ctx->mcast_fd >= 0) {
        if (gso)
            ina__udp_enable_gro(ctx->mcast_fd);
        ina__transport_add(ctx, &ina__group_ops);
    }
}
