/* ctr_train.c: ina-ctr, a CTR trainer (sparse logistic regression) over ina: all-PS, hot/cold (switch + PS), dense all-reduce (ina or MPI). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctr_data.h"
#include "ina.h"
#ifdef INA_CTR_MPI
#include <mpi.h>
#endif

enum mode { MODE_PS, MODE_HOTCOLD, MODE_DENSE_INA, MODE_DENSE_MPI };

struct opts {
    enum mode mode;
    int rank, world, batch, steps, warmup, eval, optimizer, hot, profile, reprofile, dgram, quiet;
    uint64_t keys, seed;
    double alpha;
    float lr;
    const char *ps, *sw, *job;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-ctr --mode ps|hotcold|dense-ina|dense-mpi [options]\n"
            "\n"
            "Trains a sparse logistic-regression CTR model on synthetic click logs\n"
            "(ina-ctr-gen's generator: 26 Zipf-skewed categorical fields hashed into K keys,\n"
            "labels from a planted model), data-parallel over N workers, in one of four modes:\n"
            "  ps         every key pushed to and pulled from ina-ps (ina_kv, no switch)\n"
            "  hotcold    the hot keys summed in ina-switch's hot table, the rest at ina-ps\n"
            "  dense-ina  each worker holds the whole model; the dense gradient (K+1 floats) is\n"
            "             all-reduced through ina-switch (ina_allreduce, float add)\n"
            "  dense-mpi  the same with MPI_Allreduce (run under mpirun)%s\n"
            "Each step: every worker draws its batch, pulls the weights of its keys (ps,\n"
            "hotcold), computes the gradient of the log-loss averaged over all N*B samples,\n"
            "and pushes it (one synchronous step). Rank 0 then evaluates on held-out samples\n"
            "and prints log-loss and AUC next to the planted model's (Bayes) log-loss.\n"
            "\n"
            "Options (environment: INA_RANK/RANK, INA_WORLD_SIZE/WORLD_SIZE):\n"
            "  --rank R --world N  this worker and the workers (default 0 of 1)\n"
            "  --ps ADDRS          ina-ps shards, HOST:PORT,... (default 127.0.0.1:48870)\n"
            "  --switch ADDR       ina-switch (hotcold, dense-ina; default 127.0.0.1)\n"
            "  --job NAME          job name (default ctr)\n"
            "  --keys K            feature keys (default 1000000)\n"
            "  --alpha A           Zipf exponent (default 1.0)\n"
            "  --seed S            data seed (default 1)\n"
            "  --batch B           samples per worker per step (default 1024)\n"
            "  --steps T           timed steps (default 30)\n"
            "  --warmup W          steps before the timed ones (default 3)\n"
            "  --optimizer O       sgd or adagrad (default adagrad)\n"
            "  --lr LR             learning rate (default 1.0)\n"
            "  --hot-keys H        hot keys (hotcold; default 32000)\n"
            "  --profile P         profiled steps before the first hot set (default 2)\n"
            "  --reprofile E       a new hot set every E steps (default 0: never)\n"
            "  --datagram BYTES    largest datagram to a shard (0: ina_kv's default)\n"
            "  --eval N            held-out samples rank 0 evaluates (default 20000; 0: none)\n"
            "  --quiet             no per-step progress lines\n"
            "  --help              this text\n"
            "Rank 0 ends with one line 'RESULT key=value ...'; every rank prints 'RANKSTAT ...'.\n",
#ifdef INA_CTR_MPI
            ""
#else
            " (not built: no MPI found)"
#endif
    );
}

/* ---- Keys of a batch, deduplicated ---------------------------------------------------- */

struct uniq {
    uint64_t *tab; /* open addressing: key + 1, 0 = empty */
    uint32_t *idx, cap, n;
    uint64_t *keys;
};

static int uniq_init(struct uniq *u, uint32_t cap)
{
    u->cap = 1;
    u->n = 0;
    while (u->cap < 2 * cap)
        u->cap *= 2;
    u->tab = calloc(u->cap, 8);
    u->idx = malloc(u->cap * 4);
    u->keys = malloc(cap * 8);
    return u->tab && u->idx && u->keys ? 0 : -1;
}

static uint32_t uniq_add(struct uniq *u, uint64_t key)
{
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (u->cap - 1);
    while (u->tab[h] && u->tab[h] != key + 1)
        h = (h + 1) & (u->cap - 1);
    if (!u->tab[h]) {
        u->tab[h] = key + 1;
        u->idx[h] = u->n;
        u->keys[u->n++] = key;
    }
    return u->idx[h];
}

