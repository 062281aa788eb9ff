/* test_ps_memory.c: ina-ps stays within --max-memory whatever its input: the issue-30 flood of packet indices 2^20 - 1 from 16 jobs x 256 ranks, held UPDATE copies, chain forwards to a silent replica (PROTOCOL.md §14.2.4, §15.2, §15.8). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "ps/chain.h"
#include "common/log.h"
#include "ps/ps.h"
#include "ps_wire.h"
#include "rss.h"
#include "test_addr.h"

#define LIMIT (4u << 20) /* ina-ps --max-memory 4M, as in the attack */

static struct ina_ps ps;
static struct ina_ps_chain chain;
static unsigned aborts_full; /* PS_ABORT PS_FULL datagrams queued */

/* Send the queue away: count the PS_FULL aborts, then empty it. */
static void flush(void)
{
    for (unsigned i = 0; i < ps.tx.n; i++) {
        struct ina_hdr h;
        const uint8_t *b = ps.tx.iov[i].iov_base;
        if (ina__hdr_decode(b, ps.tx.iov[i].iov_len, &h) == INA_PARSE_OK &&
            h.kind == INA_K_PS_ABORT &&
            (int32_t)ina__get32(b + INA_HDR_LEN + 8) == INA_ERR_PS_FULL)
            aborts_full++;
    }
    ina__ps_tx_reset(&ps);
}

static void input(const uint8_t *b, size_t len, const struct sockaddr_in *src)
{
    ina__ps_input(&ps, b, len, src, 1000000000ull);
    flush();
}

/*
 * The bytes ina-ps holds for its jobs, counted from the structures themselves (not from
 * its accounting, except each store's, whose arrays store.c sizes): the stores, every
 * packet bitmap, the scratch, the held UPDATE copies, chain replication's rings and
 * forwards. malloc's own overhead is not counted.
 */
static size_t held_bytes(void)
{
    size_t b = 0;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        const struct ina_ps_job *j = &ps.jobs[i];
        if (j->state == INA_PS_FREE)
            continue;
        b += j->store.bytes;
        for (int p = 0; p < 2; p++)
            for (int r = 0; r < INA_MAX_WORKERS; r++)
                b += j->rs[p][r].bits ? j->rs[p][r].nbits / 8 : 0;
        b += j->scratch ? j->store.dim * sizeof(float) : 0;
        for (int k = 0; k < INA_PS_HOLD; k++)
            b += j->held[k].used ? j->held[k].len : 0;
    }
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        const struct ina_ps_chain_job *cj = &chain.jobs[i];
        b += cj->q ? INA_PS_CHAIN_WINDOW * sizeof(*cj->q) : 0;
        for (unsigned k = 0; k < cj->n; k++)
            b += cj->q[(cj->head + k) % INA_PS_CHAIN_WINDOW].len;
    }
    return b;
}

static void join(const char *name, int world, int rank, int mode, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_PS_JOIN_BODY_LEN];
    struct ina_ps_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = 0x5000 + (uint64_t)rank;
    j.world = (uint16_t)world;
    j.nshards = 1;
    j.dim = 1;
    j.mode = (uint8_t)mode;
    j.max_delay = mode == INA_PS_MODE_STALE ? 200 : 0;
    j.lr = 1.0f;
    j.eps = 1.0f;
    snprintf(j.name, sizeof(j.name), "%s", name);
    input(b, ps_join_datagram(b, rank, &j), src);
}

static struct sockaddr_in rank_addr(int job, int rank)
{
    return mkaddr(0x7F000001, (uint16_t)(10000 + job * INA_MAX_WORKERS + rank));
}

/* A PUSH of one entry (key, 1.0) as packet index idx of step s, from rank of job. */
static void push(const struct ina_ps_job *job, int rank, uint32_t s, uint32_t idx)
{
    uint8_t b[INA_HDR_LEN + 12];
    struct ina_hdr h;
    ps_job_hdr(&h, job, INA_K_PS_PUSH, rank);
    h.slot = idx;
    h.seq = s;
    h.count = 1;
    ina__hdr_encode(b, &h);
    ina__put64(b + INA_HDR_LEN, 42);
    ina__putf(b + INA_HDR_LEN + 8, 1.0f);
    struct sockaddr_in src = rank_addr(job->id - 1, rank);
    input(b, sizeof(b), &src);
}

