/* test_ps.c: ina-ps's protocol engine (ps.c) driven datagram by datagram, no sockets: join, exactly-once PUSH, COMMIT rules, versioned ASSIGN, PULL, aborts (PROTOCOL.md §14.2). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "ps/ps.h"
#include "ps_wire.h"

#define WORLD 2

static struct ina_ps ps;
static struct sockaddr_in addr[WORLD];
static uint16_t job_id;
static uint32_t session, token;
static uint64_t now = 1000000000ull;

/* The replies queued since the last call, by kind; each decoded header into last[kind]. */
static unsigned nreply[64];
static struct ina_hdr last[64];
static uint8_t last_body[64][4096];

static void take_replies(void)
{
    memset(nreply, 0, sizeof(nreply));
    for (unsigned i = 0; i < ps.tx.n; i++) {
        const uint8_t *b = ps.tx.iov[i].iov_base;
        size_t len = ps.tx.iov[i].iov_len;
        struct ina_hdr h;
        if (ina__hdr_decode(b, len, &h) != INA_PARSE_OK || h.kind >= 64)
            continue;
        nreply[h.kind]++;
        last[h.kind] = h;
        memcpy(last_body[h.kind], b + INA_HDR_LEN,
               len - INA_HDR_LEN < sizeof(last_body[0]) ? len - INA_HDR_LEN : sizeof(last_body[0]));
    }
    ina__ps_tx_reset(&ps);
}

static void input(int rank, const uint8_t *b, size_t len)
{
    ina__ps_input(&ps, b, len, &addr[rank], now);
    take_replies();
}

static void join(int rank, uint64_t nonce)
{
    uint8_t b[INA_HDR_LEN + INA_PS_JOIN_BODY_LEN];
    struct ina_ps_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world = WORLD;
    j.shard = 0;
    j.nshards = 1;
    j.dim = 1;
    j.optim = INA_OPTIM_SGD;
    j.lr = 1.0f;
    j.eps = 1.0f;
    snprintf(j.name, sizeof(j.name), "unit");
    input(rank, b, ps_join_datagram(b, rank, &j));
}

/* A request of the job from rank: kind, slot, seq, count, flags, body. */
static void req(int rank, uint8_t kind, uint32_t slot, uint32_t seq, uint16_t count,
                uint16_t flags, const uint8_t *body, size_t blen)
{
    uint8_t b[INA_HDR_LEN + 4096];
    struct ina_hdr h;
    ina__hdr_init(&h, kind);
    h.job = job_id;
    h.rank = (uint16_t)rank;
    h.session = session;
    h.token = token;
    h.slot = slot;
    h.seq = seq;
    h.count = count;
    h.flags = flags;
    ina__hdr_encode(b, &h);
    if (blen)
        memcpy(b + INA_HDR_LEN, body, blen);
    input(rank, b, INA_HDR_LEN + blen);
}

/* PUSH of one entry (key, value) as packet index idx of step s. */
static void push1(int rank, uint32_t s, uint32_t idx, uint64_t key, float v)
{
    uint8_t e[12];
    ina__put64(e, key);
    ina__putf(e + 8, v);
    req(rank, INA_K_PS_PUSH, idx, s, 1, 0, e, sizeof(e));
}

static float pull1(uint64_t key)
{
    uint8_t k[8];
    ina__put64(k, key);
    req(0, INA_K_PS_PULL, 77, 0, 1, 0, k, sizeof(k));
    if (nreply[INA_K_PS_PULL_RESP] != 1 || last[INA_K_PS_PULL_RESP].slot != 77)
        return -12345.0f;
    return ina__getf(last_body[INA_K_PS_PULL_RESP]);
}

