/* train.c: the model-parallel (P4SGD) and data-parallel SGD loops, evaluation, and timing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "glm.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of this process (its library threads too): against the wall clock,
 * it shows how much of a run the host's other load took. */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

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
    double lr;            /* this epoch's learning rate */
    double *g;            /* data-parallel: gradient of the current mini-batch, f entries */
    float *gbuf;          /* data-parallel: the gradient as sent (F floats) */
    size_t *perm;         /* sample order of the epoch */
    float *dots;          /* model-parallel: the mini-batch's B dots, `micro` per micro-batch */
    float *z;             /* evaluation: every sample's dot */
    double comm_s;        /* time inside the all-reduce calls, this epoch so far */
    double wait_s;        /* of which inside the waits: latency the compute did not hide */
    size_t rounds;        /* all-reduces started */
    char *err;
    size_t errlen;
};

static int comm_wait(struct trainer *t, int h)
{
    double t0 = now_s();
    int rc = glm_comm_wait(t->c, h, t->err, t->errlen);
    double dt = now_s() - t0;
    t->comm_s += dt;
    t->wait_s += dt;
    return rc;
}

static int comm_start(struct trainer *t, int h, float *buf, size_t n)
{
    double t0 = now_s();
    int rc = glm_comm_start(t->c, h, buf, n);
    t->comm_s += now_s() - t0;
    t->rounds++;
    if (rc != 0 && !t->err[0]) /* a backend that reports at the start, without words */
        snprintf(t->err, t->errlen, "starting the all-reduce of %zu values failed", n);
    return rc;
}

