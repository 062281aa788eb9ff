/* fuzz_switch.c: libFuzzer target for ina-switch's packet handler (ina__switch_input). */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/h16.h"
#include "common/log.h"
#include "common/sparse_wire.h"
#include "engine/internal.h"
#include "test_addr.h"

/*
 * Input format: a sequence of records, each
 *
 *   [1 byte sel] [1 byte flags] [2 bytes length, big-endian] [length bytes: one datagram]
 *
 * (a short final record takes what is left).
 * sel: bits 0-2 pick the source address (src_table: 0..2 are the honest ranks
 * of job 1, 3..7 strangers, some sharing an IP or a port with a rank); bits
 * 3-4 pick the job table entry k (job id k + 1) that F_JOB/F_TOKEN/F_RANK
 * refer to; bits 5-7 pick the clock step of F_TICK (tick_step).
 * flags, applied in this order:
 *   F_MAGIC   write the right magic and version
 *   F_JOB     write jobs[k]'s id and session into the header
 *   F_TOKEN   write jobs[k]'s token: with F_JOB the fuzzer acts like an
 *             attacker who knows the credentials (sniffed traffic)
 *   F_RANK    write the rank that the source address holds in jobs[k], if any
 *   F_SETBIT  make the slot's set bit agree with seq
 *   F_COUNT   set count = (length - 32) / 4 and cut the datagram to match
 *   F_TICK    after the datagram, advance the clock by tick_step[sel >> 5]
 *             and run ina__switch_tick
 *   F_CHILD   (the first record's flags only) the switch is a child of a tree
 *             (ina-switch --parent, PROTOCOL.md §12) whose parent is
 *             src_table[PARENT_SRC]: the harness plays the parent to start the
 *             jobs, and with F_JOB/F_TOKEN a record from the parent carries
 *             the credentials of the job's membership at the parent, and
 *             with F_RANK its registration's nonce at the body's start
 *
 * Before the records, two jobs are started honestly with JOINs: job 1
 * "honest" (world 3, ranks at src_table[0..2]) and job 2 "oracle" (world 2,
 * at addresses the records can never use). After the records, if the oracle
 * job still runs in the same session, its slots must be untouched, and one
 * round on each of its slots must give exact sums: datagrams from
 * non-members, even with the right credentials, never change a job's sums.
 */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The harness's own checks are not what is fuzzed: no coverage feedback from them. */
#define HARNESS __attribute__((no_sanitize("coverage"), noinline))

#define F_JOB 0x01u
#define F_TOKEN 0x02u
#define F_MAGIC 0x04u
#define F_COUNT 0x08u
#define F_RANK 0x10u
#define F_SETBIT 0x20u
#define F_TICK 0x40u
#define F_CHILD 0x80u
#define PARENT_SRC 6 /* src_table entry that is the parent in child mode */

#define FZ_NSLOTS 16
#define FZ_HOT_MAX 24 /* keys of a job's hot table (--hot-keys) */
#define FZ_HOT_MEMORY 2048 /* --hot-memory: two full tables, then NOSPACE */
#define FZ_MAX_ELEMS 16
#define FZ_JOIN_TIMEOUT_NS 1000000000ull  /* 1 s */
#define FZ_IDLE_TIMEOUT_NS 10000000000ull /* 10 s */

#define HONEST_WORLD 3
#define HONEST_ELEMS 8
#define HONEST_WINDOW 4
#define ORACLE_WORLD 2
#define ORACLE_ELEMS 4
#define ORACLE_WINDOW 2

static const uint64_t tick_step[8] = {
    0, 1000, 1000000, 500000000ull, 1100000000ull, 5000000000ull, 10500000000ull, 3600000000000ull,
};

#define CHECKF(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_switch: invariant failed at %s:%d: %s\n", __FILE__,    \
                    __LINE__, #cond);                                                   \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* ---- Deterministic entropy ---------------------------------------------------- */

/*
 * The switch draws session ids and tokens from getrandom(). Here it draws
 * from a PRNG reset per input, so every input replays exactly (a crash file
 * reproduces): the engine's calls resolve to this function (-Wl,--wrap,
 * cmake/fuzz.cmake).
 */
static uint64_t rng_state;
static unsigned rng_calls;

