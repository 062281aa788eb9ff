/* sparse_scan.c: the zero test of block-sparse all-reduce: the dispatch, and the block map. */
#include <string.h>

#include "lib/quant_simd.h"
#include "lib/sparse_scan.h"

int ina__block_nonzero(ina_dtype dt, const void *x, size_t n, double threshold)
{
    if (ina__quant_impl_active() == INA_QUANT_IMPL_AVX2)
        return ina__block_nonzero_avx2(dt, x, n, threshold);
    return ina__block_nonzero_scalar(dt, x, n, threshold);
}

/* Element size of the dtypes the zero test knows. */
static size_t esize(ina_dtype dt)
{
    return dt == INA_FLOAT64 ? 8 : (dt == INA_FLOAT16 || dt == INA_BFLOAT16) ? 2 : 4;
}

uint64_t ina__sparse_scan(ina_dtype dt, const void *x, size_t count, size_t block, size_t phase,
                          double threshold, uint64_t *map)
{
    const uint8_t *p = x;
    const size_t es = esize(dt);
    const int simd = ina__quant_impl_active() == INA_QUANT_IMPL_AVX2;
    uint64_t nblocks = (phase + count + block - 1) / block, nnz = 0;
    memset(map, 0, ((nblocks + 63) / 64) * sizeof(uint64_t));
    for (uint64_t b = 0; b < nblocks; b++) {
        size_t start = b ? (size_t)b * block - phase : 0, end = (size_t)(b + 1) * block - phase;
        size_t n = (end < count ? end : count) - start;
        const void *blk = p + start * es;
        int nz = simd ? ina__block_nonzero_avx2(dt, blk, n, threshold)
                      : ina__block_nonzero_scalar(dt, blk, n, threshold);
        if (nz) {
            map[b >> 6] |= 1ull << (b & 63);
            nnz++;
        }
    }
    return nnz;
}
