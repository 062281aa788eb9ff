/* fallback.c: the host aggregator rank 0 runs when the switch has no room for the job. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rx_burst.h"
#include "engine/engine.h"
#include "lib/ctx.h"
#include "lib/session.h"

/*
 * Why this shape: the switch's pool is shared by every job (ATP's lesson),
 * so a job may find it full. Rather than fail, the job runs on its own
 * hosts: rank 0 hosts the same state machine as ina-switch (src/engine,
 * linked into libina) on a socket of its own, and every rank joins it
 * with the same protocol. Same protocol, same quantization: the same
 * results, at the cost of rank 0's host carrying N streams. It is a
 * parameter server in the ATP sense, chosen only when the network cannot
 * help.
 *
 * Rank 0 opens the socket before it joins the switch and offers its port in
 * its JOIN; the switch names that address in the NOSPACE it sends to every
 * rank. The aggregator runs on its own thread from the refusal until
 * finalize, and lingers there until every rank has left (a rank that lost
 * its last result may still retransmit) or INA_FALLBACK_LINGER_MS pass.
 */

#define INA_FALLBACK_MSGS 16
#define INA_FALLBACK_LINGER_MS 2000

struct ina_fallback {
    int fd;
    struct sockaddr_in addr; /* bound address (rank 0's side of its switch path) */
    pthread_t thread;
    int running;
    atomic_int stop;
    struct ina_switch sw;
    struct ina_rx rx; /* no GRO on this socket: a message is one datagram */
    struct ina_rx_pkt pkts[INA_FALLBACK_MSGS];
    struct mmsghdr txmsgs[64];
    /* The switch's secret, which every rank knows: the aggregator stands in
     * for the switch, so it proves the secret as the switch does (a rank
     * with a secret trusts no JOIN_ACK without the proof, PROTOCOL.md §4.4).
     * Taken from the context that prepares it: the one that read the file. */
    int has_secret;
    struct ina_hmac_key secret;
};

