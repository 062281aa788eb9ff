/* mlf_train.c: ina-mlf, one worker of asynchronous, bounded-staleness training on ina-ps with
 * MLfabric's scheduler and replica (docs/MLFABRIC.md). The model: dense least squares. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/addr.h"
#include "ina.h"
#include "mlf_client.h"

#define DIM 64

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-mlf --ps ADDR:PORT --rank R --world N [options]\n"
            "\n"
            "One worker of asynchronous training with bounded staleness on ina-ps\n"
            "(MLfabric, docs/MLFABRIC.md). Each worker pulls the model and its version,\n"
            "computes a minibatch gradient of a dense least-squares model (synthetic data\n"
            "of a fixed seed), and sends the update to the server and its replica\n"
            "(--replica) with the stamp of a grant from ina-sched (--sched), asked for\n"
            "before the pull (fetch mode) or before the update. The server applies it if\n"
            "it lags at most D versions. All ranks stop once the model reaches --updates\n"
            "versions (a rank holding a grant still sends that update, so no stamp is\n"
            "left unused); rank 0 reports the loss as it goes.\n"
            "\n"
            "Options:\n"
            "  --ps ADDR:PORT        the primary ina-ps (required)\n"
            "  --replica ADDR:PORT   its replica (an ina-ps fed the same stamped updates)\n"
            "  --sched ADDR:PORT     ina-sched; without it updates go unscheduled (FIFO)\n"
            "  --sched-mode M        fetch: ask before pulling the model, so that no pull\n"
            "                        and no update is wasted (default); update: pull, then\n"
            "                        ask before sending (the request may be refused STALE)\n"
            "  --rank R, --world N   this worker's rank and the number of workers (required)\n"
            "  --job NAME            the job's name (default mlf)\n"
            "  --max-delay D         staleness bound D, 0..255 (default 2; 0 = synchronous)\n"
            "  --keys K              model size: K keys of %d floats (default 16)\n"
            "  --updates U           stop when the model has version U (default 800)\n"
            "  --batch B             samples per gradient (default 16)\n"
            "  --lr X                SGD learning rate at the server (default 8)\n"
            "  --target-loss L       report the version and time when the loss reaches L\n"
            "                        (default 0.05 x the initial loss; every rank checks\n"
            "                        each model it pulls)\n"
            "  --compute-ms MS       extra compute time per gradient, emulated (default 0)\n"
            "  --rto-ms MS           resend an unanswered datagram after MS (default 5)\n"
            "  --failover-ms MS      a server silent this long is dead (default 1500)\n"
            "  --sched-timeout-ms MS no grant this long: send unscheduled (default 1000)\n"
            "  --join-timeout-ms MS  deadline for all ranks to join (default 30000)\n"
            "  --help                this text\n",
            DIM);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float unif(uint64_t *s) { return (float)((splitmix(s) >> 40) * (2.0 / 16777216.0) - 1.0); }

/* One sample: x uniform with E|x|^2 = 1, y = w*.x (w* uniform in [-1, 1] from a fixed seed). */
static float sample(const float *wstar, size_t p, uint64_t *s, float *x)
{
    float scale = sqrtf(3.0f / (float)p), y = 0;
    for (size_t i = 0; i < p; i++) {
        x[i] = unif(s) * scale;
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
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    static struct mlf_client c;
    const char *ps = NULL, *replica = NULL, *sched = NULL, *job = "mlf", *mode = "fetch";
    long rank = -1, world = 0, D = 2, keys = 16, updates = 800, batch = 16;
    double lr = 8, target = -1, compute_ms = 0, rto = 5, failover = 1500, sched_to = 1000,
           join_to = 30000;
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        double v = 0;
        if (opt != 'P' && opt != 'R' && opt != 'S' && opt != 'j' && opt != 'm' && opt != 'h' &&
            opt != '?') {
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
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!ps || world < 1 || world > INA_MAX_WORKERS || rank < 0 || rank >= world || D > 255 ||
        keys < 1 || keys > 240 || batch < 1 || updates < 1 || strlen(job) >= 32 || !*job ||
        rto < 1 || failover < rto || sched_to < rto ||
        (strcmp(mode, "fetch") != 0 && strcmp(mode, "update") != 0)) {
        fprintf(stderr, "ina-mlf: need --ps, --rank R < --world N <= %d; --max-delay <= 255, "
                        "--keys 1..240, --batch and --updates >= 1, a job name of 1..31 "
                        "characters, timeouts >= --rto-ms >= 1, --sched-mode fetch or update "
                        "(see --help)\n",
                INA_MAX_WORKERS);
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
    const char *addrs[2] = {ps, replica};
    for (int i = 0; i < 2 && addrs[i]; i++) {
        if (ina_parse_hostport(addrs[i], 1, &c.srv[i].addr) != 0) {
            fprintf(stderr, "ina-mlf: cannot parse or resolve '%s' (want ADDR:PORT)\n", addrs[i]);
            return 2;
        }
        c.nsrv++;
    }
    if (sched) {
        if (ina_parse_hostport(sched, 1, &c.sched) != 0) {
            fprintf(stderr, "ina-mlf: cannot parse or resolve --sched '%s'\n", sched);
            return 2;
        }
        c.use_sched = 1;
        c.fetch = strcmp(mode, "fetch") == 0;
    }
    struct ina_ps_join *j = &c.join;
    j->world = (uint16_t)world;
    j->nshards = 1;
    j->dim = DIM;
    j->optim = 0; /* SGD */
    j->mode = INA_PS_MODE_STALE;
    j->max_delay = (uint8_t)D;
    j->lr = (float)lr;
    j->eps = 1.0f;
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
    uint64_t s = 1;
    for (size_t i = 0; i < p; i++)
        wstar[i] = unif(&s);
    uint64_t data = 1000003ull * (uint64_t)(rank + 1);
    memset(w, 0, p * sizeof(float));
    double loss0 = eval_loss(w, wstar, p), hit_s = -1; /* the model starts at 0 */
    if (target < 0)
        target = 0.05 * loss0;
    uint64_t t0 = mono_ns(), start_ms = unix_ms(), hit_ms = 0;
    uint32_t version = 0, hit_v = 0, delay_max = 0;
    int iters = 0;
    for (;;) {
        if ((rc = mlf_begin(&c)) != 0 || (rc = mlf_pull(&c, w, &version)) != 0)
            break;
        double loss = eval_loss(w, wstar, p);
        if (hit_s < 0 && loss <= target) {
            hit_s = (double)(mono_ns() - t0) / 1e9;
            hit_ms = unix_ms();
            hit_v = version;
            if (rank == 0)
                printf("mlf: target loss %.6g reached at version %u after %.3f s\n", target,
                       version, hit_s);
        }
        if (rank == 0 && iters % 50 == 0)
            printf("mlf: version %u loss %.6g (%.2f s)\n", version, loss,
                   (double)(mono_ns() - t0) / 1e9);
        fflush(stdout);
        /* Done; but a grant held is a stamp the servers wait for: send its update. */
        int last = version >= (uint32_t)updates;
        if (last && !c.granted)
            break;
        memset(g, 0, p * sizeof(float));
        for (long n = 0; n < batch; n++) {
            float y = sample(wstar, p, &data, x), f = 0;
            for (size_t i = 0; i < p; i++)
                f += w[i] * x[i];
            for (size_t i = 0; i < p; i++)
                g[i] += (f - y) * x[i] / (float)batch;
        }
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
    double secs = (double)(mono_ns() - t0) / 1e9;
    if (rank == 0 && rc == 0)
        printf("mlf: final version %u loss %.6g (initial %.6g) in %.3f s; target %.6g %s at "
               "version %u (%.3f s)\n",
               version, eval_loss(w, wstar, p), loss0, secs, target,
               hit_s >= 0 ? "reached" : "NOT reached", hit_v, hit_s);
    printf("mlf rank %ld: %s iterations %d applied %llu stale %llu sched_refused %llu "
           "delay_max %u retransmits %llu failovers %llu fallbacks %llu bytes_primary %llu "
           "bytes_replica %llu target_version %u target_unix_ms %llu start_unix_ms %llu\n",
           rank, rc == 0 ? "ok" : ina_strerror(rc), iters, (unsigned long long)c.st.applied,
           (unsigned long long)c.st.stale, (unsigned long long)c.st.sched_refused, delay_max,
           (unsigned long long)c.st.retransmits, (unsigned long long)c.st.failovers,
           (unsigned long long)c.st.fallbacks, (unsigned long long)c.st.tx_bytes[0],
           (unsigned long long)c.st.tx_bytes[1], hit_s >= 0 ? hit_v : 0,
           (unsigned long long)hit_ms, (unsigned long long)start_ms);
    if (delay_max > (uint32_t)D) {
        fprintf(stderr, "mlf rank %ld: an update was applied with delay %u > D = %ld\n", rank,
                delay_max, D);
        rc = 1;
    }
    mlf_leave(&c);
    free(w);
    free(g);
    free(wstar);
    free(x);
    return rc == 0 ? 0 : 1;
}