static void open_ps(size_t limit, uint32_t initial_keys)
{
    struct ina_ps_params p = {.shard = 0, .nshards = 1, .max_memory = limit,
                              .initial_keys = initial_keys,
                              .join_timeout_ns = 120000000000ull,
                              .idle_timeout_ns = 3600000000000ull,
                              .step_timeout_ns = 60000000000ull};
    CHECK_EQ_INT(ina__ps_init(&ps, &p), 0);
    aborts_full = 0;
}

/*
 * Issue 30, item 5: 16 jobs of 256 ranks, each rank pushing packet index 2^20 - 1 of
 * steps 0 and 1 (about 8k datagrams after the joins). Each made a 128 KiB bitmap that
 * --max-memory did not count: 1 GiB at a 4 MiB limit. Now every bitmap is charged, the
 * job whose bitmap does not fit is aborted with PS_FULL, and memory stays within the limit.
 */
static void test_index_flood(void)
{
    open_ps(LIMIT, 16); /* small stores: all 16 jobs start, as in the attack */
    long rss0 = test_rss_kib();
    for (int j = 0; j < INA_PS_MAX_JOBS; j++) {
        char name[32];
        snprintf(name, sizeof(name), "flood%d", j);
        for (int r = 0; r < INA_MAX_WORKERS; r++) {
            struct sockaddr_in a = rank_addr(j, r);
            join(name, INA_MAX_WORKERS, r, INA_PS_MODE_SYNC, &a);
        }
    }
    int started = 0;
    for (int j = 0; j < INA_PS_MAX_JOBS; j++)
        started += ps.jobs[j].state == INA_PS_ACTIVE;
    CHECK_EQ_INT(started, INA_PS_MAX_JOBS); /* the stores shrink to fit: every job runs */
    size_t peak = 0, held = 0;
    int agree = 1;
    for (uint32_t s = 0; s < 2; s++)
        for (int j = 0; j < INA_PS_MAX_JOBS; j++)
            for (int r = 0; r < INA_MAX_WORKERS; r++)
                if (ps.jobs[j].state == INA_PS_ACTIVE) {
                    push(&ps.jobs[j], r, s, INA_PS_MAX_PACKETS - 1);
                    held = held_bytes();
                    peak = held > peak ? held : peak;
                    agree = agree && held == ps.mem_used;
                }
    long rss1 = test_rss_kib();
    printf("index flood: peak %zu bytes held, limit %u; VmRSS %ld -> %ld KiB; "
           "%llu refusals, %llu jobs aborted\n", peak, LIMIT, rss0, rss1,
           (unsigned long long)ps.c.memory_refusals, (unsigned long long)ps.c.jobs_aborted);
    CHECK(peak <= LIMIT);
    CHECK(peak > LIMIT / 2); /* the flood did fill the shard */
    CHECK(agree);            /* and every byte held was charged */
    CHECK(ps.c.memory_refusals >= 1);
    /* Each refusal ended its job for every rank with PS_ABORT PS_FULL (§14.2.6). */
    CHECK_EQ_INT(ps.c.jobs_aborted, ps.c.memory_refusals);
    CHECK_EQ_INT(aborts_full, ps.c.jobs_aborted * INA_MAX_WORKERS);
    /* Resident memory follows (1 GiB before the fix); slack for the allocator. */
    if (rss0 > 0 && rss1 > 0)
        CHECK(rss1 - rss0 < 128 * 1024);
    ina__ps_free(&ps);
}

