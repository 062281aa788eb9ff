/* main.c: ina-glm, a model-parallel GLM trainer in the manner of P4SGD: options, data, output. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm.h"
#include "ina.h"
#include "launch.h"

static const char *prog = "ina-glm";

static void usage(FILE *f)
{
    fprintf(f,
"Usage: ina-glm (--data FILE | --gen SHAPE) [options]\n"
"       ina-glm --comm ina --local N ...        (ina-switch and N workers on this host)\n"
"       mpirun -np N ina-glm --comm mpi ...     (the MPI baseline)\n"
"\n"
"Trains a generalized linear model with P4SGD's model parallelism: the features\n"
"are cut into N contiguous blocks, one per worker; each mini-batch of B samples\n"
"goes in micro-batches of 8, whose 8 partial dot products per worker are summed\n"
"by one all-reduce (through ina-switch with --comm ina), up to W in flight; then\n"
"every worker updates its own block of the model. docs/GLM.md has the details.\n"
"\n"
"Data (one of):\n"
"  --data FILE          libsvm text: 'label index:value ...', indices from 1\n"
"  --gen SHAPE          generated sparse data with a planted model: rcv1\n"
"                       (20,242 x 47,236), real-sim (72,309 x 20,958), avazu\n"
"                       (2,048 x 1,000,000, one-hot), amazon (4,096 x 332,710),\n"
"                       or ROWSxCOLS:NNZ (NNZ nonzeros per row; = COLS: dense)\n"
"  --seed N             generator seed (default 1); every worker generates alike\n"
"  --noise S            generator: label noise, N(0, S^2) on a.x* (default 0.1)\n"
"  --features F         feature count (default: the largest index in the file)\n"
"  --scale MODE         none (default), maxabs (x / max|x|) or minmax (to [0, 1],\n"
"                       as P4SGD; refused where it would fill in sparse zeros)\n"
"  --bias               add a feature that is 1 in every sample (an intercept; the\n"
"                       last worker holds it)\n"
"  --save-data FILE     write the dataset as libsvm (with --epochs 0: only that)\n"
"\n"
"Model:\n"
"  --loss L             squared (linear regression), logistic (default) or hinge\n"
"                       (SVM); logistic and hinge read labels > 0 as +1, else -1\n"
"  --lr R               learning rate (default 0.5)\n"
"  --lr-decay D         epoch e steps with lr / (1 + D (e - 1)) (default 0: a\n"
"                       constant rate, which ends in a noise band above the\n"
"                       optimum; a decay closes in on it)\n"
"  --l2 L               L2 regularisation (default 0): x -= lr (g/B + L x)\n"
"  --batch B            mini-batch size (default 16)\n"
"  --micro M            samples per micro-batch: the M partial dots that one\n"
"                       all-reduce sums (default 8, P4SGD's packet; at most %d):\n"
"                       fewer, larger all-reduces against less overlap\n"
"  --window W           micro-batches in flight (default: all of a mini-batch,\n"
"                       B/M rounded up; at most %d); W and M change when a\n"
"                       worker waits, never what it computes\n"
"  --epochs E           passes over the data (default 10)\n"
"  --shuffle SEED       shuffle the samples each epoch with SEED (default 1;\n"
"                       0: file order)\n"
"  --target T           stop once the objective (mean loss + L/2 |x|^2) is at or\n"
"                       below T, and report the training time it took\n"
"  --eval-steps K       also evaluate every K mini-batches (default: per epoch)\n"
"  --data-parallel      for contrast: each worker takes 1/N of each mini-batch\n"
"                       with every feature, and the F-sized gradient is all-reduced\n"
"\n"
"Communication:\n"
"  --comm C             local (default: one process), ina, or mpi (run by mpirun;\n"
"                       %s)\n"
"  --fixed-bits F       ina: sums in fixed point with F fractional bits (default\n"
"                       23: P4SGD's Q8.23); 0: floats (block floating point)\n"
"  --busy-poll US       ina: spin up to US microseconds for results before\n"
"                       sleeping (0: never; default: INA_BUSY_POLL_US, else\n"
"                       auto, from the host); with --local, the switch it starts\n"
"                       spins as long (ina-switch --busy-poll US; docs/GLM.md)\n"
"  --switch HOST:PORT, --rank R, --world N, --job NAME\n"
"                       ina: where and who (default: INA_SWITCH, INA_RANK or RANK,\n"
"                       INA_WORLD_SIZE or WORLD_SIZE, OMPI_COMM_WORLD_*, INA_JOB)\n"
"  --local N            ina: start ina-switch on loopback and N workers\n"
"  --switch-bin PATH    --local: the ina-switch to run (default: next to ina-glm)\n"
"  --switch-opt ARG     --local: pass ARG to ina-switch (repeat for more)\n"
"\n"
"Output (rank 0):\n"
"  one line per evaluation: epoch, steps, objective, loss, accuracy (logistic,\n"
"  hinge) or rmse (squared), model error |x - x*| / |x*| (generated data), the\n"
"  time of the epoch split into compute and communication (time inside the\n"
"  all-reduce calls), and the training time so far (evaluations excluded).\n"
"  --json               one JSON object per evaluation, then a summary object\n"
"  --quiet              only the summary line\n"
"  --help               this text\n"
"\n"
"Exit status: 0 trained, 1 error (data, communication), 2 usage error.\n",
            GLM_MAX_MICRO, GLM_MAX_WINDOW,
            glm_comm_mpi_ops ? "this build has MPI" : "not in this build");
}

static _Noreturn void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see --help)\n");
    exit(2);
}

static double num_arg(const char *opt, const char *s, double lo, double hi)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (!*s || *e || errno || !(v >= lo && v <= hi))
        usage_error("%s: '%s' is not a number in %g..%g", opt, s, lo, hi);
    return v;
}

static int pick(const char *opt, const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    usage_error("%s: unknown value '%s'", opt, s);
}

struct cli {
    const char *data, *gen, *save_data;
    uint64_t seed;
    double noise;
    size_t features;
    enum glm_scale scale;
    struct glm_train_opts t;
    struct glm_comm_opts c;
    struct glm_launch l;
    const char *switch_args[32];
    int json, quiet, bias;
};

enum {
    O_DATA = 256, O_GEN, O_SEED, O_NOISE, O_FEATURES, O_SCALE, O_SAVE, O_LOSS, O_LR,
    O_LR_DECAY, O_L2, O_BATCH, O_MICRO, O_WINDOW, O_EPOCHS, O_SHUFFLE, O_TARGET, O_EVAL, O_DP,
    O_COMM, O_FIXED, O_BUSY, O_SWITCH, O_RANK, O_WORLD, O_JOB, O_LOCAL, O_SWBIN, O_SWOPT, O_JSON, O_QUIET, O_HELP, O_BIAS
};

static void parse(int argc, char **argv, struct cli *o)
{
    static const struct option opts[] = {
        {"data", 1, 0, O_DATA}, {"gen", 1, 0, O_GEN}, {"seed", 1, 0, O_SEED},
        {"noise", 1, 0, O_NOISE}, {"features", 1, 0, O_FEATURES}, {"scale", 1, 0, O_SCALE},
        {"save-data", 1, 0, O_SAVE}, {"loss", 1, 0, O_LOSS}, {"lr", 1, 0, O_LR},
        {"lr-decay", 1, 0, O_LR_DECAY}, {"l2", 1, 0, O_L2}, {"batch", 1, 0, O_BATCH},
        {"micro", 1, 0, O_MICRO}, {"window", 1, 0, O_WINDOW}, {"epochs", 1, 0, O_EPOCHS}, {"shuffle", 1, 0, O_SHUFFLE}, {"target", 1, 0, O_TARGET},
        {"eval-steps", 1, 0, O_EVAL}, {"data-parallel", 0, 0, O_DP}, {"comm", 1, 0, O_COMM},
        {"fixed-bits", 1, 0, O_FIXED}, {"busy-poll", 1, 0, O_BUSY}, {"switch", 1, 0, O_SWITCH},
        {"rank", 1, 0, O_RANK}, {"world", 1, 0, O_WORLD}, {"job", 1, 0, O_JOB},
        {"local", 1, 0, O_LOCAL}, {"switch-bin", 1, 0, O_SWBIN}, {"switch-opt", 1, 0, O_SWOPT},
        {"bias", 0, 0, O_BIAS}, {"json", 0, 0, O_JSON}, {"quiet", 0, 0, O_QUIET}, {"help", 0, 0, O_HELP}, {0, 0, 0, 0}};
    static const char *const scales[] = {"none", "maxabs", "minmax"};
    memset(o, 0, sizeof(*o));
    o->seed = 1;
    o->noise = 0.1;
    o->t = (struct glm_train_opts){.loss = GLM_LOGISTIC, .lr = 0.5, .batch = 16, .micro = GLM_MICRO, .window = 0,
                                   .epochs = 10, .shuffle_seed = 1};
    o->c = (struct glm_comm_opts){.kind = GLM_COMM_LOCAL, .fixed_bits = 23, .rank = -1, .busy_poll_us = -1,
                                  .world = 0};
    o->l.switch_args = o->switch_args;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *a = optarg;
        switch (c) {
        case O_DATA: o->data = a; break;
        case O_GEN: o->gen = a; break;
        case O_SEED: o->seed = (uint64_t)num_arg("--seed", a, 0, 1e15); break;
        case O_NOISE: o->noise = num_arg("--noise", a, 0, 1e6); break;
        case O_FEATURES: o->features = (size_t)num_arg("--features", a, 1, 2147483647.0); break;
        case O_SCALE: o->scale = (enum glm_scale)pick("--scale", a, scales, 3); break;
        case O_SAVE: o->save_data = a; break;
        case O_LOSS: o->t.loss = (enum glm_loss)pick("--loss", a, glm_loss_names, 3); break;
        case O_LR: o->t.lr = num_arg("--lr", a, 0, 1e6); break;
        case O_LR_DECAY: o->t.lr_decay = num_arg("--lr-decay", a, 0, 1e6); break;
        case O_L2: o->t.l2 = num_arg("--l2", a, 0, 1e6); break;
        case O_BATCH: o->t.batch = (size_t)num_arg("--batch", a, 1, 1e9); break;
        case O_MICRO: o->t.micro = (size_t)num_arg("--micro", a, 1, GLM_MAX_MICRO); break;
        case O_WINDOW: o->t.window = (int)num_arg("--window", a, 1, GLM_MAX_WINDOW); break;
        case O_EPOCHS: o->t.epochs = (int)num_arg("--epochs", a, 0, 1e6); break;
        case O_SHUFFLE: o->t.shuffle_seed = (uint64_t)num_arg("--shuffle", a, 0, 1e15); break;
        case O_TARGET: o->t.target = num_arg("--target", a, 0, 1e300); break;
        case O_EVAL: o->t.eval_steps = (int)num_arg("--eval-steps", a, 0, 1e9); break;
        case O_DP: o->t.data_parallel = 1; break;
        case O_COMM: o->c.kind = (enum glm_comm_kind)pick("--comm", a, glm_comm_names, 3); break;
        case O_FIXED: o->c.fixed_bits = (int)num_arg("--fixed-bits", a, 0, 30); break;
        case O_BUSY: o->c.busy_poll_us = (int)num_arg("--busy-poll", a, 0, 1000000); break;
        case O_SWITCH: o->c.switch_addr = a; break;
        case O_RANK: o->c.rank = (int)num_arg("--rank", a, 0, INA_MAX_WORKERS - 1); break;
        case O_WORLD: o->c.world = (int)num_arg("--world", a, 1, INA_MAX_WORKERS); break;
        case O_JOB: o->c.job = a; break;
        case O_LOCAL: o->l.n = (int)num_arg("--local", a, 1, INA_MAX_WORKERS); break;
        case O_SWBIN: o->l.switch_bin = a; break;
        case O_SWOPT:
            if (o->l.nswitch_args == 32)
                usage_error("--switch-opt: at most 32");
            o->switch_args[o->l.nswitch_args++] = a;
            break;
        case O_BIAS: o->bias = 1; break;
        case O_JSON: o->json = 1; break;
        case O_QUIET: o->quiet = 1; break;
        case O_HELP: usage(stdout); exit(0);
        case ':': usage_error("option '%s' needs a value", argv[optind - 1]);
        default: usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    if (!o->data == !o->gen)
        usage_error("give one of --data FILE and --gen SHAPE");
    if (o->l.n && o->c.kind != GLM_COMM_INA)
        usage_error("--local N starts ina workers: it needs --comm ina (MPI: use mpirun)");
    if ((o->l.switch_bin || o->l.nswitch_args) && !o->l.n)
        usage_error("--switch-bin and --switch-opt only apply with --local");
    if (o->l.n && (o->c.switch_addr || o->c.rank >= 0 || o->c.world))
        usage_error("--local N sets the switch, ranks and world itself");
    if (o->c.kind != GLM_COMM_INA && (o->c.switch_addr || o->c.job || o->c.busy_poll_us >= 0))
        usage_error("--switch, --job and --busy-poll are for --comm ina");
    if (!o->t.window) { /* every micro-batch of a mini-batch in flight */
        size_t per_batch = (o->t.batch + o->t.micro - 1) / o->t.micro;
        o->t.window = per_batch < GLM_MAX_WINDOW ? (int)per_batch : GLM_MAX_WINDOW;
    }
    o->c.window = o->t.window;
    /* --local with --busy-poll: the switch it starts busy-polls too (a spinning worker
     * gains little while the switch sleeps), unless --switch-opt already says how. */
    if (o->l.n && o->c.busy_poll_us > 0) {
        int given = 0;
        for (int i = 0; i < o->l.nswitch_args; i++)
            given |= strncmp(o->switch_args[i], "--busy-poll", 11) == 0;
        const int cap = (int)(sizeof(o->switch_args) / sizeof(o->switch_args[0]));
        if (!given && o->l.nswitch_args + 2 <= cap) {
            static char us[16];
            snprintf(us, sizeof(us), "%d", o->c.busy_poll_us);
            o->switch_args[o->l.nswitch_args++] = "--busy-poll";
            o->switch_args[o->l.nswitch_args++] = us;
        }
    }
}