ssize_t __wrap_getrandom(void *buf, size_t n, unsigned int flags);
ssize_t __wrap_getrandom(void *buf, size_t n, unsigned int flags)
{
    (void)flags;
    if (rng_calls++ == 0 && n == 4) {
        /* The first draw is the session counter's start: 0xFFFFFFFE, so the
         * second job's session wraps through 0 ("none"), which the switch
         * must skip. */
        uint32_t v = 0xFFFFFFFEu;
        memcpy(buf, &v, 4);
        return 4;
    }
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        p[i] = (uint8_t)(rng_state >> 24);
    }
    return (ssize_t)n;
}

/* ---- Addresses ---------------------------------------------------------------- */

#define IP(a, b, c, d) \
    ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (uint32_t)(d))

static struct sockaddr_in src_table[8];
static struct sockaddr_in oracle_addr[ORACLE_WORLD];

static void addrs_init(void)
{
    src_table[0] = mkaddr(IP(10, 0, 0, 1), 7001);
    src_table[1] = mkaddr(IP(10, 0, 0, 2), 7002);
    src_table[2] = mkaddr(IP(10, 0, 0, 3), 7003);
    src_table[3] = mkaddr(IP(10, 0, 0, 1), 7009); /* rank 0's IP, other port */
    src_table[4] = mkaddr(IP(10, 0, 0, 9), 7001); /* rank 0's port, other IP */
    src_table[5] = mkaddr(IP(10, 0, 0, 5), 7005);
    src_table[6] = mkaddr(IP(10, 0, 0, 6), 7006);
    src_table[7] = mkaddr(0, 0);
    oracle_addr[0] = mkaddr(IP(10, 0, 1, 1), 8001);
    oracle_addr[1] = mkaddr(IP(10, 0, 1, 2), 8002);
}

/* ---- State ---------------------------------------------------------------------- */

static struct ina_switch sw; /* large (the job table): static, re-initialised per input */
static uint64_t now_ns;
static int child_mode; /* F_CHILD: the switch has a parent (src_table[PARENT_SRC]) */

