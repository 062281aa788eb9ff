/* test_kv_hot.c: hot keys summed in the switch, cold keys at ina-ps: every update applied exactly once, across hot-set reinstalls, with and without 1% loss, duplication and reordering, with hot sets cut by --hot-memory, with sparse hot blocks (bitmaps) and weighted shards. */
#include <math.h>

#include "check.h"
#include "kv_harness.h"

#define K 400   /* keys */
#define M 120   /* entries per push */
#define STEPS 14
#define P 2     /* profile steps: first hot set at step 2 */
#define E 3     /* a new hot set every 3 steps: at 2, 5, 8, 11 */
#define H 48    /* hot keys */
/* ina-switch --hot-memory 4K (PROTOCOL.md §14.3): the ranks' samples of H_CUT keys each do
 * not fit (16 + 12 bytes a key and the index), so the switch counts the keys that find room
 * and every set is smaller than asked. */
#define H_CUT 100
/* A hot set of up to H_WIDE keys: each rank touches about a quarter of its positions a
 * step, so its blocks go as bitmaps (PROTOCOL.md §14.3). */
#define H_WIDE 300

static char addrs[256], waddrs[256], swaddr[64];

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Skewed keys whose popular ones drift with t, so every reinstall moves keys both ways. */
static int idx_of(int r, int t, int j)
{
    double u = (double)(mix((uint64_t)r << 40 ^ (uint64_t)t << 20 ^ (uint64_t)j) >> 11) / 9007199254740992.0;
    return ((int)(K * u * u * u) + t * 9) % K;
}
static uint64_t key_at(int i) { return (uint64_t)i * 0x100000001ull + 5; }
static float val_of(int r, int t, int j) { return (float)((r + 2) * ((j + 3 * t) % 9 - 4)); }

struct run {
    const char *job;
    int optimizer, hot, faults;
    int many_cores; /* the host looks like 16 cores: auto lanes would give each rank 4 */
    int hot_memory_4k; /* ina-switch --hot-memory 4K, the job asks for H_CUT hot keys */
    int wide;          /* H_WIDE hot keys, and the shards weighted 3:1 (PROTOCOL.md §14.1) */
};

static void model_step(float *w, float *acc, int n, int t, int optimizer, float lr)
{
    float g[K] = {0};
    for (int r = 0; r < n; r++)
        for (int j = 0; j < M; j++)
            g[idx_of(r, t, j)] += val_of(r, t, j);
    for (int i = 0; i < K; i++) {
        if (g[i] == 0.0f)
            continue;
        if (optimizer == INA_KV_ADAGRAD) {
            acc[i] += g[i] * g[i];
            w[i] -= lr * g[i] / (1.0f + sqrtf(acc[i]));
        } else {
            w[i] -= lr * g[i];
        }
    }
}

