/* hot.c: the switch's hot table: exact-match key -> slot position per job, installed by rank 0, one epoch at a time. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/be32.h"
#include "common/half_bits.h"
#include "common/log.h"
#include "engine/internal.h"

/*
 * A job's hot table (PROTOCOL.md §14.3) maps each of its H hot keys to a
 * position 0..H-1 of the job's hot vector. The workers stream that vector
 * through the job's slots like an all-reduce, one block of positions per
 * packet, as dense values or as (key, value) pairs that this table places.
 * Rank 0 installs a table as epoch e in chunks (HOT_INSTALL); the table
 * becomes active when its last position arrives, replacing the previous
 * epoch's; the other ranks read it back (HOT_FETCH). Memory: at most
 * --hot-keys keys per job (key list + index, 32 to 56 bytes a key),
 * allocated on the control path when an install starts, freed with the job.
 * All jobs' tables together stay within --hot-memory (struct ina_hot_budget):
 * an install is charged, before anything is allocated, everything it will
 * hold until it becomes active (key list, bitmap, the index it then makes);
 * one that does not fit is answered NOSPACE with the keys that would fit,
 * and rank 0 installs that many of its hottest instead.
 */
struct hot_cand {
    uint64_t key;
    uint32_t count;
};

/* What a sample is charged (PROTOCOL.md §14.3, HOT_SAMPLE): these, not sizeof, so that the
 * charges are the protocol's on every host. */
#define HOT_RANK_CHARGE 24 /* a rank's record */
#define HOT_CAND_CHARGE 16 /* a sampled key and its sum */

/* One rank's part of a sample: the chunks it announced, which arrived. */
struct hot_rank_sample {
    uint32_t nchunks, got; /* nchunks 0: nothing yet */
    uint64_t *bits;        /* chunks received; NULL once the rank is complete */
    int done;
};
_Static_assert(sizeof(struct hot_rank_sample) <= 24 && sizeof(struct hot_cand) <= 16,
               "a sample's charges cover its records");

/* ---- Memory (--hot-memory, PROTOCOL.md §14.3) -------------------------------- */

static struct ina_hot_budget *hot_budget(struct ina_switch *sw)
{
    return sw->p.hot_budget ? sw->p.hot_budget : &sw->hot_own;
}

/* Take n bytes of the budget. @return 0, or -1 (nothing taken) if they do not fit. */
static int budget_take(struct ina_hot_budget *b, size_t n)
{
    size_t used = atomic_load(&b->used);
    do {
        if (n > b->limit || used > b->limit - n)
            return -1;
    } while (!atomic_compare_exchange_weak(&b->used, &used, used + n));
    return 0;
}

static void budget_give(struct ina_hot_budget *b, size_t n)
{
    if (n)
        atomic_fetch_sub(&b->used, n);
}