/* Every datagram queued in the txq is well-formed. */
HARNESS static void check_txq(void)
{
    const struct ina_txq *q = &sw.txq;
    CHECKF(q->nbuf <= q->maxbuf);
    CHECKF(q->nmsg <= q->maxmsg);
    for (unsigned i = 0; i < q->nmsg; i++) {
        const uint8_t *b = q->iovs[i].iov_base;
        size_t len = q->iovs[i].iov_len;
        CHECKF(b >= q->bufmem && b + len <= q->bufmem + (size_t)q->nbuf * q->bufsize);
        CHECKF((size_t)(b - q->bufmem) % q->bufsize == 0);
        CHECKF(len >= INA_HDR_LEN && len <= q->bufsize);
        struct ina_hdr h;
        CHECKF(ina__hdr_decode(b, len, &h) == INA_PARSE_OK);
        if (child_mode && q->addrs[i].sin_addr.s_addr == src_table[PARENT_SRC].sin_addr.s_addr &&
            (h.kind == INA_K_TREE_JOIN || h.kind == INA_K_DATA || h.kind == INA_K_LEAVE)) {
            /* (To the parent's host: a REDIRECT may have moved the port.) */
            /* A child's datagrams to its parent: its registration, partial
             * sums and leaves, as member h.rank (a set's lowest rank). */
            CHECKF(h.rank < INA_MAX_WORKERS);
            CHECKF((h.kind == INA_K_TREE_JOIN && len == INA_HDR_LEN + INA_TREE_JOIN_LEN) ||
                   (h.kind == INA_K_DATA && h.count <= FZ_MAX_ELEMS) ||
                   (h.kind == INA_K_LEAVE &&
                    (len == INA_HDR_LEN || len == INA_HDR_LEN + INA_NAK_BODY_LEN)));
            continue;
        }
        CHECKF(h.rank == INA_RANK_SWITCH);
        switch (h.kind) {
        case INA_K_RESULT:
            CHECKF(len == INA_HDR_LEN + 4 * (size_t)h.count);
            CHECKF(h.count <= FZ_MAX_ELEMS);
            CHECKF(((h.slot & INA_SLOT_SET_BIT) != 0) == (h.seq & 1));
            break;
        case INA_K_JOIN_ACK:
            CHECKF(len == INA_HDR_LEN + INA_JOIN_BODY_LEN);
            /* A child offers no op 3 and says at least one level lies above it. */
            CHECKF(!child_mode || (!(h.flags & INA_FLAG_CAP_BFP) && ina__flag_levels(h.flags) >= 1));
            break;
        case INA_K_JOIN_NAK:
            /* NOSPACE may name rank 0's fallback aggregator (8 more bytes); REJECTED
             * is 20 bytes, byte 16 its cause (PROTOCOL.md §4.2). */
            CHECKF(len == INA_HDR_LEN + INA_NAK_BODY_LEN ||
                   (len == INA_HDR_LEN + INA_NAK_FALLBACK_LEN &&
                    (int32_t)ina__get32(b + INA_HDR_LEN + 8) == INA_ERR_NOSPACE) ||
                   (len == INA_HDR_LEN + INA_NAK_REJECTED_LEN &&
                    (int32_t)ina__get32(b + INA_HDR_LEN + 8) == INA_ERR_REJECTED &&
                    b[INA_HDR_LEN + INA_NAK_CAUSE] <= INA_REJECT_JOINING_ELSEWHERE));
            break;
        case INA_K_REDIRECT: CHECKF(len == INA_HDR_LEN + INA_NAK_BODY_LEN); break;
        case INA_K_ABORT: /* 16 bytes, or 28 with a cause, a rank and an address (§4.2) */
            CHECKF(len == INA_HDR_LEN + INA_NAK_BODY_LEN ||
                   (len == INA_HDR_LEN + INA_ABORT_CAUSE_LEN &&
                    (b[INA_HDR_LEN + INA_ABORT_CAUSE] == INA_ABORT_RANK_TAKEN ||
                     b[INA_HDR_LEN + INA_ABORT_CAUSE] == INA_ABORT_RANK_DEAD)));
            break;
        case INA_K_JOIN_WAIT: {
            /* The job still waits: fewer ranks joined than its world, or all of
             * them and it waits for slots; the bitmap names exactly them. */
            CHECKF(len == INA_HDR_LEN + INA_JOIN_WAIT_BODY_LEN);
            const uint8_t *w = b + INA_HDR_LEN;
            unsigned world = ina__get16(w + 8), joined = ina__get16(w + 10), bits = 0;
            CHECKF(world >= 1 && world <= INA_MAX_WORKERS && joined >= 1 && joined <= world);
            /* (A child waits for its parent with every rank it stands for joined.) */
            CHECKF(w[12] <= 1 && (child_mode || (w[12] == 1) == (joined == world)));
            for (unsigned r = 0; r < 256; r++)
                bits += (w[16 + (r >> 3)] >> (r & 7)) & 1;
            CHECKF(bits == joined);
            break;
        }
        case INA_K_HOT_RESULT:
            CHECKF(len == INA_HDR_LEN + INA_HOT_PREFIX_LEN + 4 * (size_t)h.count);
            CHECKF(h.count <= FZ_MAX_ELEMS && h.op == INA_OP_HOT_F32);
            break;
        case INA_K_HOT_KEYS:
            CHECKF(len >= INA_HDR_LEN + INA_HOT_KEYS_HDR &&
                   len == INA_HDR_LEN + INA_HOT_KEYS_HDR + 8 * (size_t)ina__get16(b + INA_HDR_LEN + 12));
            CHECKF(ina__get16(b + INA_HDR_LEN + 12) <= FZ_HOT_MAX);
            break;
        case INA_K_DOORBELL: /* a probe of a rank that stalls a round (§5.4): a bare header */
            CHECKF(len == INA_HDR_LEN && h.rank == INA_RANK_SWITCH);
            break;
        case INA_K_SHM_ACK:
            /* This switch offers no rings (params.shm 0): every SHM_ATTACH is refused. */
            CHECKF(len == INA_HDR_LEN + INA_NAK_BODY_LEN);
            CHECKF((int32_t)ina__get32(b + INA_HDR_LEN + 8) == INA_ERR_NOTSUP);
            break;
        default: CHECKF(!"unexpected kind queued by the switch");
        }
    }
}

static void flush_txq(void)
{
    check_txq();
    CHECKF(sw.txq.overflows == 0); /* every input was preceded by the flush check */
    ina__switch_tx_reset(&sw);
}

