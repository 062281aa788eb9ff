/* ina_bpf.h: the maps the eBPF dataplane shares with its loader: one layout for the BPF program and for C. */
#ifndef INA_BPF_H
#define INA_BPF_H

/*
 * Included by the BPF program (clang -target bpf) and by the loader
 * (ebpf_dp.c), so only <linux/types.h> types. Multi-byte fields are host
 * order unless they say "network order" (copied to or from packet headers
 * as they are). docs/EBPF.md describes the maps.
 */

#include <linux/types.h>

#include "engine/drop_causes.h"

/* The program's compiled limits. Values of one slot set are a fixed array,
 * so the verifier can bound every loop over them: a job's k is capped here
 * (a JOIN proposing more is granted this many, like any switch limit). */
#define INA_BPF_MAX_ELEMS 2048
#define INA_BPF_MAX_JOBS 64 /* = INA_SW_MAX_JOBS: one dataplane thread */
#define INA_BPF_MAX_RANKS 256 /* = INA_MAX_WORKERS */
#define INA_BPF_NO_BOUND 0xFFFFFFFFFFFFFFFFull /* evict map: not evicted */

/* config[0]: written once by the loader before the program is attached. */
struct ina_bpf_config {
    __u32 ifindex;  /* the interface results leave by (the one the program sits on) */
    __u32 addr;     /* the switch's IPv4 address, network order; 0 = any on this interface */
    __u16 port;     /* the switch's UDP port, network order; 0 = not configured */
    __u8 mac[6];    /* the interface's address: source of results */
    __u32 nslots;   /* entries of sets/values: nslots * 2 */
    __u32 max_op;   /* highest wire op served (INA_OP_ADD_BFP) */
};

/* A rank's registered address, and the Ethernet address its DATA came from. */
struct ina_bpf_member {
    __u32 addr;   /* network order */
    __u16 port;   /* network order */
    __u8 mac[6];  /* learned from its frames (next hop for its results); 0 = not yet */
};

/* jobs[id - 1]: the job table, written by the control plane at start and end. */
enum { INA_BPF_JOB_FREE = 0, INA_BPF_JOB_ACTIVE = 1, INA_BPF_JOB_ABORTING = 2 };
struct ina_bpf_job {
    __u32 state;      /* INA_BPF_JOB_*: ABORTING = the program saw a MISMATCH, the
                         control plane is told (events) and will free it */
    __u32 session, token;
    __u16 id, world;
    __u32 elems;      /* k */
    __u32 window;     /* W */
    __u32 slot_base;  /* first absolute slot */
    /* --multicast: the job's group (addr, port) and its Ethernet address
     * (01:00:5e + the group's low 23 bits), to which a finished sum goes
     * once; addr 0 = to every rank by unicast (the default). */
    struct ina_bpf_member group;
    struct ina_bpf_member members[INA_BPF_MAX_RANKS];
};

/* sets[abs_slot * 2 + set]: one slot set's state (PROTOCOL.md §6.2); its
 * values are values[same index]. The lock guards both, and the job's
 * eviction bound is read under it (ebpf_dp.c: evict). */
struct ina_bpf_set {
    struct bpf_spin_lock lock;
    __u32 seq;
    __u16 count, nrecv;
    __s16 exp;
    __u8 complete, tag, op, pad[3];
    __u64 bitmap[INA_BPF_MAX_RANKS / 64];
};

struct ina_bpf_values {
    /* Host order, pairs swapped: element j is v[j ^ 1], so that a 64-bit
     * word is the byte swap of the pair's 8 wire bytes (ina_dp.bpf.c adds
     * two at a time). Only the program reads them. */
    __s32 v[INA_BPF_MAX_ELEMS];
};

/* stats[0], one per CPU: the switch's counters for what the program handled. */
struct ina_bpf_stats {
    __u64 rx_packets, rx_bytes, tx_packets, tx_bytes, tx_errors;
    __u64 contributions, completions, results_resent;
    __u64 passed_up; /* DATA left to the socket: GSO trains, fragments, an evicted job's */
    __u64 drops[INA_DROP__COUNT];
};

/* job_stats[id - 1], one per CPU: a job's counters (struct ina_job_counters,
 * its members' rx) and when DATA last passed its checks; zeroed at job start. */
struct ina_bpf_job_stats {
    __u64 rx_packets, rx_bytes, contributions, completions, retransmits;
    __u64 last_rx_ns; /* bpf_ktime_get_coarse_ns(): CLOCK_MONOTONIC, tick resolution */
    __u64 drops[INA_DROP__COUNT];
    __u64 member_rx[INA_BPF_MAX_RANKS][2]; /* packets, bytes */
};

/* events ring: what the control plane must act on. */
enum { INA_BPF_EV_MISMATCH = 1 };
struct ina_bpf_event {
    __u32 kind;    /* INA_BPF_EV_* */
    __u32 job;     /* job id */
    __u32 session; /* of the job when it happened */
    __u32 pad;
};

#endif