static void uniq_reset(struct uniq *u)
{
    memset(u->tab, 0, (size_t)u->cap * 8);
    u->n = 0;
}

/* ---- The model's math ------------------------------------------------------------------- */

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The same update rule as ina-ps (INA_KV_SGD / INA_KV_ADAGRAD, eps 1, skipping zeros). */
static void apply_dense(const struct opts *o, float *w, float *acc, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (g[i] == 0.0f)
            continue;
        if (o->optimizer == INA_KV_ADAGRAD) {
            acc[i] += g[i] * g[i];
            w[i] -= o->lr * g[i] / (1.0f + sqrtf(acc[i]));
        } else {
            w[i] -= o->lr * g[i];
        }
    }
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"mode", required_argument, 0, 'm'},    {"rank", required_argument, 0, 'r'},
        {"world", required_argument, 0, 'w'},   {"ps", required_argument, 0, 'P'},
        {"switch", required_argument, 0, 'S'},  {"job", required_argument, 0, 'j'},
        {"keys", required_argument, 0, 'k'},    {"alpha", required_argument, 0, 'a'},
        {"seed", required_argument, 0, 's'},    {"batch", required_argument, 0, 'b'},
        {"steps", required_argument, 0, 't'},   {"warmup", required_argument, 0, 'W'},
        {"optimizer", required_argument, 0, 'o'}, {"lr", required_argument, 0, 'l'},
        {"hot-keys", required_argument, 0, 'H'}, {"profile", required_argument, 0, 'p'},
        {"reprofile", required_argument, 0, 'E'}, {"datagram", required_argument, 0, 'D'},
        {"eval", required_argument, 0, 'e'},    {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    *o = (struct opts){.mode = -1, .world = 1, .batch = 1024, .steps = 30, .warmup = 3,
                       .eval = 20000, .optimizer = INA_KV_ADAGRAD, .hot = 32000, .profile = 2,
                       .keys = 1000000, .seed = 1, .alpha = 1.0, .lr = 1.0f,
                       .ps = "127.0.0.1:48870", .sw = "127.0.0.1", .job = "ctr"};
    const char *e = getenv("INA_RANK") ? getenv("INA_RANK") : getenv("RANK");
    if (e)
        o->rank = atoi(e);
    e = getenv("INA_WORLD_SIZE") ? getenv("INA_WORLD_SIZE") : getenv("WORLD_SIZE");
    if (e)
        o->world = atoi(e);
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'm':
            o->mode = !strcmp(optarg, "ps") ? MODE_PS : !strcmp(optarg, "hotcold") ? MODE_HOTCOLD
                    : !strcmp(optarg, "dense-ina") ? MODE_DENSE_INA
                    : !strcmp(optarg, "dense-mpi") ? MODE_DENSE_MPI : (enum mode)-1;
            break;
        case 'r': o->rank = atoi(optarg); break;
        case 'w': o->world = atoi(optarg); break;
        case 'P': o->ps = optarg; break;
        case 'S': o->sw = optarg; break;
        case 'j': o->job = optarg; break;
        case 'k': o->keys = strtoull(optarg, NULL, 10); break;
        case 'a': o->alpha = atof(optarg); break;
        case 's': o->seed = strtoull(optarg, NULL, 10); break;
        case 'b': o->batch = atoi(optarg); break;
        case 't': o->steps = atoi(optarg); break;
        case 'W': o->warmup = atoi(optarg); break;
        case 'o':
            o->optimizer = !strcmp(optarg, "sgd") ? INA_KV_SGD
                         : !strcmp(optarg, "adagrad") ? INA_KV_ADAGRAD : -1;
            break;
        case 'l': o->lr = (float)atof(optarg); break;
        case 'H': o->hot = atoi(optarg); break;
        case 'p': o->profile = atoi(optarg); break;
        case 'E': o->reprofile = atoi(optarg); break;
        case 'D': o->dgram = atoi(optarg); break;
        case 'e': o->eval = atoi(optarg); break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if ((int)o->mode < 0 || o->optimizer < 0 || o->batch < 1 || o->steps < 1 || o->warmup < 0 ||
        o->keys < 26 || !(o->alpha > 0) || o->world < 1 || o->rank < 0 || o->rank >= o->world ||
        o->eval < 0 || optind < argc) {
        fprintf(stderr, "ina-ctr: bad or missing arguments (want --mode ps|hotcold|dense-ina|"
                        "dense-mpi; see --help)\n");
        return -1;
    }
#ifndef INA_CTR_MPI
    if (o->mode == MODE_DENSE_MPI) {
        fprintf(stderr, "ina-ctr: --mode dense-mpi: built without MPI\n");
        return -1;
    }
#endif
    return 0;
}

