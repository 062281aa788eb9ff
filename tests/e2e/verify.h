/* verify.h: e2e test data and verification for every dtype x op: a pure generator every rank can evaluate for every rank, and checkers within each type's documented bound. */
#ifndef INA_E2E_VERIFY_H
#define INA_E2E_VERIFY_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtypes.h"
#include "e2e/harness.h"
#include "lib/wire16.h"

/* Magnitudes change every VFY_SPAN elements (a test's packet size or a divisor of it). */
#ifndef VFY_SPAN
#define VFY_SPAN 64
#endif

static const char *const vfy_dnames[] = {"int32", "float32", "float16", "bfloat16", "float64"};
static const char *const vfy_onames[] = {"sum", "max", "min", "avg"};
static const size_t vfy_esize[] = {4, 4, 2, 2, 8};

/*
 * Input element i of rank r in operation `op`, written at dst (a pure
 * function, so every rank can compute every rank's data): mixed signs,
 * magnitudes varying every VFY_SPAN elements over a few binades, every
 * pattern exact in its type. With special set (16-bit and FLOAT64 only),
 * rank 0's element 1 is +Inf and rank 1's element VFY_SPAN + 2 is NaN.
 */
static inline void vfy_gen(ina_dtype dt, int r, uint64_t op, size_t i, int special, void *dst)
{
    uint64_t h = h_mix(((uint64_t)r << 56) ^ (op << 40) ^ i ^ 0x7E57);
    int binade = (int)((i / VFY_SPAN) % 5) - 2 + (int)(h >> 60) % 3; /* -2..4 */
    uint16_t u16 = 0;
    int inf = special && r == 0 && i == 1, nan = special && r == 1 && i == VFY_SPAN + 2;
    switch (dt) {
    case INA_INT32: {
        int32_t v = (int32_t)(uint32_t)h;
        memcpy(dst, &v, 4);
        return;
    }
    case INA_FLOAT32: {
        float f = (float)ldexp((double)(h >> 40) - 0x800000, binade - 23);
        memcpy(dst, &f, 4);
        return;
    }
    case INA_FLOAT16: /* exponent field 13..19: 2^-2..2^4 */
        u16 = inf ? 0x7C00 : nan ? 0x7E00
                : (uint16_t)((h & 0x8000) | (uint64_t)(15 + binade) << 10 | (h >> 20 & 0x3FF));
        break;
    case INA_BFLOAT16:
        u16 = inf ? 0x7F80 : nan ? 0x7FC0
                : (uint16_t)((h & 0x8000) | (uint64_t)(127 + binade) << 7 | (h >> 20 & 0x7F));
        break;
    case INA_FLOAT64: {
        double d = inf ? INFINITY : nan ? NAN : ldexp((double)(h >> 11) - 0x1p52, binade - 52);
        memcpy(dst, &d, 8);
        return;
    }
    }
    memcpy(dst, &u16, 2);
}

/*
 * Block-sparse inputs (tests/e2e/test_inflight.c): granules of `granule`
 * elements, each kept with chance density (the same granules on every rank
 * if same, else each rank its own), the rest zero. density >= 1: every
 * element as vfy_gen writes it. NULL means that too.
 */
struct vfy_sparsity {
    double density;
    size_t granule;
    int same;
};

