/* mlf_train.c: ina-mlf, one worker of asynchronous, bounded-staleness training on ina-ps with
 * MLfabric's scheduler and replica (docs/MLFABRIC.md). The models: dense least squares, a
 * small MLP classifier (mlf_mlp.h), or the CTR application's logistic regression over hashed
 * features (mlf_ctr.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/addr.h"
#include "common/optim.h"
#include "ina.h"
#include "mlf_client.h"
#include "mlf_ctr.h"
#include "mlf_mlp.h"
#include "mlf_rng.h"

#define DIM 64

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-mlf --ps ADDR:PORT --rank R --world N [options]\n"
            "\n"
            "One worker of asynchronous training with bounded staleness on ina-ps\n"
            "(MLfabric, docs/MLFABRIC.md). Each worker pulls the model and its version,\n"
            "computes a minibatch gradient (--model: dense least squares, an MLP\n"
            "classifier, or CTR logistic regression; synthetic data of a fixed seed), and\n"
            "sends the update to the server and its replica\n"
            "(--replica) with the stamp of a grant from ina-sched (--sched), asked for\n"
            "before the pull (fetch mode) or before the update. The server applies it if\n"
            "it lags at most D versions. All ranks stop once the model reaches --updates\n"
            "versions (a rank holding a grant still sends that update, so no stamp is\n"
            "left unused); rank 0 reports the loss as it goes.\n"
            "\n"
            "Options:\n"
            "  --ps ADDR:PORT        the primary ina-ps (required)\n"
            "  --replica ADDR:PORT   its replica (an ina-ps fed the same stamped updates)\n"
            "  --replication R       send: this worker sends each stamped update to the\n"
            "                        primary and to the replica (default); chain: to the\n"
            "                        primary only, which forwards it (ina-ps --chain-to)\n"
            "                        and answers once the replica has it\n"
            "  --sched ADDR:PORT     ina-sched; without it updates go unscheduled (FIFO)\n"
            "  --switch ADDR:PORT    an ina-switch for opportunistic aggregation: when\n"
            "                        ina-sched (--aggregate K) grants several fetch\n"
            "                        requests as one group, the members sum their updates\n"
            "                        there and one of them sends the sum (one update, one\n"
            "                        version); without it this rank is never grouped\n"
            "  --agg-reduce R        what a group's leader sends: sum (default; for SGD the\n"
            "                        step of its members' updates one after another) or\n"
            "                        mean (one step of a k-times larger batch: for models\n"
            "                        whose learning rate is tuned for one update a version)\n"
            "  --agg-pull P          how a group's members get the model: server (default:\n"
            "                        each pulls it) or switch (the leader pulls it and the\n"
            "                        switch gives it to the others: one pull from the\n"
            "                        server per group, for a server whose link is the\n"
            "                        bottleneck and a switch at line rate)\n"
            "  --agg-timeout-ms MS   deadline of a group's sum; past it the leader sends\n"
            "                        its own update alone and the others' are dropped\n"
            "                        (default 1000)\n"
            "  --sched-mode M        fetch: ask before pulling the model, so that no pull\n"
            "                        and no update is wasted (default); update: pull, then\n"
            "                        ask before sending (the request may be refused STALE)\n"
            "  --rank R, --world N   this worker's rank and the number of workers (required);\n"
            "                        with --start-ranks, N is the most ranks the job has\n"
            "  --start-ranks M       the job starts once M ranks joined (default N); ranks\n"
            "                        M..N-1 may join it while it runs: each pulls the\n"
            "                        current model and is scheduled from then on. A rank\n"
            "                        is used once: a restarted worker takes a free one\n"
            "  --job NAME            the job's name (default mlf)\n"
            "  --max-delay D         staleness bound D, 0..254 (default 2; 0: only updates\n"
            "                        computed on the current model are applied), or\n"
            "                        unbounded (255 on the wire): every update applied,\n"
            "                        whatever its delay (unbounded asynchronous training)\n"
            "  --sync                synchronous training instead: ina-ps's SYNC mode, a\n"
            "                        barrier per version (every rank pushes its gradient\n"
            "                        of version v, the server applies their sum once all\n"
            "                        committed, then the ranks pull v + 1); no --sched,\n"
            "                        --replica, --switch or --start-ranks\n"
            "  --model M             lsq: least squares, y = w*.x, loss |w - w*|^2 / 2p\n"
            "                        exactly (default); mlp: a classifier of %d inputs, %d\n"
            "                        ReLU units and %d classes (%zu parameters, 44 keys,\n"
            "                        random initial values) on labels from a fixed teacher\n"
            "                        network; loss: cross-entropy on %d held-out samples;\n"
            "                        ctr: the CTR application's click logs (ina-ctr-gen's\n"
            "                        generator, %d keys, Zipf 1.0), logistic regression\n"
            "                        with the features hashed into the model's K x 64\n"
            "                        weights (--keys, default 240), loss: log-loss on %d\n"
            "                        held-out samples (AUC and the planted model's\n"
            "                        log-loss reported)\n"
            "  --keys K              lsq, ctr: model size, K keys of %d floats (default\n"
            "                        lsq 16, ctr 240)\n"
            "  --updates U           stop when the model has version U (default 800)\n"
            "  --batch B             samples per gradient (default lsq 16, mlp 32, ctr 64)\n"
            "  --lr X                SGD learning rate at the server (default lsq 8, mlp\n"
            "                        0.1, ctr 1)\n"
            "  --target-loss L       report the version and time when the loss reaches L\n"
            "                        (default lsq 0.05, mlp 0.42 x the initial loss; ctr:\n"
            "                        45%% of the way from the planted model's log-loss to\n"
            "                        the initial one; lsq: every rank checks each model it\n"
            "                        pulls; mlp, ctr: every 4th)\n"
            "  --stop-at-target      stop once this rank sees a model at the target loss\n"
            "                        (as at --updates: a grant held is used first); with\n"
            "                        --sync every rank checks every version, so all stop\n"
            "                        at the same one\n"
            "  --compute-ms MS       extra compute time per gradient, emulated (default 0)\n"
            "  --rto-ms MS           resend an unanswered datagram after MS (default 5)\n"
            "  --failover-ms MS      a server silent this long is dead (default 1500)\n"
            "  --sched-timeout-ms MS no grant this long: warn, send nothing unscheduled (the\n"
            "                        bound and the replica are kept) and keep asking, so\n"
            "                        that a restarted ina-sched takes over (default 1000)\n"
            "  --sched-fallback-ms MS  no grant this long: send unscheduled from then on\n"
            "                        (FIFO; the replica is left behind) (default 30000; at\n"
            "                        most --sched-timeout-ms: at once)\n"
            "  --trace               print each update's outcome (applied, refused, voided)\n"
            "                        on stderr as it comes\n"
            "  --join-timeout-ms MS  deadline for all ranks to join, and with --sync for\n"
            "                        all to commit each step (default 30000)\n"
            "  --help                this text\n",
            MLF_MLP_IN, MLF_MLP_HIDDEN, MLF_MLP_OUT, MLF_MLP_PARAMS, MLF_MLP_EVAL, MLF_CTR_KEYS,
            MLF_CTR_EVAL, DIM);
}

/* One sample: x uniform with E|x|^2 = 1, y = w*.x (w* uniform in [-1, 1] from a fixed seed). */
static float sample(const float *wstar, size_t p, uint64_t *s, float *x)
{
    float scale = sqrtf(3.0f / (float)p), y = 0;
    for (size_t i = 0; i < p; i++) {
        x[i] = mlf_unif(s) * scale;
        y += wstar[i] * x[i];
    }
    return y;
}

