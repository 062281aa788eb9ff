/* half_bits.h: one float16 or bfloat16 value to and from binary32 bits (the scalar reference of libina's half.c and of the 16-bit wire, h16_scalar.c). */
#ifndef INA_HALF_BITS_H
#define INA_HALF_BITS_H

/*
 * FLOAT16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 fraction bits),
 * BFLOAT16 the top 16 bits of a binary32 (1, 8, 7). Widening is exact;
 * narrowing rounds to nearest, ties to even, with IEEE overflow (a magnitude
 * at or above 65520 for FLOAT16, 2^128 * (1 - 2^-9) for BFLOAT16, becomes
 * +-Inf) and gradual underflow. NaN: widening a FLOAT16 NaN quiets it and
 * keeps its payload, narrowing returns a quiet NaN with the top payload
 * bits: what the F16C instructions do, so vector code can match these bit
 * for bit. Here, below libina and the switch, so that both use one reference
 * (lib/half.h has the array functions and their AVX2 kernels).
 */

#include <stdint.h>
#include <string.h>

/* A binary32's bit pattern, and the binary32 of a pattern. */
static inline uint32_t ina__f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static inline float ina__f32_of_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

uint32_t ina__f16_to_f32_bits(uint16_t h);
uint16_t ina__f32_bits_to_f16(uint32_t f);
uint16_t ina__f32_bits_to_bf16(uint32_t f);
/* double -> binary32 bits rounded to odd (truncate, then set the last bit if
 * anything was cut off): float has at least 13 more bits than either 16-bit
 * type, so a second, RNE, step to 16 bits gives the correctly rounded result
 * (Boldo & Melquiond, "When double rounding is odd", 2005). */
uint32_t ina__f64_to_f32_odd_bits(double d);

#endif
