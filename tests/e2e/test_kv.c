/* test_kv.c: the key-value API against ina-ps shards (all-PS): exact sums, repeated keys, async, optimizers, weighted splits, misuse, refusals. */
#include <math.h>

#include "check.h"
#include "kv_harness.h"

#define K 600    /* key space of the exact tests */
#define M 150    /* entries per push (with repeats) */
#define STEPS 6

static char addrs[256], weighted[256];

/* Entry j of rank r's push at step t: a key with repeats (every 10th entry is key 7) and
 * an integer value, so sums are exact in binary32 whatever the order. */
static uint64_t key_of(int r, int t, int j)
{
    return j % 10 == 0 ? 7 : (uint64_t)((j * 37 + t * 11 + r * 5) % (K - 1) + 1) * 1000003ull + 13;
}
static float val_of(int r, int t, int j) { return (float)((r + 1) * ((j + t) % 7 - 3)); }

struct model {
    int optimizer, n;
    float lr, eps;
    float w[K], acc[K];
};

static int key_index(uint64_t k) { return k == 7 ? 0 : (int)((k - 13) / 1000003ull); }

/* The expected parameters after step t of n ranks: sum per key, then the optimizer once. */
static void model_step(struct model *m, int t)
{
    float g[K] = {0};
    for (int r = 0; r < m->n; r++)
        for (int j = 0; j < M; j++)
            g[key_index(key_of(r, t, j))] += val_of(r, t, j);
    for (int i = 0; i < K; i++) {
        if (g[i] == 0.0f)
            continue;
        if (m->optimizer == INA_KV_ADAGRAD) {
            m->acc[i] += g[i] * g[i];
            m->w[i] -= m->lr * g[i] / (m->eps + sqrtf(m->acc[i]));
        } else {
            m->w[i] -= m->lr * g[i];
        }
    }
}

static uint64_t all_keys[K + 5];

static int check_all(ina_kv *kv, const struct model *m, const char *what, int t)
{
    float out[K + 5];
    int rc = ina_kv_pull(kv, all_keys, out, K + 5), bad = 0;
    if (rc) {
        fprintf(stderr, "%s: pull after step %d: %s (%s)\n", what, t, ina_err_name(rc),
                ina_kv_last_error(kv));
        return 1;
    }
    for (int i = 0; i < K + 5; i++) {
        float want = m->w[key_index(all_keys[i])];
        if (memcmp(&out[i], &want, 4) != 0 && bad++ < 3)
            fprintf(stderr, "%s: step %d key %llu: %.9g, want %.9g\n", what, t,
                    (unsigned long long)all_keys[i], (double)out[i], (double)want);
    }
    return bad != 0;
}

struct run {
    int optimizer, async, nshards;
    const char *job;
    int weighted; /* the shards with weights (PROTOCOL.md §14.1): "...@1,...@5" */
};

