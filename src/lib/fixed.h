/* fixed.h: float blocks to and from 32-bit fixed point with a scale agreed at setup (wire op 5). */
#ifndef INA_FIXED_H
#define INA_FIXED_H

/*
 * P4SGD's number format (docs/PROTOCOL.md §13): every rank multiplies its
 * values by 2^f, f = ina_config.fixed_point_bits (1..30; P4SGD uses 23,
 * "Q8.23"), rounds to the nearest integer (ties to even) and sends int32.
 * The switch adds them exactly (INA_OP_ADD_FIX); the sum times 2^-f is
 * the result. No exponent travels and nothing is agreed per operation, so
 * every packet takes one round, whatever the size of the operation.
 *
 * Range: an int32 is valid if |q| <= 2^31 - 1; INT32_MIN (INA_FIX_INVALID)
 * marks an element that is not: a NaN or Inf, a value whose |round(x 2^f)|
 * exceeds 2^31 - 1, or a sum the switch found out of range. It sticks
 * through the switch's adds and decodes to NaN, and the operation returns
 * INA_ERR_RANGE: never a wrapped, silently wrong value.
 *
 * Error per element: each rank's rounding is at most 2^-(f+1), the sum is
 * exact, then one rounding to the dtype: |result - exact| <=
 * N 2^-(f+1) + rel |exact| (+ the dtype's subnormal term), as
 * ina_fixed_error_bound() computes.
 */

#include <stddef.h>
#include <stdint.h>

#include "ina.h"

#define INA_FIXED_MAX_BITS 30

/* n elements of a float dtype -> n big-endian int32 at out (unaligned ok).
 * @return how many elements were invalid (NaN, Inf, out of range). */
size_t ina__fixed_encode(ina_dtype dt, const void *x, size_t n, int bits, uint8_t *out);

/* n big-endian sums at in -> n elements of dt at out; AVG divides by
 * nworkers (in double, before the one rounding to the dtype). Invalid
 * elements become NaN. @return how many were invalid. */
size_t ina__fixed_decode(ina_dtype dt, ina_op op, const uint8_t *in, size_t n, int bits,
                         int nworkers, void *out);

#endif
