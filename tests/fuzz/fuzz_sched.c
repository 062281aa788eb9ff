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
 * groups (aggregate 3, §15.7).
 * Checked after every record: the queued replies are GRANTs of the right length to
 * bound ranks, grants outstanding (a group once) never exceed the window and equal
 * the ranks holding one outside a group or as its leader, no grant was made beyond
 * the delay bound, no fetch request was refused, and every group member holds a
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
    for (unsigned r = 0; r < s->p.world; r++) {
        const struct ina_sched_rank *k = &s->ranks[r];
        granted += k->state == INA_SCHED_GRANTED && !k->member;
        CHECKF(k->group_size <= s->p.aggregate && (k->group_index < k->group_size || k->group_size == 0));
        if (k->state == INA_SCHED_GRANTED && k->group_size > 1)
            CHECKF(k->fetch && k->can_aggregate && k->member == (k->group_index > 0));
    }
    CHECKF(s->outstanding == granted && s->outstanding <= s->p.window);
    CHECKF(s->c.bound_violations == 0);
    for (unsigned i = 0; i < s->tx.n; i++) {
        struct ina_hdr h;
        CHECKF(ina__hdr_decode(s->tx.buf[i], sizeof(s->tx.buf[i]), &h) == INA_PARSE_OK);
        CHECKF(h.kind == INA_K_SCHED_GRANT && h.rank == INA_RANK_SWITCH);
        int32_t st = (int32_t)ina__get32(s->tx.buf[i] + INA_HDR_LEN);
        CHECKF(st == 0 || st == INA_ERR_STALE);
        uint32_t gsize = ina__get32(s->tx.buf[i] + INA_HDR_LEN + 16),
                 gindex = ina__get32(s->tx.buf[i] + INA_HDR_LEN + 20);
        CHECKF(gsize >= 1 && gsize <= s->p.aggregate && gindex < gsize);
        unsigned port = ntohs(s->tx.dst[i].sin_port);
        CHECKF(port >= 42000 && port < 42008);
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
                                 .aggregate = 3};
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
        if (flags & (F_REQ | F_DONE)) {
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
        if ((flags & F_NAME) && (flags & F_REQ))
            memcpy(b + INA_HDR_LEN + 8, "fuzz\0", 5);
        struct sockaddr_in src;
        memset(&src, 0, sizeof(src));
        src.sin_family = AF_INET;
        src.sin_addr.s_addr = htonl(0x7f000001);
        src.sin_port = htons((uint16_t)(42000 + (sel & 7)));
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
