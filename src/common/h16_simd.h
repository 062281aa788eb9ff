/* h16_simd.h: internal: the scalar reference and the AVX2 kernels behind common/h16.h. */
#ifndef INA_H16_SIMD_H
#define INA_H16_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "common/h16.h"

/* The reference (h16_scalar.c): the AVX2 kernels finish a block's tail with these. */
void ina__h16_load_scalar(int32_t *v, const uint8_t *p, size_t words, int16_t exp,
                          enum ina_h16_fmt f);
void ina__h16_add_scalar(int32_t *v, const uint8_t *p, size_t words, int16_t exp,
                         enum ina_h16_fmt f);
int16_t ina__h16_result_exp_scalar(const int32_t *v, size_t words, int16_t sexp,
                                   enum ina_h16_fmt f);
void ina__h16_store_scalar(uint8_t *p, const int32_t *v, size_t words, int16_t s,
                           enum ina_h16_fmt f);
void ina__h16_put_scalar(const uint16_t *x, size_t n, uint8_t *out);
void ina__h16_get_scalar(const uint8_t *in, size_t n, enum ina_h16_fmt f, uint16_t *out);
int16_t ina__h16_f32_scale_scalar(const float *x, size_t n);
void ina__h16_encode_f32_scalar(const float *x, size_t n, int16_t e, enum ina_h16_fmt f,
                                uint8_t *out);
void ina__h16_to_f32_scalar(const uint8_t *in, size_t n, int16_t s, enum ina_h16_fmt f,
                            float *out);
void ina__h16_to_f64_scalar(const uint8_t *in, size_t n, int16_t s, int div, enum ina_h16_fmt f,
                            double *out);

/* Shared arithmetic on a largest finite magnitude m (a binary32 pattern, > 0):
 * the smallest s with m * 2^-s < 65520, and a FLOAT32 block's binary16 scale. */
int ina__h16_fit_f16(uint32_t m);
int16_t ina__h16_scale_of_max(uint32_t m);

#endif