/* The job table, the slot owner map and every slot set of every active job agree. */
HARNESS static void check_state(void)
{
    uint32_t owned = 0, windows = 0, owned_joining = 0;
    for (uint32_t i = 0; i < FZ_NSLOTS; i++) {
        uint16_t o = sw.slot_owner[i];
        if (!o)
            continue;
        owned++;
        CHECKF(o <= INA_SW_MAX_JOBS);
        const struct ina_job *job = &sw.jobs[o - 1];
        /* An active job's window, or what a child holds while it registers. */
        uint32_t held = job->state == INA_JOB_ACTIVE ? job->window : job->up.reserved;
        CHECKF(job->state == INA_JOB_ACTIVE || (job->state == INA_JOB_JOINING && job->child));
        CHECKF(i >= job->slot_base && i < job->slot_base + held);
    }
    for (int j = 0; j < INA_SW_MAX_JOBS; j++) {
        const struct ina_job *job = &sw.jobs[j];
        if (job->state == INA_JOB_FREE)
            continue;
        CHECKF(job->id == j + 1);
        CHECKF(job->world >= 1 && job->world <= INA_MAX_WORKERS);
        int joined = 0, weights = 0;
        for (int r = 0; r < INA_MAX_WORKERS; r++) {
            const struct ina_member *m = &job->members[r];
            CHECKF(r < job->world || !m->joined);
            joined += m->joined;
            weights += m->joined ? m->weight : 0;
            /* A member stands for itself (weight 1), for a child's set
             * (weight > 1: itself and the ranks whose rep it is), or is
             * stood for by its rep (weight 0). */
            CHECKF(!m->joined || (m->weight ? m->rep == r : m->rep < r));
            CHECKF(!m->joined || m->weight || job->members[m->rep].weight > 1);
        }
        CHECKF(joined == job->njoined);
        CHECKF(weights == joined); /* every joined rank counted once */
        if (job->state == INA_JOB_JOINING) {
            CHECKF(job->child ? job->njoined <= job->world : job->njoined < job->world);
            if (job->child && job->up.reserved) {
                owned_joining += job->up.reserved;
                for (uint32_t s = 0; s < job->up.reserved; s++)
                    CHECKF(sw.slot_owner[job->slot_base + s] == job->id);
            }
            continue;
        }
        if (job->state == INA_JOB_WAITING) { /* all in, no slots yet */
            CHECKF(job->njoined == job->world);
            continue;
        }
        CHECKF(job->state == INA_JOB_ACTIVE);
        CHECKF(job->child ? job->njoined == job->need && job->need <= job->world
                          : job->njoined == job->world && job->need == job->world);
        CHECKF(job->nleft < job->need);
        CHECKF(job->session != 0);
        CHECKF(job->elems >= 1 && job->elems <= FZ_MAX_ELEMS);
        CHECKF(job->window >= 1 && (job->window & (job->window - 1)) == 0);
        CHECKF(job->slot_base + job->window <= FZ_NSLOTS);
        windows += job->window;
        for (uint32_t s = 0; s < job->window; s++) {
            CHECKF(sw.slot_owner[job->slot_base + s] == job->id);
            for (unsigned set = 0; set < 2; set++) {
                const struct ina_slot_set *ss = &sw.slots[job->slot_base + s].set[set];
                for (int r = job->world; r < INA_MAX_WORKERS; r++)
                    CHECKF(!((ss->bitmap[r >> 6] >> (r & 63)) & 1));
                int ranks = 0; /* the contributions' weights: the ranks they stand for */
                for (int r = 0; r < job->world; r++)
                    if ((ss->bitmap[r >> 6] >> (r & 63)) & 1)
                        ranks += job->members[r].weight;
                CHECKF(ss->nrecv == ranks);
                CHECKF(ss->nrecv <= job->need);
                CHECKF((ss->seq & 1) == set);
                CHECKF(ss->count <= job->elems);
                /* only valid wire ops ever enter a round */
                CHECKF(ss->op <= INA_OP_LAST || ina__op_is_sparse(ss->op) || ina__op_is_h16(ss->op) ||
                       (ss->hot && ss->op == INA_OP_HOT_F32)); /* a hot round: op 9 only */
                CHECKF(!ss->hot || ss->op == INA_OP_HOT_F32);
                if (ina__op_is_sparse(ss->op)) { /* a checked layout, within the slot */
                    uint32_t lay = (uint32_t)sw.values[((size_t)(job->slot_base + s) * 2 + set) *
                                                       sw.set_words];
                    unsigned b = ina__sparse_layout_block(lay);
                    CHECKF(ina__sparse_words_max(ina__sparse_block_words(
                                                    b, ina__op_is_sparse_h16(ss->op)),
                                                ina__sparse_layout_places(lay)) <= job->elems);
                    CHECKF(ina__sparse_words_max(b, ina__sparse_layout_places(lay)) <= sw.set_words);
                }
                CHECKF(!(ss->up && ss->complete));
                CHECKF(!ss->up || (job->child && ss->nrecv == job->need));
                CHECKF(ss->complete || ss->up || ss->nrecv < job->need);
                CHECKF(!ss->complete || ss->nrecv == job->need);
            }
        }
    }
    CHECKF(owned == windows + owned_joining);
    /* --hot-memory: the tables hold what they were charged (PROTOCOL.md §14.3), together
     * within the bound, and an active table has its keys. */
    size_t hot = 0;
    for (int j = 0; j < INA_SW_MAX_JOBS; j++) {
        const struct ina_hot *t = sw.jobs[j].hot;
        if (!t)
            continue;
        CHECKF(sw.jobs[j].state != INA_JOB_FREE);
        CHECKF(t->act_bytes == (t->epoch ? ina__hot_table_bytes(t->n) : 0));
        CHECKF(t->pend_bytes == (t->pend_epoch ? ina__hot_install_bytes(t->pend_total) : 0));
        CHECKF(t->epoch == 0 || t->keys);
        CHECKF(t->n <= FZ_HOT_MAX && t->pend_total <= FZ_HOT_MAX);
        CHECKF(t->smp_epoch || t->smp_bytes == 0);
        hot += t->act_bytes + t->pend_bytes + t->smp_bytes;
    }
    CHECKF(hot == atomic_load(&sw.hot_own.used) && hot <= FZ_HOT_MEMORY);
}

