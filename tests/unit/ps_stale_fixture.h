/* ps_stale_fixture.h: what the STALE-mode tests of ina-ps share (test_ps_stale.c,
 * test_ps_chain.c): addresses, a server, random updates of NKEYS / 2 keys of DIM floats,
 * their UPDATE encoding, and a bit-for-bit model comparison. Include after ps/ps.h,
 * check.h and rng.h, with WORLD, DIM and NKEYS defined. */
#ifndef INA_TEST_PS_STALE_FIXTURE_H
#define INA_TEST_PS_STALE_FIXTURE_H

#include "ps_wire.h"
#include "test_addr.h"

/* One PS_JOIN of job name to ps, rank r from addr: world, start (0: all), one shard, DIM,
 * lr 0.5, eps 1, uniform init (scale 0.1, seed 7), the mode and max_delay d. The answers stay
 * in ps's transmit queue. */
static void send_join(struct ina_ps *ps, const struct sockaddr_in *addr, const char *name, int r,
                      int world, int start, int mode, int d, int optim, uint64_t nonce)
{
    uint8_t b[INA_HDR_LEN + INA_PS_JOIN_BODY_LEN];
    struct ina_ps_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world = (uint16_t)world;
    j.start = (uint16_t)start;
    j.nshards = 1;
    j.dim = DIM;
    j.optim = (uint8_t)optim;
    j.mode = (uint8_t)mode;
    j.max_delay = (uint8_t)d;
    j.lr = 0.5f;
    j.eps = 1.0f;
    j.init = INA_INIT_UNIFORM;
    j.init_scale = 0.1f;
    j.init_seed = 7;
    snprintf(j.name, sizeof(j.name), "%s", name);
    ina__ps_input(ps, b, ps_join_datagram(b, r, &j), addr, 1);
}

/* Every rank's PS_JOIN of job name to ps, rank r from addr[r]: world WORLD, max_delay d (rank
 * 3: d3, so that a test can make one rank disagree). */
static void send_joins(struct ina_ps *ps, const struct sockaddr_in *addr, const char *name,
                       int mode, int d, int d3, int optim)
{
    for (int r = 0; r < WORLD; r++)
        send_join(ps, &addr[r], name, r, WORLD, 0, mode, r == 3 ? d3 : d, optim, 100 + (uint64_t)r);
}

static void new_ps(struct ina_ps *ps)
{
    struct ina_ps_params p = {.shard = 0, .nshards = 1, .max_memory = 64u << 20,
                              .initial_keys = 8};
    CHECK_EQ_INT(ina__ps_init(ps, &p), 0);
}

struct upd {
    int rank;
    uint32_t uid, base, stamp;
    float g[NKEYS / 2][DIM];
    uint64_t keys[NKEYS / 2];
};

static void random_update(struct upd *u)
{
    for (int e = 0; e < NKEYS / 2; e++) {
        u->keys[e] = 1000 + (uint64_t)(e * 2 + (int)(rng_u64() & 1));
        for (int j = 0; j < DIM; j++)
            u->g[e][j] = (float)(rng_u64() >> 40) / (float)(1 << 24) - 0.5f;
    }
}

/* u as an UPDATE (kind) to ps's job 0 (one rank's update: members 0). */
static size_t encode_update(const struct ina_ps *ps, const struct upd *u, uint8_t *b, int kind)
{
    struct ina_hdr h;
    ps_job_hdr(&h, &ps->jobs[0], (uint8_t)kind, u->rank);
    h.slot = u->uid;
    h.seq = u->base;
    h.count = NKEYS / 2;
    ina__hdr_encode(b, &h);
    uint8_t *p = b + INA_HDR_LEN;
    ina__put32(p, u->stamp);
    ina__put32(p + 4, 0);
    p += INA_PS_UPDATE_PREFIX;
    for (int e = 0; e < NKEYS / 2; e++, p += ina__ps_entry_len(DIM)) {
        ina__put64(p, u->keys[e]);
        for (int j = 0; j < DIM; j++)
            ina__putf(p + 8 + 4 * j, u->g[e][j]);
    }
    return (size_t)(p - b);
}

/* The job's model, key by key (values then state), and its version, bit for bit. */
static int same_model(const struct ina_ps *a, const struct ina_ps *b)
{
    const struct ina_ps_store *x = &a->jobs[0].store, *y = &b->jobs[0].store;
    if (x->n != y->n)
        return 0;
    for (uint32_t r = 0; r < x->n; r++) {
        uint32_t s = ina__kmap_get(&y->index, x->keys[r]);
        if (s == INA_KMAP_NONE || memcmp(x->vals + r * DIM, y->vals + s * DIM, DIM * 4) != 0 ||
            (x->state && memcmp(x->state + r * DIM, y->state + s * DIM, DIM * 4) != 0))
            return 0;
    }
    return a->jobs[0].applied == b->jobs[0].applied;
}

#endif
