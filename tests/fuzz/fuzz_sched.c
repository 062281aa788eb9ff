/* fuzz_sched.c: libFuzzer target for ina-sched's input handler (ina__sched_input, ina__sched_tick). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "sched/sched.h"

/*
 * Input: records [1 byte sel][1 byte flags][2 bytes length, big-endian][datagram]
 * (a short final record takes what is left). sel bits 0-2: the source (ports
 * 42000..42007 on loopback; ranks 0..3 of a world of 4 bind whichever comes
 * first), bits 3-5: the clock step before the record.
 * flags: F_MAGIC right magic and version; F_REQ / F_DONE kind REQ / DONE with the
 * kind's body length; F_NAME the job's name in a REQ; F_RANK rank = sel & 3;
 * F_TICK run ina__sched_tick after the datagram; F_FETCH a REQ's base is
 * INA_SCHED_BASE_AT_GRANT (a fetch request). A REQ's flags (body bytes 4..7) come
 * from the input: fetch requests with INA_SCHED_REQ_AGGREGATE may be granted as
 * groups (aggregate 3, §15.7); its bit 1 (LEAVE) makes the rank leave (§15.9).
 * The job's two servers (§15.9) are ports 42010 (primary) and 42011 (replica):
 * F_SERVER makes the record come from one (F_FETCH: the replica), as a PS_STATE
 * (with F_REQ: its length, and the job's name with F_NAME; the action and result in
 * range; the header's tag and op bytes make the stamp asked about one being voided or
 * repaired, and the next stamp near the scheduler's) or a PS_REPLAY (with F_DONE).
 * Checked after every record: the queued replies are GRANTs of the right length to
 * bound ranks and PS_SYNCs to the servers, a PS_REPLAY passed on goes to a server,
 * grants outstanding (a group once) never exceed the window and equal the ranks
 * holding one outside a group or as its leader plus the expired grants' stamps still
 * being voided, no grant was made beyond the delay bound or while the scheduler
 * rebuilds its state, no fetch request was refused, and every group member holds a
 * fetch request that asked to be grouped, with the group's stamp.
 */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define F_MAGIC 0x01u
#define F_REQ 0x02u
#define F_DONE 0x04u
#define F_NAME 0x08u
#define F_RANK 0x10u
#define F_TICK 0x20u
#define F_FETCH 0x40u
#define F_SERVER 0x80u

#define CHECKF(cond)                                                                      \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz_sched: invariant failed at %s:%d: %s\n", __FILE__,       \
                    __LINE__, #cond);                                                     \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static const uint64_t tick_step[8] = {0, 1000, 1000000, 100000000, 999000000, 1001000000,
                                      5000000000ull, 60000000000ull};