/* ---- Honest workers ------------------------------------------------------------ */

static void send_join(const char *name, int world, int rank, uint16_t elems, uint32_t window,
                      uint64_t nonce, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)rank;
    ina__hdr_encode(b, &h);
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world_size = (uint16_t)world;
    j.elems = elems;
    j.window = window;
    j.sw_version = INA_VERSION_NUMBER;
    snprintf(j.name, sizeof(j.name), "%s", name);
    ina__join_encode(b + INA_HDR_LEN, &j);
    if (ina__switch_tx_full(&sw))
        flush_txq();
    ina__switch_input(&sw, b, sizeof(b), src, now_ns);
}

/*
 * Child mode: the child registered the ranks that joined with TREE_JOINs to
 * its parent; answer the last one as the parent would (a JOIN_ACK granting
 * what it proposed), which starts the job at the child.
 */
HARNESS static void play_parent_ack(int world)
{
    const struct sockaddr_in *parent = &src_table[PARENT_SRC];
    struct ina_join j;
    int found = 0;
    for (unsigned i = 0; i < sw.txq.nmsg; i++) {
        struct ina_hdr h;
        const uint8_t *b = sw.txq.iovs[i].iov_base;
        size_t len = sw.txq.iovs[i].iov_len;
        if (!ina__addr_eq(&sw.txq.addrs[i], parent) || ina__hdr_decode(b, len, &h) != 0 ||
            h.kind != INA_K_TREE_JOIN)
            continue;
        CHECKF(ina__join_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &j) == 0);
        CHECKF(h.rank == 0 && j.world_size == world);
        found = 1;
    }
    CHECKF(found);
    flush_txq();
    static uint16_t parent_job = 40;
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN_ACK);
    h.job = ++parent_job;
    h.rank = INA_RANK_SWITCH;
    h.session = 0x5E550000u + parent_job;
    h.token = 0x70C00000u + parent_job;
    h.flags = INA_FLAG_CAP_F32;
    ina__hdr_encode(b, &h);
    ina__join_encode(b + INA_HDR_LEN, &j); /* its own proposal, granted */
    ina__switch_input(&sw, b, sizeof(b), parent, now_ns);
}

