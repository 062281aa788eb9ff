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
int16_t ina__quant_block_exp(const float *x, size_t n);

/* L = ceil(log2 nworkers), nworkers >= 1. */
int ina__quant_headroom_bits(int nworkers);

/* Encode n floats for agreed exponent e into big-endian int32 at out (may be unaligned). */
void ina__quant_encode(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out);

/* Decode n summed big-endian int32 at in (may be unaligned) into floats. */
void ina__quant_decode(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out);

/*
 * FLOAT64 blocks take the same path without the float: the exponent comes
 * from the doubles (frexp of the largest |x|), floored at
 * INA_QUANT_F64_EXP_MIN so that 2^(31-L-E) and 2^(E+L-31) stay normal
 * doubles for every N (a block whose largest |x| is below 2^-961 is
 * quantized on the grid of one at 2^-961; the absolute error, about
 * 1e-289 * N, is in the bound). E <= 1024. The values are scaled straight
 * from the double, so the 53-bit significand is cut only by the 31 - L bits
 * of the block's grid, and decoding to double is exact: no float rounding.
 */
#define INA_QUANT_F64_EXP_MIN (-960)

int16_t ina__quant_block_exp_f64(const double *x, size_t n);
void ina__quant_encode_f64(const double *x, size_t n, int16_t e, int nworkers, uint8_t *out);

/* Decode n summed big-endian int32 into doubles: Sum q * 2^(E+L-31), exact
 * for every valid E of every dtype (a 32-bit integer times a normal power of
 * two); the special exponents as in ina__quant_decode. The first step of the
 * FLOAT16/BFLOAT16/AVG paths, which then round once to their type. */
void ina__quant_decode_f64(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out);

/* The same divided by nworkers (AVG): (Sum q / N) * 2^(E+L-31), one rounding
 * (the division), and no overflow where only the sum would overflow. */
void ina__quant_decode_avg_f64(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out);

/* The same rounded once to float (FLOAT32 AVG), in one pass:
 * out[i] = (float)ina__quant_decode_avg_f64's out[i], bit for bit. */
void ina__quant_decode_avg(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out);

/* The block exponent of a block whose largest |x|, as a float32, has the bit
 * pattern absmax_bits (the 16-bit types compute it from their own bits). */
int16_t ina__quant_exp_of_f32bits(uint32_t absmax_bits);

/* int32 passthrough: host int32 <-> big-endian. */
void ina__i32_encode(const int32_t *x, size_t n, uint8_t *out);
void ina__i32_decode(const uint8_t *in, size_t n, int32_t *out);

#endif
