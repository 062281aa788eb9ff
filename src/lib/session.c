/* session.c: joining a job at the switch (JOIN until JOIN_ACK/NAK or the deadline) and leaving it. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/version.h"
#include "lib/ctx.h"
#include "lib/session.h"

static uint64_t random_nonce(void)
{
    uint64_t v = 0;
    while (v == 0)
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
            v = ina__now_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

/*
 * JOIN (or WITHDRAW, the same body: PROTOCOL.md §5.2). A JOIN's header seq
 * tells the switch how long this rank will go on waiting (ms), so that it
 * forgets the registration then even if the WITHDRAW is lost. With a secret,
 * a JOIN carries the switch's last cookie (zeros: none yet) under its proof.
 */
static int send_join(struct ina_ctx *ctx, uint8_t kind, int elems, int window, uint32_t left_ms,
                     const uint8_t *cookie)
{
    uint8_t buf[INA_HDR_LEN + INA_JOIN_BODY_LEN + INA_COOKIE_LEN + INA_AUTH_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, kind);
    h.rank = (uint16_t)ctx->rank;
    h.seq = kind == INA_K_JOIN ? (left_ms ? left_ms : 1) : 0;
    if (kind == INA_K_JOIN && ctx->lanes_auto)
        h.flags = INA_FLAG_LANES_AUTO; /* nlanes below is a proposal (PROTOCOL.md §5.6) */
    if (kind == INA_K_JOIN && ctx->integrity)
        h.flags |= INA_FLAG_INTEGRITY; /* every DATA and RESULT tagged (§4.6) */
    ina__hdr_encode(buf, &h);
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
    ina__join_encode(buf + INA_HDR_LEN, &j);
    size_t len = INA_HDR_LEN + INA_JOIN_BODY_LEN;
    if (ctx->has_secret && kind == INA_K_JOIN) {
        memcpy(buf + len, cookie, INA_COOKIE_LEN);
        len += INA_COOKIE_LEN;
    }
    if (ctx->has_secret) { /* proof of the secret over all of it (PROTOCOL.md 4.4) */
        ina__hmac_sha256(&ctx->secret, buf, len, buf + len);
        len += INA_AUTH_LEN;
    }
    return ina__net_send(ctx, buf, len);
}

#define JOIN_REDIRECTED 2
#define JOIN_WAITING 3
#define JOIN_CHALLENGED 4
#define INA_MAX_REDIRECTS 4 /* a switch redirects once; more is a loop */
#define JOIN_FIRST_NOTE_MS 3000 /* say what the join waits for after this long... */
#define JOIN_NOTE_EVERY_MS 10000 /* ...and again this often */

/* What this rank learned while joining: for its messages on stderr and in
 * ina_last_error(), so that a join that waits says for what. */
struct join_watch {
    uint64_t start, deadline, next_note;
    int answered;          /* some datagram from the switch was understood */
    int refused;           /* ICMP port unreachable since the last answer */
    int waiting;           /* a JOIN_WAIT arrived: fields below */
    unsigned world, joined, state;
    uint8_t bitmap[32];
    unsigned nak_world, nak_nlanes; /* a MISMATCH's other side (0: not said) */
    uint32_t switch_version; /* its INA_VERSION_NUMBER, from a JOIN_NAK (0: not said) */
    unsigned reject_cause;   /* a JOIN_NAK REJECTED's INA_REJECT_* (0: not said) */
    /* With a secret: the switch's last cookie (JOIN_COOKIE, PROTOCOL.md §4.4),
     * and whether the one JOIN that may answer a cookie at once went since
     * the last JOIN of the schedule (forged cookies must not make us flood). */
    uint8_t cookie[INA_COOKIE_LEN];
    int cookie_answered;
};

/*
 * "libina 0.6.0, switch 0.5.0 (the versions differ)": for the refusals that
 * a stale worker or switch could explain (REJECTED, PROTO), so that the
 * message names both versions (PROTOCOL.md §4.1, §4.2).
 */