/*
 * The expected loss over the data distribution, exactly: E[(w - w*).x]^2 / 2 with x_i
 * independent, mean 0, variance 1/p, is |w - w*|^2 / 2p. It costs p operations, so every
 * rank evaluates every model it pulls, and the first to see the target times it.
 */
static double eval_loss(const float *w, const float *wstar, size_t p)
{
    double sum = 0;
    for (size_t i = 0; i < p; i++)
        sum += (double)(w[i] - wstar[i]) * (w[i] - wstar[i]);
    return sum / (2.0 * (double)p);
}

/* The model a worker trains (--model), and what each needs. */
struct model {
    enum { MODEL_LSQ, MODEL_MLP, MODEL_CTR } kind;
    size_t p;            /* floats in the model */
    const float *wstar;  /* lsq: the planted model */
    float *x;            /* lsq: one sample */
    uint64_t data;       /* lsq, mlp: this worker's sample stream */
    struct mlf_mlp *mlp;
    struct mlf_ctr *ctr;
};

/* The loss of w; *metric (if not NULL): the MLP's accuracy or the CTR model's AUC. */
static double model_eval(struct model *m, const float *w, double *metric)
{
    switch (m->kind) {
    case MODEL_MLP: return mlf_mlp_eval(m->mlp, w, metric);
    case MODEL_CTR: return mlf_ctr_eval(m->ctr, w, metric);
    default: return eval_loss(w, m->wstar, m->p);
    }
}

