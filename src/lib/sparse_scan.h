/* sparse_scan.h: which blocks of a tensor are not zero: the vectorised zero test of block-sparse all-reduce. */
#ifndef INA_SPARSE_SCAN_H
#define INA_SPARSE_SCAN_H

/*
 * A block is zero when every element x has |x| <= threshold. Threshold 0
 * (the default) is exact: every element is +0 or -0 (INT32: 0). NaN is never
 * zero (|NaN| <= t is false); +-Inf only if... never, for a finite t. INT32
 * ignores the threshold: its sums are exact, so any non-zero value counts.
 *
 * Implementations, chosen like quant.c's (quant_simd.h): AVX2 when the CPU
 * has it and INA_NO_SIMD is not set, else scalar. Both return the same
 * answer for every input (tests/unit/test_sparse.c). Each block's test stops
 * at its first non-zero vector, so dense data costs little to scan; zero
 * blocks are read to the end.
 */

#include <stddef.h>
#include <stdint.h>

#include "ina.h"

/* 1 if the n elements of dt at x hold one with |x| > threshold (or NaN). */
int ina__block_nonzero(ina_dtype dt, const void *x, size_t n, double threshold);
int ina__block_nonzero_scalar(ina_dtype dt, const void *x, size_t n, double threshold);
int ina__block_nonzero_avx2(ina_dtype dt, const void *x, size_t n, double threshold);

/*
 * Bit b of map (nblocks = ceil((phase + count) / block) bits, map has room
 * for them rounded up to 64) = block b is not zero. Blocks lie on the grid
 * of the whole operation, of which x is a part starting phase elements
 * (0 <= phase < block) after a block boundary: block 0 holds the first
 * block - phase elements, block b > 0 elements b * block - phase on; the
 * last block may be shorter too. @return the number of non-zero blocks.
 */
uint64_t ina__sparse_scan(ina_dtype dt, const void *x, size_t count, size_t block, size_t phase,
                          double threshold, uint64_t *map);

/* The first set bit of map in [from, to), or to if none. */
static inline uint64_t ina__map_next(const uint64_t *map, uint64_t from, uint64_t to)
{
    while (from < to) {
        uint64_t w = map[from >> 6] >> (from & 63);
        if (w) {
            uint64_t b = from + (uint64_t)__builtin_ctzll(w);
            return b < to ? b : to;
        }
        from = (from | 63) + 1;
    }
    return to;
}

static inline int ina__map_test(const uint64_t *map, uint64_t b) { return (map[b >> 6] >> (b & 63)) & 1; }

#endif