/* A bitmap that fits is charged and kept until the job ends; the memory returns then. */
static void test_bitmap_charged(void)
{
    open_ps(LIMIT, 16);
    for (int r = 0; r < 2; r++) {
        struct sockaddr_in a = rank_addr(0, r);
        join("small", 2, r, INA_PS_MODE_SYNC, &a);
    }
    const struct ina_ps_job *job = &ps.jobs[0];
    CHECK_EQ_INT(job->state, INA_PS_ACTIVE);
    size_t base = ps.mem_used;
    push(job, 0, 0, 0); /* the first bitmap: INA_PS_BITMAP_MIN bits */
    CHECK_EQ_INT(ps.mem_used - base, INA_PS_BITMAP_MIN / 8);
    push(job, 0, 0, 5000); /* grows to 8192 bits */
    CHECK_EQ_INT(ps.mem_used - base, 8192 / 8);
    push(job, 1, 1, 511); /* the other parity, another rank: its own */
    CHECK_EQ_INT(ps.mem_used - base, 8192 / 8 + INA_PS_BITMAP_MIN / 8);
    /* An index at the limit is dropped INDEX, before anything is allocated. */
    push(job, 1, 1, INA_PS_MAX_PACKETS);
    CHECK_EQ_INT(ps.c.drops[INA_PS_DROP_INDEX], 1);
    CHECK_EQ_INT(ps.mem_used - base, 8192 / 8 + INA_PS_BITMAP_MIN / 8);
    CHECK_EQ_INT(held_bytes(), ps.mem_used);
    CHECK_EQ_INT(ps.c.push_entries, 3);
    /* Both ranks leave: the job is freed, and every byte charged with it. */
    for (int r = 0; r < 2; r++) {
        uint8_t lb[INA_HDR_LEN];
        struct ina_hdr h;
        ps_job_hdr(&h, job, INA_K_PS_LEAVE, r);
        ina__hdr_encode(lb, &h);
        struct sockaddr_in a = rank_addr(0, r);
        input(lb, sizeof(lb), &a);
    }
    CHECK_EQ_INT(ps.c.jobs_ended, 1);
    CHECK_EQ_INT(ps.mem_used, 0);
    ina__ps_free(&ps);
}

#define BIG_ENTRIES 5000 /* an UPDATE of 5000 dim-1 entries: 60 KiB */

static size_t stale_update(uint8_t *b, const struct ina_ps_job *job, int rank, uint32_t uid,
                           uint32_t stamp)
{
    struct ina_hdr h;
    ps_job_hdr(&h, job, INA_K_PS_UPDATE, rank);
    h.slot = uid;
    h.seq = job->applied;
    h.count = BIG_ENTRIES;
    ina__hdr_encode(b, &h);
    uint8_t *p = b + INA_HDR_LEN;
    ina__put32(p, stamp);
    ina__put32(p + 4, 0);
    p += INA_PS_UPDATE_PREFIX;
    for (int e = 0; e < BIG_ENTRIES; e++, p += ina__ps_entry_len(1)) {
        ina__put64(p, 7); /* one key, repeated: the store stays small */
        ina__putf(p + 8, 0.5f);
    }
    return (size_t)(p - b);
}

/*
 * STALE jobs (§15.2): an UPDATE that comes before its stamp's turn is kept, a copy of up
 * to 64 KiB, one per rank and up to 15 per job. The copies are charged: one that does not
 * fit is not kept (no answer, memory_refusals); the sender sends it again later.
 */
