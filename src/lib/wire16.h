/* wire16.h: one block of a float dtype to and from the 16-bit wire (ops 10 and 11, PROTOCOL.md §8.10), and its error bounds. */
#ifndef INA_WIRE16_H
#define INA_WIRE16_H

/*
 * A worker's side of common/h16.h: FLOAT16 travels as binary16 (op 10),
 * BFLOAT16 as bfloat16 (op 11), both as they are (exp 0); FLOAT32 on
 * either, when asked for (bfloat16: rounded, exp 0; binary16: scaled by its
 * block's exponent). A block is up to 2k elements, ina__h16_words(n) words.
 * The RESULT's elements with its exp s are the sums: rounded once to the
 * dtype (for FLOAT16 and BFLOAT16 SUM with s >= 0 they already are the
 * dtype's values), AVG divided by N in double first, as §8.4. No allocation:
 * the rounding paths go through a stack chunk of doubles.
 */

#include <stddef.h>
#include <stdint.h>

#include "common/h16.h"
#include "ina.h"

/* The element format dtype dt travels in: FLOAT16 binary16, BFLOAT16 bfloat16,
 * FLOAT32 f32_fmt (the worker's choice); -1 for a dtype the wire cannot carry. */
int ina__w16_fmt(ina_dtype dt, enum ina_h16_fmt f32_fmt);

/* The wire op of a dense operation in format f: 10 or 11. */
static inline uint8_t ina__w16_op(enum ina_h16_fmt f)
{
    return f == INA_H16_F16 ? INA_OP_ADD_F16 : INA_OP_ADD_BF16;
}

/* n elements of dt in format f (from ina__w16_fmt) -> ina__h16_words(n) big-endian
 * words at out; @return the header's exp. The same in two steps: the exp
 * (ina__w16_scale), then the elements at that exp (ina__w16_encode_at). */
int16_t ina__w16_encode(ina_dtype dt, enum ina_h16_fmt f, const void *x, size_t n, uint8_t *out);
int16_t ina__w16_scale(ina_dtype dt, enum ina_h16_fmt f, const void *x, size_t n);
void ina__w16_encode_at(ina_dtype dt, enum ina_h16_fmt f, const void *x, size_t n, int16_t e,
                        uint8_t *out);

/* A RESULT's n elements (format f, header exp s) -> n elements of dt at out;
 * AVG divides by nworkers. NaN comes back as the dtype's quiet NaN. */
void ina__w16_decode(ina_dtype dt, enum ina_h16_fmt f, ina_op op, const uint8_t *in, size_t n,
                     int16_t s, int nworkers, void *out);

/*
 * The bound on |result - exact| per element (§8.10.6, §12.7), for SUM
 * (exact = the exact sum of the ranks' values) or AVG (against exact / N):
 * world N, abs_sum the sum of the values' magnitudes, s the RESULT's exp
 * (at least that of every child's partial sum). With children > 0 the
 * two-level bound of a tree whose root adds `children` partial sums (each
 * rounded to 16 bits by its child) and any other ranks' values; partial_abs
 * is the sum of the children's exact partial sums' magnitudes. +Inf for
 * non-finite arguments, NaN for a dtype the wire cannot carry.
 */
double ina__w16_error_bound(ina_dtype dt, enum ina_h16_fmt f, ina_op op, int world,
                            double abs_sum, double exact_sum, int16_t s);
/* An upper bound on a RESULT's exp s for dtype dt in format f, world N, amax the
 * largest finite magnitude over all ranks in its packet (the bounds grow with s). */
int16_t ina__w16_scale_bound(ina_dtype dt, enum ina_h16_fmt f, int world, double amax);
double ina__w16_tree_error_bound(ina_dtype dt, enum ina_h16_fmt f, ina_op op, int world,
                                 int children, double abs_sum, double partial_abs,
                                 double exact_sum, int16_t s);

#endif