int main(void)
{
    struct ina_ps_params p = {.shard = 0, .nshards = 1, .max_memory = 64u << 20,
                              .initial_keys = 64, .join_timeout_ns = 120000000000ull,
                              .idle_timeout_ns = 3600000000000ull,
                              .step_timeout_ns = 60000000000ull};
    CHECK_EQ_INT(ina__ps_init(&ps, &p), 0);
    for (int r = 0; r < WORLD; r++) {
        addr[r].sin_family = AF_INET;
        addr[r].sin_addr.s_addr = htonl(0x7F000001);
        addr[r].sin_port = htons((uint16_t)(21500 + r));
    }

    /* Join: no answer until every rank is in, then an ACK to each. */
    join(0, 11);
    CHECK_EQ_INT(nreply[INA_K_PS_JOIN_ACK], 0);
    join(1, 22);
    CHECK_EQ_INT(nreply[INA_K_PS_JOIN_ACK], WORLD);
    job_id = last[INA_K_PS_JOIN_ACK].job;
    session = last[INA_K_PS_JOIN_ACK].session;
    token = last[INA_K_PS_JOIN_ACK].token;
    CHECK(session != 0);

    const uint64_t K = 0x1234567890ull;
    /* Step 0: rank 0 pushes 3 in packet 0, and the same packet again (a retransmission). */
    push1(0, 0, 0, K, 3.0f);
    CHECK_EQ_INT(nreply[INA_K_PS_PUSH_ACK], 1);
    push1(0, 0, 0, K, 3.0f);
    CHECK_EQ_INT(nreply[INA_K_PS_PUSH_ACK], 1); /* acknowledged again ... */
    CHECK_EQ_INT((int)ps.c.push_dups, 1);       /* ... but not added again */
    /* A COMMIT that claims more packets than arrived is early: dropped. */
    req(0, INA_K_PS_COMMIT, 2, 0, 0, 0, NULL, 0);
    CHECK_EQ_INT((int)ps.c.drops[INA_PS_DROP_EARLY], 1);
    req(0, INA_K_PS_COMMIT, 1, 0, 0, 0, NULL, 0);
    CHECK_EQ_INT(nreply[INA_K_PS_COMMIT_ACK], 0); /* rank 1 has not committed */
    /* Step 2 is beyond the window (steps 0 and 1 are open). */
    push1(1, 2, 0, K, 100.0f);
    CHECK_EQ_INT((int)ps.c.drops[INA_PS_DROP_FUTURE], 1);
    push1(1, 0, 0, K, 4.0f);
    req(1, INA_K_PS_COMMIT, 1, 0, 0, 0, NULL, 0);
    CHECK_EQ_INT(nreply[INA_K_PS_COMMIT_ACK], WORLD); /* applied once, acked to every rank */
    CHECK_EQ_INT((int)ps.c.steps_applied, 1);
    CHECK(pull1(K) == -7.0f); /* SGD lr 1: 0 - (3 + 4) */
    CHECK(pull1(K + 1) == 0.0f); /* never updated: the initial value, and no record made */
    CHECK_EQ_INT((int)ps.jobs[job_id - 1].store.n, 1);

    /* A copy of step 0's push after it was applied: acknowledged, not added. */
    push1(1, 0, 0, K, 4.0f);
    CHECK_EQ_INT(nreply[INA_K_PS_PUSH_ACK], 1);
    req(1, INA_K_PS_COMMIT, 1, 0, 0, 0, NULL, 0);
    CHECK_EQ_INT(nreply[INA_K_PS_COMMIT_ACK], 1); /* a late COMMIT is answered at once */
    CHECK(pull1(K) == -7.0f);

    /* ASSIGN as of step 1 (the hot-set write-back of §14.4): taken, and again (a copy). */
    uint8_t a[16];
    ina__put64(a, K);
    ina__putf(a + 8, 10.0f);
    ina__putf(a + 12, 0.0f);
    req(0, INA_K_PS_ASSIGN, 5, 1, 1, 0, a, sizeof(a));
    CHECK_EQ_INT(nreply[INA_K_PS_ASSIGN_ACK], 1);
    req(1, INA_K_PS_ASSIGN, 6, 1, 1, 0, a, sizeof(a));
    CHECK(pull1(K) == 10.0f);
    /* Step 1 updates the key; then a late ASSIGN of step 1 must not undo that update. */
    for (int r = 0; r < WORLD; r++) {
        push1(r, 1, 0, K, 1.0f);
        req(r, INA_K_PS_COMMIT, 1, 1, 0, 0, NULL, 0);
    }
    CHECK(pull1(K) == 8.0f);
    req(0, INA_K_PS_ASSIGN, 5, 1, 1, 0, a, sizeof(a));
    CHECK_EQ_INT(nreply[INA_K_PS_ASSIGN_ACK], 1);
    CHECK_EQ_INT((int)ps.c.assign_stale, 1);
    CHECK(pull1(K) == 8.0f);

    /* Wrong token, wrong source: dropped, nothing changes. */
    token ^= 1;
    push1(0, 2, 0, K, 50.0f);
    token ^= 1;
    CHECK_EQ_INT((int)ps.c.drops[INA_PS_DROP_TOKEN], 1);
    struct sockaddr_in keep = addr[0];
    addr[0].sin_port = htons(21599);
    push1(0, 2, 0, K, 50.0f);
    addr[0] = keep;
    CHECK_EQ_INT((int)ps.c.drops[INA_PS_DROP_SOURCE], 1);

    /* A step open too long aborts the job, naming the missing rank. */
    push1(0, 2, 0, K, 1.0f);
    req(0, INA_K_PS_COMMIT, 1, 2, 0, 0, NULL, 0);
    now += 61000000000ull;
    ina__ps_tick(&ps, now);
    take_replies();
    CHECK_EQ_INT(nreply[INA_K_PS_ABORT], WORLD);
    CHECK_EQ_INT((int32_t)ina__get32(last_body[INA_K_PS_ABORT] + 8), INA_ERR_TIMEOUT);
    CHECK_EQ_INT(ina__get16(last_body[INA_K_PS_ABORT] + 12), 1);
    CHECK_EQ_INT((int)ina__get32(last_body[INA_K_PS_ABORT] + 16), 2);
    CHECK_EQ_INT(ps.jobs[job_id - 1].state, INA_PS_FREE);
    CHECK_EQ_INT((int)ps.mem_used, 0);

    ina__ps_free(&ps);
    return check_report("test_ps");
}
