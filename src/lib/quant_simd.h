/* quant_simd.h: internal: the scalar and AVX2 implementations behind the quant.h functions. */
#ifndef INA_QUANT_SIMD_H
#define INA_QUANT_SIMD_H

/*
 * The functions of quant.h dispatch, once per process, to one implementation:
 *
 *   scalar  portable C (the reference; always available)
 *   avx2    x86-64 AVX2, compiled with __attribute__((target("avx2"))) in
 *           quant_avx2.c, so the rest of the build needs no -mavx2
 *
 * AVX2 is chosen when the CPU has it (__builtin_cpu_supports) and the
 * environment variable INA_NO_SIMD is unset, empty or "0". Both
 * implementations give bit-identical results for every input (including
 * garbage: NaN in a finite block, exponents outside the valid range);
 * tests/unit/test_quant_simd.c checks that.
 *
 * The named variants below exist for tests and benchmarks. Calling an _avx2
 * function when ina__quant_avx2_supported() is 0 is undefined (SIGILL); on
 * builds without the AVX2 code they are the scalar functions.
 */

#include <stddef.h>
#include <stdint.h>

enum ina_quant_impl {
    INA_QUANT_IMPL_SCALAR = 0,
    INA_QUANT_IMPL_AVX2 = 1,
};

/* 1 if this build has the AVX2 code and this CPU can run it (ignores INA_NO_SIMD). */
int ina__quant_avx2_supported(void);

/* The implementation the quant.h functions use in this process. */
enum ina_quant_impl ina__quant_impl_active(void);
const char *ina__quant_impl_name(enum ina_quant_impl impl);

int16_t ina__quant_block_exp_scalar(const float *x, size_t n);
void ina__quant_encode_scalar(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out);
void ina__quant_decode_scalar(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out);
void ina__quant_encode_f64_scalar(const double *x, size_t n, int16_t e, int nworkers, uint8_t *out);
void ina__quant_decode_f64_scalar(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out);
void ina__quant_decode_avg_scalar(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out);
void ina__i32_encode_scalar(const int32_t *x, size_t n, uint8_t *out);
void ina__i32_decode_scalar(const uint8_t *in, size_t n, int32_t *out);

int16_t ina__quant_block_exp_avx2(const float *x, size_t n);
void ina__quant_encode_avx2(const float *x, size_t n, int16_t e, int nworkers, uint8_t *out);
void ina__quant_decode_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out);
void ina__quant_encode_f64_avx2(const double *x, size_t n, int16_t e, int nworkers, uint8_t *out);
void ina__quant_decode_f64_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, double *out);
void ina__quant_decode_avg_avx2(const uint8_t *in, size_t n, int16_t e, int nworkers, float *out);
void ina__i32_encode_avx2(const int32_t *x, size_t n, uint8_t *out);
void ina__i32_decode_avx2(const uint8_t *in, size_t n, int32_t *out);

/*
 * Kernels in quant_avx2.c (only on x86-64 with gcc/clang: INA_QUANT_HAVE_AVX2).
 * They take what the scalar code derives from (e, nworkers), so both paths
 * start from the same doubles.
 *   encode: out[i] = be32(low 32 bits of (min(qmax, max(-qmax, x[i] * scale)) + 0x1.8p52))
 *           (x[i] widened to double; the _f64 kernel takes doubles)
 *   decode: out[i] = (float)((double)be32(in[i]) * scale)
 *           (the _f64 kernel stores the double, without the rounding)
 *   decode_avg: out[i] = (float)((double)be32(in[i]) / div * scale)
 *   absmax: max over i of (bits(x[i]) & 0x7FFFFFFF)
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define INA_QUANT_HAVE_AVX2 1
void ina__avx2_quant_encode(const float *x, size_t n, double scale, double qmax, uint8_t *out);
void ina__avx2_quant_decode(const uint8_t *in, size_t n, double scale, float *out);
void ina__avx2_quant_encode_f64(const double *x, size_t n, double scale, double qmax, uint8_t *out);
void ina__avx2_quant_decode_f64(const uint8_t *in, size_t n, double scale, double *out);
void ina__avx2_quant_decode_avg(const uint8_t *in, size_t n, double div, double scale,
                                float *out);
uint32_t ina__avx2_absmax_bits(const float *x, size_t n);
void ina__avx2_bswap32(const void *in, size_t n, void *out);
#else
#define INA_QUANT_HAVE_AVX2 0
#endif

#endif
