/* fuzz_ps.c: libFuzzer target for ina-ps's input handler (ina__ps_input). */

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/log.h"
#include "ps/chain.h"
#include "ps/member.h"
#include "ps/ps.h"
#include "ps_wire.h"
#include "test_addr.h"

/*
 * Input: records [1 byte sel][1 byte flags][2 bytes length, big-endian][datagram]
 * (a short final record takes what is left).
 * sel bits 0-2: the source address (0..2: ranks 0..2 of job "honest"; 3..7:
 * strangers, some sharing a rank's IP or port); bits 3-5: the clock step of F_TICK.
 * flags, in this order:
 *   F_MAGIC  right magic and version
 *   F_CREDS  job 1's id, session and token (an attacker who sniffed them)
 *   F_RANK   the rank the source address holds in job 1, if any
 *   F_COUNT  count = the entries the length holds, by kind (PUSH: key + dim values,
 *            PULL: keys, ASSIGN: key + values + state), length cut to match
 *   F_KIND   kind = PUSH, COMMIT, PULL, ASSIGN, LEAVE, JOIN, UPDATE, CHAIN_FWD, CHAIN_ACK,
 *            PS_SYNC, PS_REPLAY by bits 6-7 of sel and flag bits 6-7 (PS kinds are where the
 *            paths are)
 *   F_TICK   after the datagram, advance the clock and run ina__ps_tick
 * Before the records, three jobs start with honest JOINs: "honest" (world 3, dim 2,
 * Adagrad) at src_table[0..2], "stale" (the same, mode STALE, D 2) at the same addresses,
 * and "oracle" (world 2, dim 1, SGD lr 1) at addresses the records can never use.
 * Chain replication (§15.8) is on both ways at once: forwards are taken from src_table[5]
 * (--chain-from) and sent to src_table[6] (--chain-to). F_CREDS gives UPDATE, CHAIN_FWD and
 * CHAIN_ACK the stale job's credentials (and CHAIN_FWD its name); F_COUNT cuts UPDATE and
 * CHAIN_FWD to whole entries. ina-sched's link (§15.9) is on too, its address src_table[4]:
 * F_CREDS names the stale job in a PS_SYNC or PS_REPLAY, F_COUNT cuts a PS_REPLAY to whole
 * entries and makes a PS_SYNC well-formed (its length, an action 0..3, a count 0..64). After them, if the oracle still runs in the same session,
 * one honest step of it must give exact values: no datagram from another address,
 * even with stolen credentials, changes another job's parameters. Checked throughout:
 * the replies queued are well-formed, every byte held (stores, packet bitmaps, held UPDATE
 * copies, chain forwards) is charged and stays within --max-memory, the stores'
 * indexes and records agree, and each open step's counts are bounded; forwards go only to
 * the replica and CHAIN_ACKs only to the primary, no UPDATE_ACK goes to the primary's
 * address, and no outcome is told while the chain still waits for its stamp; PS_STATE and
 * PS_REPLAY go only to ina-sched, a VOIDED answer is for a stamp already resolved, a job's
 * next stamp never goes back, and the voided stamps recorded lie below it.
 */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HARNESS __attribute__((no_sanitize("coverage"), noinline))
#define F_MAGIC 0x01u
#define F_CREDS 0x02u
#define F_RANK 0x04u
#define F_COUNT 0x08u
#define F_KIND 0x10u
#define F_TICK 0x20u

#define CHECKF(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_ps: invariant failed at %s:%d: %s\n", __FILE__,        \
                    __LINE__, #cond);                                                   \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* Entropy from a PRNG reset per input, so every input replays exactly (as fuzz_switch.c):
 * ps.c's getrandom() calls resolve here (-Wl,--wrap, cmake/fuzz.cmake). */
static uint64_t rng_state;

ssize_t __wrap_getrandom(void *buf, size_t n, unsigned int flags);
ssize_t __wrap_getrandom(void *buf, size_t n, unsigned int flags)
{
    (void)flags;
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        p[i] = (uint8_t)(rng_state >> 24);
    }
    return (ssize_t)n;
}