static const char *versions(uint32_t switch_version, char *buf, size_t len)
{
    char theirs[INA_VERSION_STR_LEN];
    if (!switch_version)
        snprintf(buf, len, "libina %s, the switch does not say its version (older than 0.6)",
                 ina_version_string());
    else
        snprintf(buf, len, "libina %s, switch %s%s", ina_version_string(),
                 ina__version_str(switch_version, theirs, sizeof(theirs)),
                 switch_version != INA_VERSION_NUMBER ? " (the versions differ)" : "");
    return buf;
}

/* The join time left, in ms rounded up (a JOIN's header seq; at least 1). */
static uint32_t join_left_ms(const struct join_watch *w, uint64_t now)
{
    return now < w->deadline ? (uint32_t)((w->deadline - now + 999999) / 1000000) : 1;
}

/* What the join is waiting for, as a phrase. */
static void describe_wait(const struct ina_ctx *ctx, const struct join_watch *w, char *buf,
                          size_t len)
{
    char sw[32];
    ina__switch_str(ctx, sw, sizeof(sw));
    const char *dflt = ctx->addr_is_default ? " (INA_SWITCH is not set: this is the default "
                                              "address)" : "";
    if (w->waiting && w->state == 1) {
        snprintf(buf, len, "all %u ranks joined; the switch at %s holds the job until it has "
                 "free slots (admission wait)", w->world, sw);
    } else if (w->waiting) {
        char missing[96] = "";
        size_t off = 0;
        unsigned shown = 0;
        for (unsigned r = 0; r < w->world && r < 256; r++) {
            if (w->bitmap[r >> 3] & (1u << (r & 7)))
                continue;
            if (shown++ == 8) {
                snprintf(missing + off, sizeof(missing) - off, ", ...");
                break;
            }
            int n = snprintf(missing + off, sizeof(missing) - off, "%s%u", off ? ", " : "", r);
            if (n < 0 || (size_t)n >= sizeof(missing) - off)
                break;
            off += (size_t)n;
        }
        snprintf(buf, len, "waiting for rank%s %s to join (%u of %u joined at the switch %s)",
                 w->world - w->joined == 1 ? "" : "s", missing, w->joined, w->world, sw);
    } else if (w->refused) {
        snprintf(buf, len, "no answer from the switch at %s: port unreachable (is ina-switch "
                 "running there?)%s", sw, dflt);
    } else if (w->answered) {
        snprintf(buf, len, "the switch at %s answered, but has not admitted the job", sw);
    } else {
        snprintf(buf, len, "no answer from the switch at %s (is ina-switch running there, is "
                 "the address right, does a firewall drop UDP to port %u?)%s", sw,
                 (unsigned)ntohs(ctx->switch_addr.sin_port), dflt);
    }
}

/* A progress line on stderr while the join waits (INA_QUIET=1: none). */
static void note_progress(const struct ina_ctx *ctx, const struct join_watch *w, uint64_t now)
{
    if (ctx->quiet)
        return;
    char what[320];
    describe_wait(ctx, w, what, sizeof(what));
    char lane[16] = "";
    if (ctx->nlanes > 1)
        snprintf(lane, sizeof(lane), " lane %d", ctx->lane);
    fprintf(stderr, "ina: job '%s' rank %d%s: %s [%.0f s of %d s]\n", ctx->job, ctx->rank, lane,
            what, (double)(now - w->start) / 1e9, (ctx->join_timeout_ms + 999) / 1000);
}

/* What a JOIN_NAK REJECTED's cause means, for the one who reads ina_last_error(). */
static const char *reject_cause_text(unsigned cause)
{
    switch (cause) {
    case INA_REJECT_PARAMETERS:
        return "join parameters it does not take (world size, rank, job name, elems per "
               "packet or window out of its range)";
    case INA_REJECT_AUTH:
        return "no valid proof of the switch's shared secret (secret_file, INA_SECRET_FILE: "
               "missing, or another secret than ina-switch --secret-file)";
    case INA_REJECT_OTHER_JOB:
        return "this aggregator serves another job";
    case INA_REJECT_TREE:
        return "a child switch at a dataplane that serves workers only";
    case INA_REJECT_SESSION_ENDED:
        return "the JOIN of a session that already ended (a replay)";
    case INA_REJECT_RUNNING_ELSEWHERE:
        return "that rank runs in the job from another host (two jobs with one name?)";
    case INA_REJECT_JOINING_ELSEWHERE:
        return "another process joins the job as that rank (two jobs with one name?)";
    default:
        return "";
    }
}

