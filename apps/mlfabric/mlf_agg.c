/* mlf_agg.c: opportunistic aggregation (PROTOCOL.md §15.7): a group's updates summed in an
 * ina-switch, under its slot rules (loss recovery, no duplicate added twice); the leader's
 * pull shared the same way. */
#include <stdio.h>
#include <string.h>

#include "mlf_agg.h"

void mlf_agg_job_name(const char *job, uint32_t stamp, char out[32])
{
    snprintf(out, 32, "%.18s.g%u", job, stamp);
}

int mlf_agg_open(const struct mlf_agg_group *g, ina_ctx **ctx)
{
    char name[32];
    mlf_agg_job_name(g->job, g->stamp, name);
    ina_config cfg;
    ina_config_init(&cfg);
    cfg.switch_addr = g->switch_addr;
    cfg.job = name;
    cfg.rank = (int)g->index;
    cfg.world_size = (int)g->size;
    cfg.lanes = 1;                      /* small, short-lived: no lane threads */
    cfg.fallback = INA_FALLBACK_NONE;   /* no space at the switch: the leader sends alone */
    cfg.timeout_ms = g->timeout_ms;
    cfg.join_timeout_ms = g->timeout_ms;
    *ctx = NULL;
    return ina_init(ctx, &cfg);
}

/* Two all-reduces in flight together, then both waited for: one round trip. */
static int two_ops(ina_ctx *ctx, const void *s1, void *r1, size_t n1, ina_dtype t1, ina_op o1,
                   const void *s2, void *r2, size_t n2, ina_dtype t2, ina_op o2)
{
    ina_req *a = NULL, *b = NULL;
    int rc = ina_allreduce_start(ctx, s1, r1, n1, t1, o1, &a);
    if (rc == 0)
        rc = ina_allreduce_start(ctx, s2, r2, n2, t2, o2, &b);
    int wa = ina_wait(a), wb = ina_wait(b);
    return rc != 0 ? rc : wa != 0 ? wa : wb;
}

int mlf_agg_bcast(ina_ctx *ctx, int leader, float *model, size_t n, uint32_t *version)
{
    /* Floats and int32 have the same size: the bit patterns go through INT32 SUM in place,
     * and x + 0 + ... + 0 is x (sums wrap mod 2^32, so nothing saturates). */
    int32_t v = leader ? (int32_t)*version : 0;
    if (!leader)
        memset(model, 0, n * sizeof(float));
    int rc = two_ops(ctx, &v, &v, 1, INA_INT32, INA_SUM, model, model, n, INA_INT32, INA_SUM);
    if (rc == 0)
        *version = (uint32_t)v;
    return rc;
}

int mlf_agg_reduce(ina_ctx *ctx, const float *grad, float *sum, size_t n, uint32_t *base)
{
    /* Versions fit int32 (a job of 2^31 updates is beyond any run), so MIN on INT32 is the
     * minimum of the bases. */
    int32_t b = (int32_t)*base;
    int rc = two_ops(ctx, &b, &b, 1, INA_INT32, INA_MIN, grad, sum, n, INA_FLOAT32, INA_SUM);
    if (rc == 0)
        *base = (uint32_t)b;
    return rc;
}

void mlf_agg_close(ina_ctx *ctx)
{
    if (ctx)
        ina_finalize(ctx);
}

int mlf_agg_sum(const struct mlf_agg_group *g, const float *grad, float *sum, size_t n,
                uint32_t *base)
{
    ina_ctx *ctx;
    int rc = mlf_agg_open(g, &ctx);
    if (rc != 0)
        return rc;
    rc = mlf_agg_reduce(ctx, grad, sum, n, base);
    mlf_agg_close(ctx);
    return rc;
}
