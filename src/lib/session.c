/* session.c: joining a job at the switch (JOIN until JOIN_ACK/NAK or the deadline) and leaving it. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "lib/internal.h"

static uint64_t random_nonce(void)
{
    uint64_t v = 0;
    while (v == 0)
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
            v = ina__now_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

static int send_join(struct ina_ctx *ctx, int elems, int window)
{
    uint8_t buf[INA_HDR_LEN + INA_JOIN_BODY_LEN + INA_AUTH_LEN];
    struct ina_hdr h;
    ina_hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)ctx->rank;
    ina_hdr_encode(buf, &h);
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = ctx->nonce;
    j.world_size = (uint16_t)ctx->world;
    j.elems = (uint16_t)elems;
    j.window = (uint32_t)window;
    j.sw_version = INA_VERSION_NUMBER;
    j.lane = (uint8_t)ctx->lane;
    j.nlanes = (uint8_t)ctx->nlanes;
    j.fallback_port = ina__fallback_port(ctx);
    int64_t wait = ((int64_t)ctx->admission_wait_ms + 99) / 100;
    j.wait_100ms = (uint16_t)(wait > UINT16_MAX ? UINT16_MAX : wait);
    memcpy(j.name, ctx->job, sizeof(j.name));
    ina_join_encode(buf + INA_HDR_LEN, &j);
    size_t len = INA_HDR_LEN + INA_JOIN_BODY_LEN;
    if (ctx->has_secret) { /* proof of the secret over header and body (PROTOCOL.md 4.4) */
        ina_hmac_sha256(&ctx->secret, buf, len, buf + len);
        len += INA_AUTH_LEN;
    }
    return ina__net_send(ctx, buf, len);
}

#define JOIN_REDIRECTED 2
#define INA_MAX_REDIRECTS 4 /* a switch redirects once; more is a loop */

/* Handle one datagram received while joining.
 * @return 1 joined, JOIN_REDIRECTED (*port set), 0 ignore, <0 refused. */
static int on_join_reply(struct ina_ctx *ctx, const uint8_t *buf, size_t len, uint16_t *port)
{
    struct ina_hdr h;
    int perr = ina_hdr_decode(buf, len, &h);
    if (perr == INA_PARSE_VERSION && (h.kind == INA_K_JOIN_NAK || h.kind == INA_K_JOIN_ACK))
        return INA_ERR_PROTO; /* a switch of another protocol version answered */
    if (perr != INA_PARSE_OK)
        return 0;
    const uint8_t *body = buf + INA_HDR_LEN;
    size_t blen = len - INA_HDR_LEN;
    if (h.kind == INA_K_JOIN_NAK) {
        uint64_t nonce;
        int32_t reason;
        if (ina_nak_decode(body, blen, &nonce, &reason) != 0 || nonce != ctx->nonce)
            return 0;
        if (reason == INA_ERR_NOSPACE && blen >= INA_NAK_FALLBACK_LEN) {
            /* The job's rank 0 offered to aggregate: where to run instead. */
            memset(&ctx->fallback_target, 0, sizeof(ctx->fallback_target));
            ctx->fallback_target.sin_family = AF_INET;
            memcpy(&ctx->fallback_target.sin_addr.s_addr, body + 16, 4);
            ctx->fallback_target.sin_port = htons(ina_get16(body + 20));
        }
        return reason < 0 ? reason : INA_ERR_REJECTED;
    }
    if (h.kind == INA_K_REDIRECT) {
        /* This lane belongs to another dataplane thread of the switch. */
        uint64_t nonce;
        int32_t reason;
        if (ina_nak_decode(body, blen, &nonce, &reason) != 0 || nonce != ctx->nonce)
            return 0;
        *port = ina_get16(body + 12);
        return *port ? JOIN_REDIRECTED : INA_ERR_PROTO;
    }
    if (h.kind != INA_K_JOIN_ACK)
        return 0;
    struct ina_join j;
    if (ina_join_decode(body, blen, &j) != 0 || j.nonce != ctx->nonce)
        return 0;
    if (ctx->has_secret) {
        /* The switch must prove it knows the secret before we trust its token.
         * No proof at all: a switch without --secret-file, refuse. A wrong
         * proof: not from the switch (a forgery), ignore it and wait. */
        if (blen < INA_JOIN_BODY_LEN + INA_AUTH_LEN)
            return INA_ERR_REJECTED;
        uint8_t mac[INA_SHA256_LEN];
        ina_hmac_sha256(&ctx->secret, buf, INA_HDR_LEN + INA_JOIN_BODY_LEN, mac);
        if (!ina_mem_equal_ct(mac, body + INA_JOIN_BODY_LEN, INA_AUTH_LEN))
            return 0;
    }
    if (j.world_size != ctx->world || j.lane != ctx->lane || j.nlanes != ctx->nlanes ||
        j.elems == 0 || j.window == 0 ||
        j.window > INA_MAX_WINDOW || (j.window & (j.window - 1)) != 0 || j.elems > INA_MAX_ELEMS)
        return INA_ERR_PROTO;
    ctx->job_id = h.job;
    ctx->switch_caps = h.flags;
    ctx->session = h.session;
    ctx->token = h.token;
    ctx->elems = j.elems;
    ctx->window = j.window;
    ctx->mcast_group = j.mcast_group;
    ctx->mcast_port = j.mcast_port;
    return 1;
}