/* Why the switch refused the JOIN (JOIN_NAK reason), for ina_last_error(). */
static int refused_because(struct ina_ctx *ctx, const struct join_watch *w, int reason)
{
    char sw[32], vers[96];
    ina__switch_str(ctx, sw, sizeof(sw));
    switch (reason) {
    case INA_ERR_MISMATCH:
        if (w->nak_world && w->nak_world != (unsigned)ctx->world)
            return ina__fail(ctx, reason, "the ranks of job '%s' disagree on the world size: "
                             "this rank (%d) has %d, another rank has %u", ctx->job, ctx->rank,
                             ctx->world, w->nak_world);
        if (w->nak_nlanes && ctx->lanes_auto)
            return ina__fail(ctx, reason, "the ranks of job '%s' that fixed their lanes "
                             "disagree (one has %u); this rank (%d) proposed %d (lanes auto)",
                             ctx->job, w->nak_nlanes, ctx->rank, ctx->nlanes);
        if (w->nak_nlanes && w->nak_nlanes != (unsigned)ctx->nlanes)
            return ina__fail(ctx, reason, "the ranks of job '%s' disagree on the lanes: this "
                             "rank (%d) has %d, another rank has %u", ctx->job, ctx->rank,
                             ctx->nlanes, w->nak_nlanes);
        return ina__fail(ctx, reason, "the ranks of job '%s' disagree on the world size or "
                         "the lanes (this rank: world %d, %d lanes)", ctx->job, ctx->world,
                         ctx->nlanes);
    case INA_ERR_REJECTED:
        if (ina__reject_cause_name(w->reject_cause))
            return ina__fail(ctx, reason, "the switch at %s refused rank %d of job '%s': %s "
                             "(reason=%s); %s", sw, ctx->rank, ctx->job,
                             reject_cause_text(w->reject_cause),
                             ina__reject_cause_name(w->reject_cause),
                             versions(w->switch_version, vers, sizeof(vers)));
        return ina__fail(ctx, reason, "the switch at %s refused rank %d of job '%s': parameters "
                         "it does not take, that rank running or joining from another host, a "
                         "session that already ended, or a missing or wrong shared secret (the "
                         "switch's log says which: join_refused); %s", sw, ctx->rank, ctx->job,
                         versions(w->switch_version, vers, sizeof(vers)));
    case INA_ERR_NOSPACE:
        return ina__fail(ctx, reason, "the switch at %s has no free slots for job '%s'", sw,
                         ctx->job);
    case INA_ERR_ABORTED:
        return ina__fail(ctx, reason, "job '%s' was aborted while it was joining (ina-ctl "
                         "abort)", ctx->job);
    case INA_ERR_SHUTDOWN:
        return ina__fail(ctx, reason, "the switch at %s is shutting down (draining after "
                         "SIGTERM) and takes no new jobs", sw);
    case INA_ERR_PROTO:
        return ina__fail(ctx, reason, "the switch at %s refused the join as of another protocol "
                         "version (this rank speaks %d); %s", sw, INA_WIRE_VERSION,
                         versions(w->switch_version, vers, sizeof(vers)));
    case INA_ERR_NOTSUP:
        if (ctx->integrity)
            return ina__fail(ctx, reason, "the switch at %s runs without --integrity, and this "
                             "rank asks for per-packet integrity (ina_config.integrity, "
                             "INA_INTEGRITY=1): both sides must agree", sw);
        return ina__fail(ctx, reason, "the switch at %s runs with --integrity: set "
                         "ina_config.integrity (INA_INTEGRITY=1, with secret_file) on every "
                         "rank", sw);
    default:
        return ina__fail(ctx, reason, "the switch at %s refused the join: %s", sw,
                         ina_strerror(reason));
    }
}

