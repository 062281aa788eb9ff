/* dp_ops.h: the switch's pluggable dataplane: who keeps the slots and applies the slot rules to DATA. */
#ifndef INA_SW_DP_OPS_H
#define INA_SW_DP_OPS_H

/*
 * By default (sw->dp == NULL) the switch process itself applies the slot
 * rules of docs/PROTOCOL.md §6 (dataplane.c), in its own memory. Another
 * dataplane (the eBPF program of src/switch/ebpf/, which runs them in the
 * kernel before the datagram reaches any socket) keeps the slots itself;
 * the control plane (control.c: joins, sessions, admission, teardown,
 * eviction, counters) stays the same and tells it through these hooks.
 *
 * Every hook runs on the switch's own thread. A hook may queue nothing:
 * what the dataplane sends, it sends itself.
 */

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

struct ina_switch;
struct ina_job;

struct ina_dp_ops {
    const char *name; /* "ebpf": the --dataplane value, for logs */
    /*
     * A DATA datagram (header checked: length >= 32, magic, version 1, kind
     * DATA) reached the switch's socket although the dataplane aggregates
     * DATA: a GSO train the kernel split, an IP fragment, or one the
     * dataplane passed up on purpose. @return 1 if the dataplane took it
     * (counted, aggregated or dropped there), 0 if the control plane must
     * handle it as usual (ina__switch_input goes on: an evicted job's DATA,
     * answered with MIGRATE).
     */
    int (*data)(void *ctx, struct ina_switch *sw, const uint8_t *buf, size_t len,
                const struct sockaddr_in *src);
    /* The job became ACTIVE, its slots in the initial state (§6.3): serve it. */
    void (*job_start)(void *ctx, struct ina_switch *sw, const struct ina_job *job);
    /* The job leaves ACTIVE (ended, aborted): forget it, before its entry is reused. */
    void (*job_end)(void *ctx, struct ina_switch *sw, const struct ina_job *job);
    /* The round set `set` of absolute slot `abs_slot` holds now (the eviction bound). */
    uint32_t (*slot_seq)(void *ctx, uint32_t abs_slot, unsigned set);
    /* Evicted job (§5.8): pass up DATA at stream positions >= bound (0 = all). */
    void (*job_evict)(void *ctx, const struct ina_job *job, uint64_t bound);
    /* Fold the dataplane's counters into sw->c and the jobs' (deltas since the
     * last call), and each job's last DATA time into its idle timer. */
    void (*sync)(void *ctx, struct ina_switch *sw);
};

#endif
