/* test_hot.c: the switch's hot table as a state machine (hot.c, PROTOCOL.md §14.3): installs, samples, fetches and their edge cases (epochs, offsets, totals, empty tables), and --hot-memory across many jobs. No sockets. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/kmap.h"
#include "common/log.h"
#include "engine/engine.h"
#include "rss.h"
#include "test_addr.h"

#define HOT_MAX 65536

static struct ina_switch *sw;

static void sw_open(size_t hot_memory)
{
    struct ina_switch_params p;
    memset(&p, 0, sizeof(p));
    p.nslots = 2 * INA_SW_MAX_JOBS;
    p.max_elems = 8;
    p.join_timeout_ns = 1000000000ull;
    p.idle_timeout_ns = 3600000000000ull;
    p.hot_max = HOT_MAX;
    p.hot_memory = hot_memory;
    sw = malloc(sizeof(*sw));
    if (!sw || ina__switch_init(sw, &p) != 0) {
        fprintf(stderr, "test_hot: cannot open the switch\n");
        exit(1);
    }
}

static void sw_close(void)
{
    ina__switch_free(sw);
    free(sw);
    sw = NULL;
}

/* A one-rank job (issue 30's: no secret, nothing but a JOIN), or rank `rank` of one. */
struct job {
    uint16_t id, rank;
    uint32_t session, token;
    struct sockaddr_in addr;
};

/* The ranks of an n-rank job, each from its own port (port + r). */
static void join_n(const char *name, uint16_t port, int n, struct job *out)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    for (int r = 0; r < n; r++) {
        struct ina_hdr h;
        ina__hdr_init(&h, INA_K_JOIN);
        h.rank = (uint16_t)r;
        ina__hdr_encode(b, &h);
        struct ina_join j;
        memset(&j, 0, sizeof(j));
        j.nonce = 0x78000 + port + (uint64_t)r;
        j.world_size = (uint16_t)n;
        j.elems = 8;
        j.window = 1;
        j.sw_version = INA_VERSION_NUMBER;
        snprintf(j.name, sizeof(j.name), "%s", name);
        ina__join_encode(b + INA_HDR_LEN, &j);
        out[r] = (struct job){.rank = (uint16_t)r, .addr = mkaddr(0x7F000001, (uint16_t)(port + r))};
        ina__txq_reset(&sw->txq);
        ina__switch_input(sw, b, sizeof(b), &out[r].addr, 1000);
    }
    for (unsigned i = 0; i < sw->txq.nmsg; i++) { /* the last JOIN started the job */
        struct ina_hdr a;
        if (ina__hdr_decode(sw->txq.iovs[i].iov_base, sw->txq.iovs[i].iov_len, &a) ==
                INA_PARSE_OK && a.kind == INA_K_JOIN_ACK) {
            CHECK(a.flags & INA_FLAG_CAP_HOT);
            for (int r = 0; r < n; r++) {
                out[r].id = a.job;
                out[r].session = a.session;
                out[r].token = a.token;
            }
        }
    }
    CHECK(out[0].id != 0);
    ina__txq_reset(&sw->txq);
}

static struct job join1(const char *name, uint16_t port)
{
    struct job j;
    join_n(name, port, 1, &j);
    return j;
}

/* A HOT_INSTALL or HOT_FETCH of job j with that body; the answer, if any, in ans. */
struct answer {
    int n; /* HOT_KEYS queued */
    uint32_t epoch, total, offset, count;
    int32_t status;
    uint64_t keys[8];
};

