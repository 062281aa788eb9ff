/* half.h: float16 and bfloat16 <-> float/double conversions for the 16-bit dtypes (scalar, AVX2+F16C). */
#ifndef INA_HALF_H
#define INA_HALF_H

/*
 * Storage is uint16_t: IEEE 754 binary16 (FLOAT16: 1 sign, 5 exponent, 10
 * fraction bits) or bfloat16 (BFLOAT16: the top 16 bits of a float32: 1, 8,
 * 7). Every value of either format is exactly a float32, so widening is
 * exact; narrowing rounds to nearest, ties to even (RNE), with IEEE overflow:
 * a magnitude at or above the format's overflow threshold (65520 for
 * FLOAT16, 2^128 * (1 - 2^-9) for BFLOAT16) becomes +-Inf. Subnormals are
 * kept (no flush to zero) in both directions.
 *
 * NaN: FLOAT16 widening quiets a signalling NaN (sets the top fraction bit)
 * and keeps the payload; narrowing returns a quiet NaN carrying the top
 * fraction bits. That is what the F16C instructions do, so both paths agree
 * bit for bit. BFLOAT16 widening is a plain shift (bits << 16); its narrowing
 * quiets the same way.
 *
 * The double -> 16-bit functions round once, from the double: they narrow to
 * float with round-to-odd first (truncate, then set the last bit if anything
 * was cut off), which float's 13 or more spare bits make exact for a second
 * RNE step (Boldo & Melquiond, "When double rounding is odd", 2005). So the
 * result is RNE(x) for every double x, never a double-rounding error.
 *
 * Implementations: the plain functions dispatch, once per process, to AVX2 +
 * F16C kernels (half_avx2.c) when the CPU has both and the quantization code
 * uses SIMD (INA_NO_SIMD unset, quant_simd.h), else to the *_scalar
 * reference. Both give bit-identical results for every input; tests/unit/
 * test_half.c checks all 65536 patterns and the ties. Pointers may be
 * unaligned only as their types allow (uint16_t: 2 bytes).
 */

#include <stddef.h>
#include <stdint.h>

#include "common/half_bits.h"

void ina__f16_to_f32(const uint16_t *in, size_t n, float *out);
void ina__bf16_to_f32(const uint16_t *in, size_t n, float *out);
void ina__f32_to_f16(const float *in, size_t n, uint16_t *out);
void ina__f32_to_bf16(const float *in, size_t n, uint16_t *out);
void ina__f64_to_f16(const double *in, size_t n, uint16_t *out);
void ina__f64_to_bf16(const double *in, size_t n, uint16_t *out);

/* The largest |x| of n 16-bit values as a float32 bit pattern (a NaN if
 * any is NaN, though not necessarily the widened pattern of that one):
 * feeds quant.c's block exponent. */
uint32_t ina__f16_absmax_f32bits(const uint16_t *in, size_t n);
uint32_t ina__bf16_absmax_f32bits(const uint16_t *in, size_t n);

/* One value, scalar (the reference the vector kernels must match):
 * ina__f16_to_f32_bits, ina__f32_bits_to_f16, ina__f32_bits_to_bf16 and
 * ina__f64_to_f32_odd_bits, in common/half_bits.h (the switch uses them too). */

/* 1 if this build has the AVX2+F16C kernels and this CPU can run them. */
int ina__half_simd_supported(void);
/* 1 if the plain functions use them in this process. */
int ina__half_simd_active(void);

void ina__f16_to_f32_scalar(const uint16_t *in, size_t n, float *out);
void ina__bf16_to_f32_scalar(const uint16_t *in, size_t n, float *out);
void ina__f32_to_f16_scalar(const float *in, size_t n, uint16_t *out);
void ina__f32_to_bf16_scalar(const float *in, size_t n, uint16_t *out);
void ina__f64_to_f16_scalar(const double *in, size_t n, uint16_t *out);
void ina__f64_to_bf16_scalar(const double *in, size_t n, uint16_t *out);

/* The vector kernels; calling them when ina__half_simd_supported() is 0 is
 * undefined (SIGILL). On builds without them they are the scalar functions. */
void ina__f16_to_f32_simd(const uint16_t *in, size_t n, float *out);
void ina__bf16_to_f32_simd(const uint16_t *in, size_t n, float *out);
void ina__f32_to_f16_simd(const float *in, size_t n, uint16_t *out);
void ina__f32_to_bf16_simd(const float *in, size_t n, uint16_t *out);
void ina__f64_to_f16_simd(const double *in, size_t n, uint16_t *out);
void ina__f64_to_bf16_simd(const double *in, size_t n, uint16_t *out);

#endif