static int worker(int rank, int n, void *arg)
{
    const struct run *run = arg;
    if (run->faults)
        setenv("INA_FAULT", rank == 0 ? "drop=0.01,dup=0.01,reorder=0.01,seed=11"
                                      : "drop=0.01,dup=0.01,reorder=0.01,seed=23", 1);
    if (run->many_cores) /* the hot job must still run on one lane (its table is one job) */
        setenv("INA_AUTO_CORES", "16", 1);
    ina_kv_config c;
    kv_config(&c, run->wide ? waddrs : addrs, run->job, rank, n);
    c.optimizer = run->optimizer;
    c.lr = run->optimizer == INA_KV_ADAGRAD ? 0.25f : 1.0f;
    if (run->hot) {
        c.switch_addr = swaddr;
        c.hot_keys = run->hot_memory_4k ? H_CUT : run->wide ? H_WIDE : H;
        c.profile_steps = P;
        c.reprofile_steps = E;
    }
    ina_kv *kv;
    int rc = ina_kv_open(&kv, &c);
    if (rc) {
        fprintf(stderr, "%s rank %d: open: %s (%s)\n", run->job, rank, ina_err_name(rc),
                ina_last_error(NULL));
        return 1;
    }
    float w[K] = {0}, acc[K] = {0}, out[K];
    uint64_t all[K], keys[M];
    float vals[M];
    for (int i = 0; i < K; i++)
        all[i] = key_at(i);
    int bad = 0;
    for (int t = 0; t < STEPS && !bad; t++) {
        for (int j = 0; j < M; j++) {
            keys[j] = key_at(idx_of(rank, t, j));
            vals[j] = val_of(rank, t, j);
        }
        rc = ina_kv_push(kv, keys, vals, M);
        model_step(w, acc, n, t, run->optimizer, c.lr);
        if (!rc)
            rc = ina_kv_pull(kv, all, out, K);
        if (rc) {
            fprintf(stderr, "%s rank %d step %d: %s (%s)\n", run->job, rank, t, ina_err_name(rc),
                    ina_kv_last_error(kv));
            bad++;
            break;
        }
        for (int i = 0; i < K; i++)
            if (memcmp(&out[i], &w[i], 4) != 0 && bad++ < 3)
                fprintf(stderr, "%s rank %d step %d key %d: %.9g, want %.9g\n", run->job, rank,
                        t, i, (double)out[i], (double)w[i]);
    }
    ina_kv_stats st;
    ina_kv_get_stats(kv, &st);
    if (run->hot && (st.hot_installs != 4 || st.hot_entries == 0 || st.hot_keys == 0 ||
                     st.hot_pull_keys == 0 || st.hot_entries == st.push_entries ||
                     st.hot_keys_out == 0 || st.hot_keys_in <= st.hot_keys)) {
        fprintf(stderr, "%s rank %d: installs %llu hot entries %llu of %llu, hot keys %llu\n",
                run->job, rank, (unsigned long long)st.hot_installs,
                (unsigned long long)st.hot_entries, (unsigned long long)st.push_entries,
                (unsigned long long)st.hot_keys);
        bad++;
    }
    /* --hot-memory cut the sets: the switch counted what fit, and the job went on with
     * fewer hot keys (the rest at ina-ps), every update still exact. */
    if (run->hot_memory_4k && (st.hot_keys == 0 || st.hot_keys >= 64)) {
        fprintf(stderr, "%s rank %d: %llu hot keys at the end, want 1..63 (cut by "
                "--hot-memory)\n", run->job, rank, (unsigned long long)st.hot_keys);
        bad++;
    }
    if (rank == 0)
        printf("%s: %llu of %llu entries hot, %llu installs moving %llu keys in and %llu out, "
               "%llu PS retransmits\n", run->job,
               (unsigned long long)st.hot_entries, (unsigned long long)st.push_entries,
               (unsigned long long)st.hot_installs, (unsigned long long)st.hot_keys_in,
               (unsigned long long)st.hot_keys_out, (unsigned long long)st.ps_retransmits);
    ina_kv_close(kv);
    return bad != 0;
}

static int run_cluster(const struct run *run)
{
    const char *fault[] = {"--fault-rx", "drop=0.01,dup=0.01,reorder=0.01,seed=5", "--fault-tx",
                           "drop=0.01,dup=0.01,reorder=0.01,seed=6", NULL};
    struct sw_proc ps[2], sw;
    memset(ps, 0, sizeof(ps));
    memset(&sw, 0, sizeof(sw));
    int bad = 0;
    for (int i = 0; i < 2; i++)
        if (ps_start(&ps[i], i, 2, run->faults ? fault : NULL) != 0)
            return 1;
    ps_addrs(ps, 2, addrs, sizeof(addrs));
    snprintf(waddrs, sizeof(waddrs), "127.0.0.1:%d@3,127.0.0.1:%d@1", ps[0].port, ps[1].port);
    const char *small[] = {"--hot-memory", "4K", NULL};
    if (run->hot) {
        if (switch_start(&sw, run->faults ? fault : run->hot_memory_4k ? small : NULL) != 0)
            return 1;
        switch_addr(&sw, swaddr, sizeof(swaddr));
    }
    bad += run_workers(3, worker, (void *)run, 180) != 0;
    if (run->hot)
        bad += switch_stop(&sw) != 0;
    for (int i = 0; i < 2; i++)
        bad += switch_stop(&ps[i]) != 0;
    return bad;
}

int main(void)
{
    struct run runs[] = {
        {"allps", INA_KV_SGD, 0, 0, 0, 0, 0},
        {"hotcold", INA_KV_SGD, 1, 0, 0, 0, 0},
        {"hotcold-16cores", INA_KV_SGD, 1, 0, 1, 0, 0},
        {"hotcold-adagrad", INA_KV_ADAGRAD, 1, 0, 0, 0, 0},
        {"hotcold-faults", INA_KV_SGD, 1, 1, 0, 0, 0},
        {"allps-faults", INA_KV_ADAGRAD, 0, 1, 0, 0, 0},
        {"hotcold-hotmem", INA_KV_ADAGRAD, 1, 0, 0, 1, 0},
        {"hotcold-wide", INA_KV_ADAGRAD, 1, 0, 0, 0, 1},
        {"hotcold-wide-faults", INA_KV_SGD, 1, 1, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        int bad = run_cluster(&runs[i]);
        if (bad)
            fprintf(stderr, "run %s failed\n", runs[i].job);
        CHECK_EQ_INT(bad, 0);
    }
    return check_report("test_kv_hot");
}