static inline int vfy_kept(const struct vfy_sparsity *sp, int r, uint64_t op, size_t i)
{
    if (!sp || sp->density >= 1)
        return 1;
    uint64_t h = h_mix(op * 0x100000001ull ^ (i / sp->granule) ^ 0x5A5A000000000000ull ^
                       (sp->same ? 0 : (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull));
    return (double)(h >> 11) * 0x1p-53 < sp->density;
}

/* vfy_gen, or a zero of dt where the sparsity drops the element. */
static inline void vfy_gen_sparse(ina_dtype dt, int r, uint64_t op, size_t i,
                                  const struct vfy_sparsity *sp, void *dst)
{
    static const size_t esize[] = {4, 4, 2, 2, 8};
    if (vfy_kept(sp, r, op, i))
        vfy_gen(dt, r, op, i, 0, dst);
    else
        memset(dst, 0, esize[dt]);
}

/* The same element as a double. */
static inline double vfy_value_sparse(ina_dtype dt, int r, uint64_t op, size_t i, int special,
                                      const struct vfy_sparsity *sp)
{
    if (!vfy_kept(sp, r, op, i))
        return 0;
    uint8_t one[8];
    vfy_gen(dt, r, op, i, special, one);
    return value_at(dt, one, 0);
}

static inline double vfy_value(ina_dtype dt, int r, uint64_t op, size_t i, int special)
{
    return vfy_value_sparse(dt, r, op, i, special, NULL);
}

/* int32 results of elements [first, last) of an operation. */
static inline int vfy_check_int_sparse(int n, ina_op opk, uint64_t op, size_t first, size_t last,
                                       const struct vfy_sparsity *sp, const int32_t *out)
{
    int bad = 0;
    for (size_t i = first; i < last; i++) {
        uint32_t sum = 0;
        int32_t mx = INT32_MIN, mn = INT32_MAX;
        for (int r = 0; r < n; r++) {
            int32_t v = (int32_t)vfy_value_sparse(INA_INT32, r, op, i, 0, sp);
            sum += (uint32_t)v;
            mx = v > mx ? v : mx;
            mn = v < mn ? v : mn;
        }
        int32_t want = opk == INA_SUM ? (int32_t)sum
                       : opk == INA_MAX ? mx
                       : opk == INA_MIN ? mn
                                        : (int32_t)sum / n; /* AVG: truncation toward zero */
        if (out[i] != want && bad++ < 5)
            fprintf(stderr, "int32 %s n=%d i=%zu: got %d want %d\n", vfy_onames[opk], n, i,
                    out[i], want);
    }
    return bad;
}

/* Largest |x| over the n ranks' elements [b0, b0 + len) of op, and whether one is not finite. */
static inline double vfy_amax(ina_dtype dt, int n, uint64_t op, size_t b0, size_t len, int special,
                              const struct vfy_sparsity *sp, int *nonfinite)
{
    double amax = 0;
    for (int r = 0; r < n; r++)
        for (size_t j = 0; j < len; j++) {
            double x = vfy_value_sparse(dt, r, op, b0 + j, special, sp);
            *nonfinite |= !isfinite(x);
            amax = fmax(amax, fabs(x));
        }
    return amax;
}

/* The quantization blocks a float sum may have used (vfy_check_sparse). */
enum { VFY_DENSE = 1, VFY_SPARSE = 2 };

/* How float sums travelled (the float_add argument below, bits): the switch
 * added binary32 (op 4); FLOAT16 and BFLOAT16 went on the 16-bit wire (ops 10,
 * 11, PROTOCOL.md §8.10); FLOAT32 too; FLOAT32 as binary16 rather than bfloat16. */
enum { VFY_FADD = 1, VFY_W16 = 2, VFY_W16_F32 = 4, VFY_W16_FP16 = 8 };
/* ... through a tree (PROTOCOL.md §12.7): each child rounds its partial sums to
 * 16 bits once more; the two-level bound with up to N children. */
enum { VFY_W16_TREE = 16 };

/* The flags of a context's float path, from its ina_info and its config. */
static inline int vfy_float_path(const ina_info *info, const ina_config *cfg)
{
    int f = info->float_add == INA_FLOAT_ADD_SWITCH ? VFY_FADD : 0;
    if (info->wire_bits == 16)
        f |= VFY_W16 | (cfg->wire_bits == 16 ? VFY_W16_F32 : 0) |
             (cfg->wire_half == INA_WIRE_HALF_FP16 ? VFY_W16_FP16 : 0);
    return f;
}

/* Whether a dense SUM or AVG of dt went on the 16-bit wire. */
static inline int vfy_on_w16(ina_dtype dt, ina_op opk, int float_add)
{
    if (opk != INA_SUM && opk != INA_AVG)
        return 0;
    if (dt == INA_FLOAT16 || dt == INA_BFLOAT16)
        return (float_add & VFY_W16) != 0;
    return dt == INA_FLOAT32 && (float_add & VFY_W16_F32);
}

/*
 * Float results of elements [first, last) of an operation of count elements
 * (first a multiple of k) against the documented bounds. Quantized sums use
 * the bound of their block's largest magnitude: packets of k elements (grids
 * VFY_DENSE), or blocks of sb elements of the operation (VFY_SPARSE); with
 * both, an element may be within either.
 */
static inline int vfy_check_float_sparse(ina_dtype dt, int n, ina_op opk, uint64_t op,
                                         size_t count, size_t first, size_t last, int special,
                                         size_t k, size_t sb, int grids, int float_add,
                                         const struct vfy_sparsity *sp, const void *out)
{
    int bad = 0;
    const int w16 = vfy_on_w16(dt, opk, float_add); /* dense (ops 10, 11) or sparse (12, 13) */
    double w16_amax = 0; /* bounds every packet's scale: the part's largest finite |x| */
    for (size_t i = first; w16 && i < last; i++)
        for (int r = 0; r < n; r++) {
            double x = fabs(vfy_value_sparse(dt, r, op, i, special, sp));
            w16_amax = isfinite(x) && x > w16_amax ? x : w16_amax;
        }
    for (size_t b0 = first; b0 < last; b0 += k) {
        size_t len = last - b0 < k ? last - b0 : k;
        int nonfinite = 0;
        double amax = vfy_amax(dt, n, op, b0, len, special, sp, &nonfinite);
        double samax = 0; /* the sparse block's, for the element at hand */
        size_t sblock = (size_t)-1;
        for (size_t j = 0; j < len; j++) {
            size_t i = b0 + j;
            double hi = 0, lo = 0, got = value_at(dt, out, i);
            int has_inf = 0, has_nan = 0;
            for (int r = 0; r < n; r++) {
                double x = vfy_value_sparse(dt, r, op, i, special, sp);
                has_inf |= isinf(x);
                has_nan |= isnan(x);
                two_sum(&hi, &lo, x);
            }
            int ok;
            if (opk == INA_MAX || opk == INA_MIN) {
                /* exact (PROTOCOL.md §8.9): one of the inputs, NaN if any rank has one */
                double want = vfy_value_sparse(dt, 0, op, i, special, sp);
                for (int r = 1; r < n; r++) {
                    double x = vfy_value_sparse(dt, r, op, i, special, sp);
                    want = opk == INA_MAX ? fmax(want, x) : fmin(want, x);
                }
                ok = has_nan ? isnan(got) : got == want;
            } else if (w16) {
                /* The 16-bit wire: IEEE per element, the bound of ina.h (§8.10.6). */
                double abs_sum = 0;
                for (int r = 0; r < n; r++)
                    abs_sum += fabs(vfy_value_sparse(dt, r, op, i, special, sp));
                const int half = (float_add & VFY_W16_FP16) ? INA_WIRE_HALF_FP16
                                                            : INA_WIRE_HALF_BF16;
                double b = ina_wire16_error_bound(dt, half, opk, n, abs_sum, hi + lo, w16_amax);
                if (float_add & VFY_W16_TREE) { /* children's partial sums: P <= abs_sum */
                    enum ina_h16_fmt f = (enum ina_h16_fmt)ina__w16_fmt(
                        dt, half == INA_WIRE_HALF_FP16 ? INA_H16_F16 : INA_H16_BF16);
                    b = ina__w16_tree_error_bound(dt, f, opk, n, n, abs_sum, abs_sum, hi + lo,
                                                  ina__w16_scale_bound(dt, f, n, w16_amax));
                }
                double want = opk == INA_AVG ? fabs((hi + lo) / n) : fabs(hi + lo);
                double err = opk == INA_AVG ? fabs((got - hi / n) - lo / n) : fabs((got - hi) - lo);
                if (has_nan)
                    ok = isnan(got);
                else if (has_inf)
                    ok = got == INFINITY;
                else /* a FLOAT16 result within the bound of 65520 may overflow */
                    ok = err <= b || (isinf(got) && dt == INA_FLOAT16 && want + b >= 65504);
            } else if ((float_add & VFY_FADD) && dt != INA_FLOAT64) {
                /* Floats added as floats: IEEE per element (the data has
                 * only +Inf, so an Inf sum is +Inf); the bound of ina.h. */
                double abs_sum = 0;
                for (int r = 0; r < n; r++)
                    abs_sum += fabs(vfy_value_sparse(dt, r, op, i, special, sp));
                double b = ina_float_add_error_bound(dt, n, abs_sum, hi + lo);
                if (has_nan)
                    ok = isnan(got);
                else if (has_inf)
                    ok = got == INFINITY;
                else if (opk == INA_AVG)
                    ok = fabs((got - hi / n) - lo / n) <=
                         b / n + 0x1p-52 * fabs((hi + lo) / n) + avg_error_bound(dt, 1, 0, 0);
                else
                    ok = fabs((got - hi) - lo) <= b;
            } else if (nonfinite) { /* PROTOCOL.md §8: IEEE for the non-finite, NaN for the rest */
                ok = has_inf && !has_nan ? got == INFINITY : isnan(got);
            } else {
                double err = opk == INA_AVG ? fabs((got - hi / n) - lo / n) : fabs((got - hi) - lo);
#define VFY_BOUND(a) (opk == INA_AVG ? avg_error_bound(dt, n, (a), hi + lo) \
                                     : ina_error_bound(dt, n, (a), hi + lo))
                ok = (grids & VFY_DENSE) && err <= VFY_BOUND(amax);
                if (!ok && (grids & VFY_SPARSE)) {
                    if (i / sb != sblock) {
                        int nf = 0;
                        sblock = i / sb;
                        size_t s0 = sblock * sb;
                        samax = vfy_amax(dt, n, op, s0, count - s0 < sb ? count - s0 : sb, special,
                                         sp, &nf);
                    }
                    ok = err <= VFY_BOUND(samax);
                }
#undef VFY_BOUND
            }
            if (!ok && bad++ < 5)
                fprintf(stderr, "%s %s n=%d count=%zu i=%zu: got %.17g, exact sum %.17g, amax %g"
                        " (packet), %g (sparse block of %zu)\n", vfy_dnames[dt], vfy_onames[opk],
                        n, count, i, got, hi + lo, amax, samax, sb);
        }
    }
    return bad;
}