static void test_held_updates(void)
{
    static uint8_t b[INA_HDR_LEN + INA_PS_UPDATE_PREFIX + BIG_ENTRIES * 12];
    const size_t limit = 512 * 1024;
    open_ps(limit, 16);
    for (int r = 0; r < INA_PS_HOLD; r++) {
        struct sockaddr_in a = rank_addr(0, r);
        join("held", INA_PS_HOLD, r, INA_PS_MODE_STALE, &a);
    }
    const struct ina_ps_job *job = &ps.jobs[0];
    CHECK_EQ_INT(job->state, INA_PS_ACTIVE);
    size_t base = ps.mem_used;
    /* Ranks 1..15 send stamps 1..15 before stamp 0: 15 x 60 KiB to hold. */
    for (int r = 1; r < INA_PS_HOLD; r++) {
        struct sockaddr_in a = rank_addr(0, r);
        input(b, stale_update(b, job, r, 1, (uint32_t)r), &a);
        CHECK(held_bytes() <= limit && held_bytes() == ps.mem_used);
    }
    printf("held updates: %llu held, %llu refused, %zu bytes charged, limit %zu\n",
           (unsigned long long)ps.c.updates_held, (unsigned long long)ps.c.memory_refusals,
           ps.mem_used, limit);
    CHECK(ps.c.updates_held >= 1 && ps.c.updates_held < INA_PS_HOLD - 1);
    CHECK_EQ_INT(ps.c.updates_held + ps.c.memory_refusals, INA_PS_HOLD - 1);
    /* Stamp 0 comes: it and the held stamps after it are taken, their copies freed. */
    struct sockaddr_in a0 = rank_addr(0, 0);
    input(b, stale_update(b, job, 0, 1, 0), &a0);
    CHECK_EQ_INT(ps.c.updates_applied, 1 + ps.c.updates_held);
    CHECK_EQ_INT(ps.mem_used, base);
    CHECK_EQ_INT(held_bytes(), ps.mem_used);
    ina__ps_free(&ps);
}

/*
 * Chain replication (§15.8): a primary keeps every forward until the replica acknowledges
 * it, up to 512 per job. The forwards are charged: with a silent replica they fill
 * --max-memory, and the one that does not fit breaks the job's chain (the primary then
 * answers alone), instead of holding 512 x 64 KiB per job.
 */
static void test_chain_forwards(void)
{
    static uint8_t b[INA_HDR_LEN + INA_PS_UPDATE_PREFIX + BIG_ENTRIES * 12];
    const size_t limit = 512 * 1024;
    open_ps(limit, 16);
    struct sockaddr_in replica = mkaddr(0x7F000002, 9999); /* never answers */
    CHECK_EQ_INT(ina__ps_chain_init(&chain, &ps, &replica, NULL, 1000000000000ull), 0);
    for (int r = 0; r < 2; r++) {
        struct sockaddr_in a = rank_addr(0, r);
        join("chain", 2, r, INA_PS_MODE_STALE, &a);
    }
    const struct ina_ps_job *job = &ps.jobs[0];
    CHECK_EQ_INT(job->state, INA_PS_ACTIVE);
    struct sockaddr_in a0 = rank_addr(0, 0);
    uint32_t uid = 1;
    for (; uid <= 40 && !chain.jobs[0].broken; uid++) {
        input(b, stale_update(b, job, 0, uid, job->next_stamp), &a0);
        CHECK(held_bytes() <= limit && held_bytes() == ps.mem_used);
    }
    printf("chain forwards: %llu forwarded, then broken %d, %llu refusals, %zu bytes charged\n",
           (unsigned long long)ps.c.chain_forwarded, chain.jobs[0].broken,
           (unsigned long long)ps.c.memory_refusals, ps.mem_used);
    CHECK(chain.jobs[0].broken);
    CHECK_EQ_INT(ps.c.memory_refusals, 1);
    CHECK_EQ_INT(ps.c.chain_unforwarded, 1);
    CHECK_EQ_INT(ps.c.chain_forwarded, uid - 2); /* every update before the one refused */
    /* Broken: the forwards are released; the job goes on, answered by the primary alone. */
    CHECK_EQ_INT(chain.jobs[0].n, 0);
    input(b, stale_update(b, job, 0, uid, job->next_stamp), &a0);
    CHECK_EQ_INT(ps.c.updates_applied, uid);
    CHECK_EQ_INT(held_bytes(), ps.mem_used);
    ina__ps_chain_free(&ps);
    ina__ps_free(&ps);
    memset(&chain, 0, sizeof(chain));
}

int main(void)
{
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT); /* the aborts are expected */
    test_bitmap_charged();
    test_held_updates();
    test_chain_forwards();
    test_index_flood();
    return check_report("test_ps_memory");
}