static struct sockaddr_in src_table[8], oracle_addr[2];
static const uint64_t tick_step[8] = {0, 1000000, 100000000, 1100000000ull, 31000000000ull,
                                      61000000000ull, 121000000000ull, 3601000000000ull};
static struct ina_ps ps;
static struct ina_ps_chain chain;
static struct ina_ps_sched link;
static uint64_t now_ns;
static uint32_t last_session[INA_PS_MAX_JOBS], last_stamp[INA_PS_MAX_JOBS];

HARNESS static void check_tx(void)
{
    for (unsigned i = 0; i < ps.tx.n; i++) {
        const uint8_t *b = ps.tx.iov[i].iov_base;
        size_t len = ps.tx.iov[i].iov_len;
        CHECKF(b >= ps.tx.mem && b + len <= ps.tx.mem + INA_PS_TX_BYTES);
        struct ina_hdr h;
        CHECKF(ina__hdr_decode(b, len, &h) == INA_PARSE_OK &&
               (h.rank == INA_RANK_SWITCH || h.kind == INA_K_PS_CHAIN_FWD ||
                h.kind == INA_K_PS_REPLAY)); /* FWD, REPLAY: the update's rank */
        switch (h.kind) {
        case INA_K_PS_JOIN_ACK: CHECKF(len == INA_HDR_LEN + INA_PS_JOIN_BODY_LEN || len == INA_HDR_LEN + INA_PS_JOIN_SPLIT_LEN); break;
        case INA_K_PS_JOIN_NAK: CHECKF(len == INA_HDR_LEN + INA_NAK_BODY_LEN); break;
        case INA_K_PS_ABORT: CHECKF(len == INA_HDR_LEN + INA_PS_ABORT_BODY_LEN); break;
        case INA_K_PS_PUSH_ACK:
        case INA_K_PS_COMMIT_ACK:
        case INA_K_PS_ASSIGN_ACK: CHECKF(len == INA_HDR_LEN); break;
        case INA_K_PS_CHAIN_FWD:
            CHECKF(ina__addr_eq(&ps.tx.dst[i], &chain.to) &&
                   len >= INA_HDR_LEN + INA_PS_CHAIN_FWD_PREFIX + INA_PS_UPDATE_PREFIX);
            break;
        case INA_K_PS_CHAIN_ACK:
            CHECKF(ina__addr_eq(&ps.tx.dst[i], &chain.from) &&
                   len == INA_HDR_LEN + INA_PS_CHAIN_ACK_LEN);
            break;
        case INA_K_PS_STATE:
            CHECKF(ina__addr_eq(&ps.tx.dst[i], &link.addr) && len == INA_HDR_LEN + INA_PS_STATE_LEN);
            CHECKF(ina__get32(b + INA_HDR_LEN + 40) <= INA_PS_FATE_NO_JOB);
            break;
        case INA_K_PS_REPLAY:
            CHECKF(ina__addr_eq(&ps.tx.dst[i], &link.addr) && h.rank != INA_RANK_SWITCH &&
                   len >= INA_HDR_LEN + 32 + INA_PS_UPDATE_PREFIX);
            break;
        case INA_K_PS_UPDATE_ACK: {
            CHECKF(len == INA_HDR_LEN + INA_PS_UPDATE_ACK_LEN);
            CHECKF(!ina__addr_eq(&ps.tx.dst[i], &chain.from)); /* those become CHAIN_ACKs */
            int32_t st = (int32_t)ina__get32(b + INA_HDR_LEN);
            uint32_t g = ina__get32(b + INA_HDR_LEN + 12);
            if (st != INA_PS_UPDATE_HELD && g != INA_STAMP_NONE && h.job >= 1 &&
                h.job <= INA_PS_MAX_JOBS) { /* the chain's promise: told once the replica has it */
                const struct ina_ps_chain_job *cj = &chain.jobs[h.job - 1];
                CHECKF(!(cj->session == ps.jobs[h.job - 1].session && ina__ps_chain_pending(cj, g)));
            }
            CHECKF(st == 0 || st == INA_ERR_STALE || st == INA_PS_UPDATE_HELD ||
                   st == INA_PS_UPDATE_VOIDED);
            if (st == INA_PS_UPDATE_HELD || st == INA_PS_UPDATE_VOIDED) /* took no stamp */
                CHECKF(ina__get32(b + INA_HDR_LEN + 8) == 0);
            if (st == INA_PS_UPDATE_VOIDED && h.job >= 1 && h.job <= INA_PS_MAX_JOBS &&
                ps.jobs[h.job - 1].session == h.session) /* voided: resolved before it came */
                CHECKF((int32_t)(g - ps.jobs[h.job - 1].next_stamp) < 0);
            break;
        }
        case INA_K_PS_PULL_RESP: {
            const struct ina_ps_job *job = &ps.jobs[h.job - 1];
            CHECKF(h.job >= 1 && h.job <= INA_PS_MAX_JOBS);
            (void)job;
            CHECKF(len > INA_HDR_LEN || h.count == 0);
            break;
        }
        default: CHECKF(!"unexpected kind queued by ina-ps");
        }
    }
    ina__ps_tx_reset(&ps);
}

