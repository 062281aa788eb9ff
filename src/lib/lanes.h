/* lanes.h: contexts of lanes: one lane's context (lane.c) and a context of several parts, lanes x shards (lanes.c). */
#ifndef INA_LIB_LANES_H
#define INA_LIB_LANES_H

#include <netinet/in.h>

#include "ina.h"

struct ina_ctx;
struct ina_req;
struct ina_fallback;

/* A part of a multi-part context refused by its switch (NOSPACE): where the
 * refusal said the job may run instead (rank 0's host aggregator; port 0 =
 * nowhere), and on rank 0 the aggregator's socket it offered. */
struct ina_refusal {
    struct sockaddr_in target;
    struct ina_fallback *fallback;
};

/* lane.c: the fields every context has, a lane's or a multi-lane parent's (NULL: no memory). */
struct ina_ctx *ina__ctx_new(const ina_config *cfg, int lane, int nlanes);
/* lane.c: open one lane's context (socket, join, stream) at addr, as lane
 * `lane` of nlanes; close it (leave, with the abort flag if abort or if it
 * has operations in flight; free everything, the struct too). With
 * refusal (one part of several), a NOSPACE is returned as is, with *refusal
 * filled, rather than answered by a move to the host aggregator. */
int ina__lane_open(struct ina_ctx **out, const ina_config *cfg, const struct sockaddr_in *addr,
                   int lane, int nlanes, struct ina_refusal *refusal);
void ina__lane_close(struct ina_ctx *ctx, int abort);
/* lane.c: close as above, but keep the struct (ina_finalize retires it). */
void ina__lane_release(struct ina_ctx *ctx, int abort);
/* lane.c: the default elems_per_packet for a switch at addr (2048 on loopback, else 256). */
int ina__default_elems(const struct sockaddr_in *addr);

/* lanes.c: a multi-part context. start takes the n part contexts (all
 * joined) and runs nthreads threads (part p on thread p mod nthreads), or,
 * for nthreads 1, none: the caller's thread drives every part inside
 * submit, test and wait. submit splits an operation over the parts. */
int ina__lanes_start(struct ina_ctx *parent, struct ina_ctx **lane_ctx, int n, int nthreads);
int ina__lanes_submit(struct ina_ctx *parent, struct ina_req *req);
int ina__lanes_test(struct ina_req *req, int *done);
int ina__lanes_wait(struct ina_req *req);
void ina__lanes_stats(const struct ina_ctx *parent, ina_stats *st);
/* Stop the threads, close every lane (with the abort flag if an operation
 * is in flight), free the lanes. */
void ina__lanes_close(struct ina_ctx *parent);
/* The context of part i, and how many parts there are (for ina_get_info). */
const struct ina_ctx *ina__lanes_ctx(const struct ina_ctx *parent, int i);
int ina__lanes_nparts(const struct ina_ctx *parent);

#endif