static inline int vfy_check_float(ina_dtype dt, int n, ina_op opk, uint64_t op, size_t count,
                                  int special, size_t k, int float_add, const void *out)
{
    return vfy_check_float_sparse(dt, n, opk, op, count, 0, count, special, k, 0, VFY_DENSE,
                                  float_add, NULL, out);
}

/*
 * Check out, the result of op `op` (opk over n ranks' vfy_gen data, count
 * elements of dt), with packets of k elements (the float bound is per block)
 * and floats added by the switch (float_add) or quantized.
 * @return the elements that are wrong (the first few are printed).
 */
static inline int vfy_check(ina_dtype dt, int n, ina_op opk, uint64_t op, size_t count, int special,
                            size_t k, int float_add, const void *out)
{
    return dt == INA_INT32 ? vfy_check_int_sparse(n, opk, op, 0, count, NULL, out)
                           : vfy_check_float(dt, n, opk, op, count, special, k, float_add, out);
}

/* The same for elements [first, last) of vfy_gen_sparse's data (sp), whose float sums used
 * packets of k elements or blocks of sb elements of the operation, as grids says. */
static inline int vfy_check_sparse(ina_dtype dt, int n, ina_op opk, uint64_t op, size_t count,
                                   size_t first, size_t last, size_t k, size_t sb, int grids,
                                   int float_add, const struct vfy_sparsity *sp, const void *out)
{
    return dt == INA_INT32 ? vfy_check_int_sparse(n, opk, op, first, last, sp, out)
                           : vfy_check_float_sparse(dt, n, opk, op, count, first, last, 0, k, sb,
                                                    grids, float_add, sp, out);
}

#endif
