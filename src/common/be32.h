/* be32.h: big-endian int32 array kernels for the switch's slot arithmetic (AVX2 or scalar, chosen once). */
#ifndef INA_BE32_H
#define INA_BE32_H


/*
 * The wire carries int32 big-endian; slots hold them in host order. Per
 * packet the switch does one of: load (first contribution), add (later
 * ones, wrapping) or max / min (later ones, by the round's op), store
 * (result out). At GSO packet rates these loops are
 * the switch's largest cost after the kernel copies, so they are vectorised
 * (one byte shuffle + one add per 8 values). Pointers may be unaligned.
 * INA_NO_SIMD=1 in the environment forces the scalar versions.
 */

#include <stddef.h>
#include <stdint.h>

/* v[i] = be32(p[i]) */
void ina__be32_load(int32_t *v, const uint8_t *p, size_t n);
/* v[i] += be32(p[i]), modulo 2^32 */
void ina__be32_add(int32_t *v, const uint8_t *p, size_t n);
/* v[i] = max(v[i], be32(p[i])) if want_max, else min; signed */
void ina__be32_minmax(int32_t *v, const uint8_t *p, size_t n, int want_max);
/* v[i] = v[i] + be32(p[i]) as IEEE-754 binary32 (v holds float bit patterns;
 * round to nearest even, as the CPU's default mode) */
void ina__be32_fadd(int32_t *v, const uint8_t *p, size_t n);
/* Fixed-point add with a sticky invalid code (wire op 5, PROTOCOL.md §13):
 * v[i] = INT32_MIN if v[i] or be32(p[i]) is INT32_MIN or their exact sum is
 * outside [-(2^31-1), 2^31-1], else their sum. Scalar: its packets are small,
 * and the compare keeps it the same on every dataplane. */
void ina__be32_fixadd(int32_t *v, const uint8_t *p, size_t n);
/* p[i] = be32(v[i]) */
void ina__be32_store(uint8_t *p, const int32_t *v, size_t n);

#endif