static struct answer control(const struct job *j, uint8_t kind, const uint8_t *body, size_t blen)
{
    static uint8_t b[INA_HDR_LEN + INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * 4096]; /* the longest body */
    struct ina_hdr h;
    ina__hdr_init(&h, kind);
    h.job = j->id;
    h.rank = j->rank;
    h.session = j->session;
    h.token = j->token;
    ina__hdr_encode(b, &h);
    memcpy(b + INA_HDR_LEN, body, blen);
    ina__txq_reset(&sw->txq);
    ina__switch_input(sw, b, INA_HDR_LEN + blen, &j->addr, 2000);
    struct answer a;
    memset(&a, 0, sizeof(a));
    for (unsigned i = 0; i < sw->txq.nmsg; i++) {
        const uint8_t *r = sw->txq.iovs[i].iov_base;
        struct ina_hdr rh;
        if (ina__hdr_decode(r, sw->txq.iovs[i].iov_len, &rh) != INA_PARSE_OK ||
            rh.kind != INA_K_HOT_KEYS)
            continue;
        const uint8_t *p = r + INA_HDR_LEN;
        a.n++;
        a.epoch = ina__get32(p);
        a.total = ina__get32(p + 4);
        a.offset = ina__get32(p + 8);
        a.count = ina__get16(p + 12);
        a.status = (int32_t)ina__get32(p + 16);
        for (uint32_t k = 0; k < a.count && k < 8; k++)
            a.keys[k] = ina__get64(p + INA_HOT_KEYS_HDR + 8 * (size_t)k);
        CHECK_EQ_INT(sw->txq.iovs[i].iov_len, INA_HDR_LEN + INA_HOT_KEYS_HDR + 8 * (size_t)a.count);
    }
    ina__txq_reset(&sw->txq);
    return a;
}

static struct answer install(const struct job *j, uint32_t epoch, uint32_t total, uint32_t off,
                             const uint64_t *keys, uint32_t count)
{
    static uint8_t body[INA_HOT_INSTALL_HDR + 8 * 4096];
    ina__put32(body, epoch);
    ina__put32(body + 4, total);
    ina__put32(body + 8, off);
    ina__put16(body + 12, (uint16_t)count);
    ina__put16(body + 14, 0);
    for (uint32_t i = 0; i < count; i++)
        ina__put64(body + INA_HOT_INSTALL_HDR + 8 * (size_t)i, keys[i]);
    return control(j, INA_K_HOT_INSTALL, body, INA_HOT_INSTALL_HDR + 8 * (size_t)count);
}

static struct answer fetch(const struct job *j, uint32_t epoch, uint32_t off, uint16_t max)
{
    uint8_t body[INA_HOT_FETCH_LEN];
    ina__put32(body, epoch);
    ina__put32(body + 4, off);
    ina__put16(body + 8, max);
    ina__put16(body + 10, 0);
    return control(j, INA_K_HOT_FETCH, body, sizeof(body));
}

/*
 * Issue 30, item 8: JOIN (one rank), HOT_INSTALL epoch 1 total 5 with one key,
 * HOT_FETCH epoch 0 offset 0 made hot.c add an offset to the NULL key list of a table
 * with no active epoch (UBSan stopped there). Epoch 0 is no table: dropped JOIN.
 */
static void test_fetch_epoch0(void)
{
    sw_open(0);
    struct job j = join1("hot-ub", 30001);
    const uint64_t k5[5] = {11, 12, 13, 14, 15};
    struct answer a = install(&j, 1, 5, 0, k5, 1);
    CHECK(a.n == 1 && a.epoch == 1 && a.total == 5 && a.status == 0);
    uint64_t join_drops = sw->c.drops[INA_DROP_JOIN];
    a = fetch(&j, 0, 0, 100);
    CHECK_EQ_INT(a.n, 0);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_JOIN], join_drops + 1);
    /* The install goes on: epoch 1 is pending until its last position comes. */
    a = fetch(&j, 1, 0, 100);
    CHECK(a.n == 1 && a.status == INA_HOT_PENDING);
    a = install(&j, 1, 5, 1, k5 + 1, 4);
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_installs == 1);
    a = fetch(&j, 1, 0, 100);
    CHECK(a.n == 1 && a.status == 0 && a.total == 5 && a.count == 5 && a.keys[4] == 15);
    /* Epoch 0 once a table is active: still no table. */
    a = fetch(&j, 0, 0, 100);
    CHECK_EQ_INT(a.n, 0);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_JOIN], join_drops + 2);
    sw_close();
}

/* The other edges of the same kind: offsets at and past the end, later and earlier
 * epochs, empty tables, totals that change mid-install, malformed installs. */
