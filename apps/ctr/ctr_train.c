/* ctr_train.c: ina-ctr, a CTR trainer (sparse logistic regression) over ina: all-PS, hot/cold (switch + PS), dense all-reduce (ina or MPI). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "ctr_data.h"
#include "ctr_file.h"
#include "ina.h"
#ifdef INA_CTR_MPI
#include <mpi.h>
#endif

enum mode { MODE_PS, MODE_HOTCOLD, MODE_DENSE_INA, MODE_DENSE_MPI };

struct opts {
    enum mode mode;
    int rank, world, batch, steps, warmup, eval, optimizer, hot, profile, reprofile, dgram, quiet;
    int drift, steplog, predraw, rank_fields;
    uint64_t keys, seed;
    double alpha;
    float lr, eps;
    const char *ps, *sw, *job, *data, *mark_dir;
    enum ctr_format format;
};

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
            "Data: the synthetic generator (default), or a file of click logs (--data):\n"
            "Criteo's display-ads TSV or Avazu's CSV, features hashed into K keys\n"
            "(apps/ctr/ctr_file.h). Rank r trains on blocks r, r + N, ... of B lines after\n"
            "the first --eval lines (the held-out set), from the start again at the end.\n"
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
            "  --lr LR             learning rate (default 0.2)\n"
            "  --eps EPS           Adagrad's eps (default 0.001)\n"
            "  --data FILE         train on FILE (click logs) instead of the generator\n"
            "  --format F          criteo (default) or avazu: the format of --data\n"
            "  --drift D           synthetic data: from step D on, the field values map to\n"
            "                      other keys (the hot keys change; a test of the refresh)\n"
            "  --rank-fields F     synthetic data: the last F of the 26 fields map each\n"
            "                      rank's values to keys of its own (ranks see different\n"
            "                      hot keys; a test of sampling every rank's traffic)\n"
            "  --hot-keys H        hot keys (hotcold; default 32000)\n"
            "  --profile P         profiled steps before the first hot set (default 2)\n"
            "  --reprofile E       a new hot set every E steps (default 0: never)\n"
            "  --datagram BYTES    largest datagram to a shard (0: ina_kv's default)\n"
            "  --eval N            held-out samples rank 0 evaluates (default 20000; 0: none)\n"
            "  --predraw           draw every step's batch before the first step (the step\n"
            "                      time then excludes the data's generation or reading)\n"
            "  --steplog           print 'STEP rank=R step=T ms=X hot_share=S' every step\n"
            "  --mark-dir DIR      pause 0.5 s before the timed steps and after them, rank 0\n"
            "                      making DIR/start and DIR/end as each pause begins (for\n"
            "                      counting the timed steps' bytes on the links)\n"
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

/* The same update rule as ina-ps (INA_KV_SGD / INA_KV_ADAGRAD, skipping zeros). */
static void apply_dense(const struct opts *o, float *w, float *acc, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (g[i] == 0.0f)
            continue;
        if (o->optimizer == INA_KV_ADAGRAD) {
            acc[i] += g[i] * g[i];
            w[i] -= o->lr * g[i] / (o->eps + sqrtf(acc[i]));
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
        {"eps", required_argument, 0, 'x'},     {"data", required_argument, 0, 'd'},
        {"format", required_argument, 0, 'f'},  {"drift", required_argument, 0, 'R'},
        {"predraw", no_argument, 0, 'y'},       {"steplog", no_argument, 0, 'L'},
        {"mark-dir", required_argument, 0, 'M'}, {"rank-fields", required_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    *o = (struct opts){.mode = -1, .world = 1, .batch = 1024, .steps = 30, .warmup = 3,
                       .eval = 20000, .optimizer = INA_KV_ADAGRAD, .hot = 32000, .profile = 2,
                       .keys = 1000000, .seed = 1, .alpha = 1.0, .lr = 0.2f, .eps = 0.001f,
                       .drift = -1, .ps = "127.0.0.1:48870", .sw = "127.0.0.1", .job = "ctr"};
    int bad_format = 0;
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
        case 'x': o->eps = (float)atof(optarg); break;
        case 'd': o->data = optarg; break;
        case 'f': bad_format |= ctr_format_parse(optarg, &o->format) != 0; break;
        case 'R': o->drift = atoi(optarg); break;
        case 'y': o->predraw = 1; break;
        case 'L': o->steplog = 1; break;
        case 'M': o->mark_dir = optarg; break;
        case 'F': o->rank_fields = atoi(optarg); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if ((int)o->mode < 0 || o->optimizer < 0 || o->batch < 1 || o->steps < 1 || o->warmup < 0 ||
        o->keys < 26 || !(o->alpha > 0) || o->world < 1 || o->rank < 0 || o->rank >= o->world ||
        o->eval < 0 || optind < argc || bad_format || !(o->eps > 0) ||
        (o->data && (o->drift >= 0 || o->rank_fields)) || o->rank_fields < 0 ||
        o->rank_fields > CTR_FIELDS) {
        fprintf(stderr, "ina-ctr: bad or missing arguments (want --mode ps|hotcold|dense-ina|"
                        "dense-mpi, --format criteo|avazu, --eps > 0, --rank-fields 0..26, "
                        "--drift and --rank-fields only without --data; see --help)\n");
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

/* ---- Batches ------------------------------------------------------------------------- */

/* One rank's batch of one step, compact: its distinct keys, each feature's index into them,
 * each sample's feature count and label. */
struct batch {
    struct uniq u;
    uint32_t *fidx;
    uint8_t *nf, *label;
};

static int batch_init(struct batch *b, int samples)
{
    size_t maxf = (size_t)samples * CTR_MAX_FEATURES;
    b->fidx = malloc(maxf * sizeof(uint32_t));
    b->nf = malloc((size_t)samples);
    b->label = malloc((size_t)samples);
    return uniq_init(&b->u, (uint32_t)maxf) == 0 && b->fidx && b->nf && b->label ? 0 : -1;
}

static void batch_free(struct batch *b)
{
    free(b->u.tab);
    free(b->u.idx);
    free(b->u.keys);
    free(b->fidx);
    free(b->nf);
    free(b->label);
}

/* Where a rank's samples come from: the generator, or a file (its blocks r, r + N, ...). */
struct source {
    const struct ctr_gen *g;
    const struct opts *o;
    struct ctr_file file;
    int is_file;
    int64_t left; /* file: samples of the current block still to read */
};

/* The file's next sample of this rank: blocks of B lines, rank r's every N-th, after the
 * held-out lines; from the start again at the end. @return 0 or -1 (cf->err). */
static int file_sample(struct source *src, struct ctr_sample *s)
{
    const struct opts *o = src->o;
    for (int pass = 0; pass < 3; pass++) {
        if (src->left == 0) { /* the other ranks' blocks */
            ctr_file_skip(&src->file, (uint64_t)(o->world - 1) * (uint64_t)o->batch);
            src->left = o->batch;
        }
        int rc = ctr_file_next(&src->file, s);
        if (rc == 1) {
            src->left--;
            return 0;
        }
        if (rc < 0)
            return -1;
        /* The end: again from this rank's first block. */
        if (ctr_file_rewind(&src->file) != 0 ||
            ctr_file_skip(&src->file, (uint64_t)o->eval + (uint64_t)o->rank * (uint64_t)o->batch) <
                (uint64_t)o->eval + (uint64_t)o->rank * (uint64_t)o->batch)
            break;
        src->left = o->batch;
    }
    snprintf(src->file.err, sizeof(src->file.err), "%s has no training line for rank %d after "
             "the %d held-out lines", o->data, o->rank, o->eval);
    return -1;
}

static int source_open(struct source *src, const struct ctr_gen *g, const struct opts *o)
{
    memset(src, 0, sizeof(*src));
    src->g = g;
    src->o = o;
    if (!o->data)
        return 0;
    src->is_file = 1;
    if (ctr_file_open(&src->file, o->data, o->format, o->keys) != 0)
        return -1;
    uint64_t first = (uint64_t)o->eval + (uint64_t)o->rank * (uint64_t)o->batch;
    ctr_file_skip(&src->file, first);
    src->left = o->batch;
    return 0;
}

/* Rank's batch of step t. With req, libina's progress is driven every 32 samples:
 * operations advance only inside its calls (the MPI progress rule), so a push left alone
 * would wait for the batch. @return 0 or -1 (a file's line breaks its format). */
static int draw_batch(struct source *src, int t, struct batch *b, ina_kv_req *req)
{
    const struct opts *o = src->o;
    struct ctr_sample s;
    uniq_reset(&b->u);
    size_t nf = 0;
    for (int i = 0; i < o->batch; i++) {
        int done;
        if (req && i % 32 == 0 && ina_kv_test(req, &done) == 0 && done)
            req = NULL;
        if (!src->is_file)
            ctr_sample(src->g, (uint32_t)o->rank, (uint64_t)t * (uint64_t)o->batch + (uint64_t)i, &s);
        else if (file_sample(src, &s) != 0)
            return -1;
        for (int k = 0; k < s.nf; k++)
            b->fidx[nf++] = uniq_add(&b->u, s.key[k]);
        b->nf[i] = (uint8_t)s.nf;
        b->label[i] = (uint8_t)s.label;
    }
    return 0;
}

/* The held-out samples: the generator's evaluation stream, or the file's first lines. */
static struct ctr_sample *eval_set(const struct ctr_gen *g, const struct opts *o, int *n)
{
    struct ctr_sample *es = malloc((size_t)o->eval * sizeof(*es));
    if (!es)
        return NULL;
    if (!o->data) {
        for (int i = 0; i < o->eval; i++)
            ctr_sample(g, CTR_EVAL_STREAM, (uint64_t)i, &es[i]);
        *n = o->eval;
        return es;
    }
    struct ctr_file f;
    int rc = ctr_file_open(&f, o->data, o->format, o->keys) == 0 ? 1 : -1;
    for (*n = 0; rc == 1 && *n < o->eval; (*n)++)
        if ((rc = ctr_file_next(&f, &es[*n])) != 1)
            break;
    if (rc < 0) {
        fprintf(stderr, "ina-ctr: %s: %s\n", o->data, f.err);
        free(es);
        es = NULL;
    }
    if (f.f)
        ctr_file_close(&f);
    return es;
}

/* --mark-dir: every rank pauses, rank 0 says where (the links go quiet for a moment). */
static void mark(const struct opts *o, const char *name)
{
    if (!o->mark_dir)
        return;
    if (o->rank == 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", o->mark_dir, name);
        FILE *f = fopen(path, "w");
        if (f)
            fclose(f);
    }
    fflush(NULL);
    usleep(500000);
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
    if (o.drift >= 0)
        g.drift_index = (uint64_t)o.drift * (uint64_t)o.batch;
    g.rank_fields = o.rank_fields;
    struct source src;
    if (source_open(&src, &g, &o) != 0) {
        fprintf(stderr, "ina-ctr: %s\n", src.file.err);
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
        c.eps = o.eps;
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
    int total = o.steps + o.warmup;
    /* Batches: every step's drawn first (--predraw), or two: while step t's push is on the
     * wire, batch t + 1 is drawn (its generation costs CPU, not network: overlapping it is
     * what a real input pipeline does, and it keeps the step time a measure of the
     * communication, when the CPU has room for both). */
    int nb = o.predraw ? total : 2;
    struct batch *bb = calloc((size_t)nb, sizeof(*bb));
    size_t maxf = (size_t)o.batch * CTR_MAX_FEATURES;
    float *wu = malloc(maxf * sizeof(float)), *gu = malloc(maxf * sizeof(float));
    double *step_s = malloc((size_t)total * sizeof(double));
    int nomem = !bb || !wu || !gu || !step_s;
    for (int i = 0; i < nb && !nomem; i++)
        nomem = batch_init(&bb[i], o.batch) != 0;
    if (nomem) {
        fprintf(stderr, "ina-ctr: out of memory for %d batches\n", nb);
        return 1;
    }
    for (int t = 0; t < (o.predraw ? total : 1) && rc == 0; t++)
        if (draw_batch(&src, t, &bb[t], NULL) != 0)
            rc = -EINVAL;
    ina_kv_stats st0 = {0}, st1 = {0}, stp = {0}, stn;
    ina_stats is0 = {0}, is1 = {0};
    double loss_sum = 0, loss_n = 0;
    const double scale = 1.0 / ((double)o.world * o.batch);
    for (int t = 0; t < total && rc == 0; t++) {
        struct batch *b = &bb[o.predraw ? t : t & 1];
        struct uniq *u = &b->u;
        if (t == o.warmup) {
            mark(&o, "start");
            if (kv)
                ina_kv_get_stats(kv, &st0);
            if (ctx)
                ina_get_stats(ctx, &is0);
            loss_sum = loss_n = 0;
        }
        double t0 = ina__clock_s(), t_pull = 0, t_comp = 0, t_next = 0;
        if (kv) {
            rc = ina_kv_pull(kv, u->keys, wu, u->n);
            t_pull = ina__clock_s();
        } else {
            for (uint32_t i = 0; i < u->n; i++)
                wu[i] = w[u->keys[i]];
        }
        memset(gu, 0, u->n * sizeof(float));
        size_t nf = 0;
        for (int i = 0; i < o.batch && rc == 0; i++) {
            double z = 0;
            for (int k = 0; k < b->nf[i]; k++)
                z += wu[b->fidx[nf + (size_t)k]];
            double p = sigmoid(z), d = (p - b->label[i]) * scale;
            loss_sum += ctr_logloss(p, b->label[i]);
            loss_n++;
            for (int k = 0; k < b->nf[i]; k++)
                gu[b->fidx[nf + (size_t)k]] += (float)d;
            nf += b->nf[i];
        }
        ina_kv_req *req = NULL;
        t_comp = ina__clock_s();
        if (rc == 0 && kv) {
            rc = ina_kv_push_start(kv, u->keys, gu, u->n, &req);
        } else if (rc == 0) {
            memset(grad, 0, K1 * sizeof(float));
            for (uint32_t i = 0; i < u->n; i++)
                grad[u->keys[i]] = gu[i];
        }
        if (rc == 0 && !o.predraw && t + 1 < total && /* the next batch, while this step communicates */
            draw_batch(&src, t + 1, &bb[(t + 1) & 1], req) != 0) {
            if (req)
                ina_kv_wait(req);
            rc = -EINVAL;
            break;
        }
        t_next = ina__clock_s();
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
        step_s[t] = ina__clock_s() - t0;
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
        if (o.steplog && kv) { /* the hot share of this step's entries */
            ina_kv_get_stats(kv, &stn);
            uint64_t e = stn.push_entries - stp.push_entries;
            printf("STEP rank=%d step=%d ms=%.2f hot_share=%.4f hot_keys=%llu\n", o.rank, t,
                   1e3 * step_s[t], e ? (double)(stn.hot_entries - stp.hot_entries) / (double)e : 0.0,
                   (unsigned long long)stn.hot_keys);
            stp = stn;
        }
        if (o.rank == 0 && !o.quiet && ((t + 1) % 10 == 0 || t + 1 == total))
            fprintf(stderr, "ina-ctr: step %d/%d: %.1f ms, %u keys, train log-loss %.4f\n", t + 1,
                    total, 1e3 * step_s[t], u->n, loss_sum / loss_n);
    }
    if (rc == -EINVAL)
        fprintf(stderr, "ina-ctr rank %d: %s: %s\n", o.rank, o.data, src.file.err);
    if (rc == 0)
        mark(&o, "end");
    if (kv)
        ina_kv_get_stats(kv, &st1);
    if (ctx)
        ina_get_stats(ctx, &is1);
    double train_loss = loss_n ? loss_sum / loss_n : NAN;
    /* Rank 0: held-out log-loss and AUC, and the planted model's (the Bayes) log-loss. */
    double ev_loss = NAN, ev_auc = NAN, bayes = NAN;
    if (rc == 0 && o.rank == 0 && o.eval > 0) {
        int ne = 0;
        struct ctr_sample *es = eval_set(&g, &o, &ne);
        double *score = malloc((size_t)o.eval * sizeof(double));
        int *label = malloc((size_t)o.eval * sizeof(int));
        struct uniq eu;
        if (!es || !score || !label || uniq_init(&eu, (uint32_t)o.eval * CTR_MAX_FEATURES) != 0) {
            fprintf(stderr, "ina-ctr: no evaluation: %s\n", es ? "out of memory" : "no held-out set");
            return 1;
        }
        for (int i = 0; i < ne; i++)
            for (int k = 0; k < es[i].nf; k++)
                uniq_add(&eu, es[i].key[k]);
        float *ew = malloc((eu.n ? eu.n : 1) * sizeof(float));
        if (kv)
            rc = ina_kv_pull(kv, eu.keys, ew, eu.n);
        else
            for (uint32_t i = 0; i < eu.n; i++)
                ew[i] = w[eu.keys[i]];
        double l = 0, lb = 0;
        for (int i = 0; rc == 0 && i < ne; i++) {
            double z = 0;
            for (int k = 0; k < es[i].nf; k++)
                z += ew[uniq_add(&eu, es[i].key[k])];
            score[i] = sigmoid(z);
            label[i] = es[i].label;
            l += ctr_logloss(score[i], label[i]);
            lb += ctr_logloss(es[i].p, label[i]); /* NaN for a file: no planted model */
        }
        ev_loss = ne ? l / ne : NAN;
        bayes = ne ? lb / ne : NAN;
        ev_auc = ctr_auc(score, label, (size_t)ne);
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
    for (int i = 0; i < nb; i++)
        batch_free(&bb[i]);
    free(bb);
    if (src.is_file)
        ctr_file_close(&src.file);
    free(wu);
    free(gu);
    free(step_s);
    ctr_gen_free(&g);
    return rc != 0;
}
