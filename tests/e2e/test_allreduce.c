/* test_allreduce.c: end to end on loopback: N = 1,2,3,4,8 and 64 workers, awkward counts and packet sizes, int32 exact, float32 within bound. */
#include <math.h>

#include "check.h"
#include "e2e/harness.h"

static struct sw_proc sw;

/* One configuration of the test: packet size K, and the largest count run. */
struct variant {
    int k;
    size_t max_count;
};
static struct variant v; /* set before forking the workers */
#define K ((size_t)v.k)

/* Largest |x| over all ranks in the packet block holding element i. */
static double block_amax(int n, uint64_t op, size_t count, size_t i)
{
    size_t b0 = i / K * K, b1 = b0 + K < count ? b0 + K : count;
    double m = 0;
    for (int r = 0; r < n; r++)
        for (size_t j = b0; j < b1; j++)
            m = fmax(m, fabs(h_f32(r, op, j)));
    return m;
}

static int verify_float(int n, uint64_t op, size_t count, const float *out)
{
    int bad = 0;
    double amax = 0;
    for (size_t i = 0; i < count; i++) {
        if (i % K == 0)
            amax = block_amax(n, op, count, i);
        double exact = 0;
        for (int r = 0; r < n; r++)
            exact += h_f32(r, op, i);
        double bound = ina_float_error_bound(n, amax, exact);
        if (!(fabs(out[i] - exact) <= bound)) {
            if (bad++ < 5)
                fprintf(stderr, "float n=%d count=%zu i=%zu got %.9g want %.9g bound %.3g\n", n,
                        count, i, out[i], exact, bound);
        }
    }
    return bad;
}

static int verify_int(int n, uint64_t op, size_t count, const int32_t *out)
{
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t exact = 0;
        for (int r = 0; r < n; r++)
            exact += (uint32_t)h_i32(r, op, i);
        if ((uint32_t)out[i] != exact && bad++ < 5)
            fprintf(stderr, "int n=%d count=%zu i=%zu got %d want %d\n", n, count, i, out[i],
                    (int32_t)exact);
    }
    return bad;
}

static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64], job[32];
    snprintf(job, sizeof(job), "e2e-n%d-k%d", n, v.k);
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = K;
    cfg.window = 32;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init: %s\n", rank, ina_strerror(rc));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    int fails = (info.elems_per_packet != v.k) + (info.window != 32);
    uint64_t op = 0;
    const size_t counts[] = {0, 1, K - 1, K, K + 1, 3 * K + 5, (1u << 20) + 7};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        if (count > v.max_count)
            continue;
        int32_t *ib = malloc((count + 1) * 4), *ob = malloc((count + 1) * 4);
        float *fb = malloc((count + 1) * 4), *fo = malloc((count + 1) * 4);
        op++;
        for (size_t i = 0; i < count; i++)
            ib[i] = h_i32(rank, op, i);
        rc = ina_allreduce(ctx, ib, ob, count, INA_INT32, INA_SUM);
        if (rc || verify_int(n, op, count, ob)) {
            fprintf(stderr, "rank %d: int32 count %zu: rc %s\n", rank, count, ina_err_name(rc));
            fails++;
        }
        op++;
        for (size_t i = 0; i < count; i++)
            fb[i] = h_f32(rank, op, i);
        rc = ina_allreduce(ctx, fb, fo, count, INA_FLOAT32, INA_SUM);
        if (rc || verify_float(n, op, count, fo)) {
            fprintf(stderr, "rank %d: float32 count %zu: rc %s\n", rank, count, ina_err_name(rc));
            fails++;
        }
        /* In place: send buffer == receive buffer. */
        rc = ina_allreduce(ctx, fb, fb, count, INA_FLOAT32, INA_SUM);
        if (rc || verify_float(n, op, count, fb)) {
            fprintf(stderr, "rank %d: float32 in place count %zu: rc %s\n", rank, count,
                    ina_err_name(rc));
            fails++;
        }
        free(ib);
        free(ob);
        free(fb);
        free(fo);
    }
    ina_finalize(ctx);
    return fails;
}

static void run(int n, int k, size_t max_count)
{
    v.k = k;
    v.max_count = max_count;
    double t0 = ina__clock_s();
    int failed = run_workers(n, worker, NULL, 240);
    printf("N=%d k=%d counts %s %zu: %d workers failed (%.2f s)\n", n, k,
           max_count == SIZE_MAX ? "up to" : "<=", max_count == SIZE_MAX ? (size_t)(1u << 20) + 7 : max_count,
           failed, ina__clock_s() - t0);
    CHECK_EQ_INT(failed, 0);
}

int main(void)
{
    const char *const args[] = {"--max-elems", "16000", "--slots", "256", NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    const int ns[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        run(ns[i], 256, SIZE_MAX);
    /* Packet sizes: SwitchML's 64, and a large loopback payload. */
    run(3, 64, 100000);
    run(2, h_ebpf() ? 2048 : 16000, SIZE_MAX); /* the eBPF program's slots hold 2048 */
    /* Small float ops take one round per block (op 3) against this switch;
     * the two-round schedule must stay right for them too. */
    setenv("INA_ONE_ROUND", "0", 1);
    run(3, 256, 100000);
    run(4, 64, 100000);
    unsetenv("INA_ONE_ROUND");
    /* More workers than the original's 32-bit bitmap allows. */
    run(64, 256, 1000);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    return check_report("test_allreduce");
}