static void test_edges(void)
{
    sw_open(0);
    struct job j = join1("hot-edges", 30002);
    const uint64_t k[4] = {21, 22, 23, 24};
    struct answer a = fetch(&j, 1, 0, 10); /* no table at all yet */
    CHECK(a.n == 1 && a.status == INA_HOT_PENDING);
    uint64_t join_drops = sw->c.drops[INA_DROP_JOIN];
    /* Malformed installs: epoch 0, offset past total, count past total: dropped JOIN. */
    CHECK_EQ_INT(install(&j, 0, 4, 0, k, 4).n, 0);
    CHECK_EQ_INT(install(&j, 1, 4, 5, k, 0).n, 0);
    CHECK_EQ_INT(install(&j, 1, 4, 2, k, 3).n, 0);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_JOIN], join_drops + 3);
    /* An empty table (total 0) is installed by one empty chunk and fetched as such. */
    a = install(&j, 1, 0, 0, NULL, 0);
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_installs == 1);
    a = fetch(&j, 1, 0, 10);
    CHECK(a.n == 1 && a.status == 0 && a.total == 0 && a.count == 0);
    a = fetch(&j, 1, 1, 10); /* offset past H = 0 */
    CHECK(a.n == 1 && a.status == INA_ERR_MISMATCH);
    /* Epoch 2 of 4 keys; a chunk of another total replaces the pending install. */
    a = install(&j, 2, 4, 0, k, 2);
    CHECK(a.n == 1 && a.status == 0);
    a = install(&j, 2, 3, 0, k, 1);
    CHECK(a.n == 1 && a.status == 0 && a.total == 3);
    a = install(&j, 2, 3, 1, k + 1, 2); /* completes the 3-key install */
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_installs == 2);
    a = fetch(&j, 2, 3, 10); /* offset = H: no keys, status 0 */
    CHECK(a.n == 1 && a.status == 0 && a.total == 3 && a.count == 0);
    a = fetch(&j, 2, 1, 1);
    CHECK(a.n == 1 && a.count == 1 && a.keys[0] == 22);
    a = fetch(&j, 1, 0, 10); /* an older epoch */
    CHECK(a.n == 1 && a.status == INA_ERR_MISMATCH);
    a = fetch(&j, 3, 0, 10); /* a later one */
    CHECK(a.n == 1 && a.status == INA_HOT_PENDING);
    a = install(&j, 1, 4, 0, k, 4); /* an earlier epoch: a repeat, nothing changes */
    CHECK(a.n == 1 && a.status == 0);
    a = fetch(&j, 2, 0, 10);
    CHECK(a.n == 1 && a.total == 3 && a.keys[2] == 23);
    /* A key twice: MISMATCH, the pending table is dropped, epoch 2 stays. */
    const uint64_t dup[2] = {5, 5};
    a = install(&j, 3, 2, 0, dup, 2);
    CHECK(a.n == 1 && a.status == INA_ERR_MISMATCH);
    a = fetch(&j, 2, 0, 10);
    CHECK(a.n == 1 && a.status == 0 && a.total == 3);
    /* Short bodies: dropped JOIN. */
    join_drops = sw->c.drops[INA_DROP_JOIN];
    uint8_t z[12] = {0};
    CHECK_EQ_INT(control(&j, INA_K_HOT_FETCH, z, 11).n, 0);
    CHECK_EQ_INT(control(&j, INA_K_HOT_INSTALL, z, 12).n, 0);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_JOIN], join_drops + 2);
    sw_close();
}

/* The charge of an active table of n keys (PROTOCOL.md §14.3): 8n + 12 c(n). */
static size_t table_charge(uint32_t n)
{
    return n ? 8 * (size_t)n + 12 * (size_t)ina__kmap_cells(n) : 0;
}

/* Rank 0 installs keys[0..n) as epoch, in chunks of 4096, as libina does (§14.3): a NOSPACE
 * cuts the list to the total it names and starts again. @return the keys installed. */
static uint32_t install_all(const struct job *j, uint32_t epoch, const uint64_t *keys, uint32_t n)
{
    for (;;) {
        struct answer a = {0};
        for (uint32_t off = 0; off < n || (n == 0 && off == 0); off += 4096) {
            uint32_t cnt = n - off < 4096 ? n - off : 4096;
            a = install(j, epoch, n, off, keys + off, cnt);
            if (a.n != 1 || a.status != 0)
                break;
            if (n == 0)
                break;
        }
        if (a.n == 1 && a.status == INA_ERR_NOSPACE && a.total < n) {
            n = a.total;
            continue;
        }
        CHECK(a.n == 1 && a.status == 0);
        return n;
    }
}

/*
 * Issue 30, item 9: 64 one-rank jobs with 65536-key tables took the switch from 6 to
 * 166 MB. With --hot-memory, the tables together stay within it: an install that does
 * not fit is answered NOSPACE with the keys that would, and the job installs that many
 * (down to an empty table, all keys then going to ina-ps).
 */