HARNESS static void check_state(void)
{
    /* Every byte held for the jobs, counted from the structures: all of it charged to
     * --max-memory (PROTOCOL.md §14.2.4: bitmaps; §15.2: held copies; §15.8: forwards). */
    size_t mem = 0;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        const struct ina_ps_chain_job *cj = &chain.jobs[i];
        mem += cj->q ? INA_PS_CHAIN_WINDOW * sizeof(*cj->q) : 0;
        for (unsigned k = 0; k < cj->n; k++)
            mem += cj->q[(cj->head + k) % INA_PS_CHAIN_WINDOW].len;
    }
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        const struct ina_ps_job *j = &ps.jobs[i];
        if (j->state == INA_PS_FREE)
            continue;
        const struct ina_ps_store *s = &j->store;
        mem += s->bytes + (j->scratch ? s->dim * sizeof(float) : 0);
        for (int p = 0; p < 2; p++)
            for (int r = 0; r < INA_MAX_WORKERS; r++)
                mem += j->rs[p][r].bits ? j->rs[p][r].nbits / 8 : 0;
        for (int k = 0; k < INA_PS_HOLD; k++)
            mem += j->held[k].used ? j->held[k].len : 0;
        for (int r = 0; r < INA_MAX_WORKERS; r++) /* replay copies (member.c, §14.2.8) */
            mem += link.jobs[i].kept[r].cap;
        CHECKF(s->n <= s->cap && s->index.n == s->n);
        for (int p = 0; p < 2; p++)
            CHECKF(s->ntouched[p] <= s->n && j->ncommitted[p] <= (uint32_t)j->world);
        for (uint32_t r = 0; r < s->n; r += 1 + s->n / 16)
            CHECKF(ina__kmap_get(&s->index, s->keys[r]) == r);
    }
    CHECKF(mem == ps.mem_used && ps.mem_used <= ps.p.max_memory);
    for (int i = 0; i < INA_PS_MAX_JOBS; i++)
        CHECKF(chain.jobs[i].n <= INA_PS_CHAIN_WINDOW && (chain.jobs[i].n == 0 || chain.jobs[i].q));
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) { /* §15.9: stamps only move on */
        const struct ina_ps_job *j = &ps.jobs[i];
        if (j->state != INA_PS_ACTIVE)
            continue;
        if (last_session[i] == j->session)
            CHECKF((int32_t)(j->next_stamp - last_stamp[i]) >= 0);
        last_session[i] = j->session;
        last_stamp[i] = j->next_stamp;
        const struct ina_ps_sched_job *sj = &link.jobs[i];
        if (sj->session != j->session)
            continue;
        CHECKF(sj->nruns <= INA_PS_VOID_RUNS);
        for (unsigned k = 0; k < sj->nruns; k++) {
            const struct ina_ps_void_run *v = &sj->runs[(sj->head + k) % INA_PS_VOID_RUNS];
            CHECKF(v->n >= 1 && (int32_t)(v->first + v->n - j->next_stamp) <= 0);
        }
        for (int r = 0; r < INA_MAX_WORKERS; r++)
            CHECKF(!sj->kept[r].valid || (sj->kept[r].len <= sj->kept[r].cap &&
                                          (int32_t)(sj->kept[r].stamp - j->next_stamp) < 0));
    }
    CHECKF(ps.c.delay_violations == 0); /* no applied UPDATE lagged more than its job's D */
}

