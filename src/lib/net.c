/* net.c: libina's sockets: the one connected to the switch (large buffers), the multicast group's; sends outside the stream. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/busy_poll.h"
#include "common/port_guard.h"
#include "common/clock.h"
#include "lib/ctx.h"
#include "lib/session.h"

/* A function of its own, not common's inline, so that the reply fuzzer can take it over. */
uint64_t ina__now_ns(void)
{
    return ina__clock_ns();
}

/*
 * A connected UDP socket: the kernel then delivers only datagrams from the
 * switch's address, and send() needs no address. Buffers hold a whole
 * window of results, so a burst is not mistaken for loss.
 */
int ina__net_open(struct ina_ctx *ctx, const struct sockaddr_in *addr)
{
    ctx->switch_addr = *addr; /* parsed and checked by ina_init() */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return ina__fail(ctx, -errno, "socket(AF_INET, SOCK_DGRAM): %s", strerror(errno));
    int bytes = 8 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    if (ctx->busy_poll_ns && !ctx->busy_auto) /* asked for by number: the kernel spins too */
        ina__sock_busy_poll(fd, (int)(ctx->busy_poll_ns / 1000)); /* best effort: busy_poll.h */
    if (connect(fd, (struct sockaddr *)&ctx->switch_addr, sizeof(ctx->switch_addr)) != 0) {
        int rc = -errno;
        char where[32];
        close(fd);
        ina__switch_str(ctx, where, sizeof(where));
        return ina__fail(ctx, rc, "connect to the switch address %s: %s", where, strerror(-rc));
    }
    ctx->fd = fd;
    return 0;
}

void ina__switch_str(const struct ina_ctx *ctx, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &ctx->switch_addr.sin_addr, ip, sizeof(ip));
    snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(ctx->switch_addr.sin_port));
}

int ina__net_reconnect(struct ina_ctx *ctx, uint16_t port)
{
    ctx->switch_addr.sin_port = htons(port);
    if (connect(ctx->fd, (struct sockaddr *)&ctx->switch_addr, sizeof(ctx->switch_addr)) != 0)
        return -errno;
    return 0;
}

/* Send one datagram. A refused or full send is not an error here: the
 * retransmission timer and the operation deadline handle it. */
int ina__net_send(struct ina_ctx *ctx, const uint8_t *buf, size_t len)
{
    ssize_t n = send(ctx->fd, buf, len, 0);
    return n < 0 ? -errno : 0;
}

/*
 * A job that multicasts its results shows its token to any process that
 * joins the group, and a process of another user could then send DATA (or a
 * LEAVE) as this rank: Linux lets it bind this socket's port on another
 * address (a multicast one, or any with IP_FREEBIND) and send from there with
 * this host's address as the source, which the switch takes for this rank's.
 * So hold the port on every address, as the switch holds its own (PROTOCOL.md
 * §4.1): a socket on the wildcard address that is never read, sharing the
 * port with SO_REUSEPORT, which the kernel grants only to sockets of one
 * effective uid. Fails if another user's socket already holds the port.
 */
static int guard_port(struct ina_ctx *ctx, const struct sockaddr_in *local)
{
    int rc = ina__mcast_listen_opts(ctx->fd);
    int fd = rc ? rc : ina__mcast_guard_open(ntohs(local->sin_port));
    if (fd < 0)
        return ina__fail(ctx, fd, "cannot hold this rank's port %u on every address (another "
                         "user's socket holds it, and could send as this rank to a job whose "
                         "token its multicast group shows): %s",
                         (unsigned)ntohs(local->sin_port), strerror(-fd));
    ctx->guard_fd = fd;
    return 0;
}

/*
 * With `ina-switch --multicast` every finished sum goes to the job's group
 * once, and each worker receives it on a second socket bound to group:port
 * and joined to the group on the interface its unicast socket uses. The
 * unicast socket still carries everything else (JOIN, DATA, resent results).
 * SO_REUSEADDR: several workers on one host bind the same group:port.
 */
int ina__net_open_mcast(struct ina_ctx *ctx)
{
    struct sockaddr_in local;
    socklen_t len = sizeof(local);
    if (getsockname(ctx->fd, (struct sockaddr *)&local, &len) != 0)
        return -errno;
    int guarded = guard_port(ctx, &local);
    if (guarded != 0)
        return guarded;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1, bytes = 8 << 20;
    struct sockaddr_in g = {.sin_family = AF_INET,
                            .sin_port = htons(ctx->mcast_port),
                            .sin_addr.s_addr = htonl(ctx->mcast_group)};
    struct ip_mreq mreq = {.imr_multiaddr = g.sin_addr, .imr_interface = local.sin_addr};
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&g, sizeof(g)) != 0 ||
        setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof(mreq)) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    ctx->mcast_fd = fd;
    return 0;
}