static void test_hot_memory(void)
{
    const size_t limit = 8u << 20;
    sw_open(limit);
    static uint64_t keys[HOT_MAX];
    for (uint32_t i = 0; i < HOT_MAX; i++)
        keys[i] = 0x100000000ull + i;
    long rss0 = test_rss_kib();
    size_t charged = 0, peak = 0;
    uint32_t full = 0, cut = 0, empty = 0;
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        char name[32];
        snprintf(name, sizeof(name), "hot%d", i);
        struct job j = join1(name, (uint16_t)(31000 + i));
        uint32_t n = install_all(&j, 1, keys, HOT_MAX);
        full += n == HOT_MAX;
        cut += n > 0 && n < HOT_MAX;
        empty += n == 0;
        charged += table_charge(n);
        size_t used = atomic_load(&sw->hot_own.used);
        peak = used > peak ? used : peak;
        CHECK(used <= limit);
        CHECK_EQ_INT(used, charged); /* the active tables, by the formula of §14.3 */
        if (n > 0) { /* and each is whole */
            struct answer a = fetch(&j, 1, n - 1, 10);
            CHECK(a.n == 1 && a.status == 0 && a.total == n && a.count == 1 &&
                  a.keys[0] == keys[n - 1]);
        }
    }
    long rss1 = test_rss_kib();
    printf("hot memory: %u full tables, %u cut, %u empty; %zu bytes charged (limit %zu); "
           "%llu refusals; VmRSS %ld -> %ld KiB\n", full, cut, empty, charged, limit,
           (unsigned long long)sw->c.hot_refusals, rss0, rss1);
    CHECK(full >= 1 && empty >= 1);
    CHECK(sw->c.hot_refusals >= (uint64_t)(cut + empty));
    CHECK_EQ_INT(sw->c.hot_installs, INA_SW_MAX_JOBS);
    /* Resident memory follows (about 130 MiB before the bound); slack for malloc. */
    if (rss0 > 0 && rss1 > 0)
        CHECK(rss1 - rss0 < 64 * 1024);
    sw_close();
}

/* Tables return their memory when their job ends, and a reinstall holds both epochs
 * only until the new one is active. */
static void test_release(void)
{
    const size_t limit = 4u << 20;
    sw_open(limit);
    static uint64_t keys[HOT_MAX];
    for (uint32_t i = 0; i < HOT_MAX; i++)
        keys[i] = 7 + 3 * (uint64_t)i;
    struct job j = join1("hot-release", 32001);
    uint32_t n1 = install_all(&j, 1, keys, HOT_MAX); /* 2 MiB of 4 */
    CHECK_EQ_INT(n1, HOT_MAX);
    CHECK_EQ_INT(atomic_load(&sw->hot_own.used), table_charge(HOT_MAX));
    /* Epoch 2 of the same size does not fit beside epoch 1: cut to what does. */
    uint32_t n2 = install_all(&j, 2, keys + 1, HOT_MAX - 1);
    CHECK(n2 > 0 && n2 < HOT_MAX - 1);
    CHECK_EQ_INT(atomic_load(&sw->hot_own.used), table_charge(n2));
    struct answer a = fetch(&j, 2, 0, 1);
    CHECK(a.n == 1 && a.total == n2 && a.keys[0] == keys[1]);
    /* The job leaves: its table's memory is the budget's again. */
    uint8_t b[INA_HDR_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_LEAVE);
    h.job = j.id;
    h.session = j.session;
    h.token = j.token;
    ina__hdr_encode(b, &h);
    ina__switch_input(sw, b, sizeof(b), &j.addr, 3000);
    ina__txq_reset(&sw->txq);
    CHECK_EQ_INT(sw->c.jobs_ended, 1);
    CHECK_EQ_INT(atomic_load(&sw->hot_own.used), 0);
    struct job k = join1("hot-after", 32002);
    CHECK_EQ_INT(install_all(&k, 1, keys, HOT_MAX), HOT_MAX);
    sw_close();
}

