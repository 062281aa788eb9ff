/* quant.h: block floating point: float32 <-> big-endian int32 with an agreed block exponent. */
#ifndef INA_QUANT_H
#define INA_QUANT_H

/*
 * A block is the run of elements that share one packet. Each worker computes
 * its block exponent e (smallest e with max|x| < 2^e), the switch returns the
 * max E over workers, and every worker then scales by f = 2^(31 - L - E),
 * L = ceil(log2 N), so |x * f| < 2^(31-L) and the sum of N such values cannot
 * overflow int32. Values are clamped to +-(2^(31-L) - 1) after rounding to
 * nearest-even so the bound holds exactly. Scaling by a power of two is exact.
 *
 * Error: |decoded - exact| <= N * 2^(E + L - 31) + 2^-24 * |exact| (+ 2^-149 for
 * results in float's subnormal range).
 *
 * Special exponents (wire.h): INA_EXP_ZERO (all elements +-0, or n == 0) and
 * INA_EXP_NONFINITE (some element is NaN or +-Inf). In a NONFINITE block each
 * element is sent as class counts instead of a value:
 *   +Inf -> 1, -Inf -> 1 << 9, NaN -> 1 << 18, finite -> 0
 * (9 bits each; N <= 256 so no field overflows). Decoding: NaN if any NaN or
 * both +Inf and -Inf met, else +Inf or -Inf if one sign met, else NaN: a
 * finite element that shares a block with a non-finite value anywhere cannot
 * be carried and comes back as NaN (loud, never a wrong finite value).
 */

#include <stddef.h>
#include <stdint.h>

/* Exponent of n floats as defined above; INA_EXP_ZERO / INA_EXP_NONFINITE. */
int16_t ina_quant_block_exp(const float *x, size_t n);

/* L = ceil(log2 nworkers), nworkers >= 1. */
int ina_quant_headroom_bits(int nworkers);

/* Encode n floats for agreed exponent e into big-endian int32 at out (may be unaligned). */
void ina_quant_encode(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out);

/* Decode n summed big-endian int32 at in (may be unaligned) into floats. */
void ina_quant_decode(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out);

/* int32 passthrough: host int32 <-> big-endian. */
void ina_i32_encode(const int32_t *x, size_t n, uint8_t *out);
void ina_i32_decode(const uint8_t *in, size_t n, int32_t *out);

#endif
