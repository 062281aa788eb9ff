/* kv_rpc.c: the key-value client's connections: shard sockets, joins, requests kept until answered, the hot set's switch context; progress, deadlines, failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/addr.h"
#include "lib/kv/kv.h"
#include "lib/transport.h"

/* This thread's receive buffer (ina__kv_rx_ready). */
static _Thread_local uint8_t *rxbuf;

static void shard_str(const struct ina_kv *kv, unsigned s, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &kv->shard[s].addr.sin_addr, ip, sizeof(ip));
    snprintf(buf, len, "shard %u (%s:%u)", s, ip, (unsigned)ntohs(kv->shard[s].addr.sin_port));
}

/* A shard entry's weight, "HOST[:PORT]@W" (W 1..65535), cut off the entry; 0 without one. */
static int parse_weight(struct ina_kv *kv, char *one, uint32_t *w)
{
    char *at = strchr(one, '@'), *end;
    *w = 0;
    if (!at)
        return 0;
    *at = '\0';
    unsigned long x = strtoul(at + 1, &end, 10);
    if (at[1] < '0' || at[1] > '9' || *end || x < 1 || x > 65535)
        return ina__fail(NULL, INA_ERR_CONFIG, "shard %u: weight '%s' is not an integer "
                         "1..65535 (ps_addrs \"HOST:PORT@W,...\")", kv->nshards, at + 1);
    *w = (uint32_t)x;
    return 0;
}

/* With weights, the ranges of a weighted split (ina__ps_split_first). Every entry has a
 * weight, or none has. */
static int split_ranges(struct ina_kv *kv, const uint32_t *weight)
{
    unsigned with = 0;
    for (unsigned s = 0; s < kv->nshards; s++)
        with += weight[s] != 0;
    if (with == 0)
        return 0;
    if (with != kv->nshards)
        return ina__fail(NULL, INA_ERR_CONFIG, "ps_addrs gives %u of %u shards a weight: give "
                         "every shard one (\"HOST:PORT@W\") or none", with, kv->nshards);
    kv->split = 1;
    ina__ps_split_first(weight, kv->nshards, kv->split_first);
    return 0;
}

