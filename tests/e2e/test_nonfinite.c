/* test_nonfinite.c: NaN and Inf inputs give the documented results, never a wrong finite value. */
#include <math.h>

#include "check.h"
#include "e2e/harness.h"

#define K 64
#define COUNT (4 * K)
static struct sw_proc sw;

/*
 * Block 0: rank 0 has NaN at element 0, rank 1 +Inf at element 1, both +Inf
 *          at 2, +Inf and -Inf at 3; other elements finite.
 * Block 1: only rank 1 has -Inf at element K + 5.
 * Blocks 2, 3: finite only (must be unaffected and within bound).
 */
static float input(int rank, int i)
{
    if (i == 0 && rank == 0)
        return NAN;
    if (i == 1 && rank == 1)
        return INFINITY;
    if (i == 2)
        return INFINITY;
    if (i == 3)
        return rank == 0 ? INFINITY : -INFINITY;
    if (i == K + 5 && rank == 1)
        return -INFINITY;
    return (float)(rank + 1) * 0.25f * (float)(i % 7);
}

static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "e2e-nonfinite", rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = K;
    ina_ctx *ctx;
    if (ina_init(&ctx, &cfg))
        return 1;
    float in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = input(rank, i);
    int rc = ina_allreduce(ctx, in, out, COUNT, INA_FLOAT32, INA_SUM);
    int fails = rc != 0;
    fails += !isnan(out[0]);                    /* NaN + x = NaN */
    fails += !(isinf(out[1]) && out[1] > 0);    /* +Inf + x = +Inf */
    fails += !(isinf(out[2]) && out[2] > 0);    /* +Inf + +Inf = +Inf */
    fails += !isnan(out[3]);                    /* +Inf + -Inf = NaN */
    for (int i = 4; i < K; i++)
        fails += !isnan(out[i]); /* finite, but shares a block with non-finite: NaN, documented */
    fails += !(isinf(out[K + 5]) && out[K + 5] < 0);
    for (int i = 2 * K; i < COUNT; i++) {
        double exact = 0.25 * (i % 7) * (1 + 2);
        fails += !(fabs(out[i] - exact) <= ina_float_error_bound(2, 0.5 * 6, exact));
    }
    ina_stats st;
    ina_get_stats(ctx, &st);
    fails += st.nonfinite_blocks != 2;
    /* The context stays usable: a following finite all-reduce is correct. */
    for (int i = 0; i < COUNT; i++)
        in[i] = 1.0f;
    rc = ina_allreduce(ctx, in, out, COUNT, INA_FLOAT32, INA_SUM);
    fails += rc != 0;
    for (int i = 0; i < COUNT; i++)
        fails += out[i] != 2.0f;
    ina_finalize(ctx);
    if (fails)
        fprintf(stderr, "rank %d: %d failures (out[0..3] = %g %g %g %g)\n", rank, fails, out[0],
                out[1], out[2], out[3]);
    return fails;
}

int main(void)
{
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    CHECK_EQ_INT(run_workers(2, worker, NULL, 60), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    return check_report("test_nonfinite");
}