/* Worker rank's batch of step t: its samples, its distinct keys, each feature's key index.
 * With req, libina's progress is driven every 32 samples: operations advance only inside
 * its calls (the MPI progress rule), so a push left alone would wait for the batch. */
static void draw_batch(const struct ctr_gen *g, const struct opts *o, int t, struct ctr_sample *batch,
                       struct uniq *u, uint32_t *fidx, ina_kv_req *req)
{
    uniq_reset(u);
    size_t nf = 0;
    for (int i = 0; i < o->batch; i++) {
        int done;
        if (req && i % 32 == 0 && ina_kv_test(req, &done) == 0 && done)
            req = NULL;
        ctr_sample(g, (uint32_t)o->rank, (uint64_t)t * (uint64_t)o->batch + (uint64_t)i, &batch[i]);
        for (int k = 0; k < batch[i].nf; k++)
            fidx[nf++] = uniq_add(u, batch[i].key[k]);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o) != 0)
        return 2;
#ifdef INA_CTR_MPI
    if (o.mode == MODE_DENSE_MPI) {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &o.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &o.world);
    }
#endif
    struct ctr_gen g;
    if (ctr_gen_init(&g, o.keys, o.alpha, o.seed) != 0) {
        fprintf(stderr, "ina-ctr: out of memory for the generator\n");
        return 1;
    }
    const size_t K1 = o.keys + 1; /* with the bias */
    ina_kv *kv = NULL;
    ina_ctx *ctx = NULL;
    float *w = NULL, *acc = NULL, *grad = NULL;
    int rc = 0;
    if (o.mode == MODE_PS || o.mode == MODE_HOTCOLD) {
        ina_kv_config c;
        ina_kv_config_init(&c);
        c.ps_addrs = o.ps;
        c.job = o.job;
        c.rank = o.rank;
        c.world_size = o.world;
        c.optimizer = o.optimizer;
        c.lr = o.lr;
        c.eps = 1.0f;
        c.datagram_bytes = o.dgram;
        if (o.mode == MODE_HOTCOLD) {
            c.switch_addr = o.sw;
            c.hot_keys = o.hot;
            c.profile_steps = o.profile;
            c.reprofile_steps = o.reprofile;
        }
        rc = ina_kv_open(&kv, &c);
        if (rc) {
            fprintf(stderr, "ina-ctr rank %d: ina_kv_open: %s: %s\n", o.rank, ina_err_name(rc),
                    ina_last_error(NULL));
            return 1;
        }
    } else {
        w = calloc(K1, sizeof(float));
        acc = calloc(K1, sizeof(float));
        grad = malloc(K1 * sizeof(float));
        if (!w || !acc || !grad) {
            fprintf(stderr, "ina-ctr: out of memory for a dense model of %zu floats\n", K1);
            return 1;
        }
        if (o.mode == MODE_DENSE_INA) {
            ina_config c;
            ina_config_init(&c);
            c.switch_addr = o.sw;
            c.job = o.job;
            c.rank = o.rank;
            c.world_size = o.world;
            c.float_add = INA_FLOAT_ADD_SWITCH;
            rc = ina_init(&ctx, &c);
            if (rc) {
                fprintf(stderr, "ina-ctr rank %d: ina_init: %s: %s\n", o.rank, ina_err_name(rc),
                        ina_last_error(NULL));
                return 1;
            }
        }
    }
    /* Two batches: while step t's push is on the wire, batch t + 1 is drawn (its
     * generation costs CPU, not network: overlapping it is what a real input
     * pipeline does, and it keeps the step time a measure of the communication). */
    struct uniq ub[2];
    size_t maxf = (size_t)o.batch * CTR_MAX_FEATURES;
    struct ctr_sample *bb[2] = {malloc((size_t)o.batch * sizeof(struct ctr_sample)),
                                malloc((size_t)o.batch * sizeof(struct ctr_sample))};
    uint32_t *fb[2] = {malloc(maxf * sizeof(uint32_t)), malloc(maxf * sizeof(uint32_t))};
    float *wu = malloc(maxf * sizeof(float)), *gu = malloc(maxf * sizeof(float));
    double *step_s = malloc((size_t)(o.steps + o.warmup) * sizeof(double));
    if (uniq_init(&ub[0], (uint32_t)maxf) != 0 || uniq_init(&ub[1], (uint32_t)maxf) != 0 ||
        !bb[0] || !bb[1] || !fb[0] || !fb[1] || !wu || !gu || !step_s) {
        fprintf(stderr, "ina-ctr: out of memory\n");
        return 1;
    }
    ina_kv_stats st0 = {0}, st1 = {0};
    ina_stats is0 = {0}, is1 = {0};
    double loss_sum = 0, loss_n = 0;
    const double scale = 1.0 / ((double)o.world * o.batch);
    int total = o.steps + o.warmup;
    draw_batch(&g, &o, 0, bb[0], &ub[0], fb[0], NULL);
    for (int t = 0; t < total && rc == 0; t++) {
        struct uniq *u = &ub[t & 1];
        struct ctr_sample *batch = bb[t & 1];
        uint32_t *fidx = fb[t & 1];
        if (t == o.warmup) {
            if (kv)
                ina_kv_get_stats(kv, &st0);
            if (ctx)
                ina_get_stats(ctx, &is0);
            loss_sum = loss_n = 0;
        }
        double t0 = now_s(), t_pull = 0, t_comp = 0, t_next = 0;
        if (kv) {
            rc = ina_kv_pull(kv, u->keys, wu, u->n);
            t_pull = now_s();
        } else {
            for (uint32_t i = 0; i < u->n; i++)
                wu[i] = w[u->keys[i]];
        }
        memset(gu, 0, u->n * sizeof(float));
        size_t nf = 0;
        for (int i = 0; i < o.batch && rc == 0; i++) {
            double z = 0;
            for (int k = 0; k < batch[i].nf; k++)
                z += wu[fidx[nf + (size_t)k]];
            double p = sigmoid(z), d = (p - batch[i].label) * scale;
            loss_sum += ctr_logloss(p, batch[i].label);
            loss_n++;
            for (int k = 0; k < batch[i].nf; k++)
                gu[fidx[nf + (size_t)k]] += (float)d;
            nf += (size_t)batch[i].nf;
        }
        ina_kv_req *req = NULL;
        t_comp = now_s();
        if (rc == 0 && kv) {
            rc = ina_kv_push_start(kv, u->keys, gu, u->n, &req);
        } else if (rc == 0) {
            memset(grad, 0, K1 * sizeof(float));
            for (uint32_t i = 0; i < u->n; i++)
                grad[u->keys[i]] = gu[i];
        }
        if (rc == 0 && t + 1 < total) /* the next batch, while this step communicates */
            draw_batch(&g, &o, t + 1, bb[(t + 1) & 1], &ub[(t + 1) & 1], fb[(t + 1) & 1], req);
        t_next = now_s();
        if (rc == 0 && kv) {
            rc = ina_kv_wait(req);
        } else if (rc == 0) {
            if (ctx)
                rc = ina_allreduce(ctx, grad, grad, K1, INA_FLOAT32, INA_SUM);
#ifdef INA_CTR_MPI
            else
                rc = MPI_Allreduce(MPI_IN_PLACE, grad, (int)K1, MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -EIO;
#endif
            if (rc == 0)
                apply_dense(&o, w, acc, grad, K1);
        }
        step_s[t] = now_s() - t0;
        if (getenv("INA_CTR_TRACE")) /* where a step's time goes */
            fprintf(stderr, "ina-ctr rank %d step %d: pull %.1f compute %.1f next batch %.1f "
                    "push wait %.1f ms\n", o.rank, t, 1e3 * (t_pull ? t_pull - t0 : 0),
                    1e3 * (t_comp - (t_pull ? t_pull : t0)), 1e3 * (t_next - t_comp),
                    1e3 * (t0 + step_s[t] - t_next));
        if (rc) {
            fprintf(stderr, "ina-ctr rank %d step %d: %s: %s\n", o.rank, t, ina_err_name(rc),
                    kv ? ina_kv_last_error(kv) : ctx ? ina_last_error(ctx) : "MPI");
            break;
        }
        if (o.rank == 0 && !o.quiet && ((t + 1) % 10 == 0 || t + 1 == total))
            fprintf(stderr, "ina-ctr: step %d/%d: %.1f ms, %u keys, train log-loss %.4f\n", t + 1,
                    total, 1e3 * step_s[t], u->n, loss_sum / loss_n);
    }
    if (kv)
        ina_kv_get_stats(kv, &st1);
    if (ctx)
        ina_get_stats(ctx, &is1);
    double train_loss = loss_n ? loss_sum / loss_n : NAN;
    /* Rank 0: held-out log-loss and AUC, and the planted model's (the Bayes) log-loss. */
    double ev_loss = NAN, ev_auc = NAN, bayes = NAN;
    if (rc == 0 && o.rank == 0 && o.eval > 0) {
        double *score = malloc((size_t)o.eval * sizeof(double));
        int *label = malloc((size_t)o.eval * sizeof(int));
        struct ctr_sample *es = malloc((size_t)o.eval * sizeof(*es));
        struct uniq eu;
        if (!score || !label || !es || uniq_init(&eu, (uint32_t)o.eval * CTR_MAX_FEATURES) != 0) {
            fprintf(stderr, "ina-ctr: out of memory for the evaluation\n");
            return 1;
        }
        for (int i = 0; i < o.eval; i++) {
            ctr_sample(&g, CTR_EVAL_STREAM, (uint64_t)i, &es[i]);
            for (int k = 0; k < es[i].nf; k++)
                uniq_add(&eu, es[i].key[k]);
        }
        float *ew = malloc(eu.n * sizeof(float));
        if (kv)
            rc = ina_kv_pull(kv, eu.keys, ew, eu.n);
        else
            for (uint32_t i = 0; i < eu.n; i++)
                ew[i] = w[eu.keys[i]];
        double l = 0, lb = 0;
        for (int i = 0; rc == 0 && i < o.eval; i++) {
            double z = 0;
            for (int k = 0; k < es[i].nf; k++)
                z += ew[uniq_add(&eu, es[i].key[k])];
            score[i] = sigmoid(z);
            label[i] = es[i].label;
            l += ctr_logloss(score[i], label[i]);
            lb += ctr_logloss(es[i].p, label[i]);
        }
        ev_loss = l / o.eval;
        bayes = lb / o.eval;
        ev_auc = ctr_auc(score, label, (size_t)o.eval);
        free(ew);
        free(eu.tab);
        free(eu.idx);
        free(eu.keys);
        free(score);
        free(label);
        free(es);
    }
    /* Per step of the timed part: median and mean, and what went to the shards. */
    qsort(step_s + o.warmup, (size_t)o.steps, sizeof(double), cmp_double);
    double med = o.steps % 2 ? step_s[o.warmup + o.steps / 2]
                             : 0.5 * (step_s[o.warmup + o.steps / 2 - 1] + step_s[o.warmup + o.steps / 2]);
    double mean = 0;
    for (int t = o.warmup; t < total; t++)
        mean += step_s[t] / o.steps;
    const char *mname[] = {"ps", "hotcold", "dense-ina", "dense-mpi"};
    double steps = o.steps;
    uint64_t entries = st1.push_entries - st0.push_entries;
    printf("RANKSTAT rank=%d mode=%s ps_bytes_sent_per_step=%.0f ps_bytes_recv_per_step=%.0f "
           "switch_bytes_per_step=%.0f hot_share=%.4f hot_keys=%llu ps_retransmits=%llu\n",
           o.rank, mname[o.mode], (double)(st1.ps_bytes_sent - st0.ps_bytes_sent) / steps,
           (double)(st1.ps_bytes_received - st0.ps_bytes_received) / steps,
           kv ? (double)(st1.switch_bytes_sent - st0.switch_bytes_sent) / steps
              : (double)(is1.bytes_sent - is0.bytes_sent) / steps,
           entries ? (double)(st1.hot_entries - st0.hot_entries) / (double)entries : 0.0,
           (unsigned long long)st1.hot_keys,
           (unsigned long long)(st1.ps_retransmits - st0.ps_retransmits));
    if (o.rank == 0)
        printf("RESULT mode=%s N=%d K=%llu alpha=%.2f batch=%d steps=%d step_ms_median=%.2f "
               "step_ms_mean=%.2f train_logloss=%.5f eval_logloss=%.5f eval_auc=%.4f "
               "bayes_logloss=%.5f status=%s\n",
               mname[o.mode], o.world, (unsigned long long)o.keys, o.alpha, o.batch, o.steps,
               1e3 * med, 1e3 * mean, train_loss, ev_loss, ev_auc, bayes,
               rc ? ina_err_name(rc) : "ok");
    fflush(stdout);
    if (kv)
        ina_kv_close(kv);
    if (ctx)
        ina_finalize(ctx);
#ifdef INA_CTR_MPI
    if (o.mode == MODE_DENSE_MPI)
        MPI_Finalize();
#endif
    free(w);
    free(acc);
    free(grad);
    for (int i = 0; i < 2; i++) {
        free(bb[i]);
        free(fb[i]);
        free(ub[i].tab);
        free(ub[i].idx);
        free(ub[i].keys);
    }
    free(wu);
    free(gu);
    free(step_s);
    ctr_gen_free(&g);
    return rc != 0;
}
