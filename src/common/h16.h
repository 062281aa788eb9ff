/* h16.h: the 16-bit wire (ops 10..13): binary16 or bfloat16 elements, summed by the switch in binary32 slots. */
#ifndef INA_H16_H
#define INA_H16_H

/*
 * Design (issue 32; docs/PROTOCOL.md §8.10 is the specification).
 *
 * Format. A DATA or RESULT of wire op 10 (INA_OP_ADD_F16) carries IEEE
 * binary16 elements, of op 11 (INA_OP_ADD_BF16) bfloat16 elements, two per
 * 32-bit word, big-endian, in order; an odd count ends with one zero
 * element. The header's count is words, so §3's length rule and k (words
 * per packet) are unchanged and a packet carries 2k elements. Element w of a
 * packet with header exp e stands for val(w) * 2^e. The switch widens each
 * element exactly, scales it by 2^e (e clamped to -126..126) and adds it in
 * binary32 (round to nearest even, IEEE NaN, Inf and gradual underflow), one
 * 32-bit lane per element, so a set needs 2k lanes. When the round
 * completes it picks the RESULT's exponent s (op 11: the largest e of the
 * round; op 10: at least that, and the smallest that keeps every finite sum
 * below 65520 * 2^s) and sends each lane as RNE(sum * 2^-s) in the element
 * format, NaN as the canonical quiet NaN. One round per block at any size
 * (no exponent round, no lag). FLOAT16 and BFLOAT16 send their own bits
 * (e = 0); FLOAT32, opt-in, is rounded to bfloat16 (e = 0) or scaled per
 * block into binary16 (e = its block exponent - 15). Ops 12 and 13 are the
 * block-sparse payload of §17 with 16-bit blocks.
 *
 * Why. (1) Precision: each element keeps the 16-bit type's own relative
 * precision and its own NaN/Inf (no block exponent that costs small
 * elements their bits, no class codes), and for FLOAT16 and BFLOAT16 the
 * result is the binary32 sum of the inputs rounded once to the type. Their SUM's
 * bound is op 4's: (N-1) 2^-24 X (1+rho) + rho |exact| + 2^s sigma, X the sum
 * of the inputs' magnitudes: the accumulation term is (N-1) 2^-13 times
 * FLOAT16's half ulp (3% at N = 256), (N-1) 2^-16 times BFLOAT16's (0.4%). 16-bit
 * integer mantissas under a block exponent do worse at every N: with
 * ceil(log2 N) bits of headroom a rank keeps 15 - L bits of the block's
 * largest value (at N = 256, 7 bits: an absolute error of N 2^(E-8) = 2^E,
 * the block's largest value itself); without headroom (exact 32-bit sums,
 * renormalised RESULT) the inputs' error is N 2^(E-16), FLOAT16's half ulp of
 * the block's largest value at N = 16 and more beyond, and any element 2^-8
 * below its block's largest keeps 7 bits or fewer; NaN and Inf would need a
 * marker per packet, since three 9-bit class counters do not fit in 16 bits.
 * (2) Fewer rounds: no agreed exponent, so no exponent round and no lag.
 * (3) Closure: a child switch sends its partial sums up in the same format
 * (its s as exp), so trees need nothing new; each level adds one 16-bit
 * rounding of its partial sums (§12.7). (4) Worker cost: FLOAT16 and
 * BFLOAT16 encode and decode are byte swaps. The price: the switch needs
 * binary32 arithmetic (a software switch; not the eBPF dataplane, a P4
 * pipeline or --int-ops-only, which keep the 32-bit path: §16), and, as for
 * op 4, a sum can differ in its last bits between runs (arrival order). MAX
 * and MIN stay on the 32-bit order keys of §8.9.
 *
 * Switch cost (bench/h16_rate, one core, 2048-element blocks, AVX2 + F16C;
 * a 2-core shared VM): load 0.10 ns per element, add 0.11, the RESULT 0.75
 * (binary16: a scan for s, then the conversion) or 0.30 (bfloat16), against
 * 0.09 for ina__be32_add and 0.10 for ina__be32_store; per element of a round
 * of N contributions about 0.75 + 0.11 N ns against 0.1 + 0.09 N. The scalar
 * reference is 10 to 30 times slower.
 *
 * Where it is used: JOIN_ACK flag INA_FLAG_CAP_H16 (engine/job.c, the
 * fallback, children after their parent; never with --int-ops-only or the
 * eBPF dataplane); slot sets of 2 * max_elems lanes (engine.h:
 * ina__switch_set_words); engine/dataplane.c's New round and combine.c's Combine call
 * ina__h16_load and ina__h16_add, completion ina__h16_result_exp (kept as the
 * set's exp) and build_round ina__h16_store; a child forwards the parent's
 * RESULT payload as received (the set's raw flag); src/engine/sparse.c ops
 * 12, 13. libina: lib/codec_h16.c (through lib/wire16.h), chosen in plan.c
 * with 2k elements per block and lag 0; INA_WIRE_BITS=16|32 and
 * INA_WIRE_HALF=bf16|fp16 (ina_config.wire_bits, wire_half) for FLOAT32 and
 * for the opt-out; lib/sparse.c ops 12, 13.
 */

#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

enum ina_h16_fmt {
    INA_H16_F16 = 0,  /* IEEE binary16: ops 10 and 12 */
    INA_H16_BF16 = 1, /* bfloat16: ops 11 and 13 */
};

/* The NaN the switch sends (and a worker's decode returns) for every NaN sum. */
#define INA_H16_F16_QNAN 0x7E00u
#define INA_H16_BF16_QNAN 0x7FC0u

/* The range the switch clamps a 16-bit packet's exp to: 2^e and 2^-e are
 * normal binary32 numbers. */
