/* train.c: the model-parallel (P4SGD) and data-parallel SGD loops, evaluation, and timing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "glm.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Everything one worker trains with. */
struct trainer {
    const struct glm_dataset *ds;
    const struct glm_train_opts *o;
    struct glm_comm *c;
    struct glm_block blk; /* model-parallel: columns [c0, c0+f) of every row; data-parallel: all */
    size_t n, f, c0;
    double *y;            /* labels as the loss wants them */
    /* This worker's model block (data-parallel: the whole model) is scale * v:
     * L2 regularisation then costs one multiplication per step instead of a
     * pass over every feature, and a step touches only the features of its
     * samples (a sparse row has 74 of rcv1's 47,236). */
    double *v, scale;
    double *g;            /* gradient of the current mini-batch, f entries */
    uint32_t *touched;    /* features with g != 0 this step (sparse blocks), nt of them */
    uint8_t *mark;        /* feature is in touched */
    size_t nt;
    float *gbuf;          /* data-parallel: the gradient as sent (F floats) */
    size_t *perm;         /* sample order of the epoch */
    float (*dots)[GLM_MICRO]; /* W micro-batches of partial dots in flight */
    size_t (*rows)[GLM_MICRO]; /* and their samples */
    int *cnt;             /* samples in each */
    float *z;             /* evaluation: every sample's dot */
    double comm_s;        /* time inside the all-reduce calls, this epoch so far */
    char *err;
    size_t errlen;
};

static int comm_wait(struct trainer *t, int h)
{
    double t0 = now_s();
    int rc = glm_comm_wait(t->c, h, t->err, t->errlen);
    t->comm_s += now_s() - t0;
    return rc;
}

static int comm_start(struct trainer *t, int h, float *buf, size_t n)
{
    double t0 = now_s();
    int rc = glm_comm_start(t->c, h, buf, n);
    t->comm_s += now_s() - t0;
    return rc;
}

static int comm_allreduce(struct trainer *t, float *buf, size_t n)
{
    double t0 = now_s();
    int rc = glm_comm_allreduce(t->c, buf, n, t->err, t->errlen);
    t->comm_s += now_s() - t0;
    return rc;
}

