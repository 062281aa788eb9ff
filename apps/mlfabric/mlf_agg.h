/* mlf_agg.h: opportunistic aggregation, a worker's side (PROTOCOL.md §15.7): the members of a
 * group grant sum their updates in an ina-switch before one of them sends the sum, and may
 * share one pull of the model through it. */
#ifndef INA_MLF_AGG_H
#define INA_MLF_AGG_H

#include <stddef.h>
#include <stdint.h>

#include "ina.h"

/* The group's job name at the switch: the same on every member of the group, one per stamp:
 * the first 18 bytes of the ina-ps job's name, ".g", the stamp in decimal. */
void mlf_agg_job_name(const char *job, uint32_t stamp, char out[32]);

struct mlf_agg_group {
    const char *switch_addr; /* "host:port" of the ina-switch */
    const char *job;         /* the ina-ps job's name */
    uint32_t stamp;          /* the group's stamp */
    unsigned size, index;    /* members, and this one's index (0: the leader) */
    int timeout_ms;          /* deadline of the join and of each operation */
};

/* Join the group's all-reduce job at the switch (every member). @return 0, or a negative
 * INA_ERR_* / errno of libina (*ctx NULL). */
int mlf_agg_open(const struct mlf_agg_group *g, ina_ctx **ctx);

/*
 * The leader's model to every member: model[0..n) and *version, the leader's (pulled from
 * the server), are every member's on return; a member's own are ignored (overwritten). An
 * INT32 SUM of the values' bit patterns with the others' zeros: exact (PROTOCOL.md §8.5).
 * @return 0, or libina's error (the group is broken: every member pulls for itself).
 */
int mlf_agg_bcast(ina_ctx *ctx, int leader, float *model, size_t n, uint32_t *version);

/*
 * Sum this member's update grad[0..n) with the other members' into sum[] (grad is left
 * untouched), and the members' base versions into their minimum (*base: this member's,
 * then the group's): INT32 MIN and FLOAT32 SUM in flight together, each bounded by the
 * group's deadline. @return 0, or libina's error (sum[] unspecified).
 */
int mlf_agg_reduce(ina_ctx *ctx, const float *grad, float *sum, size_t n, uint32_t *base);

/* Leave the group's job (the sums are in: a failed LEAVE changes nothing). NULL: nothing. */
void mlf_agg_close(ina_ctx *ctx);

/* open, reduce, close: a group whose members pulled the model each for itself. */
int mlf_agg_sum(const struct mlf_agg_group *g, const float *grad, float *sum, size_t n,
                uint32_t *base);

#endif