static int worker(int rank, int n, void *arg)
{
    const struct run *run = arg;
    ina_kv_config c;
    kv_config(&c, run->weighted ? weighted : addrs, run->job, rank, n);
    c.optimizer = run->optimizer;
    c.lr = run->optimizer == INA_KV_ADAGRAD ? 0.5f : 1.0f;
    c.eps = 1.0f;
    ina_kv *kv;
    int rc = ina_kv_open(&kv, &c);
    if (rc) {
        fprintf(stderr, "rank %d: open: %s (%s)\n", rank, ina_err_name(rc), ina_last_error(NULL));
        return 1;
    }
    static struct model m;
    memset(&m, 0, sizeof(m));
    m.optimizer = run->optimizer;
    m.n = n;
    m.lr = c.lr;
    m.eps = c.eps;
    int bad = check_all(kv, &m, run->job, -1); /* initial values: zero */
    uint64_t keys[STEPS][M];
    float vals[STEPS][M];
    for (int t = 0; t < STEPS && !bad; t++) {
        for (int j = 0; j < M; j++) {
            keys[t][j] = key_of(rank, t, j);
            vals[t][j] = val_of(rank, t, j);
        }
        if (run->async && t + 1 < STEPS) {
            /* Two pushes in flight, then a pull that must see both. */
            for (int j = 0; j < M; j++) {
                keys[t + 1][j] = key_of(rank, t + 1, j);
                vals[t + 1][j] = val_of(rank, t + 1, j);
            }
            ina_kv_req *a, *b, *p;
            float out[K + 5];
            rc = ina_kv_push_start(kv, keys[t], vals[t], M, &a);
            if (!rc)
                rc = ina_kv_push_start(kv, keys[t + 1], vals[t + 1], M, &b);
            if (!rc)
                rc = ina_kv_pull_start(kv, all_keys, out, K + 5, &p);
            int done = 0;
            while (!rc && !done) /* test makes progress too */
                rc = ina_kv_test(p, &done);
            if (!rc)
                rc = ina_kv_wait(a);
            if (!rc)
                rc = ina_kv_wait(b);
            if (!rc)
                rc = ina_kv_wait(p);
            model_step(&m, t);
            model_step(&m, t + 1);
            for (int i = 0; !rc && i < K + 5; i++)
                bad += memcmp(&out[i], &m.w[key_index(all_keys[i])], 4) != 0;
            t++;
        } else {
            rc = ina_kv_push(kv, keys[t], vals[t], M);
            model_step(&m, t);
            if (!rc)
                bad += check_all(kv, &m, run->job, t);
        }
        if (rc) {
            fprintf(stderr, "rank %d step %d: %s (%s)\n", rank, t, ina_err_name(rc),
                    ina_kv_last_error(kv));
            bad++;
        }
    }
    ina_kv_stats st;
    ina_kv_get_stats(kv, &st);
    if (st.steps != STEPS || st.push_entries != STEPS * M)
        bad++, fprintf(stderr, "rank %d: stats steps %llu entries %llu\n", rank,
                       (unsigned long long)st.steps, (unsigned long long)st.push_entries);
    ina_kv_close(kv);
    CHECK_EQ_INT(ina_kv_close(kv), INA_ERR_CLOSED); /* a closed handle is caught */
    return bad != 0;
}

/* Misuse: every bad argument gets its documented error, and nothing is sent. */
static int misuse(int rank, int n, void *arg)
{
    (void)arg;
    ina_kv_config c;
    kv_config(&c, addrs, "misuse", rank, n);
    ina_kv *kv = NULL;
    int bad = 0;
    c.dim = 0;
    bad += ina_kv_open(&kv, &c) != -EINVAL || kv != NULL;
    c.dim = 1;
    c.switch_addr = "127.0.0.1:1";
    bad += ina_kv_open(&kv, &c) != -EINVAL; /* a switch without hot keys */
    c.switch_addr = NULL;
    c.lr = NAN;
    bad += ina_kv_open(&kv, &c) != -EINVAL;
    c.lr = 0.5f;
    int rc = ina_kv_open(&kv, &c);
    if (rc) {
        fprintf(stderr, "misuse open: %s (%s)\n", ina_err_name(rc), ina_last_error(NULL));
        return 1;
    }
    uint64_t key = 1;
    float v = NAN, out;
    bad += ina_kv_push(kv, &key, &v, 1) != -EINVAL;
    v = INFINITY;
    bad += ina_kv_push(kv, &key, &v, 1) != -EINVAL;
    bad += ina_kv_push(kv, NULL, &v, 1) != -EINVAL;
    bad += ina_kv_pull(kv, &key, NULL, 1) != -EINVAL;
    bad += ina_kv_push(kv, &key, &v, (size_t)1 << 32) != -EOVERFLOW;
    bad += ina_kv_push(NULL, &key, &v, 1) != -EINVAL;
    bad += ina_kv_test(NULL, &rc) != -EINVAL;
    bad += ina_kv_wait(NULL) != 0;
    /* Nothing was pushed by the refused calls: the value is still 0 after one real step. */
    v = 2.0f;
    bad += ina_kv_push(kv, &key, &v, 1) != 0;
    bad += ina_kv_pull(kv, &key, &out, 1) != 0;
    bad += out != -0.5f * 2.0f * (float)n;
    bad += ina_kv_push(kv, NULL, NULL, 0) != 0; /* an empty step is a step */
    if (bad)
        fprintf(stderr, "misuse rank %d: %d wrong answers (%s)\n", rank, bad, ina_kv_last_error(kv));
    ina_kv_close(kv);
    return bad != 0;
}