#define INA_H16_EXP_MIN (-126)
#define INA_H16_EXP_MAX 126

/* The 32-bit words of a payload of n elements (the header's count). */
static inline size_t ina__h16_words(size_t n) { return (n + 1) / 2; }

/* Wire ops 10..13 carry 16-bit elements; even ones binary16, odd ones bfloat16. */
static inline int ina__op_is_h16(uint8_t op) { return op >= INA_OP_ADD_F16 && op <= INA_OP_SPARSE_BF16; }
static inline enum ina_h16_fmt ina__h16_fmt_of_op(uint8_t op)
{
    return (op & 1) ? INA_H16_BF16 : INA_H16_F16;
}

static inline int ina__h16_clamp_exp(int e)
{
    return e < INA_H16_EXP_MIN ? INA_H16_EXP_MIN : e > INA_H16_EXP_MAX ? INA_H16_EXP_MAX : e;
}

/* ---- Switch: one round's lanes, 2 per word, binary32 bit patterns in int32 ----------- */

/* First contribution: v[i] = fl32(val(w_i) * 2^e'), i < 2*words, e' the clamped exp. */
void ina__h16_load(int32_t *v, const uint8_t *p, size_t words, int16_t exp, enum ina_h16_fmt f);
/* A later one: v[i] = fl32(v[i] + fl32(val(w_i) * 2^e')). */
void ina__h16_add(int32_t *v, const uint8_t *p, size_t words, int16_t exp, enum ina_h16_fmt f);
/* The finished round's exponent s, from sexp (the largest exp of its
 * contributions; clamped): bfloat16 sexp; binary16 the larger of sexp and
 * the smallest s for which every finite lane has |v| * 2^-s < 65520. */
int16_t ina__h16_result_exp(const int32_t *v, size_t words, int16_t sexp, enum ina_h16_fmt f);
/* The RESULT payload: w_i = RNE(fl32(v[i] * 2^-s')) in the format, big-endian,
 * s' = s clamped; a NaN as 0x7E00 (binary16) or 0x7FC0 (bfloat16). */
void ina__h16_store(uint8_t *p, const int32_t *v, size_t words, int16_t s, enum ina_h16_fmt f);

/* ---- Worker: blocks of n elements (the payload is ina__h16_words(n) words) ---------------- */

/* FLOAT16 or BFLOAT16 as they are (exp 0): big-endian, a zero element after an odd n. */
void ina__h16_put(const uint16_t *x, size_t n, uint8_t *out);
/* Their sums back, when the RESULT's exp is 0: host order, a NaN as the
 * format's canonical quiet NaN (0x7E00, 0x7FC0). */
void ina__h16_get(const uint8_t *in, size_t n, enum ina_h16_fmt f, uint16_t *out);
/* FLOAT32 to binary16: the block's exp, clamp(E - 15) with 2^(E-1) <= the
 * largest finite |x| < 2^E, or 0 when no finite element is nonzero. */
int16_t ina__h16_f32_scale(const float *x, size_t n);
/* FLOAT32 to the format with exp e (clamped): w_i = RNE(fl32(x_i * 2^-e)), big-endian, padded. */
void ina__h16_encode_f32(const float *x, size_t n, int16_t e, enum ina_h16_fmt f, uint8_t *out);
/* RESULT elements with exp s to FLOAT32: RNE32(val(w) * 2^s), one rounding; NaN 0x7FC00000. */
void ina__h16_to_f32(const uint8_t *in, size_t n, int16_t s, enum ina_h16_fmt f, float *out);
/* ... to doubles: (val(w) / div) * 2^s, div >= 1 (1: exact; N: AVG, one rounding, as
 * §8.4), NaN the positive quiet NaN; for a final rounding to a 16-bit type. */
void ina__h16_to_f64(const uint8_t *in, size_t n, int16_t s, int div, enum ina_h16_fmt f,
                    double *out);

/* ---- Implementations ---------------------------------------------------------------- */

/*
 * Every function above dispatches, once per process, to AVX2 + F16C kernels
 * (h16_avx2.c) when the CPU has both and INA_NO_SIMD is unset, empty or "0",
 * else to the scalar reference (h16_scalar.c). Both give the same bits for every
 * input, NaN payloads in the lanes included (tests/unit/test_h16.c). The
 * tables below name them, for tests and benchmarks.
 */
struct ina_h16_kernels {
    void (*load)(int32_t *v, const uint8_t *p, size_t words, int16_t exp, enum ina_h16_fmt f);
    void (*add)(int32_t *v, const uint8_t *p, size_t words, int16_t exp, enum ina_h16_fmt f);
    int16_t (*result_exp)(const int32_t *v, size_t words, int16_t sexp, enum ina_h16_fmt f);
    void (*store)(uint8_t *p, const int32_t *v, size_t words, int16_t s, enum ina_h16_fmt f);
    void (*put)(const uint16_t *x, size_t n, uint8_t *out);
    void (*get)(const uint8_t *in, size_t n, enum ina_h16_fmt f, uint16_t *out);
    int16_t (*f32_scale)(const float *x, size_t n);
    void (*encode_f32)(const float *x, size_t n, int16_t e, enum ina_h16_fmt f, uint8_t *out);
    void (*to_f32)(const uint8_t *in, size_t n, int16_t s, enum ina_h16_fmt f, float *out);
    void (*to_f64)(const uint8_t *in, size_t n, int16_t s, int div, enum ina_h16_fmt f,
                   double *out);
};

extern const struct ina_h16_kernels ina__h16_scalar;
/* The AVX2 + F16C kernels; NULL where this build or this CPU has none. */
const struct ina_h16_kernels *ina__h16_simd(void);
/* The kernels the functions above use in this process. */
const struct ina_h16_kernels *ina__h16_active(void);

#endif