static void send_to(const uint8_t *b, size_t len, const struct sockaddr_in *src)
{
    if (ina__ps_tx_full(&ps))
        check_tx();
    ina__ps_input(&ps, b, len, src, now_ns);
}

static uint16_t join(const char *name, int world, int rank, int dim, int optim, float lr,
                     int mode, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_PS_JOIN_BODY_LEN];
    struct ina_ps_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = 0x1000 + (uint64_t)rank + (uint64_t)world * 77;
    j.world = (uint16_t)world;
    j.nshards = 1;
    j.dim = (uint16_t)dim;
    j.optim = (uint8_t)optim;
    j.mode = (uint8_t)mode;
    j.max_delay = mode == INA_PS_MODE_STALE ? 2 : 0;
    j.lr = lr;
    j.eps = 1.0f;
    snprintf(j.name, sizeof(j.name), "%s", name);
    send_to(b, ps_join_datagram(b, rank, &j), src);
    return 0;
}

static const struct ina_ps_job *job_named(const char *name)
{
    for (int i = 0; i < INA_PS_MAX_JOBS; i++)
        if (ps.jobs[i].state == INA_PS_ACTIVE && strcmp(ps.jobs[i].p.name, name) == 0)
            return &ps.jobs[i];
    return NULL;
}

static void one_record(uint8_t sel, uint8_t flags, const uint8_t *d, size_t len)
{
    uint8_t b[70000];
    if (len > sizeof(b))
        len = sizeof(b);
    memcpy(b, d, len);
    const struct sockaddr_in *src = &src_table[sel & 7];
    const struct ina_ps_job *honest = &ps.jobs[0], *stale = job_named("stale");
    if (len >= INA_HDR_LEN) {
        if (flags & F_MAGIC) {
            ina__put16(b, INA_WIRE_MAGIC);
            b[2] = INA_WIRE_VERSION;
        }
        if (flags & F_KIND) {
            static const uint8_t kinds[] = {
                INA_K_PS_PUSH,      INA_K_PS_COMMIT,    INA_K_PS_PULL,   INA_K_PS_ASSIGN,
                INA_K_PS_LEAVE,     INA_K_PS_JOIN,      INA_K_PS_UPDATE, INA_K_PS_SYNC,
                INA_K_PS_CHAIN_FWD, INA_K_PS_CHAIN_ACK, INA_K_PS_UPDATE, INA_K_PS_CHAIN_FWD,
                INA_K_PS_CHAIN_ACK, INA_K_PS_REPLAY,    INA_K_PS_UPDATE, INA_K_PS_SYNC};
            b[3] = kinds[(sel >> 6) | ((flags >> 5) & 4) | ((flags >> 3) & 8)];
        }
        int stale_kind = b[3] == INA_K_PS_UPDATE || b[3] == INA_K_PS_CHAIN_FWD ||
                         b[3] == INA_K_PS_CHAIN_ACK || b[3] == INA_K_PS_SYNC ||
                         b[3] == INA_K_PS_REPLAY;
        if ((flags & F_CREDS) && stale_kind && stale) {
            ina__put16(b + 4, stale->id);
            ina__put32(b + 8, stale->session);
            ina__put32(b + 12, stale->token);
            if ((b[3] == INA_K_PS_CHAIN_FWD || b[3] == INA_K_PS_SYNC || b[3] == INA_K_PS_REPLAY) &&
                len >= INA_HDR_LEN + INA_PS_CHAIN_FWD_PREFIX) { /* the job's name first */
                memset(b + INA_HDR_LEN, 0, INA_PS_CHAIN_FWD_PREFIX);
                memcpy(b + INA_HDR_LEN, "stale", 5);
            }
        } else if ((flags & F_CREDS) && honest->state == INA_PS_ACTIVE) {
            ina__put16(b + 4, honest->id);
            ina__put32(b + 8, honest->session);
            ina__put32(b + 12, honest->token);
        }
        if ((flags & F_RANK) && (sel & 7) < 3)
            ina__put16(b + 6, sel & 7);
        if ((flags & F_COUNT) && b[3] == INA_K_PS_SYNC) { /* well-formed: only the values vary */
            if (len < INA_HDR_LEN + INA_PS_SYNC_LEN)
                memset(b + len, 0, INA_HDR_LEN + INA_PS_SYNC_LEN - len);
            len = INA_HDR_LEN + INA_PS_SYNC_LEN;
            ina__put32(b + INA_HDR_LEN + 32, ina__get32(b + INA_HDR_LEN + 32) & 3);
            ina__put32(b + INA_HDR_LEN + 40, ina__get32(b + INA_HDR_LEN + 40) % (INA_PS_VOID_MAX + 1));
        } else if (flags & F_COUNT) {
            size_t el = b[3] == INA_K_PS_PUSH || b[3] == INA_K_PS_UPDATE ||
                                b[3] == INA_K_PS_CHAIN_FWD || b[3] == INA_K_PS_REPLAY
                            ? 8 + 4 * 2
                        : b[3] == INA_K_PS_ASSIGN ? 8 + 8 * 2
                                                  : 8;
            size_t pre = b[3] == INA_K_PS_UPDATE ? INA_PS_UPDATE_PREFIX
                         : b[3] == INA_K_PS_CHAIN_FWD || b[3] == INA_K_PS_REPLAY
                             ? INA_PS_CHAIN_FWD_PREFIX + INA_PS_UPDATE_PREFIX
                             : 0;
            size_t n = len >= INA_HDR_LEN + pre ? (len - INA_HDR_LEN - pre) / el : 0;
            if (n > 0xFFFF)
                n = 0xFFFF;
            ina__put16(b + 24, (uint16_t)n);
            if (len >= INA_HDR_LEN + pre)
                len = INA_HDR_LEN + pre + n * el;
        }
    }
    send_to(b, len, src);
    if (flags & F_TICK) {
        now_ns += tick_step[(sel >> 3) & 7];
        if (ina__ps_tx_full(&ps))
            check_tx();
        ina__ps_tick(&ps, now_ns);
        if (ina__ps_tx_full(&ps))
            check_tx();
        ina__ps_chain_tick(&ps, now_ns);
    }
    check_tx();
    check_state();
}

