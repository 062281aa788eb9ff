/* ebpf_floor.bpf.c: the parts of the eBPF dataplane's per-packet work, alone, to time them (bench/ebpf_floor.c, run by bench/ebpf.sh). */

/*
 * Four TC programs, the first three each a prefix of what src/switch/ebpf/ina_dp.bpf.c
 * does with a 1 KiB DATA datagram, run by BPF_PROG_TEST_RUN on the same
 * frame many times (bench/ebpf_floor.c):
 *   floor_empty  returns at once: the cost of a run itself;
 *   floor_copy   + the map lookups and the payload copied out of the packet
 *                (bpf_skb_load_bytes), as the dataplane does before the lock;
 *   floor_add    + the slot set's spin lock and the integer adds, two
 *                elements at a time (the dataplane's combine(), op 0), with
 *                the running sum written back for the result;
 *   floor_add1   the same, one element at a time (the dataplane before
 *                2026-11-27: a byte swap, an add and a swap back per element).
 * The differences are what each step costs: floor_add - floor_empty is the
 * least a BPF program pays per packet to add it into a slot, whatever else
 * it does (checks, counters, sending the result).
 */

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_helpers.h>

#include "switch/ebpf/pair_add.bpf.h"

#define FLOOR_MAX_ELEMS 2048
#define FLOOR_PAYLOAD_OFF 74 /* Ethernet 14 + IPv4 20 + UDP 8 + the ina header 32 */

char LICENSE[] SEC("license") = "GPL";

struct floor_set {
    struct bpf_spin_lock lock;
    __u32 nrecv;
    __s32 v[FLOOR_MAX_ELEMS];
};

struct floor_scratch {
    __u32 buf[FLOOR_MAX_ELEMS];
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct floor_set);
} sets SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct floor_scratch);
} scratch SEC(".maps");

/* The element count (-DFLOOR_ELEMS=N; 256 = 1 KiB, the benchmark's packets). */
#ifndef FLOOR_ELEMS
#define FLOOR_ELEMS 256
#endif


SEC("tc")
int floor_empty(struct __sk_buff *skb)
{
    (void)skb;
    return TC_ACT_SHOT;
}

static __always_inline int copy_in(struct __sk_buff *skb, struct floor_set **set,
                                   struct floor_scratch **scr)
{
    __u32 zero = 0;
    *set = bpf_map_lookup_elem(&sets, &zero);
    *scr = bpf_map_lookup_elem(&scratch, &zero);
    if (!*set || !*scr)
        return -1;
    __u32 len = FLOOR_ELEMS * 4;
    if (len == 0 || len > sizeof((*scr)->buf))
        return -1;
    return bpf_skb_load_bytes(skb, FLOOR_PAYLOAD_OFF, (*scr)->buf, len) == 0 ? 0 : -1;
}

SEC("tc")
int floor_copy(struct __sk_buff *skb)
{
    struct floor_set *set;
    struct floor_scratch *scr;
    if (copy_in(skb, &set, &scr) != 0)
        return TC_ACT_OK;
    return TC_ACT_SHOT;
}

SEC("tc")
int floor_add(struct __sk_buff *skb)
{
    struct floor_set *set;
    struct floor_scratch *scr;
    if (copy_in(skb, &set, &scr) != 0)
        return TC_ACT_OK;
    __u32 np = (FLOOR_ELEMS + 1) / 2;
    __u64 *v2 = (__u64 *)set->v, *b2 = (__u64 *)scr->buf;
    bpf_spin_lock(&set->lock);
#pragma clang loop unroll(disable)
    for (__u32 i = 0; i < FLOOR_MAX_ELEMS / 2 && i < np; i++) {
        __u64 x = add_pairs(v2[i], __builtin_bswap64(b2[i]));
        v2[i] = x;
        b2[i] = __builtin_bswap64(x);
    }
    set->nrecv++;
    bpf_spin_unlock(&set->lock);
    return TC_ACT_SHOT;
}

SEC("tc")
int floor_add1(struct __sk_buff *skb)
{
    struct floor_set *set;
    struct floor_scratch *scr;
    if (copy_in(skb, &set, &scr) != 0)
        return TC_ACT_OK;
    __u32 *b = scr->buf;
    bpf_spin_lock(&set->lock);
#pragma clang loop unroll(disable)
    for (__u32 i = 0; i < FLOOR_MAX_ELEMS && i < FLOOR_ELEMS; i++) {
        __s32 x = (__s32)((__u32)set->v[i] + __builtin_bswap32(b[i]));
        set->v[i] = x;
        b[i] = __builtin_bswap32((__u32)x);
    }
    set->nrecv++;
    bpf_spin_unlock(&set->lock);
    return TC_ACT_SHOT;
}