static void check(struct ina_sched *s)
{
    unsigned granted = 0;
    for (unsigned e = 0; e < INA_SCHED_VOIDS; e++)
        granted += s->voids[e].state != INA_SCHED_VOID_FREE && s->voids[e].in_o;
    for (unsigned r = 0; r < s->p.world; r++) {
        const struct ina_sched_rank *k = &s->ranks[r];
        granted += k->state == INA_SCHED_GRANTED && !k->member;
        CHECKF(k->group_size <= s->p.aggregate && (k->group_index < k->group_size || k->group_size == 0));
        if (k->state == INA_SCHED_GRANTED && k->group_size > 1)
            CHECKF(k->fetch && k->can_aggregate && k->member == (k->group_index > 0));
    }
    CHECKF(s->outstanding == granted && s->outstanding <= s->p.window);
    CHECKF(s->c.bound_violations == 0);
    if (s->tx.relay) {
        unsigned port = ntohs(s->tx.relay_dst.sin_port);
        CHECKF((port == 42010 || port == 42011) && s->tx.relay_len >= INA_HDR_LEN + 40);
    }
    for (unsigned i = 0; i < s->tx.n; i++) {
        struct ina_hdr h;
        CHECKF(ina__hdr_decode(s->tx.buf[i], s->tx.len[i], &h) == INA_PARSE_OK);
        if (h.kind == INA_K_PS_SYNC) {
            unsigned port = ntohs(s->tx.dst[i].sin_port);
            CHECKF((port == 42010 || port == 42011) && s->tx.len[i] == INA_HDR_LEN + INA_PS_SYNC_LEN);
            CHECKF(ina__get32(s->tx.buf[i] + INA_HDR_LEN + 32) <= INA_PS_SYNC_DEPART);
            continue;
        }
        CHECKF(h.kind == INA_K_SCHED_GRANT && h.rank == INA_RANK_SWITCH &&
               s->tx.len[i] == INA_HDR_LEN + INA_SCHED_GRANT_LEN);
        int32_t st = (int32_t)ina__get32(s->tx.buf[i] + INA_HDR_LEN);
        CHECKF(st == 0 || st == INA_ERR_STALE);
        CHECKF(st != 0 || !s->recovering); /* no grant while its state is rebuilt */
        uint32_t gsize = ina__get32(s->tx.buf[i] + INA_HDR_LEN + 16),
                 gindex = ina__get32(s->tx.buf[i] + INA_HDR_LEN + 20);
        CHECKF(gsize >= 1 && gsize <= s->p.aggregate && gindex < gsize);
        unsigned port = ntohs(s->tx.dst[i].sin_port);
        CHECKF(port >= 42000 && port < 42012); /* a rank or a server (any source binds a rank) */
        if (st == INA_ERR_STALE) { /* a fetch request always fits, in time: a refusal is of */
            int update_req = 0;    /* an update request (several ranks may share a port) */
            for (unsigned r = 0; r < s->p.world; r++)
                update_req |= s->ranks[r].bound && ntohs(s->ranks[r].addr.sin_port) == port &&
                              s->ranks[r].uid == h.slot && !s->ranks[r].fetch;
            CHECKF(update_req);
        }
    }
    ina__sched_tx_reset(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ina_sched s;
    struct ina_sched_params p = {.world = 4, .max_delay = 2, .window = 2,
                                 .grant_timeout_ns = 1000000000ull, .straggler_ratio = 0.6,
                                 .max_wait_ns = 50000000ull, .initial_rate = 1e6,
                                 .aggregate = 3, .nservers = 2, .failover_ns = 500000000ull,
                                 .agg_hold_ns = 10000000ull, .rate_halflife_ns = 50000000ull};
    for (int i = 0; i < 2; i++) {
        p.server[i].sin_family = AF_INET;
        p.server[i].sin_addr.s_addr = htonl(0x7f000001);
        p.server[i].sin_port = htons((uint16_t)(42010 + i));
    }
    snprintf(p.job, sizeof(p.job), "fuzz");
    if (ina__sched_init(&s, &p) != 0)
        abort();
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT);
    uint64_t now = 1;
    size_t off = 0;
    while (off + 4 <= size) {
        uint8_t sel = data[off], flags = data[off + 1];
        size_t len = (size_t)data[off + 2] << 8 | data[off + 3];
        off += 4;
        if (len > size - off)
            len = size - off;
        uint8_t b[2048];
        if (len > sizeof(b))
            len = sizeof(b);
        memcpy(b, data + off, len);
        off += len;
        if ((flags & (F_REQ | F_DONE)) && len < INA_HDR_LEN)
            continue;
        if ((flags & F_SERVER) && (flags & (F_REQ | F_DONE))) { /* PS_STATE, PS_REPLAY */
            b[3] = (flags & F_REQ) ? INA_K_PS_STATE : INA_K_PS_REPLAY;
            size_t want = INA_HDR_LEN + ((flags & F_REQ) ? INA_PS_STATE_LEN : 40 + 12 * (b[24] & 3));
            if (len < want)
                memset(b + len, 0, want - len);
            len = want;
            if (flags & F_NAME)
                memcpy(b + INA_HDR_LEN, "fuzz\0", 5);
            /* The header's op and tag bytes (the scheduler reads neither) steer the values:
             * tag < 64 the stamp asked about is one being voided, < 128 the one repaired;
             * op < 64 the next stamp is near ours; 128 and above: the input's own values. */
            uint8_t pick = b[31], near = b[30];
            if (flags & F_REQ) {
                uint8_t *q = b + INA_HDR_LEN;
                ina__put32(q + 32, ina__get32(q + 32) & 3);  /* the action */
                ina__put32(q + 40, ina__get32(q + 40) % 6);  /* the result */
                if (pick < 128)
                    ina__put32(q + 36, pick < 64 ? s.voids[pick % INA_SCHED_VOIDS].stamp
                                                : s.repair_stamp);
                if (near < 64)
                    ina__put32(q + 52, s.next_stamp - (near & 7));
            } else if (len >= INA_HDR_LEN + 36 && pick < 128) {
                ina__put32(b + INA_HDR_LEN + 32, s.repair_stamp); /* the stamp asked for */
            }
        } else if (flags & (F_REQ | F_DONE)) {
            b[3] = (flags & F_REQ) ? INA_K_SCHED_REQ : INA_K_SCHED_DONE;
            size_t want = INA_HDR_LEN + ((flags & F_REQ) ? INA_SCHED_REQ_LEN : INA_SCHED_DONE_LEN);
            if (len < want)
                memset(b + len, 0, want - len);
            len = want;
            ina__put16(b + 24, 0); /* count */
        }
        if (len >= INA_HDR_LEN && (flags & F_MAGIC)) {
            ina__put16(b, INA_WIRE_MAGIC);
            b[2] = INA_WIRE_VERSION;
        }
        if (len >= INA_HDR_LEN && (flags & F_RANK))
            ina__put16(b + 6, sel & 3);
        if ((flags & F_FETCH) && (flags & F_REQ))
            ina__put32(b + 20, INA_SCHED_BASE_AT_GRANT); /* the header's seq: the base */
        if ((flags & F_NAME) && (flags & F_REQ) && !(flags & F_SERVER))
            memcpy(b + INA_HDR_LEN + 8, "fuzz\0", 5);
        struct sockaddr_in src;
        memset(&src, 0, sizeof(src));
        src.sin_family = AF_INET;
        src.sin_addr.s_addr = htonl(0x7f000001);
        src.sin_port = htons((uint16_t)(42000 + (sel & 7)));
        if (flags & F_SERVER)
            src.sin_port = htons((uint16_t)(42010 + ((flags & F_FETCH) ? 1 : 0)));
        now += tick_step[(sel >> 3) & 7];
        ina__sched_input(&s, b, len, &src, now);
        check(&s);
        if (flags & F_TICK) {
            ina__sched_tick(&s, now);
            check(&s);
        }
    }
    return 0;
}