/*
 * Values that are not integers: one SGD step (lr 1, from 0) leaves -fl(sum) at every
 * key, and the float sum of m terms is within gamma(m-1) * sum|x| of the exact sum
 * (gamma(k) = k u / (1 - k u), u = 2^-24; docs/PS.md), whatever the order of arrival.
 */
static float frac_val(int r, int j) { return (float)((j * 7919 + r * 104729) % 2001 - 1000) / 997.0f; }

static int frac(int rank, int n, void *arg)
{
    (void)arg;
    ina_kv_config c;
    kv_config(&c, addrs, "frac", rank, n);
    c.lr = 1.0f;
    ina_kv *kv;
    int rc = ina_kv_open(&kv, &c);
    if (rc)
        return 1;
    uint64_t keys[M];
    float vals[M], out[M];
    for (int j = 0; j < M; j++) {
        keys[j] = key_of(rank, 0, j);
        vals[j] = frac_val(rank, j);
    }
    int bad = ina_kv_push(kv, keys, vals, M) != 0 || ina_kv_pull(kv, keys, out, M) != 0;
    for (int i = 0; i < M && !bad; i++) {
        double sum = 0, abs = 0;
        int m = 0;
        for (int r = 0; r < n; r++)
            for (int j = 0; j < M; j++)
                if (key_of(r, 0, j) == keys[i]) {
                    sum += frac_val(r, j);
                    abs += fabs(frac_val(r, j));
                    m++;
                }
        double u = ldexp(1.0, -24), gamma = (m - 1) * u / (1 - (m - 1) * u);
        if (fabs(-(double)out[i] - sum) > gamma * abs) {
            fprintf(stderr, "frac: key %llu: %.9g, exact sum %.12g, bound %.3g\n",
                    (unsigned long long)keys[i], (double)-out[i], sum, gamma * abs);
            bad = 1;
        }
    }
    ina_kv_close(kv);
    return bad;
}

/* ina_kv_open with ps_addrs "127.0.0.1:P0W0,127.0.0.1:P1W1" fails INA_ERR_CONFIG, nothing
 * joined, saying why. */
static void refused_config(const struct sw_proc *ps, const char *w0, const char *w1,
                           const char *why)
{
    char a[256];
    snprintf(a, sizeof(a), "127.0.0.1:%d%s,127.0.0.1:%d%s", ps[0].port, w0, ps[1].port, w1);
    ina_kv_config c;
    kv_config(&c, a, "badweight", 0, 1);
    ina_kv *kv = NULL;
    CHECK_EQ_INT(ina_kv_open(&kv, &c), INA_ERR_CONFIG);
    CHECK(kv == NULL && strstr(ina_last_error(NULL), why) != NULL);
}