/* One HOT_SAMPLE chunk (PROTOCOL.md §14.3): pairs (keys[i], counts[i]). */
static struct answer sample(const struct job *j, uint32_t epoch, uint32_t want, uint16_t chunk,
                            uint16_t nchunks, const uint64_t *keys, const uint32_t *counts,
                            uint16_t n)
{
    static uint8_t body[INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * 4096];
    ina__put32(body, epoch);
    ina__put32(body + 4, want);
    ina__put16(body + 8, chunk);
    ina__put16(body + 10, nchunks);
    ina__put16(body + 12, n);
    ina__put16(body + 14, 0);
    for (uint16_t i = 0; i < n; i++) {
        ina__put64(body + INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * (size_t)i, keys[i]);
        ina__put32(body + INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * (size_t)i + 8, counts[i]);
    }
    return control(j, INA_K_HOT_SAMPLE, body, INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * (size_t)n);
}

/*
 * Issue 34: the hot set from every rank's sample. Three ranks send their sampled counts;
 * the switch sums them and activates the hottest `want` keys, hottest first (ties: the
 * smaller key), once the last rank's last chunk is in; repeats add nothing; malformed
 * chunks are dropped; a rank that names another want is refused.
 */
static void test_sample(void)
{
    sw_open(0);
    struct job r[3];
    join_n("hot-sample", 33001, 3, r);
    const uint64_t k0[3] = {10, 11, 12}, k0b[1] = {14}, k1[3] = {11, 13, 14};
    const uint32_t c0[3] = {5, 1, 1}, c0b[1] = {1}, c1[3] = {3, 2, 1};
    uint64_t join_drops = sw->c.drops[INA_DROP_JOIN];
    /* Malformed: epoch 0, want 0, nchunks 0, chunk >= nchunks, a length that lies. */
    CHECK_EQ_INT(sample(&r[0], 0, 3, 0, 2, k0, c0, 3).n, 0);
    CHECK_EQ_INT(sample(&r[0], 1, 0, 0, 2, k0, c0, 3).n, 0);
    CHECK_EQ_INT(sample(&r[0], 1, 3, 0, 0, k0, c0, 3).n, 0);
    CHECK_EQ_INT(sample(&r[0], 1, 3, 2, 2, k0, c0, 3).n, 0);
    uint8_t z[INA_HOT_SAMPLE_HDR + 4] = {0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 1};
    CHECK_EQ_INT(control(&r[0], INA_K_HOT_SAMPLE, z, sizeof(z)).n, 0);
    CHECK_EQ_INT(control(&r[0], INA_K_HOT_SAMPLE, z, INA_HOT_SAMPLE_HDR - 1).n, 0);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_JOIN], join_drops + 6);
    /* Rank 0: chunk 0 of 2, twice (the repeat adds nothing); pending until all are in. */
    struct answer a = sample(&r[0], 1, 3, 0, 2, k0, c0, 3);
    CHECK(a.n == 1 && a.epoch == 1 && a.total == 2 && a.offset == 0 && a.status == 0);
    a = sample(&r[0], 1, 3, 0, 2, k0, c0, 3);
    CHECK(a.n == 1 && a.status == 0);
    CHECK_EQ_INT(sw->c.hot_samples, 3);
    a = fetch(&r[2], 1, 0, 10);
    CHECK(a.n == 1 && a.status == INA_HOT_PENDING);
    /* Another nchunks from the same rank: dropped; another want: MISMATCH. */
    CHECK_EQ_INT(sample(&r[0], 1, 3, 0, 3, k0, c0, 3).n, 0);
    a = sample(&r[1], 1, 4, 0, 1, k1, c1, 3);
    CHECK(a.n == 1 && a.status == INA_ERR_MISMATCH);
    a = sample(&r[1], 1, 3, 0, 1, k1, c1, 3);
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_installs == 0);
    a = sample(&r[2], 1, 3, 0, 1, NULL, NULL, 0); /* an empty sample */
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_installs == 0);
    a = sample(&r[0], 1, 3, 1, 2, k0b, c0b, 1); /* the last chunk: the table */
    CHECK(a.n == 1 && a.status == 0 && a.offset == 1 && sw->c.hot_installs == 1);
    CHECK_EQ_INT(sw->c.hot_samples, 7);
    /* Sums: 10:5, 11:4, 13:2, 12:1, 14:2 -> the top 3, hottest first: 10, 11, then 13
     * before 14 (equal sums: the smaller key). */
    a = fetch(&r[1], 1, 0, 10);
    CHECK(a.n == 1 && a.status == 0 && a.total == 3 && a.count == 3);
    CHECK(a.keys[0] == 10 && a.keys[1] == 11 && a.keys[2] == 13);
    CHECK_EQ_INT(atomic_load(&sw->hot_own.used), table_charge(3)); /* the sample's released */
    a = sample(&r[1], 1, 3, 0, 1, k1, c1, 3); /* a repeat after the fact: status 0 */
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_samples == 7);
    /* Epoch 2 asks for more than --hot-keys: the switch keeps HOT_MAX of them. */
    static uint64_t many[HOT_MAX + 10];
    static uint32_t ones[HOT_MAX + 10];
    for (uint32_t i = 0; i < HOT_MAX + 10; i++) {
        many[i] = 1000 + (uint64_t)i;
        ones[i] = 1 + (i % 3 == 0);
    }
    uint16_t per = 4096, nch = (uint16_t)((HOT_MAX + 10 + per - 1) / per);
    for (int rk = 0; rk < 3; rk++)
        for (uint16_t c = 0; c < nch; c++) {
            uint32_t off = (uint32_t)c * per, cnt = HOT_MAX + 10 - off < per ? HOT_MAX + 10 - off : per;
            a = sample(&r[rk], 2, HOT_MAX + 10, c, nch, many + off, ones + off, (uint16_t)cnt);
            CHECK(a.n == 1 && a.status == 0);
        }
    a = fetch(&r[0], 2, 0, 4);
    CHECK(a.n == 1 && a.status == 0 && a.total == HOT_MAX && a.keys[0] == 1000 &&
          a.keys[1] == 1003); /* counts 2 (i % 3 == 0) first, by key */
    CHECK_EQ_INT(atomic_load(&sw->hot_own.used), table_charge(HOT_MAX));
    sw_close();
}

