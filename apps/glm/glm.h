/* glm.h: ina-glm's pieces: datasets (libsvm, generated), partitions, losses, communication, training. */
#ifndef INA_GLM_H
#define INA_GLM_H

/*
 * ina-glm trains a generalized linear model the way P4SGD does (Huang et al.,
 * arXiv 2305.05885; docs/GLM.md): model parallelism. The F features are cut
 * into N contiguous blocks; worker r holds block r of every sample, block r
 * of the model, and every label. A mini-batch of B samples is split into
 * micro-batches of 8 (one packet of 8 partial dot products); each worker
 * computes its partial dots, all-reduces them (the only traffic of a step,
 * independent of F), and, from the full dots, the same loss derivative s_i
 * for every sample as every other worker; then it updates its own block.
 * Up to W micro-batches are in flight, so the forward pass of later samples
 * overlaps the all-reduce of earlier ones.
 *
 * Everything here runs in every worker's process; only comm_*.c differ.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GLM_MICRO 8 /* samples per micro-batch by default: one packet of 8 partial dots (P4SGD) */
#define GLM_MAX_MICRO 4096
#define GLM_MAX_WINDOW 1024

/* ---- Data ---------------------------------------------------------------- */

/* Rows are samples, in compressed sparse rows; columns 0-based. */
struct glm_csr {
    size_t nrows, ncols, nnz;
    size_t *rowptr; /* nrows + 1 */
    uint32_t *col;  /* nnz, increasing within a row */
    float *val;     /* nnz */
};

struct glm_dataset {
    struct glm_csr x;
    double *y;       /* label per row */
    double *planted; /* generated data: the model the labels came from (ncols), else NULL */
    char name[96];
};

/* One worker's share of the features, as the training loop reads it: the
 * columns [c0, c0 + f) of every row, dense (row-major) when that is dense
 * enough to pay, else CSR with local column numbers. */
struct glm_block {
    size_t n, f, c0;
    int dense;
    float *d;          /* n x f, if dense */
    struct glm_csr s;  /* if not */
};

void glm_csr_free(struct glm_csr *m);
void glm_dataset_free(struct glm_dataset *d);
void glm_block_free(struct glm_block *b);

/* Parse libsvm text ("label idx:val ..." per line, 1-based increasing
 * indices). nfeatures > 0 fixes F (a larger index is an error), 0 takes the
 * largest index seen. On error: -1, and err (size errlen) says where and why
 * ("line 12: index 0: indices start at 1"). Never reads past len. */
int glm_libsvm_parse(const char *buf, size_t len, size_t nfeatures, struct glm_dataset *out,
                     char *err, size_t errlen);
/* The same from a file. */
int glm_libsvm_load(const char *path, size_t nfeatures, struct glm_dataset *out, char *err,
                    size_t errlen);
/* Write d as libsvm text (%.9g values). @return 0 or -1 (errno set). */
int glm_libsvm_write(const struct glm_dataset *d, FILE *f);

/* Named shapes of the generator (P4SGD's datasets, generated: they cannot be
 * downloaded here), or "ROWSxCOLS:NNZ" for any shape (NNZ per row). */
struct glm_shape {
    const char *name;
    size_t rows, cols, nnz_per_row;
    int text;       /* 1: tf-idf-like rows (positive, unit norm, popular columns), 0: one-hot */
    const char *of; /* what it imitates */
};
extern const struct glm_shape glm_shapes[];
/* @return 0 and *out, or -1 with err set. */
int glm_shape_parse(const char *spec, struct glm_shape *out, char *err, size_t errlen);

/*
 * Generate a dataset of the shape with a planted model x* (d->planted):
 * regression labels y = a.x* + noise N(0, noise^2); classification
 * (classify != 0) y = sign(a.x* + noise), in {-1, +1}. Deterministic in
 * seed, so every worker generates the same data. "dense" shapes (nnz ==
 * cols) draw features uniformly in [-1, 1]; sparse ones as `text` says.
 */