/* The same order on every rank: Fisher-Yates from (seed, epoch). */
static void shuffle(struct trainer *t, int epoch)
{
    for (size_t i = 0; i < t->n; i++)
        t->perm[i] = i;
    if (!t->o->shuffle_seed)
        return;
    uint64_t s = t->o->shuffle_seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch;
    for (size_t i = t->n - 1; i > 0; i--) {
        size_t j = (size_t)(glm_rand64(&s) % (i + 1));
        size_t tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
}

/* Partial dot of row i with this worker's block of the model. */
static double dot(const struct trainer *t, size_t i)
{
    return t->scale * glm_block_dot(&t->blk, i, t->v);
}

/* g += s a_i over this worker's features, noting which features it touched. */
static void accumulate(struct trainer *t, size_t i, double s)
{
    if (s == 0)
        return;
    glm_block_axpy(&t->blk, i, s, t->g);
    if (t->blk.dense)
        return; /* every feature: update() walks them all */
    const struct glm_csr *m = &t->blk.s;
    for (size_t k = m->rowptr[i]; k < m->rowptr[i + 1]; k++)
        if (!t->mark[m->col[k]]) {
            t->mark[m->col[k]] = 1;
            t->touched[t->nt++] = m->col[k];
        }
}

/* x -= lr (g / B + l2 x), and clear g for the next mini-batch. With x =
 * scale v: the L2 term shrinks scale, the gradient term moves v. */
static void update(struct trainer *t, size_t batch)
{
    const double lr = t->o->lr, step = lr / ((double)batch * t->scale);
    if (t->blk.dense || t->o->data_parallel) {
        for (size_t k = 0; k < t->f; k++) {
            t->v[k] -= step * t->g[k];
            t->g[k] = 0;
        }
    } else {
        for (size_t q = 0; q < t->nt; q++) {
            uint32_t k = t->touched[q];
            t->v[k] -= step * t->g[k];
            t->g[k] = 0;
            t->mark[k] = 0;
        }
    }
    t->nt = 0;
    t->scale *= 1.0 - lr * t->o->l2;
    if (t->scale < 1e-30 || t->scale > 1e30) { /* fold it in before it under- or overflows */
        for (size_t k = 0; k < t->f; k++)
            t->v[k] *= t->scale;
        t->scale = 1.0;
    }
}

/* Micro-batch in slot h has its full dots: accumulate each sample's gradient. */
static void backward(struct trainer *t, int h)
{
    for (int k = 0; k < t->cnt[h]; k++) {
        size_t i = t->rows[h][k];
        accumulate(t, i, glm_dloss(t->o->loss, t->dots[h][k], t->y[i]));
    }
}

/*
 * One mini-batch, model-parallel: micro-batches of GLM_MICRO samples, each
 * worker's partial dots all-reduced, up to W in flight. They complete in
 * the order started (the oldest is waited for first), so the gradient is
 * accumulated in the same order whatever W is: W > 1 gives the trajectory
 * of W = 1 exactly, as long as the sums themselves do not depend on timing
 * (fixed point and MPI's float sums do not; the switch's one-round block
 * floating point may round in arrival order, PROTOCOL.md §8.7).
 */
static int step_model_parallel(struct trainer *t, size_t b0, size_t b1)
{
    const int W = t->o->window;
    int head = 0, inflight = 0; /* oldest slot, and how many are out */
    for (size_t p = b0; p < b1 || inflight; ) {
        if (p < b1 && inflight < W) {
            int h = (head + inflight) % W;
            int k = 0;
            for (; k < GLM_MICRO && p < b1; k++, p++) {
                size_t i = t->perm[p];
                t->rows[h][k] = i;
                t->dots[h][k] = (float)dot(t, i);
            }
            t->cnt[h] = k;
            if (comm_start(t, h, t->dots[h], (size_t)k) != 0)
                return -1;
            inflight++;
            continue;
        }
        if (comm_wait(t, head) != 0)
            return -1;
        backward(t, head);
        head = (head + 1) % W;
        inflight--;
    }
    update(t, b1 - b0);
    return 0;
}

/*
 * One mini-batch, data-parallel (for contrast): worker r takes the r-th of
 * N contiguous parts of the mini-batch, computes full dots (it holds every
 * column) and the gradient of its samples, and the F-sized gradient is
 * all-reduced: F values per step instead of B.
 */
static int step_data_parallel(struct trainer *t, size_t b0, size_t b1)
{
    const size_t B = b1 - b0, N = (size_t)t->c->world, r = (size_t)t->c->rank;
    for (size_t p = b0 + B * r / N; p < b0 + B * (r + 1) / N; p++) {
        size_t i = t->perm[p];
        double z = (double)(float)dot(t, i); /* a float, as model-parallel's sums are */
        accumulate(t, i, glm_dloss(t->o->loss, z, t->y[i]));
    }
    t->nt = 0; /* every feature goes to the all-reduce and update() walks them all */
    for (size_t k = 0; k < t->f; k++)
        t->gbuf[k] = (float)t->g[k];
    if (comm_allreduce(t, t->gbuf, t->f) != 0)
        return -1;
    for (size_t k = 0; k < t->f; k++)
        t->g[k] = t->gbuf[k];
    update(t, B);
    return 0;
}

/* Loss, accuracy and model error over the whole dataset, the same on every rank. */
static int evaluate(struct trainer *t, struct glm_eval *ev)
{
    const struct glm_dataset *ds = t->ds;
    const int cls = t->o->loss != GLM_SQUARED;
    double loss = 0, correct = 0, sq = 0, norm2 = 0, err2 = 0, planted2 = 0;
    float red[4] = {0, 0, 0, 0};
    if (ds->planted)
        for (size_t j = 0; j < ds->x.ncols; j++)
            planted2 += ds->planted[j] * ds->planted[j];
    for (size_t k = 0; k < t->f; k++) {
        double x = t->scale * t->v[k];
        norm2 += x * x;
        if (ds->planted) {
            double e = x - ds->planted[t->c0 + k];
            err2 += e * e;
        }
    }
    if (!t->o->data_parallel) {
        /* every sample's partial dot, summed over the blocks: one all-reduce of n */
        for (size_t i = 0; i < t->n; i++)
            t->z[i] = (float)dot(t, i);
        if (comm_allreduce(t, t->z, t->n) != 0)
            return -1;
        for (size_t i = 0; i < t->n; i++) {
            loss += glm_loss(t->o->loss, t->z[i], t->y[i]);
            correct += (t->z[i] >= 0 ? 1.0 : -1.0) == t->y[i];
            sq += ((double)t->z[i] - t->y[i]) * ((double)t->z[i] - t->y[i]);
        }
        /* The model's norm and error over the blocks, normalised (per feature, and
         * by |x*|^2) so that they stay small numbers: fixed point has a range. */
        red[0] = (float)(norm2 / (double)ds->x.ncols);
        red[1] = planted2 > 0 ? (float)(err2 / planted2) : 0;
        if (comm_allreduce(t, red, 2) != 0)
            return -1;
        norm2 = red[0] * (double)ds->x.ncols;
        err2 = red[1];
    } else {
        /* every worker has the whole model: each evaluates its share of the samples */
        const size_t N = (size_t)t->c->world, r = (size_t)t->c->rank;
        for (size_t i = t->n * r / N; i < t->n * (r + 1) / N; i++) {
            double z = (float)dot(t, i);
            loss += glm_loss(t->o->loss, z, t->y[i]);
            correct += (z >= 0 ? 1.0 : -1.0) == t->y[i];
            sq += (z - t->y[i]) * (z - t->y[i]);
        }
        red[0] = (float)(loss / (double)t->n);
        red[1] = (float)(correct / (double)t->n);
        red[2] = (float)(sq / (double)t->n);
        if (comm_allreduce(t, red, 3) != 0)
            return -1;
        loss = red[0] * (double)t->n;
        correct = red[1] * (double)t->n;
        sq = red[2] * (double)t->n;
        err2 = planted2 > 0 ? err2 / planted2 : 0;
    }
    ev->loss = loss / (double)t->n;
    ev->objective = ev->loss + 0.5 * t->o->l2 * norm2;
    ev->accuracy = cls ? correct / (double)t->n : NAN;
    ev->rmse = cls ? NAN : sqrt(sq / (double)t->n);
    ev->model_err = ds->planted ? sqrt(err2) : NAN;
    return 0;
}

static void trainer_free(struct trainer *t)
{
    glm_block_free(&t->blk);
    free(t->y);
    free(t->v);
    free(t->g);
    free(t->touched);
    free(t->mark);
    free(t->gbuf);
    free(t->perm);
    free(t->dots);
    free(t->rows);
    free(t->cnt);
    free(t->z);
}

static int trainer_init(struct trainer *t, const struct glm_dataset *ds,
                        const struct glm_train_opts *o, struct glm_comm *c)
{
    t->ds = ds;
    t->o = o;
    t->c = c;
    t->n = ds->x.nrows;
    size_t c1 = ds->x.ncols;
    t->c0 = 0;
    if (!o->data_parallel)
        glm_partition(ds->x.ncols, c->rank, c->world, &t->c0, &c1);
    t->f = c1 - t->c0;
    /* Dense blocks pay when at least a quarter of the cells are nonzero. */
    if (glm_block_make(&ds->x, 0, t->n, t->c0, c1, 0.25, &t->blk) != 0)
        return -1;
    const size_t W = (size_t)o->window, f1 = t->f ? t->f : 1;
    t->y = malloc(t->n * sizeof(double));
    t->v = calloc(f1, sizeof(double));
    t->scale = 1.0;
    t->g = calloc(f1, sizeof(double));
    t->touched = malloc(f1 * sizeof(uint32_t));
    t->mark = calloc(f1, 1);
    t->gbuf = o->data_parallel ? calloc(f1, sizeof(float)) : NULL;
    t->perm = malloc(t->n * sizeof(size_t));
    t->dots = calloc(W, sizeof(*t->dots));
    t->rows = calloc(W, sizeof(*t->rows));
    t->cnt = calloc(W, sizeof(int));
    t->z = malloc(t->n * sizeof(float));
    if (!t->y || !t->v || !t->g || !t->touched || !t->mark || (o->data_parallel && !t->gbuf) || !t->perm || !t->dots ||
        !t->rows || !t->cnt || !t->z)
        return -1;
    memcpy(t->y, ds->y, t->n * sizeof(double));
    glm_labels_for(o->loss, t->y, t->n);
    return 0;
}

int glm_train(const struct glm_dataset *ds, const struct glm_train_opts *o, struct glm_comm *c,
              glm_report_fn report, void *arg, struct glm_result *res, char *err, size_t errlen)
{
    struct trainer t;
    memset(&t, 0, sizeof(t));
    memset(res, 0, sizeof(*res));
    t.err = err;
    t.errlen = errlen;
    if (trainer_init(&t, ds, o, c) != 0) {
        trainer_free(&t);
        snprintf(err, errlen, "out of memory for the model and the data block");
        return -1;
    }
    struct glm_progress pr;
    memset(&pr, 0, sizeof(pr));
    int rc = evaluate(&t, &pr.ev); /* before training: the starting point of every curve */
    if (rc == 0 && report)
        report(&pr, arg);
    double train_s = 0;
    const size_t steps_per_epoch = (t.n + o->batch - 1) / o->batch;
    for (int e = 1; rc == 0 && e <= o->epochs && !res->reached; e++) {
        double t_start = now_s(), seg_start = t_start, seg_comm = 0;
        t.comm_s = 0;
        shuffle(&t, e);
        for (size_t s = 0; s < steps_per_epoch && rc == 0; s++) {
            size_t b0 = s * o->batch, b1 = b0 + o->batch < t.n ? b0 + o->batch : t.n;
            rc = o->data_parallel ? step_data_parallel(&t, b0, b1)
                                  : step_model_parallel(&t, b0, b1);
            pr.step++;
            int last = s + 1 == steps_per_epoch;
            if (rc != 0 || !(last || (o->eval_steps && pr.step % (size_t)o->eval_steps == 0)))
                continue;
            /* An evaluation point: its own time is not training time. */
            double seg = now_s() - seg_start;
            train_s += seg;
            pr.epoch = e;
            pr.train_s = train_s;
            pr.epoch_s = seg;
            pr.comm_s = t.comm_s - seg_comm;
            pr.compute_s = seg - pr.comm_s;
            double saved = t.comm_s;
            rc = evaluate(&t, &pr.ev);
            t.comm_s = saved;
            if (rc != 0)
                break;
            if (report)
                report(&pr, arg);
            if (o->target > 0 && pr.ev.objective <= o->target && !res->reached) {
                res->reached = 1; /* every rank sees the same objective: all stop here */
                res->time_to_target = train_s;
                break;
            }
            seg_start = now_s();
            seg_comm = t.comm_s;
        }
        res->epochs_run = e;
    }
    res->final = pr.ev;
    trainer_free(&t);
    return rc;
}
