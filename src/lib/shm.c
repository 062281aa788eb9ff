/* shm.c: a worker's shared-memory rings to a switch on the same host (PROTOCOL.md §5.9). */
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/host.h"
#include "common/kv_wire.h"
#include "common/shm_ring.h"
#include "lib/ctx.h"
#include "lib/session.h"
#include "lib/stream.h"
#include "lib/transport.h"

/*
 * Why optional and best effort: the rings only pay on one host, and only a
 * switch started with --shm, run by the same user, can map them. Anything
 * that goes wrong while attaching (no offer, another user, another pid
 * namespace, a lost answer) leaves the context on UDP, which carries the
 * same protocol.
 *
 * The object is a memfd whose size is sealed (shm_ring.h), so that neither
 * side can lose a page of its mapping: a same-user process that opens it
 * (through /proc/<pid>/fd) can write nonsense into the rings, which both
 * sides check, but cannot make either side fault.
 */

#define INA_SHM_ATTACH_WAIT_MS 2000 /* at most, then UDP */
#define INA_SHM_MIN_SLOTS 64
#define INA_SHM_MAX_SLOTS 4096


/* SHM_ATTACH for the memfd `name`, our descriptor fd (§5.9). */
static void send_attach(struct ina_ctx *ctx, const char *name, int fd, uint32_t nslots,
                        uint32_t slot_size, uint64_t nonce)
{
    uint8_t buf[INA_HDR_LEN + INA_SHM_ATTACH_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_session(&h, ctx, INA_K_SHM_ATTACH);
    ina__hdr_encode(buf, &h);
    uint8_t *b = buf + INA_HDR_LEN;
    memset(b, 0, INA_SHM_ATTACH_BODY_LEN);
    ina__put32(b, (uint32_t)(nonce >> 32));
    ina__put32(b + 4, (uint32_t)nonce);
    ina__put32(b + 8, nslots);
    ina__put32(b + 12, slot_size);
    memcpy(b + 16, name, strnlen(name, INA_SHM_NAME_MAX - 1));
    ina__put32(b + 80, (uint32_t)getpid());
    ina__put32(b + 84, (uint32_t)fd);
    ina__net_send(ctx, buf, sizeof(buf));
}

/* @return 1 if buf is our SHM_ACK (*reason set), else 0. */
static int is_ack(const struct ina_ctx *ctx, const uint8_t *buf, size_t len, uint64_t nonce,
                  int32_t *reason)
{
    struct ina_hdr h;
    uint64_t n;
    if (ina__hdr_decode(buf, len, &h) != INA_PARSE_OK || h.kind != INA_K_SHM_ACK ||
        h.job != ctx->job_id || h.session != ctx->session || h.token != ctx->token)
        return 0;
    if (ina__nak_decode(buf + INA_HDR_LEN, len - INA_HDR_LEN, &n, reason) != 0 || n != nonce)
        return 0;
    return 1;
}

int ina__shm_attach(struct ina_ctx *ctx)
{
    const char *env = getenv("INA_SHM");
    if (!(ctx->switch_caps & INA_FLAG_CAP_SHM) || !ina__addr_is_this_host(&ctx->switch_addr) ||
        (env && strcmp(env, "0") == 0))
        return 0;
    uint32_t nslots = INA_SHM_MIN_SLOTS;
    while (nslots < 2 * ctx->window && nslots < INA_SHM_MAX_SLOTS)
        nslots *= 2;
    uint32_t slot_size = ina__ring_slot_size(INA_HDR_LEN + INA_HOT_PREFIX_LEN +
                                           4 * (size_t)ctx->elems + INA_MAC_LEN); /* §4.6 */
    struct ina_shm *s = calloc(1, sizeof(*s));
    char name[INA_SHM_NAME_MAX];
    int fd;
    if (!s)
        return 0;
    if (ina__ring_create(s, name, &fd, nslots, slot_size) != 0) {
        free(s);
        return 0;
    }
    uint64_t nonce = ctx->nonce ^ 0x5348u;
    uint64_t now = ina__now_ns(), deadline = now + INA_SHM_ATTACH_WAIT_MS * 1000000ull;
    uint64_t next_send = now;
    int32_t reason = INA_ERR_TIMEOUT;
    uint8_t buf[512];
    for (int done = 0; !done;) {
        now = ina__now_ns();
        if (now >= deadline)
            break;
        if (now >= next_send) {
            send_attach(ctx, name, fd, nslots, slot_size, nonce);
            next_send = now + 100000000ull;
        }
        uint64_t wake = next_send < deadline ? next_send : deadline;
        struct pollfd pfd = {.fd = ctx->fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)((wake - now + 999999) / 1000000)) <= 0)
            continue;
        ssize_t n;
        while (!done && (n = recv(ctx->fd, buf, sizeof(buf), MSG_DONTWAIT)) >= 0) {
            done = is_ack(ctx, buf, (size_t)n, nonce, &reason);
            if (!done && n > 3 && buf[3] == INA_K_ABORT) {
                /* The session ended before it began (another process took a
                 * rank): the next operation must say so, not time out. */
                ina__stream_on_datagram(ctx, buf, (size_t)n, now);
                done = ctx->broken != 0;
            }
        }
    }
    close(fd); /* the switch opens it only while we wait: mapped by both sides now, or by us */
    if (reason != 0) {
        ina__ring_unmap(s);
        free(s);
        return 0;
    }
    ctx->shm = s;
    ina__transport_add(ctx, &ina__shm_ops); /* sends go to the rings from now on */
    return 1;
}