/* Join `world` ranks; the last JOIN starts the job (child mode: the parent's
 * answer does). Learn its credentials from the ACKs. */
HARNESS static struct ina_job *start_job(const char *name, int world, uint16_t elems,
                                         uint32_t window, const struct sockaddr_in *addrs,
                                         uint64_t nonce_base)
{
    flush_txq();
    for (int r = 0; r < world; r++) {
        if (r == world - 1)
            flush_txq(); /* the JOIN_WAITs of the ranks before (checked there) */
        send_join(name, world, r, elems, window, nonce_base + (uint64_t)r, &addrs[r]);
    }
    if (child_mode)
        play_parent_ack(world);
    CHECKF(sw.txq.nmsg == (unsigned)world);
    uint16_t id = 0;
    uint32_t session = 0, token = 0;
    for (int r = 0; r < world; r++) {
        struct ina_hdr h;
        const uint8_t *b = sw.txq.iovs[r].iov_base;
        size_t len = sw.txq.iovs[r].iov_len;
        CHECKF(ina__hdr_decode(b, len, &h) == INA_PARSE_OK);
        CHECKF(h.kind == INA_K_JOIN_ACK);
        CHECKF(ina__addr_eq(&sw.txq.addrs[r], &addrs[r]));
        struct ina_join j;
        CHECKF(ina__join_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &j) == 0);
        CHECKF(j.nonce == nonce_base + (uint64_t)r);
        CHECKF(j.world_size == world && j.elems == elems && j.window == window);
        if (r == 0) {
            id = h.job;
            session = h.session;
            token = h.token;
        }
        CHECKF(h.job == id && h.session == session && h.token == token);
    }
    flush_txq();
    CHECKF(id >= 1 && id <= INA_SW_MAX_JOBS);
    struct ina_job *job = &sw.jobs[id - 1];
    CHECKF(job->state == INA_JOB_ACTIVE && job->session == session && job->token == token);
    CHECKF(session != 0);
    return job;
}

static void send_data(const struct ina_job *job, int rank, uint32_t slot, uint32_t seq,
                      const int32_t *v, uint16_t count, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + 4 * FZ_MAX_ELEMS];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_DATA);
    h.job = job->id;
    h.rank = (uint16_t)rank;
    h.session = job->session;
    h.token = job->token;
    h.slot = slot | ((seq & 1) ? INA_SLOT_SET_BIT : 0);
    h.seq = seq;
    h.count = count;
    h.op = INA_OP_ADD_I32;
    ina__hdr_encode(b, &h);
    for (unsigned i = 0; i < count; i++)
        ina__put32(b + INA_HDR_LEN + 4 * i, (uint32_t)v[i]);
    if (ina__switch_tx_full(&sw))
        flush_txq();
    ina__switch_input(&sw, b, INA_HDR_LEN + 4 * (size_t)count, src, now_ns);
}

/*
 * Child mode: the round went up as one partial sum (exact) to the parent;
 * answer it with the RESULT the parent would send (no other member), which
 * the child passes down to both ranks.
 */
HARNESS static void play_parent_result(const struct ina_job *job, const int32_t *v0,
                                       const int32_t *v1)
{
    CHECKF(sw.txq.nmsg == 1);
    CHECKF(ina__addr_eq(&sw.txq.addrs[0], &src_table[PARENT_SRC]));
    uint8_t b[INA_HDR_LEN + 4 * FZ_MAX_ELEMS];
    size_t len = sw.txq.iovs[0].iov_len;
    CHECKF(len <= sizeof(b));
    memcpy(b, sw.txq.iovs[0].iov_base, len);
    struct ina_hdr h;
    CHECKF(ina__hdr_decode(b, len, &h) == INA_PARSE_OK);
    CHECKF(h.kind == INA_K_DATA && h.job == job->up.job && h.rank == job->up.rep &&
           h.session == job->up.session && h.token == job->up.token && h.count == ORACLE_ELEMS);
    for (int i = 0; i < ORACLE_ELEMS; i++)
        CHECKF(ina__get32(b + INA_HDR_LEN + 4 * i) == (uint32_t)v0[i] + (uint32_t)v1[i]);
    flush_txq();
    h.kind = INA_K_RESULT;
    h.rank = INA_RANK_SWITCH;
    ina__hdr_encode(b, &h);
    ina__switch_input(&sw, b, len, &src_table[PARENT_SRC], now_ns);
}