/* The most keys, up to total, whose install would fit what is left of the budget now. */
static uint32_t install_fit(struct ina_hot_budget *b, uint32_t total)
{
    size_t used = atomic_load(&b->used), left = used < b->limit ? b->limit - used : 0;
    uint32_t lo = 0, hi = total; /* ina__hot_install_bytes(lo) fits (0 always does) */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (ina__hot_install_bytes(mid) <= left)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void pend_clear(struct ina_hot *t)
{
    free(t->pend_keys);
    free(t->pend_bits);
    budget_give(t->budget, t->pend_bytes);
    t->pend_bytes = 0;
    t->pend_keys = t->pend_bits = NULL;
    t->pend_epoch = t->pend_total = t->pend_filled = 0;
}

static void sample_clear(struct ina_hot *t, int world)
{
    if (t->smp_rank)
        for (int r = 0; r < world; r++)
            free(t->smp_rank[r].bits);
    free(t->smp_rank);
    ina__kmap_free(&t->smp_map);
    free(t->smp);
    budget_give(t->budget, t->smp_bytes);
    t->smp_rank = NULL;
    t->smp = NULL;
    t->smp_bytes = 0;
    t->smp_epoch = t->smp_want = t->smp_done = t->smp_cap = 0;
}

void ina__hot_free(struct ina_job *job)
{
    struct ina_hot *t = job->hot;
    if (!t)
        return;
    sample_clear(t, job->world);
    pend_clear(t);
    free(t->keys);
    ina__kmap_free(&t->map);
    budget_give(t->budget, t->act_bytes);
    free(t);
    job->hot = NULL;
}

int ina__hot_parse(const struct ina_hdr *h, const uint8_t *payload, size_t plen,
                   struct ina_hot_in *in)
{
    if (plen < INA_HOT_PREFIX_LEN)
        return -1;
    in->epoch = ina__get32(payload);
    in->base = ina__get32(payload + 4);
    in->keyed = (h->flags & INA_FLAG_HOT_KEYED) != 0;
    in->bitmap = (h->flags & INA_FLAG_HOT_BITMAP) != 0;
    in->entries = payload + INA_HOT_PREFIX_LEN;
    size_t body = plen - INA_HOT_PREFIX_LEN;
    if (in->keyed && in->bitmap)
        return -1;
    if (in->bitmap) { /* the bitmap's bits past count are 0; then one value a bit set */
        size_t nb = ((size_t)h->count + 7) / 8;
        if (body < nb || (h->count % 8 && in->entries[nb - 1] >> (h->count % 8)))
            return -1;
        size_t m = 0;
        for (size_t i = 0; i < nb; i++)
            m += (size_t)__builtin_popcount(in->entries[i]);
        in->nkeyed = 0;
        in->nbitmap = (uint32_t)m;
        return body == nb + 4 * m ? 0 : -1;
    }
    in->nbitmap = 0;
    if (!in->keyed) {
        in->nkeyed = 0;
        return body == 4 * (size_t)h->count ? 0 : -1;
    }
    if (body % INA_HOT_KEYED_LEN != 0 || body / INA_HOT_KEYED_LEN > h->count)
        return -1;
    in->nkeyed = (uint32_t)(body / INA_HOT_KEYED_LEN);
    return 0;
}

/* Position of keyed entry i in the block, or UINT32_MAX if the key is not in it. */
static uint32_t keyed_pos(const struct ina_hot *t, const struct ina_hot_in *in, uint32_t count,
                          uint32_t i)
{
    uint32_t pos = ina__kmap_get(&t->map, ina__get64(in->entries + (size_t)i * INA_HOT_KEYED_LEN));
    return pos != INA_KMAP_NONE && pos >= in->base && pos - in->base < count ? pos - in->base
                                                                              : UINT32_MAX;
}

int ina__hot_valid(const struct ina_job *job, const struct ina_hot_in *in, uint32_t count)
{
    const struct ina_hot *t = job->hot;
    if (!t || t->epoch == 0 || in->epoch != t->epoch || in->base > t->n || count > t->n - in->base)
        return 0;
    for (uint32_t i = 0; i < in->nkeyed; i++)
        if (keyed_pos(t, in, count, i) == UINT32_MAX)
            return 0;
    return 1;
}

/* A slot's value as the binary32 its bits are, and back (common/half_bits.h). */
static inline float bits_f(int32_t v)
{
    return ina__f32_of_bits((uint32_t)v);
}

static inline int32_t f_bits(float f)
{
    return (int32_t)ina__f32_bits(f);
}

/* A bitmap block: each present position's value added (load: the others +0.0f first). */
static void bitmap_add(int32_t *v, const struct ina_hot_in *in, uint32_t count)
{
    const uint8_t *bits = in->entries, *val = in->entries + (count + 7) / 8;
    for (uint32_t j = 0; j < (count + 7) / 8; j++)
        for (unsigned b = bits[j]; b; b &= b - 1, val += 4) {
            uint32_t p = 8 * j + (uint32_t)__builtin_ctz(b);
            v[p] = f_bits(bits_f(v[p]) + ina__getf(val));
        }
}

void ina__hot_load(const struct ina_job *job, int32_t *v, const struct ina_hot_in *in,
                   uint32_t count)
{
    if (in->bitmap) {
        memset(v, 0, 4 * (size_t)count);
        bitmap_add(v, in, count);
        return;
    }
    if (!in->keyed) {
        ina__be32_load(v, in->entries, count);
        return;
    }
    memset(v, 0, 4 * (size_t)count); /* +0.0f: positions this rank did not touch */
    ina__hot_add(job, v, in, count);
}

void ina__hot_add(const struct ina_job *job, int32_t *v, const struct ina_hot_in *in,
                  uint32_t count)
{
    if (in->bitmap) {
        bitmap_add(v, in, count);
        return;
    }
    if (!in->keyed) {
        ina__be32_fadd(v, in->entries, count);
        return;
    }
    for (uint32_t i = 0; i < in->nkeyed; i++) {
        uint32_t p = keyed_pos(job->hot, in, count, i); /* checked by ina__hot_valid */
        float x = ina__getf(in->entries + (size_t)i * INA_HOT_KEYED_LEN + 8);
        v[p] = f_bits(bits_f(v[p]) + x);
    }
}

/* HOT_KEYS: the answer to an install chunk (count 0) or a fetch (the keys). */
static void send_keys(struct ina_switch *sw, const struct ina_job *job, uint32_t epoch,
                      uint32_t total, uint32_t offset, uint32_t count, int32_t status,
                      const uint64_t *keys, const struct sockaddr_in *dst)
{
    size_t len = INA_HDR_LEN + INA_HOT_KEYS_HDR + 8 * (size_t)count;
    if (!ina__txq_room(&sw->txq, 1) || len > sw->txq.bufsize)
        return;
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_HOT_KEYS);
    h.job = job->id;
    h.rank = INA_RANK_SWITCH;
    h.session = job->session;
    h.token = job->token;
    uint8_t *b = ina__txq_buf(&sw->txq);
    ina__hdr_encode(b, &h);
    uint8_t *p = b + INA_HDR_LEN;
    ina__put32(p, epoch);
    ina__put32(p + 4, total);
    ina__put32(p + 8, offset);
    ina__put16(p + 12, (uint16_t)count);
    ina__put16(p + 14, 0);
    ina__put32(p + 16, (uint32_t)status);
    for (uint32_t i = 0; i < count; i++)
        ina__put64(p + INA_HOT_KEYS_HDR + 8 * (size_t)i, keys[i]);
    ina__txq_push(&sw->txq, b, len, dst);
}