void ina__shm_detach(struct ina_ctx *ctx)
{
    if (!ctx->shm)
        return;
    ina__transport_remove(ctx, &ina__shm_ops); /* back to the socket */
    ina__ring_unmap(ctx->shm);
    free(ctx->shm);
    ctx->shm = NULL;
}

/* The switch sleeps: wake it with a DOORBELL over UDP. */
static void ring_bell(struct ina_ctx *ctx)
{
    uint8_t buf[INA_HDR_LEN];
    struct ina_hdr h;
    ina__hdr_session(&h, ctx, INA_K_DOORBELL);
    ina__hdr_encode(buf, &h);
    ina__net_send(ctx, buf, sizeof(buf));
}

/*
 * The switch reads a ring only while it runs: one that died awake (its
 * `sleeping` word clear) asks for no DOORBELL, and nothing would reach its
 * port. So a retransmission (a timer expired: no RESULT came) rings anyway.
 * A live switch takes it as a wake-up; the host of a dead one answers "port
 * unreachable", and the context fails with -ECONNREFUSED as on UDP rather
 * than at its deadline.
 */
static void shm_probe(struct ina_ctx *ctx)
{
    if (ctx->shm)
        ring_bell(ctx);
}

/* Into the up ring: what does not fit (the switch is behind) is lost, like a
 * datagram a full socket buffer refuses. */
static void shm_send_burst(struct ina_ctx *ctx, const struct iovec *iov, const unsigned *order,
                           unsigned n)
{
    unsigned sent = 0;
    for (unsigned i = 0; i < n; i++) {
        const struct iovec *v = &iov[order[i]];
        uint8_t *slot = ina__ring_slot(ctx->shm, 1);
        if (!slot || v->iov_len > ctx->shm->slot_size - 4)
            continue; /* full (the switch is behind): lost, like a full socket buffer */
        memcpy(slot, v->iov_base, v->iov_len);
        ina__ring_push(ctx->shm, 1, v->iov_len);
        sent++;
    }
    if (sent && ina__ring_wake_needed(ctx->shm, 1))
        ring_bell(ctx);
}

int ina__shm_recv(struct ina_ctx *ctx, uint64_t now)
{
    int got = 0;
    for (int i = 0; i < INA_SHM_MAX_SLOTS && ctx->shm && !ctx->broken; i++) {
        size_t len;
        const uint8_t *p = ina__ring_peek(ctx->shm, 0, &len);
        if (!p) {
            if (ctx->shm->corrupt)
                ina__stream_fail_all(ctx, INA_ERR_PROTO); /* the switch broke its ring */
            break;
        }
        memcpy(ctx->ringmem, p, len); /* copied out: the switch may still write there */
        ina__ring_pop(ctx->shm, 0);
        ina__fault_corrupt(&ctx->fault, ctx->ringmem, len); /* INA_FAULT=corrupt */
        ina__stream_on_datagram(ctx, ctx->ringmem, len, now);
        got++;
    }
    return got;
}

/* The switch rings the doorbell (a DOORBELL datagram to the socket) of a side that sleeps. */
static int shm_may_sleep(struct ina_ctx *ctx)
{
    return !ctx->shm || ina__ring_sleep_prepare(ctx->shm, 0);
}

static void shm_awake(struct ina_ctx *ctx)
{
    if (ctx->shm)
        ina__ring_awake(ctx->shm, 0);
}

static int shm_readable(const struct ina_ctx *ctx) { return ina__ring_readable(ctx->shm, 0); }

/* A move to rank 0's host aggregator (migrate.c): the rings were the old session's, the
 * aggregator is on UDP. */
static void shm_session_end(struct ina_ctx *ctx) { ina__shm_detach(ctx); }

/* The DOORBELL and every ABORT and MIGRATE come by the socket, which ina__udp_ops polls. */
const struct ina_transport_ops ina__shm_ops = {
    .name = "shm", .order = 1, .send_burst = shm_send_burst, .rx_burst = ina__shm_recv,
    .readable = shm_readable, .may_sleep = shm_may_sleep, .awake = shm_awake,
    .probe = shm_probe, .session_end = shm_session_end};
