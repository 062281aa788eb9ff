/* benchdata.h: the deterministic all-reduce input data and its verification, shared by the
 * comparison benchmark's peers (bench/mpi_allreduce.c, and bench/gloo_allreduce.py through
 * libbenchdata.so). The data are the same as tools/ina-bench.c's, so all systems sum the same
 * tensors. */
#ifndef BENCHDATA_H
#define BENCHDATA_H

#include <stddef.h>
#include <stdint.h>

enum { BD_FLOAT32 = 0, BD_INT32 = 1, BD_FLOAT16 = 2, BD_BFLOAT16 = 3 };

/* Element size in bytes of a BD_* dtype; its name ("float32", "int32", "float16", "bfloat16");
 * the BD_* code of a name, or -1. */
size_t bd_esize(int dtype);
const char *bd_name(int dtype);
int bd_dtype(const char *name);

/* inout[i] = inout[i] + in[i] for n float16 or bfloat16 patterns: the sum of the two values,
 * correctly rounded to the type (nearest, ties to even; overflow to Inf; NaN stays NaN). The
 * user-defined MPI op of half types where MPI has no datatype for them. */
void bd_sum16(int dtype, const void *in, void *inout, size_t n);

/* From now on, inputs are block-sparse (ina-bench --density, --pattern, --sparse-block;
 * tools/bench_data.h): a fraction density of the blocks of `block` elements is kept
 * (pattern 0 random, 1 overlap, 2 disjoint), the rest are zero. density >= 1: dense data
 * (the default). */
void bd_set_sparse(double density, int pattern, size_t block, int world);

/* Fill out[0..count) with rank's input for one size (bytes per rank) and iteration (float16
 * and bfloat16: ina-bench's data of those types, tools/bench_data.h). */
void bd_fill(int dtype, void *out, size_t count, int rank, uint64_t bytes, int iter);

/*
 * Check recv[0..count) against the sum over world ranks, regenerated here in double
 * precision (int32: the wrapping sum, bit-exact). float32 tolerance per element:
 * world * 2^-24 * sum_r |x_r| (any summation order or tree of world float32 additions stays
 * within (world-1) * 2^-24 * sum |x_r|); NaN counts as a failure. Returns the number of
 * elements out of tolerance; *max_abs_err and *max_err_over_tol are raised to the largest
 * seen (they are not reset). Up to 5 mismatches are printed to stderr with the tag.
 */
int64_t bd_verify(int dtype, const void *recv, size_t count, int world, uint64_t bytes, int iter,
                  double *max_abs_err, double *max_err_over_tol, const char *tag);

#endif