/* The last position of the pending table arrived: index it and make it the
 * active one. @return 0, or INA_ERR_MISMATCH (a key twice), -ENOMEM. */
static int activate(struct ina_switch *sw, struct ina_job *job)
{
    struct ina_hot *t = job->hot;
    struct ina_kmap map;
    if (ina__kmap_init(&map, t->pend_total) != 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->pend_total; i++)
        if (ina__kmap_put(&map, t->pend_keys[i], i) != i) {
            ina__kmap_free(&map);
            pend_clear(t);
            return INA_ERR_MISMATCH;
        }
    free(t->keys);
    ina__kmap_free(&t->map);
    t->keys = t->pend_keys;
    t->map = map;
    t->n = t->pend_total;
    t->epoch = t->pend_epoch;
    t->pend_keys = NULL;
    /* The table now holds its key list and index (within what the install took);
     * the old table and the bitmap are freed. */
    size_t now = ina__hot_table_bytes(t->n);
    budget_give(t->budget, t->act_bytes + t->pend_bytes - now);
    t->act_bytes = now;
    t->pend_bytes = 0;
    pend_clear(t);
    if (t->smp_epoch && t->smp_epoch <= t->epoch)
        sample_clear(t, job->world); /* an install overtook it */
    sw->c.hot_installs++;
    ina__log(INA_LOG_INFO, "hot_installed", INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("epoch", t->epoch), INA_KV_I("keys", t->n), INA_KV_S("from", "install"));
    return 0;
}

/* An install that --hot-memory has no room for: NOSPACE with the keys that would fit
 * (fewer than total), which rank 0 then installs instead, its hottest first. */
static void refuse_install(struct ina_switch *sw, const struct ina_job *job, uint32_t epoch,
                           uint32_t total, uint32_t off, const struct sockaddr_in *src)
{
    struct ina_hot_budget *b = hot_budget(sw);
    uint32_t fit = install_fit(b, total);
    if (fit >= total)
        fit = total - 1; /* room freed by another thread since: still less than asked */
    sw->c.hot_refusals++;
    ina__log(INA_LOG_WARN, "hot_refused", INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("epoch", epoch), INA_KV_I("keys", total), INA_KV_I("fit", fit),
            INA_KV_I("hot_memory", b->limit));
    send_keys(sw, job, epoch, fit, off, 0, INA_ERR_NOSPACE, NULL, src);
}