/* The oracle job was untouched by the records: one round per slot set gives exact sums. */
HARNESS static void oracle_check(uint16_t id, uint32_t session, uint32_t token)
{
    struct ina_job *job = &sw.jobs[id - 1];
    /* It may have ended legitimately: a JOIN naming it (names are not
     * secret) or the idle timeout. Then there is nothing to compare. */
    if (job->state != INA_JOB_ACTIVE || job->session != session || job->token != token)
        return;
    for (uint32_t s = 0; s < ORACLE_WINDOW; s++)
        for (unsigned set = 0; set < 2; set++) {
            const struct ina_slot_set *ss = &sw.slots[job->slot_base + s].set[set];
            CHECKF(ss->seq == (uint32_t)set - 2u && ss->complete && ss->nrecv == ORACLE_WORLD);
        }
    flush_txq();
    for (uint32_t seq = 0; seq < 2; seq++)
        for (uint32_t s = 0; s < ORACLE_WINDOW; s++) {
            int32_t v[ORACLE_WORLD][ORACLE_ELEMS];
            for (int r = 0; r < ORACLE_WORLD; r++)
                for (int i = 0; i < ORACLE_ELEMS; i++)
                    v[r][i] = r == 0 ? INT32_MAX - i : (int32_t)(s * 100 + seq * 10) + i + 1;
            for (int r = 0; r < ORACLE_WORLD; r++) {
                CHECKF(sw.txq.nmsg == 0);
                send_data(job, r, s, seq, v[r], ORACLE_ELEMS, &oracle_addr[r]);
            }
            if (child_mode)
                play_parent_result(job, v[0], v[1]);
            CHECKF(sw.txq.nmsg == ORACLE_WORLD);
            for (int r = 0; r < ORACLE_WORLD; r++) {
                struct ina_hdr h;
                const uint8_t *b = sw.txq.iovs[r].iov_base;
                CHECKF(ina__hdr_decode(b, sw.txq.iovs[r].iov_len, &h) == INA_PARSE_OK);
                CHECKF(h.kind == INA_K_RESULT && h.job == id && h.session == session &&
                       h.token == token && h.seq == seq && h.count == ORACLE_ELEMS &&
                       (h.slot & INA_SLOT_INDEX_MASK) == s);
                CHECKF(ina__addr_eq(&sw.txq.addrs[r], &oracle_addr[r]));
                for (int i = 0; i < ORACLE_ELEMS; i++) {
                    uint32_t want = (uint32_t)v[0][i] + (uint32_t)v[1][i];
                    CHECKF(ina__get32(b + INA_HDR_LEN + 4 * i) == want);
                }
            }
            flush_txq();
        }
}

/* INA_FUZZ_VERBOSE=1: print the switch's counters and jobs after each input (seed checks). */
static int verbose(void)
{
    static int v = -1;
    if (v < 0)
        v = getenv("INA_FUZZ_VERBOSE") != NULL;
    return v;
}

HARNESS static void dump_state(void)
{
    ina__sw_counters_print(&sw.c, stderr);
    for (int j = 0; j < INA_SW_MAX_JOBS; j++)
        if (sw.jobs[j].state != INA_JOB_FREE)
            fprintf(stderr, "  job %d \"%s\" state %d world %d joined %d session %08x\n",
                    sw.jobs[j].id, sw.jobs[j].name, (int)sw.jobs[j].state, sw.jobs[j].world,
                    sw.jobs[j].njoined, sw.jobs[j].session);
}

/* ---- The fuzz input ------------------------------------------------------------ */

static int member_rank(const struct ina_job *job, const struct sockaddr_in *src)
{
    if (job->state == INA_JOB_FREE)
        return -1;
    for (int r = 0; r < job->world; r++)
        if (job->members[r].joined && ina__addr_eq(&job->members[r].addr, src))
            return r;
    return -1;
}

