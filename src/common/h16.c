/* h16.c: the 16-bit wire's kernels (h16.h): the once-per-process choice between the scalar reference (h16_scalar.c) and the AVX2 kernels (h16_avx2.c). */
#include "common/h16.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- Dispatch ----------------------------------------------------------------------- */

/* Decided once; threads racing on the first call all compute the same value. */
static _Atomic(const struct ina_h16_kernels *) active;

const struct ina_h16_kernels *ina__h16_active(void)
{
    const struct ina_h16_kernels *k = atomic_load_explicit(&active, memory_order_relaxed);
    if (!k) {
        const char *no = getenv("INA_NO_SIMD");
        int disabled = no && no[0] && strcmp(no, "0") != 0;
        k = !disabled && ina__h16_simd() ? ina__h16_simd() : &ina__h16_scalar;
        atomic_store_explicit(&active, k, memory_order_relaxed);
    }
    return k;
}

void ina__h16_load(int32_t *v, const uint8_t *p, size_t words, int16_t exp, enum ina_h16_fmt f)
{
    ina__h16_active()->load(v, p, words, exp, f);
}

void ina__h16_add(int32_t *v, const uint8_t *p, size_t words, int16_t exp, enum ina_h16_fmt f)
{
    ina__h16_active()->add(v, p, words, exp, f);
}

int16_t ina__h16_result_exp(const int32_t *v, size_t words, int16_t sexp, enum ina_h16_fmt f)
{
    return ina__h16_active()->result_exp(v, words, sexp, f);
}

void ina__h16_store(uint8_t *p, const int32_t *v, size_t words, int16_t s, enum ina_h16_fmt f)
{
    ina__h16_active()->store(p, v, words, s, f);
}

void ina__h16_put(const uint16_t *x, size_t n, uint8_t *out) { ina__h16_active()->put(x, n, out); }

void ina__h16_get(const uint8_t *in, size_t n, enum ina_h16_fmt f, uint16_t *out)
{
    ina__h16_active()->get(in, n, f, out);
}

int16_t ina__h16_f32_scale(const float *x, size_t n) { return ina__h16_active()->f32_scale(x, n); }

void ina__h16_encode_f32(const float *x, size_t n, int16_t e, enum ina_h16_fmt f, uint8_t *out)
{
    ina__h16_active()->encode_f32(x, n, e, f, out);
}

void ina__h16_to_f32(const uint8_t *in, size_t n, int16_t s, enum ina_h16_fmt f, float *out)
{
    ina__h16_active()->to_f32(in, n, s, f, out);
}

void ina__h16_to_f64(const uint8_t *in, size_t n, int16_t s, int div, enum ina_h16_fmt f,
                    double *out)
{
    ina__h16_active()->to_f64(in, n, s, div, f, out);
}