/* Weights that do not parse, or given to some shards only: INA_ERR_CONFIG, nothing joined. */
static void bad_weights(const struct sw_proc *ps)
{
    const char *bad[] = {"@0", "@65536", "@x", "@", "@3x", "@-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        refused_config(ps, bad[i], "@1", "weight");
    refused_config(ps, "@2", "", "1 of 2 shards");
}

/* A rank of ranks that disagree: rank 0 registers first or second, so one of them is refused
 * (MISMATCH) and the other times out. @return 1 if so. */
static int refused_join(ina_kv_config *c)
{
    c->join_timeout_ms = 3000;
    ina_kv *kv;
    int rc = ina_kv_open(&kv, c);
    if (rc == 0)
        ina_kv_close(kv);
    return rc == INA_ERR_MISMATCH || rc == INA_ERR_TIMEOUT;
}

/* Ranks whose weights differ disagree on the shards' ranges: MISMATCH (or the other rank
 * times out), never a job that splits the keys two ways. */
static int disagree_weights(int rank, int n, void *arg)
{
    const struct sw_proc *ps = arg;
    char a[256];
    snprintf(a, sizeof(a), "127.0.0.1:%d@%d,127.0.0.1:%d@1", ps[0].port, rank + 1, ps[1].port);
    ina_kv_config c;
    kv_config(&c, a, "weights-differ", rank, n);
    return !refused_join(&c);
}

/* Ranks that disagree on a parameter fail at once with MISMATCH. */
static int disagree(int rank, int n, void *arg)
{
    (void)arg;
    ina_kv_config c;
    kv_config(&c, addrs, "disagree", rank, n);
    c.lr = rank == 0 ? 0.1f : 0.2f;
    return !refused_join(&c);
}

int main(void)
{
    struct sw_proc ps[2];
    memset(ps, 0, sizeof(ps));
    for (int i = 0; i < 2; i++)
        if (ps_start(&ps[i], i, 2, NULL) != 0) {
            fprintf(stderr, "cannot start ina-ps (%s)\n", INA_PS_BIN);
            return 1;
        }
    ps_addrs(ps, 2, addrs, sizeof(addrs));
    snprintf(weighted, sizeof(weighted), "127.0.0.1:%d@1,127.0.0.1:%d@5", ps[0].port, ps[1].port);
    for (int i = 0; i < K; i++)
        all_keys[i] = i == 0 ? 7 : (uint64_t)i * 1000003ull + 13;
    for (int i = 0; i < 5; i++)
        all_keys[K + i] = all_keys[i * 3]; /* repeats in a pull */

    struct run sgd = {INA_KV_SGD, 0, 2, "sgd", 0}, ada = {INA_KV_ADAGRAD, 0, 2, "adagrad", 0},
               async = {INA_KV_SGD, 1, 2, "async", 0},
               wsgd = {INA_KV_SGD, 0, 2, "weighted-sgd", 1},
               wasync = {INA_KV_ADAGRAD, 1, 2, "weighted-async", 1};
    CHECK_EQ_INT(run_workers(3, worker, &sgd, 120), 0);
    CHECK_EQ_INT(run_workers(3, worker, &ada, 120), 0);
    CHECK_EQ_INT(run_workers(2, worker, &async, 120), 0);
    CHECK_EQ_INT(run_workers(3, worker, &wsgd, 120), 0);
    CHECK_EQ_INT(run_workers(2, worker, &wasync, 120), 0);
    bad_weights(ps);
    CHECK_EQ_INT(run_workers(2, disagree_weights, ps, 60), 0);
    CHECK_EQ_INT(run_workers(2, misuse, NULL, 60), 0);
    CHECK_EQ_INT(run_workers(3, frac, NULL, 60), 0);
    CHECK_EQ_INT(run_workers(2, disagree, NULL, 60), 0);

    /* Shards named in the wrong order: each refuses the job (it is not that shard). */
    char swapped[256];
    snprintf(swapped, sizeof(swapped), "127.0.0.1:%d,127.0.0.1:%d", ps[1].port, ps[0].port);
    ina_kv_config c;
    kv_config(&c, swapped, "swapped", 0, 1);
    ina_kv *kv = NULL;
    CHECK_EQ_INT(ina_kv_open(&kv, &c), INA_ERR_REJECTED);
    CHECK(kv == NULL);
    CHECK(strstr(ina_last_error(NULL), "--shard") != NULL);
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(switch_stop(&ps[i]), 0);
    return check_report("test_kv");
}
