/* pair_add.bpf.h: two int32 adds in one 64-bit word, for BPF programs (no SIMD there): the
 * eBPF dataplane's integer add (ina_dp.bpf.c) and the benchmark that times it alone
 * (bench/ebpf_floor.bpf.c), so that the floor measures the dataplane's own add. */
#ifndef INA_PAIR_ADD_BPF_H
#define INA_PAIR_ADD_BPF_H

#include <linux/types.h>

#include <bpf/bpf_helpers.h>

#define PAIR_LO 0x7FFFFFFF7FFFFFFFull /* the 31 low bits of each 32-bit lane */
#define PAIR_HI 0x8000000080000000ull /* their top bits */

/* Two int32 adds at once, each modulo 2^32 as dataplane.c's: the low 31
 * bits of the lanes add without a carry across lanes; the top bits by xor. */
static __always_inline __u64 add_pairs(__u64 a, __u64 b)
{
    return ((a & PAIR_LO) + (b & PAIR_LO)) ^ ((a ^ b) & PAIR_HI);
}

#endif