static void on_install(struct ina_switch *sw, struct ina_job *job, const uint8_t *b, size_t len,
                       const struct sockaddr_in *src)
{
    uint32_t epoch = ina__get32(b), total = ina__get32(b + 4), off = ina__get32(b + 8);
    uint32_t count = ina__get16(b + 12);
    if (len != INA_HOT_INSTALL_HDR + 8 * (size_t)count || epoch == 0 || off > total ||
        count > total - off) {
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    if (total > sw->p.hot_max) { /* the rank cuts its list to what fits (its hottest keys) */
        send_keys(sw, job, epoch, sw->p.hot_max, off, 0, INA_ERR_NOSPACE, NULL, src);
        return;
    }
    if (!job->hot && !(job->hot = calloc(1, sizeof(*job->hot)))) {
        send_keys(sw, job, epoch, total, off, 0, -ENOMEM, NULL, src);
        return;
    }
    struct ina_hot *t = job->hot;
    t->budget = hot_budget(sw);
    if (epoch <= t->epoch) { /* a repeat of an installed epoch (its ack was lost) */
        send_keys(sw, job, epoch, t->epoch == epoch ? t->n : total, off, 0, 0, NULL, src);
        return;
    }
    if (t->pend_epoch != epoch || t->pend_total != total) {
        pend_clear(t); /* a new install replaces the one in progress, and its charge */
        if (budget_take(t->budget, ina__hot_install_bytes(total)) != 0) {
            refuse_install(sw, job, epoch, total, off, src);
            return;
        }
        t->pend_bytes = ina__hot_install_bytes(total);
        t->pend_keys = malloc(8 * (size_t)(total ? total : 1));
        t->pend_bits = calloc(total / 64 + 1, 8);
        if (!t->pend_keys || !t->pend_bits) {
            pend_clear(t);
            send_keys(sw, job, epoch, total, off, 0, -ENOMEM, NULL, src);
            return;
        }
        t->pend_epoch = epoch;
        t->pend_total = total;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t pos = off + i;
        t->pend_keys[pos] = ina__get64(b + INA_HOT_INSTALL_HDR + 8 * (size_t)i);
        uint64_t m = 1ull << (pos & 63);
        if (!(t->pend_bits[pos >> 6] & m)) {
            t->pend_bits[pos >> 6] |= m;
            t->pend_filled++;
        }
    }
    int status = t->pend_filled == t->pend_total ? activate(sw, job) : 0;
    send_keys(sw, job, epoch, total, off, 0, status, NULL, src);
}

static void on_fetch(struct ina_switch *sw, struct ina_job *job, const uint8_t *b, size_t len,
                     const struct sockaddr_in *src)
{
    uint32_t epoch = len >= INA_HOT_FETCH_LEN ? ina__get32(b) : 0;
    if (epoch == 0) { /* short, or epoch 0: no table ever has it */
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    uint32_t off = ina__get32(b + 4), want = ina__get16(b + 8);
    const struct ina_hot *t = job->hot;
    if (!t || t->epoch < epoch) { /* none active yet (an install may be in progress) */
        send_keys(sw, job, epoch, 0, off, 0, INA_HOT_PENDING, NULL, src);
        return;
    }
    if (t->epoch > epoch || off > t->n) {
        send_keys(sw, job, epoch, t->n, off, 0, INA_ERR_MISMATCH, NULL, src);
        return;
    }
    size_t room = (sw->txq.bufsize - INA_HDR_LEN - INA_HOT_KEYS_HDR) / 8;
    uint32_t n = t->n - off;
    if (n > want)
        n = want;
    if (n > room)
        n = (uint32_t)room;
    send_keys(sw, job, epoch, t->n, off, n, 0, t->keys + off, src);
}

/* ---- Samples: every rank's counts, summed here (HOT_SAMPLE, PROTOCOL.md §14.3) ---- */

/* Hotter first: the larger count, then the smaller key. */
static int cand_before(const struct hot_cand *a, const struct hot_cand *b)
{
    return a->count != b->count ? a->count > b->count : a->key < b->key;
}

static int cand_cmp(const void *a, const void *b)
{
    const struct hot_cand *x = a, *y = b;
    return cand_before(x, y) ? -1 : cand_before(y, x);
}

static void cand_swap(struct hot_cand *a, struct hot_cand *b)
{
    struct hot_cand t = *a;
    *a = *b;
    *b = t;
}

/* Put the k hottest of c[0..n) first (in any order): quickselect, expected O(n). */
static void cand_select(struct hot_cand *c, uint32_t n, uint32_t k)
{
    uint32_t lo = 0, hi = n; /* the k-th hottest is in [lo, hi) */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    while (hi - lo > 1 && k > lo && k < hi) {
        x = ina__key_mix(x + 1);
        cand_swap(&c[lo + (uint32_t)(x % (hi - lo))], &c[hi - 1]);
        struct hot_cand pivot = c[hi - 1];
        uint32_t store = lo;
        for (uint32_t i = lo; i + 1 < hi; i++)
            if (cand_before(&c[i], &pivot))
                cand_swap(&c[i], &c[store++]);
        cand_swap(&c[store], &c[hi - 1]); /* c[lo..store) hotter than the pivot, at store */
        if (store + 1 == k || store == k)
            return;
        if (store > k)
            hi = store;
        else
            lo = store + 1;
    }
}

/* Every rank's sample is in: the min(want, --hot-keys) hottest keys (by summed count, the
 * smaller key first among equals), hottest first, become the active table. The table takes
 * less memory than the sample it comes from, whose charge it inherits. @return 0 or -ENOMEM. */
static int sample_activate(struct ina_switch *sw, struct ina_job *job)
{
    struct ina_hot *t = job->hot;
    uint32_t n = t->smp_map.n;
    if (n > t->smp_want)
        n = t->smp_want;
    if (n > sw->p.hot_max)
        n = sw->p.hot_max;
    cand_select(t->smp, t->smp_map.n, n);
    qsort(t->smp, n, sizeof(*t->smp), cand_cmp);
    /* The key list in place, over the candidates (key i at byte 8i, read before it is
     * overwritten: 8i + 8 <= 16i from i = 1 on). */
    uint8_t *raw = (uint8_t *)t->smp;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t key = t->smp[i].key;
        memcpy(raw + 8 * (size_t)i, &key, 8);
    }
    uint64_t *keys = realloc(t->smp, 8 * (size_t)(n ? n : 1));
    if (!keys)
        keys = raw ? (uint64_t *)(void *)raw : malloc(8);
    t->smp = NULL;
    if (!keys) {
        sample_clear(t, job->world);
        return -ENOMEM;
    }
    ina__kmap_free(&t->smp_map);
    struct ina_kmap map;
    if (ina__kmap_init(&map, n) != 0) {
        free(keys);
        sample_clear(t, job->world);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        ina__kmap_put(&map, keys[i], i);
    free(t->keys);
    ina__kmap_free(&t->map);
    t->keys = keys;
    t->map = map;
    t->n = n;
    t->epoch = t->smp_epoch;
    size_t now = ina__hot_table_bytes(n); /* <= the sample's charge: 16 + 12 a key against 8 + 12 */
    budget_give(t->budget, t->act_bytes + t->smp_bytes - now);
    t->act_bytes = now;
    t->smp_bytes = 0;
    sample_clear(t, job->world);
    if (t->pend_epoch && t->pend_epoch <= t->epoch)
        pend_clear(t);
    sw->c.hot_installs++;
    ina__log(INA_LOG_INFO, "hot_installed", INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("epoch", t->epoch), INA_KV_I("keys", t->n), INA_KV_S("from", "sample"));
    return 0;
}

/* Room for one more sampled key: the candidates and the index grow, charged first.
 * @return 0, or -1 (nothing changed: the key is not counted). */
static int sample_room(struct ina_hot *t)
{
    if (t->smp_map.n == t->smp_cap) {
        uint32_t cap = t->smp_cap ? 2 * t->smp_cap : 16;
        size_t more = HOT_CAND_CHARGE * (size_t)(cap - t->smp_cap);
        if (cap <= t->smp_cap || budget_take(t->budget, more) != 0)
            return -1;
        struct hot_cand *c = realloc(t->smp, sizeof(*c) * (size_t)cap);
        if (!c) {
            budget_give(t->budget, more);
            return -1;
        }
        t->smp = c;
        t->smp_cap = cap;
        t->smp_bytes += more;
    }
    if (ina__kmap_full(&t->smp_map)) {
        size_t more = ina__kmap_bytes(t->smp_map.cap); /* doubling adds as much again */
        if (budget_take(t->budget, more) != 0)
            return -1;
        if (ina__kmap_grow(&t->smp_map) != 0) {
            budget_give(t->budget, more);
            return -1;
        }
        t->smp_bytes += more;
    }
    return 0;
}

/* Start the sample of epoch (discarding another one in progress): the ranks' records and
 * an empty index, charged. @return 0, or -1 if they do not fit (or no memory). */
static int sample_start(struct ina_hot *t, int world, uint32_t epoch, uint32_t want)
{
    sample_clear(t, world);
    size_t bytes = HOT_RANK_CHARGE * (size_t)world + ina__kmap_bytes(ina__kmap_cells(0));
    if (budget_take(t->budget, bytes) != 0)
        return -1;
    t->smp_bytes = bytes;
    t->smp_rank = calloc((size_t)world, sizeof(*t->smp_rank));
    if (!t->smp_rank || ina__kmap_init(&t->smp_map, 0) != 0) {
        sample_clear(t, world);
        return -1;
    }
    t->smp_epoch = epoch;
    t->smp_want = want;
    return 0;
}

/* A sample that --hot-memory cannot hold at all: its epoch becomes active with no keys
 * (every key cold), so the ranks' fetches are answered rather than left pending. */
static int sample_refused(struct ina_switch *sw, struct ina_job *job, uint32_t epoch)
{
    struct ina_hot *t = job->hot;
    sw->c.hot_refusals++;
    ina__log(INA_LOG_WARN, "hot_refused", INA_KV_I("job", job->id), INA_KV_S("name", job->name),
            INA_KV_I("epoch", epoch), INA_KV_I("keys", 0), INA_KV_I("fit", 0),
            INA_KV_I("hot_memory", t->budget->limit));
    sample_clear(t, job->world);
    uint64_t *keys = malloc(8);
    if (!keys)
        return -ENOMEM;
    free(t->keys);
    ina__kmap_free(&t->map);
    ina__kmap_init(&t->map, 0); /* an empty index: lookups on cap 0 find nothing anyway */
    budget_give(t->budget, t->act_bytes);
    t->act_bytes = 0;
    t->keys = keys;
    t->n = 0;
    t->epoch = epoch;
    if (t->pend_epoch && t->pend_epoch <= epoch)
        pend_clear(t);
    sw->c.hot_installs++;
    return 0;
}

/* Add chunk's pairs (key, count) to the sample; keys that find no room are not counted. */
static void sample_add(struct ina_switch *sw, struct ina_hot *t, const uint8_t *p, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++, p += INA_HOT_SAMPLE_PAIR) {
        uint64_t key = ina__get64(p);
        uint32_t c = ina__get32(p + 8), idx = ina__kmap_get(&t->smp_map, key);
        if (idx == INA_KMAP_NONE) {
            if (sample_room(t) != 0) {
                sw->c.hot_sample_drops++;
                continue;
            }
            idx = ina__kmap_put(&t->smp_map, key, t->smp_map.n);
            t->smp[idx] = (struct hot_cand){key, 0};
        }
        t->smp[idx].count = c > UINT32_MAX - t->smp[idx].count ? UINT32_MAX : t->smp[idx].count + c;
        sw->c.hot_samples++;
    }
}

static void on_sample(struct ina_switch *sw, struct ina_job *job, uint16_t rank, const uint8_t *b,
                      size_t len, const struct sockaddr_in *src)
{
    uint32_t epoch = ina__get32(b), want = ina__get32(b + 4);
    uint32_t chunk = ina__get16(b + 8), nchunks = ina__get16(b + 10), count = ina__get16(b + 12);
    if (len != INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * (size_t)count || epoch == 0 ||
        want == 0 || nchunks == 0 || chunk >= nchunks) {
        sw->c.drops[INA_DROP_JOIN]++;
        return;
    }
    if (!job->hot && !(job->hot = calloc(1, sizeof(*job->hot)))) {
        send_keys(sw, job, epoch, nchunks, chunk, 0, -ENOMEM, NULL, src);
        return;
    }
    struct ina_hot *t = job->hot;
    t->budget = hot_budget(sw);
    if (epoch <= t->epoch) { /* active already (this chunk's answer was lost) */
        send_keys(sw, job, epoch, nchunks, chunk, 0, 0, NULL, src);
        return;
    }
    if (t->smp_epoch == epoch && t->smp_want != want) {
        send_keys(sw, job, epoch, nchunks, chunk, 0, INA_ERR_MISMATCH, NULL, src);
        return;
    }
    if (t->smp_epoch != epoch && sample_start(t, job->world, epoch, want) != 0) {
        int st = sample_refused(sw, job, epoch);
        send_keys(sw, job, epoch, nchunks, chunk, 0, st, NULL, src);
        return;
    }
    struct hot_rank_sample *rs = &t->smp_rank[rank];
    if (rs->nchunks && rs->nchunks != nchunks) {
        sw->c.drops[INA_DROP_JOIN]++; /* a rank announces its chunks once */
        return;
    }
    if (!rs->done && !rs->nchunks) {
        size_t bytes = 8 * ((size_t)nchunks / 64 + 1);
        int took = budget_take(t->budget, bytes) == 0;
        rs->nchunks = nchunks;
        rs->bits = took ? calloc(1, bytes) : NULL;
        if (rs->bits) {
            t->smp_bytes += bytes;
        } else {
            if (took)
                budget_give(t->budget, bytes);
            rs->done = 1; /* no room to tell its chunks apart: its sample is left out */
            sw->c.hot_sample_drops += count;
            t->smp_done++;
            ina__log(INA_LOG_WARN, "hot_sample_cut", INA_KV_I("job", job->id),
                    INA_KV_S("name", job->name), INA_KV_I("epoch", epoch), INA_KV_I("rank", rank),
                    INA_KV_I("hot_memory", t->budget->limit));
        }
    }
    if (!rs->done && !(rs->bits[chunk / 64] & (1ull << (chunk % 64)))) {
        rs->bits[chunk / 64] |= 1ull << (chunk % 64);
        sample_add(sw, t, b + INA_HOT_SAMPLE_HDR, count);
        if (++rs->got == rs->nchunks) {
            size_t bytes = 8 * ((size_t)nchunks / 64 + 1);
            free(rs->bits);
            rs->bits = NULL;
            budget_give(t->budget, bytes);
            t->smp_bytes -= bytes;
            rs->done = 1;
            t->smp_done++;
        }
    }
    int status = t->smp_done == (uint32_t)job->world ? sample_activate(sw, job) : 0;
    send_keys(sw, job, epoch, nchunks, chunk, 0, status, NULL, src);
}

void ina__hot_control(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                      const uint8_t *body, size_t len, const struct sockaddr_in *src)
{
    if (!sw->p.hot_max || sw->p.int_ops_only || job->tree || job->child) {
        sw->c.drops[INA_DROP_KIND]++; /* not offered (no CAP_HOT in its JOIN_ACK) */
        return;
    }
    if (h->kind == INA_K_HOT_INSTALL) {
        if (h->rank != 0 || len < INA_HOT_INSTALL_HDR) {
            sw->c.drops[INA_DROP_JOIN]++; /* rank 0 installs; the others fetch */
            return;
        }
        on_install(sw, job, body, len, src);
    } else if (h->kind == INA_K_HOT_SAMPLE) {
        if (len < INA_HOT_SAMPLE_HDR) {
            sw->c.drops[INA_DROP_JOIN]++;
            return;
        }
        on_sample(sw, job, h->rank, body, len, src);
    } else {
        on_fetch(sw, job, body, len, src);
    }
}
