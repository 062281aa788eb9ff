/* dtype.h: one block of any dtype to and from the wire's int32: element size, block exponent, encode, decode (with AVG). */
#ifndef INA_DTYPE_H
#define INA_DTYPE_H

/*
 * The wire carries k int32 per packet whatever the dtype (PROTOCOL.md §8):
 *
 *   INT32     unchanged
 *   FLOAT32   block floating point (quant.h)
 *   FLOAT16,  widened to float32 exactly, then as FLOAT32; the sum comes back
 *   BFLOAT16  as an exact double and is rounded once to the 16-bit type (RNE)
 *   FLOAT64   block floating point from the doubles (quant.h), decoded exactly
 *
 * AVG is the SUM on the wire; the worker divides after decoding: floats in
 * double before their one rounding to the dtype (so a FLOAT16 average whose
 * sum would overflow 65504 still comes back finite), INT32 by C's integer
 * division (truncation toward zero) of the wrapped sum, as NCCL's ncclAvg
 * does for integer types. MAX and MIN: INT32 unchanged; FLOAT32, FLOAT16 and
 * BFLOAT16 as order keys (below); FLOAT64 refused (ctx.c): its keys would
 * need 64-bit lanes.
 *
 * No allocation: the 16-bit and AVG paths convert through a small stack
 * buffer, a chunk at a time (every element is independent given E).
 */

#include <stddef.h>
#include <stdint.h>

#include "ina.h"

/* Bytes per element of a supported dtype, 0 for any other value. */
size_t ina__dtype_size(ina_dtype dt);

/* 1 for the float types (block floating point, exponents one round ahead). */
int ina__dtype_quantized(ina_dtype dt);

/* The wire op code (wire.h) that carries an API op: ADD for SUM and AVG. */
uint8_t ina__wire_op(ina_op op);

/* Block exponent of n elements (quant.h); 0 for INT32. */
int16_t ina__block_exp(ina_dtype dt, const void *x, size_t n);

/* n elements -> n big-endian int32 at out (may be unaligned), for agreed exponent e. */
void ina__block_encode(ina_dtype dt, const void *x, size_t n, int16_t e, int nworkers,
                       uint8_t *out);

/*
 * How many of n elements of a quantized float dtype (this rank's input) a
 * block whose final exponent is e loses (PROTOCOL.md §8.1): with e finite,
 * the nonzero values of at most half a unit of the block's scale,
 * |x| <= 2^(E+L-32) (E floored as the dtype's encode floors it), which
 * quantize to 0: flushed to zero beside a larger value; with e NONFINITE,
 * every finite value (it comes back NaN or +-Inf, §8.1's class codes); with
 * e ZERO, none. Reads x only; a pass over the block.
 */
size_t ina__block_lost(ina_dtype dt, const void *x, size_t n, int16_t e, int nworkers);

/* 1 for the dtypes that can go to the switch as binary32 (INA_OP_ADD_F32):
 * FLOAT32, FLOAT16 and BFLOAT16 (the 16-bit ones widen exactly). */
int ina__dtype_float_wire(ina_dtype dt);

/* Elements i..i+m-1 of a FLOAT16 or BFLOAT16 buffer x, widened exactly to float. */
void ina__widen_16(ina_dtype dt, const void *x, size_t i, size_t m, float *buf);

/* INA_OP_ADD_F32: n elements -> n big-endian binary32 at out (unaligned ok). */
void ina__block_encode_f32wire(ina_dtype dt, const void *x, size_t n, uint8_t *out);

/* INA_OP_ADD_F32: n big-endian binary32 sums at in -> n elements at out;
 * AVG divides by nworkers in double, then one rounding to the dtype. */
void ina__block_decode_f32wire(ina_dtype dt, ina_op op, const uint8_t *in, size_t n,
                               int nworkers, void *out);

/*
 * Float MAX and MIN (PROTOCOL.md §8.9) ride on the switch's int32 max and
 * min: a binary32 value's bits become an int32 key whose signed order is the
 * floats' order (-Inf < ... < -0 < +0 < ... < +Inf). The key of a sign-set
 * value flips its other 31 bits; the map is its own inverse. NaN, whatever
 * its sign and payload, is sent as the extreme the op keeps (+qNaN for MAX,
 * -qNaN for MIN), so a NaN on any rank comes back NaN, as in PyTorch.
 */
static inline uint32_t ina__f32_order_key(uint32_t bits)
{
    return bits ^ ((0u - (bits >> 31)) >> 1);
}

/* Float MAX/MIN: n elements -> n big-endian order keys at out (unaligned ok). */
void ina__block_encode_order(ina_dtype dt, ina_op op, const void *x, size_t n, uint8_t *out);

/* Float MAX/MIN: n big-endian order keys at in -> n elements at out (exact:
 * the result is one of the inputs; NaN comes back as the dtype's quiet NaN). */
void ina__block_decode_order(ina_dtype dt, const uint8_t *in, size_t n, void *out);

/* Elements i..i+m-1 of out (FLOAT32, FLOAT16 or BFLOAT16): buf rounded once
 * to the dtype (round to nearest even; the 16-bit types by round-to-odd
 * through float, half.h). */
void ina__round_to_dtype(ina_dtype dt, const double *buf, size_t m, void *out, size_t i);

/* The one rounding of a result to a float dtype: rel, half its precision
 * (relative), and sub, half its smallest subnormal (absolute); FLOAT64
 * (decoded exactly) 0 and 0. @return 1 for a float dtype, 0 for INT32 (no
 * rounding), -1 for an unknown value. */
int ina__dtype_rounding(ina_dtype dt, double *rel, double *sub);

/* n combined big-endian int32 at in -> n elements at out, applying op's
 * post-processing (AVG: the division by nworkers). */
void ina__block_decode(ina_dtype dt, ina_op op, const uint8_t *in, size_t n, int16_t e,
                       int nworkers, void *out);

#endif