/* One honest step of the oracle: both ranks push key 5 (+1, +2), commit; a pull gives -3. */
HARNESS static void oracle_step(uint16_t id, uint32_t session, uint32_t token)
{
    const struct ina_ps_job *o = &ps.jobs[id - 1];
    if (o->state != INA_PS_ACTIVE || o->session != session || o->token != token)
        return; /* the records ended it legitimately (e.g. a tick's idle timeout) */
    uint32_t step = o->applied;
    uint8_t b[INA_HDR_LEN + 12];
    struct ina_hdr h;
    for (int r = 0; r < 2; r++) {
        ps_job_hdr(&h, o, INA_K_PS_PUSH, r);
        h.seq = step;
        h.slot = 1000 + (uint32_t)r; /* a packet index no record can have used for this step */
        h.count = 1;
        ina__hdr_encode(b, &h);
        ina__put64(b + INA_HDR_LEN, 5);
        ina__putf(b + INA_HDR_LEN + 8, (float)(r + 1));
        send_to(b, sizeof(b), &oracle_addr[r]);
    }
    (void)b;
    /* A commit must name the packets the rank sent: ask the shard's own count. */
    for (int r = 0; r < 2; r++) {
        const struct ina_ps_rankstep *rs = &o->rs[step & 1][r];
        ps_job_hdr(&h, o, INA_K_PS_COMMIT, r);
        h.seq = step;
        h.slot = rs->step1 == step + 1 ? rs->nrecv : 0;
        ina__hdr_encode(b, &h);
        send_to(b, INA_HDR_LEN, &oracle_addr[r]);
    }
    check_tx();
    CHECKF(o->applied == step + 1);
    uint32_t rec = ina__kmap_get(&o->store.index, 5);
    CHECKF(rec != INA_KMAP_NONE);
    /* Only the oracle's own members pushed to it: its value is the sum of this step and
     * of its setup step (-3 each). */
    CHECKF(o->store.vals[rec] == -6.0f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    src_table[0] = mkaddr(0x0A000001, 7001);
    src_table[1] = mkaddr(0x0A000002, 7002);
    src_table[2] = mkaddr(0x0A000003, 7003);
    src_table[3] = mkaddr(0x0A000001, 7009);
    src_table[4] = mkaddr(0x0A000009, 7001);
    src_table[5] = mkaddr(0x0A000005, 7005);
    src_table[6] = mkaddr(0x0A000006, 7006);
    src_table[7] = mkaddr(0, 0);
    oracle_addr[0] = mkaddr(0x0A000101, 8001);
    oracle_addr[1] = mkaddr(0x0A000102, 8002);
    rng_state = 0x9E3779B97F4A7C15ull;
    now_ns = 1000000000ull;
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT);
    struct ina_ps_params p = {.shard = 0, .nshards = 1, .max_memory = 256 * 1024,
                              .initial_keys = 16, .join_timeout_ns = 5000000000ull,
                              .idle_timeout_ns = 60000000000ull,
                              .step_timeout_ns = 30000000000ull};
    CHECKF(ina__ps_init(&ps, &p) == 0);
    CHECKF(ina__ps_chain_init(&chain, &ps, &src_table[6], &src_table[5], 2000000000ull) == 0);
    CHECKF(ina__ps_sched_init(&link, &ps, &src_table[4]) == 0);
    memset(last_session, 0, sizeof(last_session));
    ina__ps_chain_tick(&ps, now_ns);
    for (int r = 0; r < 3; r++)
        join("honest", 3, r, 2, INA_OPTIM_ADAGRAD, 0.5f, INA_PS_MODE_SYNC, &src_table[r]);
    for (int r = 0; r < 2; r++)
        join("oracle", 2, r, 1, INA_OPTIM_SGD, 1.0f, INA_PS_MODE_SYNC, &oracle_addr[r]);
    for (int r = 0; r < 3; r++)
        join("stale", 3, r, 2, INA_OPTIM_ADAGRAD, 0.5f, INA_PS_MODE_STALE, &src_table[r]);
    check_tx();
    const struct ina_ps_job *o = job_named("oracle");
    CHECKF(o && job_named("honest") == &ps.jobs[0]);
    uint16_t oid = o->id;
    uint32_t osession = o->session, otoken = o->token;
    /* A first oracle step before the records (so the store has the key). */
    {
        const struct ina_ps_job *oj = &ps.jobs[oid - 1];
        uint8_t b[INA_HDR_LEN + 12];
        struct ina_hdr h;
        for (int r = 0; r < 2; r++) {
            ps_job_hdr(&h, oj, INA_K_PS_PUSH, r);
            h.count = 1;
            ina__hdr_encode(b, &h);
            ina__put64(b + INA_HDR_LEN, 5);
            ina__putf(b + INA_HDR_LEN + 8, (float)(r + 1));
            send_to(b, sizeof(b), &oracle_addr[r]);
        }
        for (int r = 0; r < 2; r++) {
            ps_job_hdr(&h, oj, INA_K_PS_COMMIT, r);
            h.slot = 1;
            ina__hdr_encode(b, &h);
            send_to(b, INA_HDR_LEN, &oracle_addr[r]);
        }
        check_tx();
        CHECKF(oj->applied == 1);
    }
    check_state();
    while (size >= 4) {
        uint8_t sel = data[0], flags = data[1];
        size_t len = (size_t)data[2] << 8 | data[3];
        data += 4;
        size -= 4;
        if (len > size)
            len = size;
        one_record(sel, flags, data, len);
        data += len;
        size -= len;
    }
    oracle_step(oid, osession, otoken);
    ina__ps_chain_free(&ps);
    ina__ps_sched_free(&ps);
    ina__ps_free(&ps);
    return 0;
}