/* A sample --hot-memory cannot hold whole: the keys that find room are counted (hot-
 * sample_drops the rest), the budget holds at every step, and the table charges A(n) after;
 * one that cannot even begin makes an empty table of its epoch at once. */
static void test_sample_memory(void)
{
    const size_t limit = 8192;
    sw_open(limit);
    struct job r[2];
    join_n("hot-smem", 33101, 2, r);
    static uint64_t keys[1000];
    static uint32_t cnt[1000];
    for (uint32_t i = 0; i < 1000; i++) {
        keys[i] = 0xABC000 + (uint64_t)i;
        cnt[i] = 1000 - i; /* the hottest first, as libina sends them */
    }
    for (int rk = 0; rk < 2; rk++)
        for (uint16_t c = 0; c < 10; c++) {
            struct answer a = sample(&r[rk], 1, 1000, c, 10, keys + 100 * c, cnt + 100 * c, 100);
            CHECK(a.n == 1 && a.status == 0);
            CHECK(atomic_load(&sw->hot_own.used) <= limit);
        }
    CHECK(sw->c.hot_sample_drops > 0 && sw->c.hot_installs == 1);
    struct answer a = fetch(&r[0], 1, 0, 8);
    CHECK(a.n == 1 && a.status == 0 && a.total > 0 && a.total < 1000 && a.keys[0] == keys[0]);
    uint32_t n = a.total;
    CHECK_EQ_INT(atomic_load(&sw->hot_own.used), table_charge(n));
    printf("sample memory: %u of 1000 keys counted within %zu bytes, %llu pairs dropped\n", n,
           limit, (unsigned long long)sw->c.hot_sample_drops);
    sw_close();
    /* Too little to begin: the epoch becomes active, empty (every key cold). */
    sw_open(100);
    join_n("hot-snone", 33201, 2, r);
    a = sample(&r[0], 1, 10, 0, 1, keys, cnt, 5);
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_refusals == 1 && sw->c.hot_installs == 1);
    a = fetch(&r[1], 1, 0, 8);
    CHECK(a.n == 1 && a.status == 0 && a.total == 0);
    a = sample(&r[1], 1, 10, 0, 1, keys, cnt, 5); /* the other rank's: a repeat now */
    CHECK(a.n == 1 && a.status == 0 && sw->c.hot_installs == 1);
    CHECK_EQ_INT(atomic_load(&sw->hot_own.used), 0);
    sw_close();
}

int main(void)
{
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT); /* refusals log warnings: expected here */
    test_fetch_epoch0();
    test_edges();
    test_hot_memory();
    test_release();
    test_sample();
    test_sample_memory();
    return check_report("test_hot");
}