int ina__kv_shards_open(struct ina_kv *kv)
{
    const char *p = kv->cfg.ps_addrs;
    uint32_t weight[INA_KV_MAX_SHARDS];
    kv->nshards = 0;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        char one[256], why[200];
        if (kv->nshards == INA_KV_MAX_SHARDS)
            return ina__fail(NULL, INA_ERR_CONFIG, "ps_addrs names more than %d shards",
                             INA_KV_MAX_SHARDS);
        if (len == 0 || len >= sizeof(one))
            return ina__fail(NULL, INA_ERR_CONFIG, "ps_addrs '%s' has an empty or overlong entry",
                             kv->cfg.ps_addrs);
        memcpy(one, p, len);
        one[len] = '\0';
        int rc = parse_weight(kv, one, &weight[kv->nshards]);
        if (rc)
            return rc;
        struct kv_shard *sh = &kv->shard[kv->nshards];
        char hp[300];
        snprintf(hp, sizeof(hp), strchr(one, ':') ? "%s" : "%s:48870", one);
        if (ina__parse_hostport_why(hp, 0, &sh->addr, why, sizeof(why)) != 0)
            return ina__fail(NULL, INA_ERR_CONFIG, "shard %u address: %s (ps_addrs, INA_PS)",
                             kv->nshards, why);
        sh->cwnd = INA_KV_WINDOW_INIT;
        sh->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (sh->fd < 0)
            return ina__fail(NULL, -errno, "socket: %s", strerror(errno));
        kv->nshards++;
        int bytes = 8 << 20;
        if (setsockopt(sh->fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
            setsockopt(sh->fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
        if (setsockopt(sh->fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
            setsockopt(sh->fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
        if (connect(sh->fd, (struct sockaddr *)&sh->addr, sizeof(sh->addr)) != 0)
            return ina__fail(NULL, -errno, "connect to shard %u: %s", kv->nshards - 1,
                             strerror(errno));
        p += len;
        if (*p == ',')
            p++;
    }
    if (kv->nshards == 0)
        return ina__fail(NULL, INA_ERR_CONFIG, "ps_addrs is empty");
    return split_ranges(kv, weight);
}

static void send_raw(struct ina_kv *kv, unsigned s, const uint8_t *buf, size_t len)
{
    if (send(kv->shard[s].fd, buf, len, 0) >= 0) {
        kv->stats.ps_datagrams_sent++;
        kv->stats.ps_bytes_sent += len;
    }
}

/* A header of this rank's session at shard s. */
static void shard_hdr(const struct ina_kv *kv, unsigned s, struct ina_hdr *h, uint8_t kind)
{
    ina__hdr_init(h, kind);
    h->job = kv->shard[s].job;
    h->rank = (uint16_t)kv->cfg.rank;
    h->session = kv->shard[s].session;
    h->token = kv->shard[s].token;
}

/*
 * Join every shard at once: PS_JOIN to each, resent at 100, 200, 400, 800,
 * 1000, 1000 ... ms, until each answered with PS_JOIN_ACK (its session) or
 * PS_JOIN_NAK (the join fails with its reason), or join_timeout_ms passed.
 */
int ina__kv_shards_join(struct ina_kv *kv)
{
    uint64_t nonce = 0;
    while (nonce == 0)
        if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
            nonce = ina__now_ns() ^ (uint64_t)getpid() << 32;
    struct ina_ps_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world = (uint16_t)kv->cfg.world_size;
    j.nshards = (uint16_t)kv->nshards;
    j.dim = (uint16_t)kv->cfg.dim;
    j.optim = (uint8_t)kv->cfg.optimizer;
    j.mode = INA_PS_MODE_SYNC;
    j.init = (uint8_t)kv->cfg.init;
    j.lr = kv->cfg.lr;
    j.eps = kv->cfg.eps;
    j.init_acc = kv->cfg.init_acc;
    j.init_scale = kv->cfg.init_scale;
    j.init_seed = kv->cfg.init_seed;
    j.sw_version = INA_VERSION_NUMBER;
    snprintf(j.name, sizeof(j.name), "%s", kv->job);
    j.hot_keys = (uint32_t)kv->cfg.hot_keys;
    j.profile_steps = (uint32_t)kv->cfg.profile_steps;
    j.reprofile_steps = (uint32_t)kv->cfg.reprofile_steps;
    uint8_t buf[INA_HDR_LEN + INA_PS_JOIN_SPLIT_LEN], rx[2048];
    int joined[INA_KV_MAX_SHARDS] = {0}, njoined = 0;
    uint64_t start = ina__now_ns(), next = start, gap = 100;
    uint64_t deadline = start + (uint64_t)kv->cfg.join_timeout_ms * 1000000ull;
    while (njoined < (int)kv->nshards) {
        uint64_t now = ina__now_ns();
        if (now >= deadline)
            break;
        if (now >= next) {
            for (unsigned s = 0; s < kv->nshards; s++) {
                if (joined[s])
                    continue;
                struct ina_hdr h;
                ina__hdr_init(&h, INA_K_PS_JOIN);
                h.rank = (uint16_t)kv->cfg.rank;
                ina__hdr_encode(buf, &h);
                j.shard = (uint16_t)s;
                j.split = kv->split ? INA_PS_SPLIT_RANGE : INA_PS_SPLIT_MOD;
                j.range_first = (uint32_t)kv->split_first[s];
                j.range_last = (uint32_t)(kv->split_first[s + 1] - 1);
                size_t blen = ina__ps_join_encode_split(buf + INA_HDR_LEN, &j);
                send_raw(kv, s, buf, INA_HDR_LEN + blen);
            }
            next = now + gap * 1000000ull;
            gap = gap * 2 > 1000 ? 1000 : gap * 2;
        }
        struct pollfd pfd[INA_KV_MAX_SHARDS];
        for (unsigned s = 0; s < kv->nshards; s++)
            pfd[s] = (struct pollfd){.fd = joined[s] ? -1 : kv->shard[s].fd, .events = POLLIN};
        uint64_t wake = next < deadline ? next : deadline;
        poll(pfd, kv->nshards, (int)((wake - now) / 1000000 + 1));
        for (unsigned s = 0; s < kv->nshards; s++) {
            ssize_t n;
            while (!joined[s] && (n = recv(kv->shard[s].fd, rx, sizeof(rx), 0)) >= 0) {
                struct ina_hdr h;
                int rc = ina__hdr_decode(rx, (size_t)n, &h);
                if (rc == INA_PARSE_VERSION && h.kind == INA_K_PS_JOIN_NAK)
                    return ina__fail(NULL, INA_ERR_PROTO, "shard %u speaks protocol version %d",
                                     s, h.version);
                if (rc != INA_PARSE_OK || (size_t)n < INA_HDR_LEN + 16 ||
                    ina__get64(rx + INA_HDR_LEN) != nonce)
                    continue;
                if (h.kind == INA_K_PS_JOIN_NAK) {
                    int32_t reason = (int32_t)ina__get32(rx + INA_HDR_LEN + 8);
                    char sh[80];
                    shard_str(kv, s, sh, sizeof(sh));
                    if (reason >= 0)
                        reason = INA_ERR_REJECTED;
                    return ina__fail(NULL, reason, "%s refused the job '%s': %s%s", sh, kv->job,
                                     ina_strerror(reason),
                                     reason == INA_ERR_REJECTED ? " (is it shard %u of the "
                                     "ps_addrs list, started with --shard I/S?)" : "");
                }
                struct ina_ps_join a;
                if (h.kind != INA_K_PS_JOIN_ACK ||
                    ina__ps_join_decode(rx + INA_HDR_LEN, (size_t)n - INA_HDR_LEN, &a) != 0 ||
                    h.session == 0 || a.world != j.world || a.dim != j.dim)
                    continue;
                kv->shard[s].job = h.job;
                kv->shard[s].session = h.session;
                kv->shard[s].token = h.token;
                kv->shard[s].last_reply_ns = ina__now_ns();
                joined[s] = 1;
                njoined++;
            }
        }
    }
    if (njoined == (int)kv->nshards)
        return 0;
    for (unsigned s = 0; s < kv->nshards; s++)
        if (!joined[s]) {
            char sh[80];
            shard_str(kv, s, sh, sizeof(sh));
            return ina__fail(NULL, INA_ERR_TIMEOUT, "%s did not start the job '%s' within %d ms: "
                             "not every rank joined it, or no ina-ps runs there",
                             sh, kv->job, kv->cfg.join_timeout_ms);
        }
    return INA_ERR_TIMEOUT;
}

void ina__kv_shards_close(struct ina_kv *kv, int abort)
{
    for (unsigned s = 0; s < kv->nshards; s++) {
        if (kv->shard[s].session) {
            uint8_t b[INA_HDR_LEN + INA_PS_LEAVE_BODY_LEN];
            struct ina_hdr h;
            shard_hdr(kv, s, &h, INA_K_PS_LEAVE);
            h.flags = abort ? INA_FLAG_ABORT : 0;
            ina__hdr_encode(b, &h);
            ina__put32(b + INA_HDR_LEN, (uint32_t)(abort ? kv->broken : 0));
            ina__put32(b + INA_HDR_LEN + 4, kv->steps_done);
            send_raw(kv, s, b, sizeof(b));
            send_raw(kv, s, b, sizeof(b)); /* twice, best effort: no answer comes */
            kv->shard[s].session = 0;
        }
    }
}

/* ---- The switch context of the hot set ------------------------------------------- */

int ina__kv_switch_open(struct ina_kv *kv)
{
    ina_config c;
    ina_config_init(&c);
    c.switch_addr = kv->cfg.switch_addr;
    c.job = kv->job;
    c.rank = kv->cfg.rank;
    c.world_size = kv->cfg.world_size;
    c.timeout_ms = kv->cfg.timeout_ms;
    c.join_timeout_ms = kv->cfg.join_timeout_ms;
    c.fallback = INA_FALLBACK_NONE; /* a host aggregator has no hot table */
    c.lanes = 1; /* the hot table is one switch job: HOT_DATA has no lanes (PROTOCOL.md §14.3) */
    /* Off loopback, as many floats as a 1500-byte MTU holds with the hot prefix
     * (32 + 8 + 4 * 358 = 1472 bytes of UDP payload). */
    struct sockaddr_in sa;
    if (ina__parse_hostport(kv->cfg.switch_addr, 0, &sa) == 0 &&
        (ntohl(sa.sin_addr.s_addr) >> 24) != 127)
        c.elems_per_packet = (1472 - INA_HDR_LEN - INA_HOT_PREFIX_LEN) / 4;
    int rc = ina_init(&kv->hctx, &c);
    if (rc != 0)
        return rc;
    if (!(kv->hctx->switch_caps & INA_FLAG_CAP_HOT)) {
        ina__session_leave(kv->hctx, 1);
        ina_finalize(kv->hctx);
        kv->hctx = NULL;
        return ina__fail(NULL, INA_ERR_NOTSUP, "the switch at %s has no hot table "
                         "(ina-switch --hot-keys 0 or --int-ops-only)", kv->cfg.switch_addr);
    }
    return 0;
}

void ina__kv_switch_close(struct ina_kv *kv, int abort)
{
    if (!kv->hctx)
        return;
    for (struct ina_kv_req *op = kv->live; op; op = op->live_next)
        op->hot_req = NULL; /* freed with the context below */
    if (abort)
        ina__session_leave(kv->hctx, 1);
    ina_finalize(kv->hctx);
    kv->hctx = NULL;
}

/* ---- Requests ------------------------------------------------------------------ */

int ina__kv_window_room(const struct ina_kv *kv, unsigned s, size_t len)
{
    return kv->shard[s].inflight_bytes == 0 || kv->shard[s].inflight_bytes + len <= kv->shard[s].cwnd;
}

struct kv_rpc *ina__kv_rpc_send(struct ina_kv *kv, struct ina_kv_req *op, unsigned s, uint8_t kind,
                                uint32_t slot, uint32_t seq, uint16_t count, uint16_t flags,
                                const uint8_t *body, size_t blen, kv_answered_fn *answered)
{
    struct kv_rpc *r = malloc(sizeof(*r) + INA_HDR_LEN + blen);
    if (!r) {
        ina__kv_fail(kv, -ENOMEM, "out of memory for a request to shard %u", s);
        return NULL;
    }
    struct ina_hdr h;
    shard_hdr(kv, s, &h, kind);
    h.slot = slot;
    h.seq = seq;
    h.count = count;
    h.flags = flags;
    ina__hdr_encode(r->buf, &h);
    if (blen)
        memcpy(r->buf + INA_HDR_LEN, body, blen);
    uint64_t now = ina__now_ns();
    r->op = op;
    r->answered = answered;
    r->shard = (uint8_t)s;
    r->kind = kind;
    r->tries = 0;
    r->slot = slot;
    r->seq = seq;
    r->off = r->n = 0;
    r->len = INA_HDR_LEN + blen;
    r->first_ns = now;
    r->rto_ms = kv->rto_ms;
    r->deadline_ns = now + (uint64_t)r->rto_ms * 1000000ull;
    if (kv->shard[s].inflight_bytes == 0)
        kv->shard[s].last_reply_ns = now; /* idle time is not a silence */
    kv->shard[s].inflight_bytes += r->len;
    r->next = kv->rpcs;
    kv->rpcs = r;
    kv->nrpcs++;
    if (op)
        op->nwait++;
    send_raw(kv, s, r->buf, r->len);
    return r;
}

/* The request of shard s answered by a reply of kind (slot, seq), unlinked; NULL if none. */
static struct kv_rpc *rpc_take(struct ina_kv *kv, unsigned s, uint8_t kind, uint32_t slot,
                               uint32_t seq, int match_slot, int match_seq)
{
    for (struct kv_rpc **pp = &kv->rpcs; *pp; pp = &(*pp)->next) {
        struct kv_rpc *r = *pp;
        if (r->shard == s && r->kind == kind && (!match_slot || r->slot == slot) &&
            (!match_seq || r->seq == seq)) {
            *pp = r->next;
            kv->nrpcs--;
            struct kv_shard *sh = &kv->shard[s];
            sh->inflight_bytes -= r->len;
            if (r->tries == 0 && sh->cwnd < INA_KV_WINDOW_MAX) /* additive increase */
                sh->cwnd += (kv->dgram * r->len) / sh->cwnd + 1;
            if (r->op)
                r->op->nwait--;
            return r;
        }
    }
    return NULL;
}

void ina__kv_fail(struct ina_kv *kv, int err, const char *fmt, ...)
{
    if (kv->broken)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kv->errmsg, sizeof(kv->errmsg), fmt, ap);
    va_end(ap);
    kv->broken = err;
    /* A failure seen here first breaks the job for every rank: tell the
     * shards and the switch, which end it for the others at once. */
    if (err != INA_ERR_ABORTED && err != INA_ERR_CLOSED)
        ina__kv_shards_close(kv, 1);
    ina__kv_switch_close(kv, err != INA_ERR_ABORTED && err != INA_ERR_CLOSED);
    while (kv->rpcs) {
        struct kv_rpc *r = kv->rpcs;
        kv->rpcs = r->next;
        free(r);
    }
    kv->nrpcs = 0;
    for (struct ina_kv_req *op = kv->head; op; op = op->next) {
        op->done = 1;
        op->status = err;
    }
    kv->head = kv->tail = NULL;
}

/* Request r (taken off the list) was answered: its sender's handler, then free it. */
static void answer(struct ina_kv *kv, struct kv_rpc *r, const struct ina_hdr *h,
                   const uint8_t *body, size_t blen)
{
    if (r->answered)
        r->answered(kv, r, h, body, blen);
    free(r);
}

/* One reply from shard s. */
static void on_reply(struct ina_kv *kv, unsigned s, const uint8_t *buf, size_t len)
{
    struct ina_hdr h;
    struct kv_shard *sh = &kv->shard[s];
    if (ina__hdr_decode(buf, len, &h) != INA_PARSE_OK || h.job != sh->job ||
        h.session != sh->session || h.token != sh->token)
        return; /* another session's, or junk */
    const uint8_t *body = buf + INA_HDR_LEN;
    size_t blen = len - INA_HDR_LEN;
    sh->last_reply_ns = ina__now_ns();
    sh->refused_since_ns = 0;
    kv->stats.ps_datagrams_received++;
    kv->stats.ps_bytes_received += len;
    struct kv_rpc *r;
    switch (h.kind) {
    case INA_K_PS_PUSH_ACK:
        if ((r = rpc_take(kv, s, INA_K_PS_PUSH, h.slot, h.seq, 1, 1)))
            answer(kv, r, &h, body, blen);
        break;
    case INA_K_PS_COMMIT_ACK:
        while ((r = rpc_take(kv, s, INA_K_PS_COMMIT, 0, h.seq, 0, 1)))
            answer(kv, r, &h, body, blen);
        break;
    case INA_K_PS_PULL_RESP:
        if ((r = rpc_take(kv, s, INA_K_PS_PULL, h.slot, 0, 1, 0)))
            answer(kv, r, &h, body, blen);
        break;
    case INA_K_PS_ASSIGN_ACK:
        if ((r = rpc_take(kv, s, INA_K_PS_ASSIGN, h.slot, 0, 1, 0)))
            answer(kv, r, &h, body, blen);
        break;
    case INA_K_PS_ABORT: {
        int32_t reason = blen >= 12 ? (int32_t)ina__get32(body + 8) : INA_ERR_ABORTED;
        unsigned missing = blen >= 14 ? ina__get16(body + 12) : 0xFFFF;
        uint32_t step = blen >= 20 ? ina__get32(body + 16) : 0;
        char shs[80], who[96] = "";
        shard_str(kv, s, shs, sizeof(shs));
        if (missing != 0xFFFF)
            snprintf(who, sizeof(who), "; rank %u had not completed step %u", missing, step);
        if (reason != INA_ERR_TIMEOUT && reason != INA_ERR_PS_FULL)
            reason = INA_ERR_ABORTED;
        ina__kv_fail(kv, reason, "%s ended the job: %s%s", shs,
                 reason == INA_ERR_ABORTED ? "a rank failed or left with work in flight"
                 : reason == INA_ERR_PS_FULL ? "its --max-memory is reached"
                                              : "a step or the job timed out there", who);
        break;
    }
    default: break;
    }
}

static int rx_all(struct ina_kv *kv, uint64_t now, uint8_t *buf)
{
    int got = 0;
    for (unsigned s = 0; s < kv->nshards && !kv->broken; s++) {
        for (int i = 0; i < 256 && !kv->broken; i++) {
            ssize_t n = recv(kv->shard[s].fd, buf, INA_GRO_BUF, 0);
            if (n < 0) {
                if (errno == ECONNREFUSED && !kv->shard[s].refused_since_ns)
                    kv->shard[s].refused_since_ns = now;
                break;
            }
            on_reply(kv, s, buf, (size_t)n);
            got++;
        }
    }
    return got;
}

/* Resend what timed out (the timeout doubles, to 1 s); fail at a shard's deadline. */
static void timers(struct ina_kv *kv, uint64_t now)
{
    for (struct kv_rpc *r = kv->rpcs; r && !kv->broken; r = r->next) {
        if (now < r->deadline_ns)
            continue;
        struct kv_shard *sh = &kv->shard[r->shard];
        char shs[80];
        /* (a reply may have been taken after `now` was read: no silence then) */
        if (now > sh->last_reply_ns &&
            now - sh->last_reply_ns > (uint64_t)kv->cfg.timeout_ms * 1000000ull) {
            shard_str(kv, r->shard, shs, sizeof(shs));
            ina__kv_fail(kv, INA_ERR_TIMEOUT,
                     "no answer from %s for %d ms (timeout_ms)%s", shs, kv->cfg.timeout_ms,
                     r->kind == INA_K_PS_COMMIT ? " while it waited for every rank to push the "
                                                  "step: a rank stopped, or the shard is gone"
                                                : ": the shard is gone or unreachable");
            return;
        }
        if (sh->refused_since_ns && now > sh->refused_since_ns && now > sh->last_reply_ns &&
            now - sh->refused_since_ns > INA_REFUSED_FAIL_MS * 1000000ull &&
            now - sh->last_reply_ns > INA_REFUSED_FAIL_MS * 1000000ull) {
            shard_str(kv, r->shard, shs, sizeof(shs));
            ina__kv_fail(kv, -ECONNREFUSED, "%s is gone: port unreachable for %d ms", shs,
                     INA_REFUSED_FAIL_MS);
            return;
        }
        if (r->kind != INA_K_PS_COMMIT && now - sh->cut_ns > (uint64_t)r->rto_ms * 1000000ull) {
            size_t floor = 4 * kv->dgram;
            sh->cwnd = sh->cwnd / 2 > floor ? sh->cwnd / 2 : floor; /* a loss: halve */
            sh->cut_ns = now;
        }
        r->tries++;
        kv->stats.ps_retransmits++;
        r->rto_ms = r->rto_ms * 2 > INA_MAX_RTO_MS ? INA_MAX_RTO_MS : r->rto_ms * 2;
        r->deadline_ns = now + (uint64_t)r->rto_ms * 1000000ull;
        send_raw(kv, r->shard, r->buf, r->len);
    }
}

int ina__kv_rx_ready(struct ina_kv *kv)
{
    if (!rxbuf && !(rxbuf = malloc(INA_GRO_BUF))) {
        ina__kv_fail(kv, -ENOMEM, "out of memory for a receive buffer");
        return 0;
    }
    return 1;
}

void ina__kv_rpc_progress(struct ina_kv *kv, int timeout_ms)
{
    if (!ina__kv_rx_ready(kv) || kv->broken)
        return;
    uint64_t now = ina__now_ns();
    int got = rx_all(kv, now, rxbuf);
    if (kv->hctx && kv->hctx->head && !kv->broken)
        ina__stream_progress(kv->hctx, 0);
    if (!got && timeout_ms > 0 && !kv->broken) {
        uint64_t wake = now + (uint64_t)timeout_ms * 1000000ull;
        for (struct kv_rpc *r = kv->rpcs; r; r = r->next)
            if (r->deadline_ns < wake)
                wake = r->deadline_ns;
        if (kv->hctx && kv->hctx->head && kv->hctx->next_rto_ns && kv->hctx->next_rto_ns < wake)
            wake = kv->hctx->next_rto_ns;
        struct pollfd pfd[INA_KV_MAX_SHARDS + INA_XP_MAX];
        unsigned n = 0;
        for (unsigned s = 0; s < kv->nshards; s++)
            pfd[n++] = (struct pollfd){.fd = kv->shard[s].fd, .events = POLLIN};
        if (kv->hctx && kv->hctx->head) /* the switch's socket, and its group with --multicast */
            n += (unsigned)ina__transport_pollfds(kv->hctx, pfd + n);
        poll(pfd, n, wake > now ? (int)((wake - now + 999999) / 1000000) : 0);
        now = ina__now_ns();
        rx_all(kv, now, rxbuf);
        if (kv->hctx && kv->hctx->head && !kv->broken)
            ina__stream_progress(kv->hctx, 0);
    }
    if (kv->broken)
        return;
    timers(kv, now);
}

int ina__kv_wait_rpcs(struct ina_kv *kv, struct ina_kv_req *op)
{
    for (;;) {
        int left = 0;
        for (struct kv_rpc *r = kv->rpcs; r; r = r->next)
            left |= r->op == op;
        if (!left || kv->broken)
            return kv->broken;
        ina__kv_rpc_progress(kv, 100);
    }
}
