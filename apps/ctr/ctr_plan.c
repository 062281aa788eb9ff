/* ctr_plan.c: ina-ctr-gen --plan: the bytes of a CTR step on every link, for all-PS and hot/cold at equal aggregation hosts, and the weighted split. */
#include "ctr_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/kv_wire.h"

#define L2 42u          /* Ethernet (14) + IPv4 (20) + UDP (8) */
#define HDR INA_HDR_LEN /* the ina header */
#define MAXH 16         /* hosts */

/* One host's link, bytes per step each way: in = toward the host. */
struct link {
    double in, out;
};

/* The cold traffic of one (worker, shard) pair: push, commit, pull, and their answers. */
static void cold_bytes(uint32_t c, int pull, int dgram, struct link *host, struct link *worker)
{
    uint32_t per_push = (uint32_t)(dgram - HDR) / 12, per_pull = (uint32_t)(dgram - HDR) / 8;
    uint32_t np = (c + per_push - 1) / per_push, nl = pull ? (c + per_pull - 1) / per_pull : 0;
    double in = np * (double)(L2 + HDR) + 12.0 * c + (L2 + HDR); /* PUSHes, the COMMIT */
    double out = np * (double)(L2 + HDR) + (L2 + HDR);          /* their answers */
    if (pull) {
        in += nl * (double)(L2 + HDR) + 8.0 * c;
        out += nl * (double)(L2 + HDR) + 4.0 * c;
    }
    host->in += in;
    host->out += out;
    worker->out += in;
    worker->in += out;
}

struct kc {
    uint64_t key;
    uint32_t count;
};

