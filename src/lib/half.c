/* half.c: float16 and bfloat16 conversions: the scalar reference and the once-per-process dispatch. */
#include "lib/half.h"

#include <stdatomic.h>
#include <string.h>

#include "lib/quant_simd.h"


/* ---- Arrays, scalar ------------------------------------------------------------------ */

void ina__f16_to_f32_scalar(const uint16_t *in, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b = ina__f16_to_f32_bits(in[i]);
        memcpy(&out[i], &b, 4);
    }
}

void ina__bf16_to_f32_scalar(const uint16_t *in, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)in[i] << 16;
        memcpy(&out[i], &b, 4);
    }
}

void ina__f32_to_f16_scalar(const float *in, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ina__f32_bits_to_f16(ina__f32_bits(in[i]));
}

void ina__f32_to_bf16_scalar(const float *in, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ina__f32_bits_to_bf16(ina__f32_bits(in[i]));
}

void ina__f64_to_f16_scalar(const double *in, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ina__f32_bits_to_f16(ina__f64_to_f32_odd_bits(in[i]));
}

void ina__f64_to_bf16_scalar(const double *in, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ina__f32_bits_to_bf16(ina__f64_to_f32_odd_bits(in[i]));
}

/* ---- Block maxima (for the block exponent) ------------------------------------------ */

/*
 * For non-negative values the order of the bit patterns is the numeric order
 * (NaN and Inf above every finite value), in both formats, so the max of
 * x & 0x7FFF is the largest magnitude, and converting that one value gives
 * what quant.c's float scan would have found. Chunked like quant.c's scan so
 * that gcc -O2 vectorizes it.
 */
#define HALF_CHUNK 16

static uint16_t absmax16(const uint16_t *in, size_t n)
{
    uint16_t lane[HALF_CHUNK] = {0};
    size_t i = 0;
    for (; i + HALF_CHUNK <= n; i += HALF_CHUNK)
        for (int j = 0; j < HALF_CHUNK; j++) {
            uint16_t a = in[i + j] & 0x7FFFu;
            lane[j] = a > lane[j] ? a : lane[j];
        }
    uint16_t mx = 0;
    for (int j = 0; j < HALF_CHUNK; j++)
        mx = lane[j] > mx ? lane[j] : mx;
    for (; i < n; i++) {
        uint16_t a = in[i] & 0x7FFFu;
        mx = a > mx ? a : mx;
    }
    return mx;
}

uint32_t ina__f16_absmax_f32bits(const uint16_t *in, size_t n)
{
    return ina__f16_to_f32_bits(absmax16(in, n));
}

uint32_t ina__bf16_absmax_f32bits(const uint16_t *in, size_t n)
{
    return (uint32_t)absmax16(in, n) << 16;
}

/* ---- Dispatch ------------------------------------------------------------------------ */

#if !INA_QUANT_HAVE_AVX2 /* no vector kernels in this build: the named variants are scalar */
int ina__half_simd_supported(void) { return 0; }
void ina__f16_to_f32_simd(const uint16_t *in, size_t n, float *out) { ina__f16_to_f32_scalar(in, n, out); }
void ina__bf16_to_f32_simd(const uint16_t *in, size_t n, float *out) { ina__bf16_to_f32_scalar(in, n, out); }
void ina__f32_to_f16_simd(const float *in, size_t n, uint16_t *out) { ina__f32_to_f16_scalar(in, n, out); }
void ina__f32_to_bf16_simd(const float *in, size_t n, uint16_t *out) { ina__f32_to_bf16_scalar(in, n, out); }
void ina__f64_to_f16_simd(const double *in, size_t n, uint16_t *out) { ina__f64_to_f16_scalar(in, n, out); }
void ina__f64_to_bf16_simd(const double *in, size_t n, uint16_t *out) { ina__f64_to_bf16_scalar(in, n, out); }
#endif

/*
 * Follows quant.c's choice (so INA_NO_SIMD turns both off) and adds the F16C
 * requirement. Decided once; threads racing here all compute the same value.
 */
static _Atomic int half_simd = -1;

int ina__half_simd_active(void)
{
    int v = atomic_load_explicit(&half_simd, memory_order_relaxed);
    if (v < 0) {
        v = ina__quant_impl_active() == INA_QUANT_IMPL_AVX2 && ina__half_simd_supported();
        atomic_store_explicit(&half_simd, v, memory_order_relaxed);
    }
    return v;
}

/* Generates the dispatching function NAME(in, n, out) over NAME_simd / NAME_scalar. */
#define HALF_DISPATCH(name, tin, tout)                    \
    void name(const tin *in, size_t n, tout *out)         \
    {                                                     \
        if (ina__half_simd_active())                       \
            name##_simd(in, n, out);                      \
        else                                              \
            name##_scalar(in, n, out);                    \
    }

HALF_DISPATCH(ina__f16_to_f32, uint16_t, float)
HALF_DISPATCH(ina__bf16_to_f32, uint16_t, float)
HALF_DISPATCH(ina__f32_to_f16, float, uint16_t)
HALF_DISPATCH(ina__f32_to_bf16, float, uint16_t)
HALF_DISPATCH(ina__f64_to_f16, double, uint16_t)
HALF_DISPATCH(ina__f64_to_bf16, double, uint16_t)