int glm_generate(const struct glm_shape *sh, uint64_t seed, int classify, double noise,
                 struct glm_dataset *d, char *err, size_t errlen);

/* Scale every column. maxabs: x / max|x| into [-1, 1], zeros stay zeros.
 * minmax: (x - min) / (max - min) into [0, 1] (P4SGD's preprocessing), with
 * min and max over every row, the implicit zeros of sparse rows included;
 * a column whose min is negative while some rows leave it out would turn
 * those zeros into stored values: refused (-1, err says which column; use
 * maxabs). Constant columns become 0. */
enum glm_scale { GLM_SCALE_NONE = 0, GLM_SCALE_MAXABS, GLM_SCALE_MINMAX };
int glm_scale(struct glm_dataset *d, enum glm_scale how, char *err, size_t errlen);

/* Append a feature that is 1 in every sample: its weight is the intercept
 * (bias) of the model. @return 0 or -1 (out of memory). */
int glm_add_bias(struct glm_dataset *d);

/* Worker r of n: the contiguous block of columns [c0, c1) it holds. */
void glm_partition(size_t ncols, int r, int n, size_t *c0, size_t *c1);
/* Columns [c0, c1) of rows [r0, r1) of x, dense if density >= dense_min
 * (0..1; > 1 never). @return 0 or -1 (out of memory). */
int glm_block_make(const struct glm_csr *x, size_t r0, size_t r1, size_t c0, size_t c1,
                   double dense_min, struct glm_block *b);

/* ---- Model --------------------------------------------------------------- */

enum glm_loss { GLM_SQUARED = 0, GLM_LOGISTIC = 1, GLM_HINGE = 2 };
extern const char *const glm_loss_names[3];

/* Loss of one sample with full dot z and label y (y in {-1, 1} for the
 * classification losses). */
double glm_loss(enum glm_loss l, double z, double y);
/* Its derivative with respect to z (the s_i of the update). */
double glm_dloss(enum glm_loss l, double z, double y);
/* Labels as the loss wants them: {-1, +1} for logistic and hinge (a label
 * > 0 is +1, else -1: {0, 1} and {-1, 1} files both work). @return how many
 * labels were not already -1 or +1. */
size_t glm_labels_for(enum glm_loss l, double *y, size_t n);

/* Partial dot of row i of b with the local model x (double accumulation). */
double glm_block_dot(const struct glm_block *b, size_t i, const double *x);
/* g[j] += s * b[i][j] over row i's entries. */
void glm_block_axpy(const struct glm_block *b, size_t i, double s, double *g);

/* ---- Communication ------------------------------------------------------- */

enum glm_comm_kind { GLM_COMM_LOCAL = 0, GLM_COMM_INA = 1, GLM_COMM_MPI = 2 };
extern const char *const glm_comm_names[3];

struct glm_comm_opts {
    enum glm_comm_kind kind;
    int fixed_bits;  /* ina: fixed point with this many fractional bits, 0 = floats */
    int busy_poll_us; /* ina: microseconds, 0 = never; -1 (default): INA_BUSY_POLL_US or auto */
    int window;      /* W: all-reduces in flight (handles 0..W-1) */
    const char *switch_addr, *job; /* ina; NULL = INA_SWITCH / INA_JOB or defaults */
    int rank, world;               /* ina; -1 = from the environment */
};

/* A backend: blocking and pipelined SUM all-reduces of float32, in place. */
struct glm_comm {
    enum glm_comm_kind kind;
    int rank, world;
    int fixed_bits; /* in use (ina: what the switch granted) */
    char desc[160]; /* one line: what runs the all-reduces */
    void *impl;
};

/* @return 0, or -1 with err set (the backend's own words). */
int glm_comm_open(struct glm_comm *c, const struct glm_comm_opts *o, int *argc, char ***argv,
                  char *err, size_t errlen);