/* ---- Output ------------------------------------------------------------------------- */

struct out {
    const struct cli *o;
    const struct glm_comm *c;
};

static void jnum(const char *k, double v, int last)
{
    if (isfinite(v))
        printf("\"%s\":%.9g%s", k, v, last ? "" : ",");
    else
        printf("\"%s\":null%s", k, last ? "" : ",");
}

static void report(const struct glm_progress *p, void *arg)
{
    const struct out *u = arg;
    if (u->c->rank != 0 || u->o->quiet)
        return;
    if (u->o->json) {
        printf("{\"epoch\":%d,\"step\":%zu,", p->epoch, p->step);
        jnum("objective", p->ev.objective, 0);
        jnum("loss", p->ev.loss, 0);
        jnum("accuracy", p->ev.accuracy, 0);
        jnum("rmse", p->ev.rmse, 0);
        jnum("model_err", p->ev.model_err, 0);
        jnum("epoch_s", p->epoch_s, 0);
        jnum("compute_s", p->compute_s, 0);
        jnum("comm_s", p->comm_s, 0);
        jnum("wait_s", p->wait_s, 0);
        jnum("cpu_s", p->cpu_s, 0);
        printf("\"rounds\":%zu,", p->rounds);
        jnum("train_s", p->train_s, 1);
        printf("}\n");
    } else {
        printf("%5d %8zu %12.6g %12.6g %9.4f %9.4g %9.4g %9.4f %9.4f %9.4f %9.3f\n", p->epoch,
               p->step, p->ev.objective, p->ev.loss, p->ev.accuracy, p->ev.rmse,
               p->ev.model_err, p->epoch_s, p->compute_s, p->comm_s, p->train_s);
    }
    fflush(stdout);
}