static void one_record(uint8_t sel, uint8_t flags, const uint8_t *bytes, size_t len)
{
    /* Exact-size heap copy: a read past the datagram's end is an ASan error,
     * not a silent read of the next record. */
    uint8_t *b = malloc(len ? len : 1);
    CHECKF(b != NULL);
    if (len)
        memcpy(b, bytes, len);
    const struct sockaddr_in *src = &src_table[sel & 7];
    unsigned k = (sel >> 3) & 3;
    const struct ina_job *job = &sw.jobs[k];

    if ((flags & F_MAGIC) && len >= 3) {
        ina__put16(b, INA_WIRE_MAGIC);
        b[2] = INA_WIRE_VERSION;
    }
    /* From the parent (child mode): the credentials of the job's membership there. */
    int up = child_mode && (sel & 7) == PARENT_SRC;
    if ((flags & F_JOB) && len >= 12) {
        ina__put16(b + 4, up ? job->up.job : (uint16_t)(k + 1));
        ina__put32(b + 8, up ? job->up.session : job->session);
    }
    if ((flags & F_TOKEN) && len >= 16)
        ina__put32(b + 12, up ? job->up.token : job->token);
    if (up && (flags & F_RANK) && len >= INA_HDR_LEN + 8) {
        /* The parent answering the job's registration: its nonce (JOIN_ACK,
         * JOIN_NAK and REDIRECT echo it at the body's start). */
        ina__put32(b + INA_HDR_LEN, (uint32_t)(job->up.nonce >> 32));
        ina__put32(b + INA_HDR_LEN + 4, (uint32_t)job->up.nonce);
    } else if ((flags & F_RANK) && len >= 8) {
        int r = member_rank(job, src);
        if (r >= 0)
            ina__put16(b + 6, (uint16_t)r);
    }
    if ((flags & F_SETBIT) && len >= 24)
        b[16] = (uint8_t)((b[16] & 0x7F) | (b[23] & 1) << 7);
    if ((flags & F_COUNT) && len >= INA_HDR_LEN) {
        size_t n = (len - INA_HDR_LEN) / 4;
        if (n > UINT16_MAX)
            n = UINT16_MAX;
        ina__put16(b + 24, (uint16_t)n);
        len = INA_HDR_LEN + 4 * n;
    }

    if (ina__switch_tx_full(&sw))
        flush_txq();
    uint64_t rx_before = sw.c.rx_packets;
    ina__switch_input(&sw, b, len, src, now_ns);
    CHECKF(sw.c.rx_packets == rx_before + 1);
    free(b);
    check_txq();
    check_state();

    if (flags & F_TICK) {
        now_ns += tick_step[sel >> 5];
        if (ina__switch_tx_full(&sw))
            flush_txq();
        ina__switch_tick(&sw, now_ns);
        check_txq();
        check_state();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!src_table[0].sin_family)
        addrs_init();
    rng_state = 0x9E3779B97F4A7C15ull;
    rng_calls = 0;
    now_ns = 1000000000ull;

    struct ina_switch_params p;
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT); /* job events would flood the fuzzer's output */
    memset(&p, 0, sizeof(p));
    p.nslots = FZ_NSLOTS;
    p.max_elems = FZ_MAX_ELEMS;
    p.join_timeout_ns = FZ_JOIN_TIMEOUT_NS;
    p.idle_timeout_ns = FZ_IDLE_TIMEOUT_NS;
    p.min_job_slots = 1; /* admission may shrink windows: exercise it */
    p.hot_max = FZ_HOT_MAX; /* the hot table (kinds 5, 6, 45..47, 64) is part of the surface */
    p.hot_memory = FZ_HOT_MEMORY;
    child_mode = size >= 2 && (data[1] & F_CHILD);
    if (child_mode) {
        p.nparents = 1;
        p.parents[0] = src_table[PARENT_SRC];
    }
    CHECKF(ina__switch_init(&sw, &p) == 0);

    start_job("honest", HONEST_WORLD, HONEST_ELEMS, HONEST_WINDOW, src_table, 0x1000);
    struct ina_job *oracle =
        start_job("oracle", ORACLE_WORLD, ORACLE_ELEMS, ORACLE_WINDOW, oracle_addr, 0x2000);
    uint16_t oracle_id = oracle->id;
    uint32_t oracle_session = oracle->session, oracle_token = oracle->token;
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

    flush_txq();
    oracle_check(oracle_id, oracle_session, oracle_token);
    check_state();
    if (verbose())
        dump_state();
    ina__switch_free(&sw);
    return 0;
}
