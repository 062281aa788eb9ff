/* mlf_agg.h: opportunistic aggregation, a worker's side (PROTOCOL.md §15.7): the members of a
 * group grant sum their updates in an ina-switch before one of them sends the sum. */
#ifndef INA_MLF_AGG_H
#define INA_MLF_AGG_H

#include <stddef.h>
#include <stdint.h>

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

/*
 * Sum this member's update grad[0..n) with the other members' into sum[] (grad is left
 * untouched), and the members' base versions into their minimum (*base: this member's,
 * then the group's). One all-reduce job of the group's own at the switch, INT32 MIN and
 * FLOAT32 SUM in flight together; every wait bounded by g->timeout_ms.
 * @return 0, or a negative INA_ERR_* / errno of libina (a dead member or switch, no
 * space at the switch: the group is not summed, and sum[] is unspecified).
 */
int mlf_agg_sum(const struct mlf_agg_group *g, const float *grad, float *sum, size_t n,
                uint32_t *base);

#endif