/* Handle one datagram received while joining.
 * @return 1 joined, JOIN_REDIRECTED (*port set), JOIN_WAITING (w updated),
 * 0 ignore, <0 refused. */
static int on_join_reply(struct ina_ctx *ctx, const uint8_t *buf, size_t len, uint16_t *port,
                         struct join_watch *w)
{
    struct ina_hdr h;
    char vers[96];
    int perr = ina__hdr_decode(buf, len, &h);
    if (perr == INA_PARSE_VERSION && (h.kind == INA_K_JOIN_NAK || h.kind == INA_K_JOIN_ACK)) {
        /* A switch of another protocol version answered: its body's layout,
         * and so its software version, is unknown. */
        char sw[32];
        ina__switch_str(ctx, sw, sizeof(sw));
        return ina__fail(ctx, INA_ERR_PROTO, "the switch at %s answered in protocol version %u, "
                         "this rank speaks %d (libina %s)", sw, (unsigned)h.version,
                         INA_WIRE_VERSION, ina_version_string());
    }
    if (perr != INA_PARSE_OK)
        return 0;
    const uint8_t *body = buf + INA_HDR_LEN;
    size_t blen = len - INA_HDR_LEN;
    if (h.kind == INA_K_JOIN_WAIT) {
        if (blen < INA_JOIN_WAIT_BODY_LEN ||
            ((uint64_t)ina__get32(body) << 32 | ina__get32(body + 4)) != ctx->nonce)
            return 0;
        w->waiting = 1;
        w->world = ina__get16(body + 8);
        w->joined = ina__get16(body + 10);
        w->state = body[12];
        memcpy(w->bitmap, body + 16, sizeof(w->bitmap));
        return JOIN_WAITING;
    }
    if (h.kind == INA_K_JOIN_COOKIE) {
        /* Only a switch with a secret asks: the cookie goes under the proof. */
        if (!ctx->has_secret || blen < INA_JOIN_COOKIE_BODY_LEN ||
            ((uint64_t)ina__get32(body) << 32 | ina__get32(body + 4)) != ctx->nonce)
            return 0;
        memcpy(w->cookie, body + 8, INA_COOKIE_LEN);
        return JOIN_CHALLENGED;
    }
    if (h.kind == INA_K_JOIN_NAK) {
        uint64_t nonce;
        int32_t reason;
        if (ina__nak_decode(body, blen, &nonce, &reason) != 0 || nonce != ctx->nonce)
            return 0;
        if (reason == INA_ERR_NOSPACE && blen >= INA_NAK_FALLBACK_LEN) {
            /* The job's rank 0 offered to aggregate: where to run instead. */
            memset(&ctx->fallback_target, 0, sizeof(ctx->fallback_target));
            ctx->fallback_target.sin_family = AF_INET;
            memcpy(&ctx->fallback_target.sin_addr.s_addr, body + 16, 4);
            ctx->fallback_target.sin_port = htons(ina__get16(body + 20));
        }
        if (reason == INA_ERR_REJECTED && blen >= INA_NAK_REJECTED_LEN)
            w->reject_cause = body[INA_NAK_CAUSE];
        if (reason == INA_ERR_MISMATCH) {
            w->nak_world = ina__get16(body + INA_NAK_MISMATCH_WORLD);
            w->nak_nlanes = body[INA_NAK_MISMATCH_NLANES];
        } else {
            w->switch_version = ina__get32(body + INA_NAK_VERSION);
        }
        return reason < 0 ? reason : INA_ERR_REJECTED;
    }
    if (h.kind == INA_K_REDIRECT) {
        /* This lane belongs to another dataplane thread of the switch. */
        uint64_t nonce;
        int32_t reason;
        if (ina__nak_decode(body, blen, &nonce, &reason) != 0 || nonce != ctx->nonce)
            return 0;
        *port = ina__get16(body + 12);
        return *port ? JOIN_REDIRECTED : INA_ERR_PROTO;
    }
    if (h.kind != INA_K_JOIN_ACK)
        return 0;
    struct ina_join j;
    if (ina__join_decode(body, blen, &j) != 0 || j.nonce != ctx->nonce)
        return 0;
    if (ctx->has_secret) {
        /* The switch must prove it knows the secret before we trust its token.
         * No proof at all: a switch without --secret-file, refuse. A wrong
         * proof: not from the switch (a forgery), ignore it and wait. */
        if (blen < INA_JOIN_BODY_LEN + INA_AUTH_LEN)
            return ina__fail(ctx, INA_ERR_REJECTED, "the switch did not prove it knows the "
                             "shared secret: it runs without --secret-file; %s",
                             versions(j.sw_version, vers, sizeof(vers)));
        uint8_t mac[INA_SHA256_LEN];
        ina__hmac_sha256(&ctx->secret, buf, INA_HDR_LEN + INA_JOIN_BODY_LEN, mac);
        if (!ina__mem_equal_ct(mac, body + INA_JOIN_BODY_LEN, INA_AUTH_LEN))
            return 0;
    }
    /* A proposal of lanes (lane 0 of lanes=0) takes the job's count, if the
     * switch says it agreed one; a switch that does not know the flag
     * treats the proposal as fixed, and echoes it. */
    const int agreed = ctx->lanes_auto && (h.flags & INA_FLAG_LANES_AUTO);
    if (j.world_size != ctx->world || j.lane != ctx->lane ||
        (agreed ? j.nlanes < 1 || j.nlanes > INA_MAX_PARTS : j.nlanes != ctx->nlanes) ||
        j.elems == 0 || j.window == 0 ||
        j.window > INA_MAX_WINDOW || (j.window & (j.window - 1)) != 0 || j.elems > INA_MAX_ELEMS)
        return ina__fail(ctx, INA_ERR_PROTO, "the switch granted impossible parameters: world "
                         "%u, lane %u of %u, %u elements per packet, window %u; %s",
                         j.world_size, j.lane, j.nlanes, j.elems, j.window,
                         versions(j.sw_version, vers, sizeof(vers)));
    /* Integrity is agreed when asked for and granted (the HMAC above covers
     * the flag). A switch that predates it ignores the flag: refuse. */
    const int integrity = (h.flags & INA_FLAG_INTEGRITY) != 0;
    if (integrity != ctx->integrity)
        return ctx->integrity
                   ? ina__fail(ctx, INA_ERR_NOTSUP, "the switch does not offer per-packet "
                               "integrity (ina-switch --integrity), which this rank asks for")
                   : ina__fail(ctx, INA_ERR_PROTO, "the switch granted per-packet integrity, "
                               "which this rank did not ask for");
    /* Tagged datagrams (§4.6) leave 16 bytes less for the payload. */
    const int tagged = ctx->has_secret && (j.mcast_group || integrity);
    if (tagged && j.elems > INA_MAX_ELEMS_TAGGED)
        return ina__fail(ctx, INA_ERR_PROTO, "the switch granted %u elements per packet, more "
                         "than a tagged datagram holds (%d)", j.elems, INA_MAX_ELEMS_TAGGED);
    if (agreed)
        ctx->nlanes = j.nlanes;
    ctx->integrity_on = integrity;
    ctx->tag_rx = tagged;
    ctx->tag_tx = integrity;
    if (tagged)
        ina__mac_key_derive(&ctx->mac_key, &ctx->secret, h.job, h.session, h.token);
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

/* The rank gives up joining: take the registration back (twice, no answer;
 * a lost WITHDRAW is covered by the deadline the JOINs stated). */
static void withdraw(struct ina_ctx *ctx, int elems, int window)
{
    for (int i = 0; i < 2; i++)
        send_join(ctx, INA_K_WITHDRAW, elems, window, 0, NULL);
}

int ina__session_join(struct ina_ctx *ctx, int elems, int window)
{
    ina__fail_clear(ctx);
    ctx->nonce = random_nonce();
    struct join_watch w;
    memset(&w, 0, sizeof(w));
    w.start = ina__now_ns();
    w.deadline = w.start + (uint64_t)ctx->join_timeout_ms * 1000000ull;
    w.next_note = w.start + JOIN_FIRST_NOTE_MS * 1000000ull;
    uint64_t next_send = w.start;
    uint64_t interval_ms = 100;
    int redirects = 0;
    uint8_t buf[512];
    for (;;) {
        uint64_t now = ina__now_ns();
        if (now >= w.deadline) {
            withdraw(ctx, elems, window);
            char what[320];
            describe_wait(ctx, &w, what, sizeof(what));
            return ina__fail(ctx, INA_ERR_TIMEOUT, "job '%s' rank %d: no session within "
                             "join_timeout_ms %d: %s", ctx->job, ctx->rank, ctx->join_timeout_ms,
                             what);
        }
        if (now >= w.next_note) {
            note_progress(ctx, &w, now);
            w.next_note = now + JOIN_NOTE_EVERY_MS * 1000000ull;
        }
        if (now >= next_send) {
            /* refused while no switch: retry */
            send_join(ctx, INA_K_JOIN, elems, window, join_left_ms(&w, now), w.cookie);
            w.cookie_answered = 0;
            next_send = now + interval_ms * 1000000ull;
            interval_ms = interval_ms * 2 > 1000 ? 1000 : interval_ms * 2;
        }
        uint64_t wake = next_send < w.deadline ? next_send : w.deadline;
        if (w.next_note < wake)
            wake = w.next_note;
        struct pollfd pfd = {.fd = ctx->fd, .events = POLLIN};
        int ms = (int)((wake - now + 999999) / 1000000);
        if (poll(&pfd, 1, ms) <= 0)
            continue;
        for (;;) {
            ssize_t n = recv(ctx->fd, buf, sizeof(buf), 0);
            if (n < 0) {
                if (errno == ECONNREFUSED)
                    w.refused = 1; /* no switch (yet) at the address: keep trying */
                break;
            }
            uint16_t port = 0;
            int rc = on_join_reply(ctx, buf, (size_t)n, &port, &w);
            if (rc != 0) {
                w.answered = 1;
                w.refused = 0;
            }
            if (rc == JOIN_WAITING)
                continue;
            if (rc == JOIN_CHALLENGED) {
                /* Join again with the cookie now: one round trip, not a retry interval. */
                if (!w.cookie_answered) {
                    w.cookie_answered = 1;
                    send_join(ctx, INA_K_JOIN, elems, window, join_left_ms(&w, ina__now_ns()),
                              w.cookie);
                }
                continue;
            }
            if (rc == JOIN_REDIRECTED) {
                if (++redirects > INA_MAX_REDIRECTS) {
                    withdraw(ctx, elems, window);
                    return ina__fail(ctx, INA_ERR_PROTO, "the switch redirected the join %d "
                                     "times (a loop between its threads?)", redirects);
                }
                rc = ina__net_reconnect(ctx, port);
                if (rc != 0)
                    return ina__fail(ctx, rc, "reconnect to the switch's port %u: %s",
                                     (unsigned)port, strerror(-rc));
                next_send = ina__now_ns(); /* JOIN there at once */
                interval_ms = 100;
                break;
            }
            if (rc > 0) {
                ina__fail_clear(ctx);
                return 0;
            }
            if (rc < 0)
                return ctx->errmsg[0] ? rc : refused_because(ctx, &w, rc);
        }
    }
}

int ina__session_join_host(struct ina_ctx *ctx, int elems, int window)
{
    int rc = ctx->rank == 0 ? ina__fallback_start(ctx, elems, window) : 0;
    if (rc == 0) {
        ctx->switch_addr = ctx->fallback_target;
        rc = ina__net_reconnect(ctx, ntohs(ctx->fallback_target.sin_port));
    }
    if (rc == 0)
        rc = ina__session_join(ctx, elems, window);
    if (rc == 0)
        ctx->path = INA_PATH_HOST;
    return rc;
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
    ina__hdr_encode(buf, &h);
    for (int i = 0; i < 2; i++)
        ina__net_send(ctx, buf, sizeof(buf));
}