/* Start summing buf[0..n) over all workers in handle slot h (0..W-1, free). */
int glm_comm_start(struct glm_comm *c, int h, float *buf, size_t n);
/* Wait for slot h. @return 0, or -1 with err set. */
int glm_comm_wait(struct glm_comm *c, int h, char *err, size_t errlen);
/* Blocking sum (evaluation, barriers). */
int glm_comm_allreduce(struct glm_comm *c, float *buf, size_t n, char *err, size_t errlen);
void glm_comm_close(struct glm_comm *c);

/* The backends (comm.c, comm_mpi.c): same contract as above. */
struct glm_comm_ops {
    int (*open)(struct glm_comm *c, const struct glm_comm_opts *o, int *argc, char ***argv,
                char *err, size_t errlen);
    int (*start)(struct glm_comm *c, int h, float *buf, size_t n);
    int (*wait)(struct glm_comm *c, int h, char *err, size_t errlen);
    int (*allreduce)(struct glm_comm *c, float *buf, size_t n, char *err, size_t errlen);
    void (*close)(struct glm_comm *c);
};
extern const struct glm_comm_ops glm_comm_local_ops, glm_comm_ina_ops;
extern const struct glm_comm_ops *const glm_comm_mpi_ops; /* NULL: built without MPI */

/* ---- Training -------------------------------------------------------------- */

struct glm_train_opts {
    enum glm_loss loss;
    double lr, l2;
    double lr_decay;  /* epoch e (1-based) steps with lr / (1 + lr_decay (e - 1)) */
    size_t batch;     /* B */
    size_t micro;     /* samples per micro-batch, one all-reduce each (GLM_MICRO) */
    int window;       /* W: micro-batches in flight */
    int epochs;
    int data_parallel;
    uint64_t shuffle_seed; /* 0: samples in file order */
    double target;    /* stop when the objective is at or below it (0 = run every epoch) */
    int eval_steps;   /* also evaluate every this many steps (0: only per epoch) */
};

/* One evaluation of the model over the whole dataset. */
struct glm_eval {
    double objective; /* mean loss + l2/2 ||x||^2 */
    double loss;      /* mean loss */
    double accuracy;  /* classification: fraction with sign(z) == y; squared: NaN */
    double rmse;      /* squared: sqrt(mean (z - y)^2); else NaN */
    double model_err; /* generated data: ||x - x*|| / ||x*||, else NaN */
};

/* Per evaluation point: called on every rank; rank 0 prints. */
struct glm_progress {
    int epoch;            /* 1-based; 0 = before training */
    size_t step;          /* steps (mini-batches) done */
    double train_s;       /* training time so far, evaluations excluded */
    double epoch_s, compute_s, comm_s; /* this epoch's (or since the last point) */
    double wait_s;        /* of comm_s, inside the waits: round trips the compute did not hide */
    double cpu_s;         /* CPU time of this process over the same span (wall - cpu: the host's
                           * other load, and sleeping in waits) */
    size_t rounds;        /* all-reduces of the span (one per micro-batch) */
    struct glm_eval ev;
};
typedef void (*glm_report_fn)(const struct glm_progress *p, void *arg);

/* Train on ds (each worker passes the same dataset; it takes its part).
 * x_out (optional) receives this worker's model block (f floats) at the
 * end. @return 0, or -1 with err set. */
struct glm_result {
    int reached;          /* target reached */
    double time_to_target;
    int epochs_run;
    struct glm_eval final;
};
int glm_train(const struct glm_dataset *ds, const struct glm_train_opts *o, struct glm_comm *c,
              glm_report_fn report, void *arg, struct glm_result *res, char *err, size_t errlen);

/* splitmix64: the generator's and the shuffle's random numbers. */
static inline uint64_t glm_rand64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform in [0, 1) */
static inline double glm_rand01(uint64_t *s) { return (double)(glm_rand64(s) >> 11) * 0x1p-53; }

#endif
