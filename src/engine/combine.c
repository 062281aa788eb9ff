/* combine.c: the arithmetic of one round: a later contribution added into the values held, by the round's op. */
#include "common/be32.h"
#include "common/h16.h"
#include "engine/internal.h"

/* x / 2^d rounded to nearest (ties up), for |x| < 2^31 and d >= 1. */
static inline int32_t shift_round(int64_t x, int d)
{
    if (d > 32)
        return 0; /* |x| / 2^d < 1/2 */
    return (int32_t)((x + ((int64_t)1 << (d - 1))) >> d); /* arithmetic shift: floor */
}

/*
 * INA_OP_ADD_BFP: add a contribution quantized with its own block exponent e
 * to values held at exponent ss->exp, keeping the larger exponent: the side
 * with the smaller one is shifted right (rounded) by the difference. Each
 * arrival adds at most one rounding of half a unit of the final scale to the
 * contributions' own half-unit quantization errors, so the sum stays within
 * N units of the final scale, the bound of the two-round mode (PROTOCOL.md
 * §8.7). Special exponents: an all-zero block adds nothing; non-finite
 * blocks carry class codes (quant.h), to which finite blocks add nothing.
 */
static void combine_bfp(struct ina_slot_set *ss, int32_t *v, const uint8_t *payload, size_t n,
                        int16_t e)
{
    if (e == INA_EXP_NONFINITE || ss->exp == INA_EXP_NONFINITE) {
        if (ss->exp != INA_EXP_NONFINITE) {
            ina__be32_load(v, payload, n); /* the finite sum so far has no class codes */
            ss->exp = INA_EXP_NONFINITE;
        } else if (e == INA_EXP_NONFINITE) {
            ina__be32_add(v, payload, n);
        }
        return;
    }
    if (e == INA_EXP_ZERO)
        return;
    if (ss->exp == INA_EXP_ZERO) {
        ina__be32_load(v, payload, n);
        ss->exp = e;
        return;
    }
    int d = (int)e - (int)ss->exp;
    if (d > 0) {
        for (size_t i = 0; i < n; i++)
            v[i] = shift_round(v[i], d);
        ss->exp = e;
        d = 0;
    }
    if (d == 0) {
        ina__be32_add(v, payload, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t q = (int32_t)ina__get32(payload + 4 * i);
        v[i] = (int32_t)((uint32_t)v[i] + (uint32_t)shift_round(q, -d));
    }
}

void ina__combine(struct ina_slot_set *ss, int32_t *v, const uint8_t *payload, size_t n,
                  int16_t e)
{
    if (ss->op == INA_OP_ADD_I32)
        ina__be32_add(v, payload, n);
    else if (ina__op_is_h16(ss->op)) /* 2n binary32 lanes (§8.10.4) */
        ina__h16_add(v, payload, n, e, ina__h16_fmt_of_op(ss->op));
    else if (ss->op == INA_OP_ADD_BFP)
        combine_bfp(ss, v, payload, n, e);
    else if (ss->op == INA_OP_ADD_F32)
        ina__be32_fadd(v, payload, n);
    else if (ss->op == INA_OP_ADD_FIX)
        ina__be32_fixadd(v, payload, n);
    else
        ina__be32_minmax(v, payload, n, ss->op == INA_OP_MAX_I32);
}
