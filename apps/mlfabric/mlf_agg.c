/* mlf_agg.c: opportunistic aggregation (PROTOCOL.md §15.7): a group's updates summed in an
 * ina-switch, under its slot rules (loss recovery, no duplicate added twice). */
#include <stdio.h>

#include "ina.h"
#include "mlf_agg.h"

void mlf_agg_job_name(const char *job, uint32_t stamp, char out[32])
{
    snprintf(out, 32, "%.18s.g%u", job, stamp);
}

int mlf_agg_sum(const struct mlf_agg_group *g, const float *grad, float *sum, size_t n,
                uint32_t *base)
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
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc != 0)
        return rc;
    /* Versions fit int32 (a job of 2^31 updates is beyond any run), so MIN on INT32 is the
     * minimum of the bases. Both operations are in flight together: one round trip. */
    int32_t b = (int32_t)*base;
    ina_req *rb = NULL, *rs = NULL;
    rc = ina_allreduce_start(ctx, &b, &b, 1, INA_INT32, INA_MIN, &rb);
    if (rc == 0)
        rc = ina_allreduce_start(ctx, grad, sum, n, INA_FLOAT32, INA_SUM, &rs);
    int wb = ina_wait(rb), ws = ina_wait(rs);
    if (rc == 0)
        rc = wb != 0 ? wb : ws;
    ina_finalize(ctx); /* the sums are in: a failed LEAVE changes nothing */
    if (rc == 0)
        *base = (uint32_t)b;
    return rc;
}