int ina__session_join(struct ina_ctx *ctx, int elems, int window)
{
    ctx->nonce = random_nonce();
    uint64_t start = ina__now_ns();
    uint64_t deadline = start + (uint64_t)ctx->join_timeout_ms * 1000000ull;
    uint64_t next_send = start;
    uint64_t interval_ms = 100;
    int redirects = 0;
    uint8_t buf[512];
    for (;;) {
        uint64_t now = ina__now_ns();
        if (now >= deadline)
            return INA_ERR_TIMEOUT;
        if (now >= next_send) {
            send_join(ctx, elems, window); /* refused while no switch: retry */
            next_send = now + interval_ms * 1000000ull;
            interval_ms = interval_ms * 2 > 1000 ? 1000 : interval_ms * 2;
        }
        uint64_t wake = next_send < deadline ? next_send : deadline;
        struct pollfd pfd = {.fd = ctx->fd, .events = POLLIN};
        int ms = (int)((wake - now + 999999) / 1000000);
        if (poll(&pfd, 1, ms) <= 0)
            continue;
        for (;;) {
            ssize_t n = recv(ctx->fd, buf, sizeof(buf), 0);
            if (n < 0)
                break; /* EAGAIN, or ECONNREFUSED while the switch is not up yet */
            uint16_t port = 0;
            int rc = on_join_reply(ctx, buf, (size_t)n, &port);
            if (rc == JOIN_REDIRECTED) {
                if (++redirects > INA_MAX_REDIRECTS)
                    return INA_ERR_PROTO;
                rc = ina__net_reconnect(ctx, port);
                if (rc != 0)
                    return rc;
                next_send = ina__now_ns(); /* JOIN there at once */
                interval_ms = 100;
                break;
            }
            if (rc != 0)
                return rc > 0 ? 0 : rc;
        }
    }
}

/* Best effort: the switch frees the job once every rank has left, at once
 * if abort is set, or after its idle timeout if these datagrams are lost. */
void ina__session_leave(struct ina_ctx *ctx, int abort)
{
    if (ctx->session == 0 || ctx->fd < 0)
        return;
    uint8_t buf[INA_HDR_LEN];
    struct ina_hdr h;
    ina__hdr_session(&h, ctx, INA_K_LEAVE);
    h.flags = abort ? INA_FLAG_ABORT : 0;
    ina_hdr_encode(buf, &h);
    for (int i = 0; i < 2; i++)
        ina__net_send(ctx, buf, sizeof(buf));
}
