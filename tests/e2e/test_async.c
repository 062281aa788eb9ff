/* test_async.c: several all-reduces in flight at once (start/test/wait), mixed dtypes and sizes, N = 3. */
#include <math.h>

#include "check.h"
#include "e2e/harness.h"

#define NOPS 8
static struct sw_proc sw;

static size_t op_count(int i) { return (size_t)(i * 12345 % 70001) + (size_t)i; }

static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "e2e-async", rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = 512;
    cfg.window = 16;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init: %s\n", rank, ina_strerror(rc));
        return 1;
    }
    int fails = 0;
    void *in[NOPS], *out[NOPS];
    ina_req *req[NOPS];
    /* Two in flight, then NOPS in flight; even ops int32, odd float32. */
    for (int round = 0; round < 2; round++) {
        int nops = round == 0 ? 2 : NOPS;
        for (int i = 0; i < nops; i++) {
            size_t count = op_count(i + 1);
            in[i] = malloc(count * 4 + 4);
            out[i] = malloc(count * 4 + 4);
            for (size_t j = 0; j < count; j++) {
                if (i % 2 == 0)
                    ((int32_t *)in[i])[j] = h_i32(rank, (uint64_t)i, j);
                else
                    ((float *)in[i])[j] = h_f32(rank, (uint64_t)i, j);
            }
            rc = ina_allreduce_start(ctx, in[i], out[i], count, i % 2 ? INA_FLOAT32 : INA_INT32,
                                     INA_SUM, &req[i]);
            if (rc) {
                fprintf(stderr, "rank %d: start %d: %s\n", rank, i, ina_strerror(rc));
                return 1;
            }
        }
        /* Poll the last one with ina_test until done, then wait all (reverse order). */
        int done = 0;
        for (double t0 = ina__clock_s(); !done && ina__clock_s() - t0 < 30;)
            rc = ina_test(req[nops - 1], &done);
        fails += !done || rc != 0;
        for (int i = nops - 1; i >= 0; i--) {
            rc = ina_wait(req[i]);
            if (rc) {
                fprintf(stderr, "rank %d: wait %d: %s\n", rank, i, ina_strerror(rc));
                fails++;
            }
            size_t count = op_count(i + 1);
            for (size_t j = 0; j < count; j++) {
                if (i % 2 == 0) {
                    uint32_t exact = 0;
                    for (int r = 0; r < n; r++)
                        exact += (uint32_t)h_i32(r, (uint64_t)i, j);
                    fails += ((uint32_t *)out[i])[j] != exact;
                } else {
                    double exact = 0, amax = 0;
                    size_t b0 = j / 512 * 512;
                    for (int r = 0; r < n; r++) {
                        exact += h_f32(r, (uint64_t)i, j);
                        for (size_t k = b0; k < b0 + 512 && k < count; k++)
                            amax = fmax(amax, fabs(h_f32(r, (uint64_t)i, k)));
                    }
                    if (j % 512 == 0 || j == count - 1) /* amax loop is costly: sample */
                        fails += !(fabs(((float *)out[i])[j] - exact) <=
                                   ina_float_error_bound(n, amax, exact));
                }
            }
            free(in[i]);
            free(out[i]);
        }
    }
    /* A request left unwaited is freed by finalize (checked by LeakSanitizer). */
    int32_t x = 1, y;
    ina_req *dangling;
    rc = ina_allreduce_start(ctx, &x, &y, 1, INA_INT32, INA_SUM, &dangling);
    fails += rc != 0;
    ina_stats st;
    ina_get_stats(ctx, &st);
    fails += st.ops < 10;
    ina_finalize(ctx);
    if (fails)
        fprintf(stderr, "rank %d: %d failures\n", rank, fails);
    return fails;
}

int main(void)
{
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    CHECK_EQ_INT(run_workers(3, worker, NULL, 120), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    return check_report("test_async");
}
