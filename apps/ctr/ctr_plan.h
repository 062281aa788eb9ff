/* ctr_plan.h: the byte model of a CTR job on aggregation hosts: hot set, per-host bytes, the weighted key split that balances the links. */
#ifndef INA_CTR_PLAN_H
#define INA_CTR_PLAN_H

/*
 * ina-ctr-gen --plan. A cluster of N workers and A aggregation hosts, every
 * link alike (rate r each way). The model counts, datagram by datagram, what
 * one synchronous step of ina-ctr puts on each link (UDP payload + 42 bytes
 * of Ethernet, IP and UDP headers, what tbf counts on a veth), from the
 * generator's own batches, for three setups:
 *
 *   all-PS, 1 shard      one ina-ps host (for contrast: fewer hosts)
 *   all-PS, A shards     one ina-ps on each of the A hosts, keys split by hash
 *   hot/cold             ina-switch and shard 0 on host 0, shards 1..A-1 on
 *                        hosts 1..A-1; the hot set from every rank's sample
 *                        (1 in R entries over P steps, each rank's top H,
 *                        summed, the top H of the sum: what the switch
 *                        installs), the cold keys split by weight
 *
 * Per step and worker: PS_PUSH (12 B an entry, 120 a datagram) and its ack,
 * PS_COMMIT and its ack per shard, PS_PULL (8 B a key, 180 a datagram) and
 * its answer (4 B a key); HOT_DATA per block of 358 positions (dense 4 B a
 * position, or keyed 12 B a nonzero, whichever is shorter: positions carry
 * no key bytes) and HOT_RESULT per block (dense), once to the multicast group
 * or once per worker. The weight of shard 0 is chosen so that the busiest
 * link carries the least: host 0's link carries the hot vector and its share
 * of cold keys, the others only cold keys. The step time predicted is the
 * busiest link's bytes over the rate (the links are the bottleneck).
 */
#include <stdio.h>

#include "ctr_data.h"

struct ctr_plan_opts {
    int workers, batch, hosts, profile, steps, sample;
    const uint64_t *hot; /* H values to try */
    int nhot;
    double rate_bps;     /* each link, each way */
    int dgram;           /* datagrams to shards (1472) */
    int multicast;       /* HOT_RESULT once per block (ina-switch --multicast) */
};

/* Worker w's distinct keys of step t, in the order of first appearance (ina-ctr's push
 * order), into keys (room for batch * CTR_MAX_FEATURES); seen[] (K + 1 entries) marks them
 * with stamp, a value new to it. @return how many. */
uint32_t ctr_batch_keys(const struct ctr_gen *g, int w, int t, int batch, uint64_t *keys,
                        uint32_t *seen, uint32_t stamp);
/* What the switch sums from every rank's sample (PROTOCOL.md §14.4): per rank, 1 in R of
 * its entries of steps 0..P-1 counted, its top H keys (count desc, key asc) with their
 * counts. @return the sums per key (K + 1 entries, malloc'd), or NULL. */
uint32_t *ctr_sampled_sums(const struct ctr_gen *g, int workers, int batch, int P, uint32_t R,
                           uint64_t H);
/* Print the plan (see above) to out. @return 0, or -1 (no memory). */
int ctr_plan(const struct ctr_gen *g, const struct ctr_plan_opts *po, FILE *out);

#endif