static int kc_cmp(const void *a, const void *b)
{
    const struct kc *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

uint32_t ctr_batch_keys(const struct ctr_gen *g, int w, int t, int batch, uint64_t *keys,
                        uint32_t *seen, uint32_t stamp)
{
    struct ctr_sample s;
    uint32_t n = 0;
    for (int i = 0; i < batch; i++) {
        ctr_sample(g, (uint32_t)w, (uint64_t)t * (uint64_t)batch + (uint64_t)i, &s);
        for (int k = 0; k < s.nf; k++)
            if (seen[s.key[k]] != stamp) {
                seen[s.key[k]] = stamp;
                keys[n++] = s.key[k];
            }
    }
    return n;
}

uint32_t *ctr_sampled_sums(const struct ctr_gen *g, int workers, int batch, int P, uint32_t R,
                           uint64_t H)
{
    uint64_t K1 = g->keys + 1, maxk = (uint64_t)batch * CTR_MAX_FEATURES;
    uint32_t *cnt = calloc(K1, 4), *sum = calloc(K1, 4), *seen = calloc(K1, 4), stamp = 0;
    uint64_t *keys = malloc(maxk * 8);
    struct kc *all = malloc(K1 * sizeof(*all));
    if (!cnt || !sum || !seen || !keys || !all) {
        free(sum);
        sum = NULL;
        goto out;
    }
    for (int w = 0; w < workers; w++) {
        memset(cnt, 0, K1 * 4);
        for (int t = 0; t < P; t++) {
            uint32_t m = ctr_batch_keys(g, w, t, batch, keys, seen, ++stamp);
            uint64_t base = ina__hot_sample_base((uint32_t)w, (uint32_t)t);
            for (uint32_t i = 0; i < m; i++)
                if (ina__hot_sampled(base, i, R))
                    cnt[keys[i]]++;
        }
        uint64_t m = 0;
        for (uint64_t k = 0; k < K1; k++)
            if (cnt[k])
                all[m++] = (struct kc){k, cnt[k]};
        qsort(all, m, sizeof(*all), kc_cmp);
        for (uint64_t i = 0; i < m && i < H; i++)
            sum[all[i].key] += all[i].count;
    }
out:
    free(cnt);
    free(seen);
    free(keys);
    free(all);
    return sum;
}

/* The hot set the switch installs from the samples (ctr_sampled_sums): the top H of the
 * sums, hottest first. pos[key] = position + 1 (0: cold). @return H' (<= H) or -1. */
static long hot_set(const struct ctr_gen *g, const struct ctr_plan_opts *po, uint64_t H,
                    uint32_t *pos)
{
    uint64_t K1 = g->keys + 1;
    uint32_t *sum = ctr_sampled_sums(g, po->workers, po->batch, po->profile,
                                     (uint32_t)po->sample, H);
    struct kc *all = malloc(K1 * sizeof(*all));
    long n = -1;
    if (sum && all) {
        uint64_t m = 0;
        for (uint64_t k = 0; k < K1; k++)
            if (sum[k])
                all[m++] = (struct kc){k, sum[k]};
        qsort(all, m, sizeof(*all), kc_cmp);
        n = (long)(m < H ? m : H);
        memset(pos, 0, K1 * 4);
        for (long i = 0; i < n; i++)
            pos[all[i].key] = (uint32_t)i + 1;
    }
    free(sum);
    free(all);
    return n;
}

/* The bytes of a step: every measured (worker, step), averaged. */
struct traffic {
    struct link host[MAXH], worker; /* worker: the busiest worker's link */
    double hot_share;
};

/* Cold keys' hashes (mix(key) >> 32) of every measured (worker, step), sorted: how many fall
 * in a shard's range is a binary search. */
struct cold {
    uint32_t *u;
    size_t *off; /* (worker, step) i: u[off[i] .. off[i + 1]) */
    double hot_bytes_in, hot_bytes_out, hot_share;
    double hot_worker_out, hot_worker_in;
    int nws;
};

static size_t count_in(const uint32_t *u, size_t n, uint64_t lo, uint64_t hi)
{
    size_t a = 0, b = n; /* first >= lo */
    while (a < b) {
        size_t m = (a + b) / 2;
        if (u[m] < lo)
            a = m + 1;
        else
            b = m;
    }
    size_t c = a, d = n; /* first >= hi */
    while (c < d) {
        size_t m = (c + d) / 2;
        if (u[m] < hi)
            c = m + 1;
        else
            d = m;
    }
    return c - a;
}

/* Per-host bytes of the cold keys split by first[0..S] (hosts 0..S-1), plus the hot vector
 * on host 0 (hot/cold), averaged over the measured (worker, step)s. */
static void traffic_of(const struct cold *cd, const struct ctr_plan_opts *po, unsigned S,
                       const uint64_t *first, int hot, struct traffic *tr)
{
    memset(tr, 0, sizeof(*tr));
    double steps = (double)cd->nws / po->workers;
    struct link wmax = {0, 0};
    for (int w = 0; w < po->workers; w++) {
        struct link wl = {0, 0};
        for (int i = w; i < cd->nws; i += po->workers) {
            const uint32_t *u = cd->u + cd->off[i];
            size_t n = cd->off[i + 1] - cd->off[i];
            for (unsigned s = 0; s < S; s++)
                cold_bytes((uint32_t)count_in(u, n, first[s], first[s + 1]), 1, po->dgram,
                           &tr->host[s], &wl);
        }
        wl.in /= steps;
        wl.out /= steps;
        if (hot) {
            wl.in += cd->hot_worker_in;
            wl.out += cd->hot_worker_out;
        }
        if (wl.in > wmax.in)
            wmax.in = wl.in;
        if (wl.out > wmax.out)
            wmax.out = wl.out;
    }
    for (unsigned s = 0; s < S; s++) {
        tr->host[s].in /= steps;
        tr->host[s].out /= steps;
    }
    if (hot) {
        tr->host[0].in += cd->hot_bytes_in;
        tr->host[0].out += cd->hot_bytes_out;
        tr->hot_share = cd->hot_share;
    }
    tr->worker = wmax;
}

static double busiest(const struct traffic *tr, unsigned hosts, const char **what)
{
    double b = tr->worker.in > tr->worker.out ? tr->worker.in : tr->worker.out;
    *what = "a worker's link";
    for (unsigned h = 0; h < hosts; h++) {
        double x = tr->host[h].in > tr->host[h].out ? tr->host[h].in : tr->host[h].out;
        if (x > b) {
            b = x;
            *what = h ? "a shard host's link" : "host 0's link";
        }
    }
    return b;
}

/* Modulo split's per-shard counts equal a range split's only in law: measure the modulo
 * split itself, as the all-PS jobs run it. */
static void traffic_mod(const struct ctr_gen *g, const struct ctr_plan_opts *po, unsigned S,
                        struct traffic *tr)
{
    uint64_t K1 = g->keys + 1, maxk = (uint64_t)po->batch * CTR_MAX_FEATURES;
    uint32_t *seen = calloc(K1, 4), stamp = 0;
    uint64_t *keys = malloc(maxk * 8);
    memset(tr, 0, sizeof(*tr));
    if (!seen || !keys) {
        free(seen);
        free(keys);
        return;
    }
    struct link wmax = {0, 0};
    for (int w = 0; w < po->workers; w++) {
        struct link wl = {0, 0};
        for (int t = po->profile; t < po->profile + po->steps; t++) {
            uint32_t n = ctr_batch_keys(g, w, t, po->batch, keys, seen, ++stamp), c[MAXH] = {0};
            for (uint32_t i = 0; i < n; i++)
                c[ina__ps_shard_of(keys[i], S)]++;
            for (unsigned s = 0; s < S; s++)
                cold_bytes(c[s], 1, po->dgram, &tr->host[s], &wl);
        }
        wl.in /= po->steps;
        wl.out /= po->steps;
        if (wl.in > wmax.in)
            wmax.in = wl.in;
        if (wl.out > wmax.out)
            wmax.out = wl.out;
    }
    for (unsigned s = 0; s < S; s++) {
        tr->host[s].in /= po->steps;
        tr->host[s].out /= po->steps;
    }
    tr->worker = wmax;
    free(seen);
    free(keys);
}

/* The measured steps under hot set pos (H positions): the cold keys' hashes, the hot
 * vector's bytes. @return 0 or -1. */
static int measure(const struct ctr_gen *g, const struct ctr_plan_opts *po, const uint32_t *pos,
                   uint32_t H, struct cold *cd)
{
    uint64_t K1 = g->keys + 1, maxk = (uint64_t)po->batch * CTR_MAX_FEATURES;
    uint32_t k = (uint32_t)(po->dgram - HDR - INA_HOT_PREFIX_LEN) / 4; /* positions a block */
    uint32_t nb = (H + k - 1) / k, *nnz = calloc(nb ? nb : 1, 4), *seen = calloc(K1, 4), stamp = 0;
    uint64_t *keys = malloc(maxk * 8);
    int nws = po->workers * po->steps;
    memset(cd, 0, sizeof(*cd));
    cd->u = malloc(maxk * (size_t)nws * 4);
    cd->off = calloc((size_t)nws + 1, sizeof(size_t));
    if (!nnz || !seen || !keys || !cd->u || !cd->off) {
        free(nnz);
        free(seen);
        free(keys);
        return -1;
    }
    double hot = 0, all = 0, data = 0;
    size_t o = 0;
    int i = 0;
    for (int t = po->profile; t < po->profile + po->steps; t++)
        for (int w = 0; w < po->workers; w++, i++) {
            uint32_t n = ctr_batch_keys(g, w, t, po->batch, keys, seen, ++stamp);
            memset(nnz, 0, (nb ? nb : 1) * 4);
            cd->off[i] = o;
            for (uint32_t j = 0; j < n; j++) {
                if (pos[keys[j]]) {
                    nnz[(pos[keys[j]] - 1) / k]++;
                    hot++;
                } else {
                    cd->u[o++] = (uint32_t)(ina__key_mix(keys[j]) >> 32);
                }
            }
            all += n;
            qsort(cd->u + cd->off[i], o - cd->off[i], 4, u32_cmp);
            for (uint32_t b = 0; b < nb; b++) /* the shortest encoding */
                data += L2 + HDR + INA_HOT_PREFIX_LEN +
                        (double)ina__hot_block_len(b + 1 < nb ? k : H - b * k, nnz[b], NULL);
        }
    cd->off[nws] = o;
    cd->nws = nws;
    double result = nb * (double)(L2 + HDR + INA_HOT_PREFIX_LEN) + 4.0 * H; /* one copy */
    cd->hot_bytes_in = data / po->steps;
    cd->hot_bytes_out = result * (po->multicast ? 1 : po->workers);
    cd->hot_worker_out = data / nws;
    cd->hot_worker_in = result;
    cd->hot_share = all ? hot / all : 0;
    free(nnz);
    free(seen);
    free(keys);
    return 0;
}

/* Shard 0 (host 0, beside the switch) gets weight w0, shards 1..S-1 weight 1000 each. */
static void weights_first(unsigned S, uint32_t w0, uint64_t *first)
{
    uint32_t w[MAXH];
    w[0] = w0;
    for (unsigned s = 1; s < S; s++)
        w[s] = 1000;
    ina__ps_split_first(w, S, first);
}

static void print_hosts(FILE *out, const char *setup, const struct traffic *tr, unsigned hosts,
                        double rate)
{
    for (unsigned h = 0; h < hosts; h++)
        fprintf(out, "PLAN_HOST setup=%s host=%u in=%.0f out=%.0f\n", setup, h, tr->host[h].in,
                tr->host[h].out);
    fprintf(out, "PLAN_HOST setup=%s host=worker in=%.0f out=%.0f\n", setup, tr->worker.in,
            tr->worker.out);
    const char *what;
    double b = busiest(tr, hosts, &what);
    fprintf(out, "PLAN setup=%s hosts=%u busiest_bytes=%.0f step_ms=%.2f busiest=\"%s\"\n", setup,
            hosts, b, 1e3 * 8 * b / rate, what);
}

int ctr_plan(const struct ctr_gen *g, const struct ctr_plan_opts *po, FILE *out)
{
    unsigned A = (unsigned)po->hosts;
    if (A < 1 || A > MAXH)
        return -1;
    uint32_t *pos = malloc((g->keys + 1) * 4);
    if (!pos)
        return -1;
    struct traffic one, many, hc, best_hc = {0};
    uint64_t first[MAXH + 1], best_first[MAXH + 1] = {0};
    traffic_mod(g, po, 1, &one);
    traffic_mod(g, po, A, &many);
    fprintf(out, "# plan: K=%llu alpha=%.2f N=%d batch=%d, %u aggregation hosts, links %.0f "
            "Mbit/s, datagrams %d B, hot results %s; bytes per step (payload + %u B a "
            "datagram)\n", (unsigned long long)g->keys, g->alpha, po->workers, po->batch, A,
            po->rate_bps / 1e6, po->dgram, po->multicast ? "multicast" : "unicast", L2);
    print_hosts(out, "allps1", &one, 1, po->rate_bps);
    print_hosts(out, "allps", &many, A, po->rate_bps);
    const char *what;
    double allps = busiest(&many, A, &what), best = INFINITY;
    uint64_t bestH = 0;
    uint32_t best_w0 = 0;
    for (int hi = 0; hi < po->nhot; hi++) {
        long H = hot_set(g, po, po->hot[hi], pos);
        struct cold cd;
        if (H < 0 || measure(g, po, pos, (uint32_t)H, &cd) != 0) {
            free(pos);
            return -1;
        }
        /* w0 from 1 to 64000 (shard 0's share from ~0 to ~1 of the hashes): the busiest
         * link's bytes fall, then rise, as shard 0 takes more of the cold keys. */
        double hb = INFINITY;
        uint32_t hw0 = 1;
        for (uint32_t w0 = 1; w0 <= 64000; w0 = w0 < 100 ? w0 + 1 : w0 + w0 / 50) {
            if (A == 1 && w0 > 1)
                break;
            weights_first(A, w0, first);
            traffic_of(&cd, po, A, first, 1, &hc);
            double b = busiest(&hc, A, &what);
            if (b < hb) {
                hb = b;
                hw0 = w0;
            }
        }
        weights_first(A, hw0, first);
        traffic_of(&cd, po, A, first, 1, &hc);
        fprintf(out, "PLAN_HOT H=%ld hot_share=%.4f w0=%u step_ms=%.2f ratio=%.3f\n", H,
                hc.hot_share, hw0, 1e3 * 8 * hb / po->rate_bps, allps / hb);
        if (hb < best) {
            best = hb;
            bestH = (uint64_t)H;
            best_w0 = hw0;
            best_hc = hc;
            memcpy(best_first, first, sizeof(first));
        }
        free(cd.u);
        free(cd.off);
    }
    if (po->nhot > 0) {
        fprintf(out, "PLAN_BEST H=%llu weights=%u", (unsigned long long)bestH, best_w0);
        for (unsigned s = 1; s < A; s++)
            fprintf(out, ",1000");
        fprintf(out, " shard0_share=%.4f\n", A > 1 ? (double)best_first[1] / 4294967296.0 : 1.0);
        print_hosts(out, "hotcold", &best_hc, A, po->rate_bps);
        fprintf(out, "PLAN_RATIO allps_over_hotcold=%.3f allps1_over_hotcold=%.3f\n",
                allps / best, busiest(&one, 1, &what) / best);
    }
    free(pos);
    return 0;
}