static int load(const struct cli *o, struct glm_dataset *ds, char *err, size_t errlen)
{
    if (o->data) {
        if (glm_libsvm_load(o->data, o->features, ds, err, errlen) != 0)
            return -1;
    } else {
        struct glm_shape sh;
        if (glm_shape_parse(o->gen, &sh, err, errlen) != 0 ||
            glm_generate(&sh, o->seed, o->t.loss != GLM_SQUARED, o->noise, ds, err, errlen) != 0)
            return -1;
    }
    if (glm_scale(ds, o->scale, err, errlen) != 0)
        return -1;
    if (o->bias && glm_add_bias(ds) != 0) {
        snprintf(err, errlen, "out of memory adding the bias feature");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct cli o;
    char err[640] = "";
    parse(argc, argv, &o);
    if (o.l.n && !getenv("INA_GLM_WORKER"))
        return glm_launch_local(&o.l, argc, argv);

    struct glm_dataset ds;
    struct glm_comm comm;
    /* Communication first: an MPI rank's output is decided by its rank. */
    if (glm_comm_open(&comm, &o.c, &argc, &argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    if (load(&o, &ds, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: rank %d: %s\n", prog, comm.rank, err);
        glm_comm_close(&comm);
        return 1;
    }
    if ((size_t)comm.world > ds.x.ncols && !o.t.data_parallel) {
        fprintf(stderr, "%s: %d workers for %zu features: some would hold none\n", prog,
                comm.world, ds.x.ncols);
        glm_dataset_free(&ds);
        glm_comm_close(&comm);
        return 1;
    }
    int rc = 0;
    if (o.save_data && comm.rank == 0) {
        FILE *f = fopen(o.save_data, "w");
        if (!f || glm_libsvm_write(&ds, f) != 0) {
            fprintf(stderr, "%s: cannot write %s: %s\n", prog, o.save_data, strerror(errno));
            rc = 1;
        }
        if (f)
            fclose(f);
    }
    struct out u = {&o, &comm};
    if (comm.rank == 0 && !o.quiet && !o.json) {
        printf("# ina-glm: %s: %zu samples x %zu features, %zu nonzeros (%.3g%%)\n", ds.name,
               ds.x.nrows, ds.x.ncols, ds.x.nnz,
               100.0 * (double)ds.x.nnz / ((double)ds.x.nrows * (double)ds.x.ncols));
        printf("# %s loss, lr %g (decay %g), l2 %g, batch %zu, micro-batches of %zu, %d in "
               "flight, %d epochs, %s over %d worker%s; %s\n", glm_loss_names[o.t.loss], o.t.lr,
               o.t.lr_decay, o.t.l2, o.t.batch, o.t.micro, o.t.window, o.t.epochs,
               o.t.data_parallel ? "data-parallel" : "model-parallel", comm.world,
               comm.world > 1 ? "s" : "", comm.desc);
        printf("%5s %8s %12s %12s %9s %9s %9s %9s %9s %9s %9s\n", "epoch", "steps", "objective",
               "loss", "accuracy", "rmse", "model_err", "epoch_s", "compute_s", "comm_s",
               "train_s");
    }
    struct glm_result res;
    if (rc == 0 && glm_train(&ds, &o.t, &comm, report, &u, &res, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: rank %d: %s\n", prog, comm.rank, err);
        rc = 1;
    }
    if (rc == 0 && comm.rank == 0) {
        if (o.json) {
            printf("{\"summary\":true,\"comm\":\"%s\",\"workers\":%d,\"data\":\"%s\","
                   "\"samples\":%zu,\"features\":%zu,\"loss_fn\":\"%s\",\"batch\":%zu,"
                   "\"micro\":%zu,\"window\":%d,\"data_parallel\":%s,\"fixed_bits\":%d,"
                   "\"epochs_run\":%d,\"reached\":%s,", glm_comm_names[comm.kind], comm.world,
                   ds.name, ds.x.nrows, ds.x.ncols, glm_loss_names[o.t.loss], o.t.batch,
                   o.t.micro, o.t.window, o.t.data_parallel ? "true" : "false", comm.fixed_bits,
                   res.epochs_run, res.reached ? "true" : "false");
            jnum("target", o.t.target, 0);
            jnum("time_to_target_s", res.reached ? res.time_to_target : NAN, 0);
            jnum("objective", res.final.objective, 0);
            jnum("accuracy", res.final.accuracy, 0);
            jnum("model_err", res.final.model_err, 1);
            printf("}\n");
        } else if (o.t.target > 0) {
            if (res.reached)
                printf("# time to target %g: %.4f s of training\n", o.t.target,
                       res.time_to_target);
            else
                printf("# target %g not reached in %d epochs (objective %g)\n", o.t.target,
                       res.epochs_run, res.final.objective);
        }
    }
    glm_dataset_free(&ds);
    glm_comm_close(&comm);
    return rc;
}