/* g = the gradient of the mean loss of w over the worker's next batch samples. */
static void model_grad(struct model *m, const float *w, long batch, float *g)
{
    if (m->kind == MODEL_MLP) {
        mlf_mlp_grad(m->mlp, w, (int)batch, &m->data, g); /* the padding of g stays 0 */
        return;
    }
    if (m->kind == MODEL_CTR) {
        mlf_ctr_grad(m->ctr, w, (int)batch, g);
        return;
    }
    memset(g, 0, m->p * sizeof(float));
    for (long n = 0; n < batch; n++) {
        float y = sample(m->wstar, m->p, &m->data, m->x), f = 0;
        for (size_t i = 0; i < m->p; i++)
            f += w[i] * m->x[i];
        for (size_t i = 0; i < m->p; i++)
            g[i] += (f - y) * m->x[i] / (float)batch;
    }
}

static uint64_t unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"ps", required_argument, 0, 'P'},           {"replica", required_argument, 0, 'R'},
        {"sched", required_argument, 0, 'S'},        {"rank", required_argument, 0, 'r'},
        {"world", required_argument, 0, 'w'},        {"job", required_argument, 0, 'j'},
        {"max-delay", required_argument, 0, 'D'},    {"keys", required_argument, 0, 'k'},
        {"updates", required_argument, 0, 'U'},      {"batch", required_argument, 0, 'b'},
        {"lr", required_argument, 0, 'l'},           {"target-loss", required_argument, 0, 't'},
        {"compute-ms", required_argument, 0, 'c'},   {"rto-ms", required_argument, 0, 'o'},
        {"failover-ms", required_argument, 0, 'f'},  {"sched-timeout-ms", required_argument, 0, 's'},
        {"join-timeout-ms", required_argument, 0, 'J'}, {"sched-mode", required_argument, 0, 'm'},
        {"model", required_argument, 0, 'M'},       {"switch", required_argument, 0, 'X'},
        {"agg-timeout-ms", required_argument, 0, 'T'}, {"replication", required_argument, 0, 'E'},
        {"agg-reduce", required_argument, 0, 'G'},   {"start-ranks", required_argument, 0, 'W'},
        {"sched-fallback-ms", required_argument, 0, 'F'}, {"trace", no_argument, 0, 'Z'},
        {"sync", no_argument, 0, 'Y'},           {"stop-at-target", no_argument, 0, 'K'},
        {"agg-pull", required_argument, 0, 'A'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    static struct mlf_client c;
    const char *ps = NULL, *replica = NULL, *sched = NULL, *job = "mlf", *mode = "fetch",
               *model = "lsq", *sw = NULL, *replication = "send", *agg_reduce = "sum",
               *agg_pull = "server";
    long rank = -1, world = 0, D = 2, keys = -1, updates = 800, batch = -1, start_ranks = 0;
    double lr = -1, target = -1, compute_ms = 0, rto = 5, failover = 1500, sched_to = 1000,
           join_to = 30000, agg_to = 1000, sched_fallback = 30000;
    int trace = 0, sync = 0, stop_at_target = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        double v = 0;
        if (opt == 'D' && strcmp(optarg, "unbounded") == 0) {
            D = INA_PS_DELAY_UNBOUNDED;
            continue;
        }
        if (opt != 'P' && opt != 'R' && opt != 'S' && opt != 'j' && opt != 'm' && opt != 'M' &&
            opt != 'X' && opt != 'E' && opt != 'G' && opt != 'Z' && opt != 'Y' && opt != 'K' &&
            opt != 'A' && opt != 'h' && opt != '?') {
            v = strtod(optarg, &end);
            if (end == optarg || *end || !(v >= 0) || v > 1e9) {
                fprintf(stderr, "ina-mlf: bad number '%s' (see --help)\n", optarg);
                return 2;
            }
        }
        switch (opt) {
        case 'P': ps = optarg; break;
        case 'R': replica = optarg; break;
        case 'S': sched = optarg; break;
        case 'j': job = optarg; break;
        case 'm': mode = optarg; break;
        case 'M': model = optarg; break;
        case 'X': sw = optarg; break;
        case 'G': agg_reduce = optarg; break;
        case 'A': agg_pull = optarg; break;
        case 'E': replication = optarg; break;
        case 'T': agg_to = v; break;
        case 'r': rank = (long)v; break;
        case 'w': world = (long)v; break;
        case 'D': D = (long)v; break;
        case 'k': keys = (long)v; break;
        case 'U': updates = (long)v; break;
        case 'b': batch = (long)v; break;
        case 'l': lr = v; break;
        case 't': target = v; break;
        case 'c': compute_ms = v; break;
        case 'o': rto = v; break;
        case 'f': failover = v; break;
        case 's': sched_to = v; break;
        case 'J': join_to = v; break;
        case 'W': start_ranks = (long)v; break;
        case 'F': sched_fallback = v; break;
        case 'Z': trace = 1; break;
        case 'Y': sync = 1; break;
        case 'K': stop_at_target = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    int mlp = strcmp(model, "mlp") == 0, ctr = strcmp(model, "ctr") == 0;
    if (!mlp && !ctr && strcmp(model, "lsq") != 0) {
        fprintf(stderr, "ina-mlf: --model is lsq, mlp or ctr, not '%s' (see --help)\n", model);
        return 2;
    }
    if (mlp && keys >= 0) {
        fprintf(stderr, "ina-mlf: --keys is for --model lsq and ctr (the MLP has its own size)\n");
        return 2;
    }
    if (mlp)
        keys = (long)((MLF_MLP_PARAMS + DIM - 1) / DIM);
    else if (keys < 0)
        keys = ctr ? 240 : 16;
    if (batch < 0)
        batch = mlp ? 32 : ctr ? 64 : 16;
    if (lr < 0)
        lr = mlp ? 0.1 : ctr ? 1 : 8;
    if (!ps || world < 1 || world > INA_MAX_WORKERS || rank < 0 || rank >= world || D > 255 ||
        keys < 1 || keys > 240 || batch < 1 || updates < 1 || strlen(job) >= 32 || !*job ||
        rto < 1 || failover < rto || sched_to < rto || agg_to < 1 || agg_to > 600000 ||
        start_ranks > world ||
        (strcmp(mode, "fetch") != 0 && strcmp(mode, "update") != 0)) {
        fprintf(stderr, "ina-mlf: need --ps, --rank R < --world N <= %d; --max-delay <= 255, "
                        "--keys 1..240, --batch and --updates >= 1, --start-ranks <= N, a "
                        "job name of 1..31 "
                        "characters, timeouts >= --rto-ms >= 1, --agg-timeout-ms 1..600000, "
                        "--sched-mode fetch or update "
                        "(see --help)\n",
                INA_MAX_WORKERS);
        return 2;
    }
    if (sync && (sched || replica || sw || (start_ranks && start_ranks < world))) {
        fprintf(stderr, "ina-mlf: --sync trains with a barrier at ina-ps alone: no --sched, "
                        "--replica, --switch or --start-ranks (see --help)\n");
        return 2;
    }
    c.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int bufsz = 4 << 20;
    setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
    c.rank = (int)rank;
    c.nkeys = (uint32_t)keys;
    c.rto_ns = (uint64_t)(rto * 1e6);
    c.failover_ns = (uint64_t)(failover * 1e6);
    c.sched_timeout_ns = (uint64_t)(sched_to * 1e6);
    c.sched_fallback_ns = (uint64_t)(sched_fallback * 1e6);
    c.trace = trace;
    c.sync = sync;
    c.barrier_ns = (uint64_t)(join_to * 1e6);
    const char *addrs[2] = {ps, replica};
    for (int i = 0; i < 2 && addrs[i]; i++) {
        if (ina__parse_hostport(addrs[i], 1, &c.srv[i].addr) != 0) {
            fprintf(stderr, "ina-mlf: cannot parse or resolve '%s' (want ADDR:PORT)\n", addrs[i]);
            return 2;
        }
        c.nsrv++;
    }
    if (sched) {
        if (ina__parse_hostport(sched, 1, &c.sched) != 0) {
            fprintf(stderr, "ina-mlf: cannot parse or resolve --sched '%s'\n", sched);
            return 2;
        }
        c.use_sched = 1;
        c.fetch = strcmp(mode, "fetch") == 0;
    }
    if (strcmp(replication, "send") != 0 && strcmp(replication, "chain") != 0) {
        fprintf(stderr, "ina-mlf: --replication is send or chain, not '%s'\n", replication);
        return 2;
    }
    c.chain = strcmp(replication, "chain") == 0;
    if (strcmp(agg_reduce, "sum") != 0 && strcmp(agg_reduce, "mean") != 0) {
        fprintf(stderr, "ina-mlf: --agg-reduce is sum or mean, not '%s'\n", agg_reduce);
        return 2;
    }
    if (strcmp(agg_pull, "server") != 0 && strcmp(agg_pull, "switch") != 0) {
        fprintf(stderr, "ina-mlf: --agg-pull is server or switch, not '%s'\n", agg_pull);
        return 2;
    }
    if (sw) {
        struct sockaddr_in swa;
        if (ina__parse_hostport(sw, 1, &swa) != 0) {
            fprintf(stderr, "ina-mlf: cannot parse or resolve --switch '%s'\n", sw);
            return 2;
        }
        if (!sched || !c.fetch)
            fprintf(stderr, "ina-mlf: note: --switch takes effect only with --sched in fetch "
                            "mode (ina-sched --aggregate groups fetch requests)\n");
        c.agg_switch = sw;
        c.agg_timeout_ms = (int)agg_to;
        c.agg_mean = strcmp(agg_reduce, "mean") == 0;
        c.agg_pull_switch = strcmp(agg_pull, "switch") == 0;
    }
    struct ina_ps_join *j = &c.join;
    j->world = (uint16_t)world;
    j->nshards = 1;
    j->dim = DIM;
    j->optim = 0; /* SGD */
    j->mode = sync ? INA_PS_MODE_SYNC : INA_PS_MODE_STALE;
    j->max_delay = sync ? 0 : (uint8_t)D;
    j->start = sync ? 0 : (uint16_t)start_ranks; /* 0: every rank starts the job */
    j->lr = (float)lr;
    j->eps = 1.0f;
    if (mlp) { /* random initial values (PROTOCOL.md §14.1): an MLP at 0 cannot break symmetry */
        j->init = INA_INIT_UNIFORM;
        j->init_scale = 0.2f;
        j->init_seed = 7;
    }
    j->sw_version = INA_VERSION_NUMBER;
    snprintf(j->name, sizeof(j->name), "%s", job);
    int rc = mlf_join(&c, (uint64_t)(join_to * 1e6));
    if (rc != 0)
        return 1;
    size_t p = (size_t)keys * DIM;
    float *w = calloc(p, sizeof(float)), *g = calloc(p, sizeof(float)),
          *wstar = malloc(p * sizeof(float)), *x = malloc(p * sizeof(float));
    if (!w || !g || !wstar || !x) {
        fprintf(stderr, "ina-mlf: out of memory\n");
        return 1;
    }
    static struct mlf_mlp net;
    static struct mlf_ctr clicks;
    struct model m = {.kind = mlp ? MODEL_MLP : ctr ? MODEL_CTR : MODEL_LSQ, .p = p,
                      .wstar = wstar, .x = x, .data = 1000003ull * (uint64_t)(rank + 1),
                      .mlp = &net, .ctr = &clicks};
    double metric = 0; /* the MLP's accuracy, the CTR model's AUC */
    uint64_t s = 1;
    for (size_t i = 0; i < p; i++)
        wstar[i] = mlf_unif(&s);
    if (mlp)
        mlf_mlp_init(&net);
    if (ctr && mlf_ctr_init(&clicks, p, (uint32_t)rank) != 0) {
        fprintf(stderr, "ina-mlf: out of memory\n");
        return 1;
    }
    /* The model's version 0, as the server starts it (PROTOCOL.md §14.1). */
    for (size_t i = 0; i < p; i++)
        w[i] = ina__param_init(j->init, j->init_scale, j->init_seed, i / DIM, (unsigned)(i % DIM));
    double loss0 = model_eval(&m, w, NULL), hit_s = -1;
    if (target < 0)
        target = ctr ? clicks.bayes + 0.45 * (loss0 - clicks.bayes) : (mlp ? 0.42 : 0.05) * loss0;
    uint64_t t0 = ina__clock_ns(), start_ms = unix_ms(), hit_ms = 0;
    uint32_t version = 0, hit_v = 0, delay_max = 0;
    int iters = 0;
    for (;;) {
        if ((rc = mlf_begin(&c)) != 0 || (rc = mlf_fetch(&c, w, &version)) != 0)
            break;
        if (sync)
            version = c.step; /* a SYNC job's pull does not say its version: the steps applied */
        /* The MLP's and the CTR model's evaluations cost a few gradients: each rank checks
         * every 4th model; with --sync every rank checks every version (the same model on
         * every rank: they see the target at the same version). */
        int check = m.kind == MODEL_LSQ || sync || (iters + rank) % 4 == 0;
        double loss = check ? model_eval(&m, w, mlp ? &metric : NULL) : -1;
        if (check && hit_s < 0 && loss <= target) {
            hit_s = (double)(ina__clock_ns() - t0) / 1e9;
            hit_ms = unix_ms();
            hit_v = version;
            if (rank == 0)
                printf("mlf: target loss %.6g reached at version %u after %.3f s\n", target,
                       version, hit_s);
        }
        if (rank == 0 && iters % 50 == 0 && check) {
            printf("mlf: version %u loss %.6g", version, loss);
            if (mlp)
                printf(" accuracy %.3f", metric);
            printf(" (%.2f s)\n", (double)(ina__clock_ns() - t0) / 1e9);
        }
        fflush(stdout);
        /* Done; but a grant held is a stamp the servers wait for: send its update. */
        int last = version >= (uint32_t)updates || (stop_at_target && hit_s >= 0);
        if (last && !c.granted)
            break;
        model_grad(&m, w, batch, g);
        if (compute_ms > 0)
            usleep((useconds_t)(compute_ms * 1000));
        struct mlf_result res;
        if ((rc = mlf_update(&c, g, version, &res)) != 0)
            break;
        if (res.status == 0 && res.delay > delay_max)
            delay_max = res.delay;
        if (last)
            break;
        iters++;
    }
    double secs = (double)(ina__clock_ns() - t0) / 1e9;
    if (rank == 0 && rc == 0) {
        double final = model_eval(&m, w, &metric);
        printf("mlf: final version %u loss %.6g (initial %.6g) in %.3f s; target %.6g %s at "
               "version %u (%.3f s)",
               version, final, loss0, secs, target, hit_s >= 0 ? "reached" : "NOT reached",
               hit_v, hit_s);
        if (mlp)
            printf("; held-out accuracy %.3f", metric);
        if (ctr)
            printf("; held-out AUC %.4f, the planted model's log-loss %.4f", metric, clicks.bayes);
        printf("\n");
    }
    printf("mlf rank %ld: %s iterations %d applied %llu stale %llu sched_refused %llu "
           "delay_max %u retransmits %llu failovers %llu fallbacks %llu bytes_primary %llu "
           "bytes_replica %llu groups_led %llu aggregated %llu agg_failures %llu voided %llu "
           "sched_waits %llu reattaches %llu shared_pulls %llu "
           "target_version %u target_unix_ms %llu start_unix_ms %llu\n",
           rank, rc == 0 ? "ok" : ina_strerror(rc), iters, (unsigned long long)c.st.applied,
           (unsigned long long)c.st.stale, (unsigned long long)c.st.sched_refused, delay_max,
           (unsigned long long)c.st.retransmits, (unsigned long long)c.st.failovers,
           (unsigned long long)c.st.fallbacks, (unsigned long long)c.st.tx_bytes[0],
           (unsigned long long)c.st.tx_bytes[1], (unsigned long long)c.st.groups_led,
           (unsigned long long)c.st.aggregated, (unsigned long long)c.st.agg_failures,
           (unsigned long long)c.st.voided, (unsigned long long)c.st.sched_waits,
           (unsigned long long)c.st.reattaches, (unsigned long long)c.st.shared_pulls,
           hit_s >= 0 ? hit_v : 0,
           (unsigned long long)hit_ms, (unsigned long long)start_ms);
    if (D != INA_PS_DELAY_UNBOUNDED && delay_max > (uint32_t)D) {
        fprintf(stderr, "mlf rank %ld: an update was applied with delay %u > D = %ld\n", rank,
                delay_max, D);
        rc = 1;
    }
    mlf_leave(&c);
    if (ctr)
        mlf_ctr_free(&clicks);
    free(w);
    free(g);
    free(wstar);
    free(x);
    return rc == 0 ? 0 : 1;
}