int ina__fallback_prepare(struct ina_ctx *ctx)
{
    struct sockaddr_in local;
    socklen_t len = sizeof(local);
    if (getsockname(ctx->fd, (struct sockaddr *)&local, &len) != 0)
        return -errno;
    struct ina_fallback *fb = calloc(1, sizeof(*fb));
    if (!fb)
        return -ENOMEM;
    fb->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    local.sin_port = 0;
    len = sizeof(fb->addr);
    if (fb->fd < 0 || bind(fb->fd, (struct sockaddr *)&local, sizeof(local)) != 0 ||
        getsockname(fb->fd, (struct sockaddr *)&fb->addr, &len) != 0) {
        int rc = -errno;
        if (fb->fd >= 0)
            close(fb->fd);
        free(fb);
        return rc;
    }
    int bytes = 8 << 20;
    if (setsockopt(fb->fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fb->fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    if (setsockopt(fb->fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
        setsockopt(fb->fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    fb->has_secret = ctx->has_secret;
    fb->secret = ctx->secret;
    ctx->fallback = fb;
    return 0;
}

uint16_t ina__fallback_port(const struct ina_ctx *ctx)
{
    return ctx->fallback ? ntohs(ctx->fallback->addr.sin_port) : 0;
}

/* Send what the aggregator queued, in batches of sendmmsg. */
static void flush(struct ina_fallback *fb)
{
    struct ina_txq *q = &fb->sw.txq;
    for (unsigned i = 0; i < q->nmsg;) {
        unsigned n = 0;
        for (; n < 64 && i + n < q->nmsg; n++) {
            struct msghdr *mh = &fb->txmsgs[n].msg_hdr;
            memset(mh, 0, sizeof(*mh));
            mh->msg_name = &q->addrs[i + n];
            mh->msg_namelen = sizeof(q->addrs[i + n]);
            mh->msg_iov = &q->iovs[i + n];
            mh->msg_iovlen = 1;
        }
        int sent = sendmmsg(fb->fd, fb->txmsgs, n, 0);
        /* A datagram the kernel refuses is lost like any other: the
         * workers' retransmission recovers it. Skip past it. */
        i += sent > 0 ? (unsigned)sent : 1;
    }
    ina__switch_tx_reset(&fb->sw);
}

static int job_running(const struct ina_switch *sw)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++)
        if (sw->jobs[i].state != INA_JOB_FREE)
            return 1;
    return 0;
}

static void *aggregator_main(void *arg)
{
    struct ina_fallback *fb = arg;
    uint64_t next_tick = 0, linger_until = 0;
    for (;;) {
        uint64_t now = ina__now_ns();
        if (atomic_load(&fb->stop)) {
            if (!linger_until)
                linger_until = now + INA_FALLBACK_LINGER_MS * 1000000ull;
            if (!job_running(&fb->sw) || now >= linger_until)
                break;
        }
        int n = ina__rx_burst(&fb->rx, fb->fd, fb->pkts, INA_FALLBACK_MSGS);
        for (int i = 0; i < n; i++) {
            if (ina__switch_tx_full(&fb->sw))
                flush(fb);
            ina__switch_input(&fb->sw, fb->pkts[i].data, fb->pkts[i].len, fb->pkts[i].src, now);
        }
        if (now >= next_tick) {
            ina__switch_tick(&fb->sw, now);
            next_tick = now + 100000000ull;
        }
        flush(fb);
        if (fb->rx.got == 0) {
            struct pollfd pfd = {.fd = fb->fd, .events = POLLIN};
            poll(&pfd, 1, 50);
        }
    }
    return NULL;
}

int ina__fallback_start(struct ina_ctx *ctx, int elems, int nslots)
{
    struct ina_fallback *fb = ctx->fallback;
    if (!fb)
        return INA_ERR_NOSPACE;
    if (fb->running)
        return 0;
    struct ina_switch_params p;
    memset(&p, 0, sizeof(p));
    p.nslots = (uint32_t)nslots; /* a window per lane of the job */
    p.max_elems = (uint32_t)elems;
    p.join_timeout_ns = (uint64_t)ctx->join_timeout_ms * 1000000ull;
    p.idle_timeout_ns = 0; /* it lives as long as rank 0's context */
    memcpy(p.only_job, ctx->job, sizeof(p.only_job));
    p.has_secret = fb->has_secret;
    p.secret = fb->secret;
    if (ctx->integrity) {
        /* Per-packet integrity holds on this path too: the ranks join here
         * asking for it, and the tags' keys come from the secret. */
        p.integrity = 1;
        if (p.max_elems > INA_MAX_ELEMS_TAGGED)
            p.max_elems = INA_MAX_ELEMS_TAGGED;
    }
    int rc = ina__rx_init(&fb->rx, INA_FALLBACK_MSGS, INA_MAX_DATAGRAM);
    if (rc == 0) {
        rc = ina__switch_init(&fb->sw, &p);
        if (rc != 0)
            ina__rx_free(&fb->rx);
    }
    if (rc == 0) {
        rc = -pthread_create(&fb->thread, NULL, aggregator_main, fb);
        if (rc != 0) {
            ina__switch_free(&fb->sw);
            ina__rx_free(&fb->rx);
        }
    }
    if (rc != 0)
        return rc;
    fb->running = 1;
    return 0;
}

void ina__fallback_free(struct ina_fallback *fb)
{
    if (!fb)
        return;
    if (fb->running) {
        atomic_store(&fb->stop, 1);
        pthread_join(fb->thread, NULL);
        ina__switch_free(&fb->sw);
        ina__rx_free(&fb->rx);
    }
    close(fb->fd);
    free(fb);
}

void ina__fallback_close(struct ina_ctx *ctx)
{
    ina__fallback_free(ctx->fallback);
    ctx->fallback = NULL;
}