static int comm_allreduce(struct trainer *t, float *buf, size_t n)
{
    double t0 = now_s();
    int rc = glm_comm_allreduce(t->c, buf, n, t->err, t->errlen);
    double dt = now_s() - t0;
    t->comm_s += dt;
    t->wait_s += dt; /* blocking: all of it is waiting */
    t->rounds++;
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

/* The L2 term of a step, x -= lr l2 x: only the scale moves. */
static void shrink(struct trainer *t)
{
    t->scale *= 1.0 - t->lr * t->o->l2;
    if (t->scale < 1e-30 || t->scale > 1e30) { /* fold it in before it under- or overflows */
        for (size_t k = 0; k < t->f; k++)
            t->v[k] *= t->scale;
        t->scale = 1.0;
    }
}

/* Data-parallel: x -= lr (g / B + l2 x), and clear g for the next mini-batch. */
static void update(struct trainer *t, size_t batch)
{
    const double step = t->lr / ((double)batch * t->scale);
    for (size_t k = 0; k < t->f; k++) {
        t->v[k] -= step * t->g[k];
        t->g[k] = 0;
    }
    shrink(t);
}

/* Forward of micro-batch m (samples p0..p1 of the epoch's order): its partial
 * dots into t->dots, and its all-reduce started in slot h. */
static int forward(struct trainer *t, size_t m, size_t p0, size_t p1, int h)
{
    float *d = t->dots + m * t->o->micro;
    for (size_t p = p0; p < p1; p++)
        d[p - p0] = (float)dot(t, t->perm[p]);
    return comm_start(t, h, d, p1 - p0);
}

/* Backward of micro-batch m, whose dots are summed: each sample's share of
 * the step, x -= lr/B s_i a_i, straight into the model. */
static void backward(struct trainer *t, size_t m, size_t p0, size_t p1, double step)
{
    const float *d = t->dots + m * t->o->micro;
    for (size_t p = p0; p < p1; p++) {
        size_t i = t->perm[p];
        double s = glm_dloss(t->o->loss, d[p - p0], t->y[i]);
        if (s != 0)
            glm_block_axpy(&t->blk, i, -step * s, t->v);
    }
}

/*
 * One mini-batch, model-parallel: micro-batches of `micro` samples, each
 * worker's partial dots all-reduced, up to W in flight.
 *
 * Every forward of the mini-batch comes first, each all-reduce started as
 * soon as its dots are in, so the dots of later micro-batches are computed
 * while earlier ones are on the wire; then the backwards, in order, each as
 * soon as its sums are back, while later ones are still out. Since every
 * dot was taken before the model moves, each backward can step the model
 * directly (no gradient buffer, no second pass over the touched features),
 * and the arithmetic is the same whatever W and the micro-batch size are: a
 * smaller W only waits earlier (as long as the sums themselves do not depend
 * on timing or grouping: fixed point and MPI's float sums do not; the
 * switch's one-round block floating point may round in arrival order,
 * PROTOCOL.md §8.7). What is left between one mini-batch and the next is
 * the round trip of its last micro-batch and that micro-batch's backward.
 */
static int step_model_parallel(struct trainer *t, size_t b0, size_t b1)
{
    const size_t W = (size_t)t->o->window, U = t->o->micro, M = (b1 - b0 + U - 1) / U;
    size_t done = 0; /* micro-batches whose all-reduce was waited for */
    for (size_t m = 0; m < M; m++) {
        if (m - done == W && comm_wait(t, (int)(done++ % W)) != 0)
            return -1;
        size_t p0 = b0 + m * U, p1 = p0 + U < b1 ? p0 + U : b1;
        if (forward(t, m, p0, p1, (int)(m % W)) != 0)
            return -1;
    }
    const double step = t->lr / ((double)(b1 - b0) * t->scale);
    for (size_t m = 0; m < M; m++) {
        if (m == done && comm_wait(t, (int)(done++ % W)) != 0)
            return -1;
        size_t p0 = b0 + m * U, p1 = p0 + U < b1 ? p0 + U : b1;
        backward(t, m, p0, p1, step);
    }
    shrink(t);
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
        double s = glm_dloss(t->o->loss, z, t->y[i]);
        if (s != 0)
            glm_block_axpy(&t->blk, i, s, t->g);
    }
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
    free(t->gbuf);
    free(t->perm);
    free(t->dots);
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
    const size_t f1 = t->f ? t->f : 1, B = o->batch < t->n ? o->batch : t->n;
    t->y = malloc(t->n * sizeof(double));
    t->v = calloc(f1, sizeof(double));
    t->scale = 1.0;
    if (o->data_parallel) {
        t->g = calloc(f1, sizeof(double));
        t->gbuf = calloc(f1, sizeof(float));
    }
    t->perm = malloc(t->n * sizeof(size_t));
    t->dots = calloc(B + 1, sizeof(float)); /* never 0 */
    t->z = malloc(t->n * sizeof(float));
    if (!t->y || !t->v || (o->data_parallel && (!t->g || !t->gbuf)) || !t->perm || !t->dots ||
        !t->z)
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
        double t_start = now_s(), seg_start = t_start, seg_cpu = cpu_s();
        double seg_comm = 0, seg_wait = 0;
        size_t seg_rounds = t.rounds;
        t.comm_s = t.wait_s = 0;
        t.lr = o->lr / (1.0 + o->lr_decay * (double)(e - 1));
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
            pr.cpu_s = cpu_s() - seg_cpu;
            pr.comm_s = t.comm_s - seg_comm;
            pr.wait_s = t.wait_s - seg_wait;
            pr.compute_s = seg - pr.comm_s;
            pr.rounds = t.rounds - seg_rounds;
            double saved = t.comm_s, saved_wait = t.wait_s;
            size_t saved_rounds = t.rounds;
            rc = evaluate(&t, &pr.ev);
            t.comm_s = saved;
            t.wait_s = saved_wait;
            t.rounds = saved_rounds;
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
            seg_cpu = cpu_s();
            seg_comm = t.comm_s;
            seg_wait = t.wait_s;
            seg_rounds = t.rounds;
        }
        res->epochs_run = e;
    }
    res->final = pr.ev;
    trainer_free(&t);
    return rc;
}
