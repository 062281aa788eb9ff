/* test_reproducible.c: 30 identical float32 all-reduces give one bit-identical result at N = 2, 3, 4 and 8 on UDP, rings, lanes, shards and the host fallback (issue 36 item 1: one-round sums used to follow the switch's arrival order). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "e2e/harness.h"

#define CALLS 30
#define COUNT 1000
#define NCASES 2 /* uniform random; mixed magnitudes */

static struct sw_proc sw, sw2;

struct path {
    const char *name;
    const char *const *sw_args;
    int lanes, elems, shards, blocker, float_add;
    int expect_path;
};

/* What the workers report: each rank's hash of its first result per case,
 * and the number of calls whose bits differed from that first result. */
struct shared {
    uint64_t hash[8][NCASES];
    int differing[8][NCASES];
};
static struct shared *sh;

/* Case 0: uniform in [-1, 1). Case 1: every rank's block has its own scale
 * (2^(6r)) and elements spread over 2^-20..2^20, so the ranks' block
 * exponents differ and the alignment of one-round sums is exercised. */
static float input(int c, int rank, size_t i)
{
    uint64_t x = h_mix(((uint64_t)rank << 56) ^ ((uint64_t)c << 40) ^ i ^ 0x36);
    double u = (double)(x >> 11) / 9007199254740992.0 * 2 - 1;
    if (c == 0)
        return (float)u;
    int spread = (int)(h_mix(x) % 41) - 20;
    return (float)ldexp(u, spread + 6 * rank);
}

static uint64_t hash_bits(const float *v, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        h = h_mix(h ^ b);
    }
    return h;
}

static int worker(int rank, int n, void *arg)
{
    const struct path *p = arg;
    char addr[128], one[64], job[32];
    snprintf(job, sizeof(job), "repro-%s-%d", p->name, n);
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, one, sizeof(one));
    if (p->shards > 1) {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d,127.0.0.1:%d", sw.port, sw2.port);
        cfg.switch_addr = addr;
    }
    cfg.lanes = p->lanes;
    cfg.elems_per_packet = (uint32_t)p->elems;
    cfg.float_add = p->float_add;
    cfg.timeout_ms = 10000;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "%s rank %d: ina_init: %s (%s)\n", job, rank, ina_err_name(rc),
                ina_last_error(NULL));
        return 1;
    }
    ina_info info;
    int fails = ina_get_info(ctx, &info) != 0 || info.path != p->expect_path;
    static float x[COUNT], first[COUNT];
    for (int c = 0; c < NCASES && !fails; c++) {
        for (int k = 0; k < CALLS && !fails; k++) {
            for (size_t i = 0; i < COUNT; i++)
                x[i] = input(c, rank, i);
            rc = ina_allreduce(ctx, x, x, COUNT, INA_FLOAT32, INA_SUM);
            if (rc) {
                fprintf(stderr, "%s rank %d case %d call %d: %s\n", job, rank, c, k,
                        ina_err_name(rc));
                fails++;
            } else if (k == 0) {
                memcpy(first, x, sizeof(x));
                sh->hash[rank][c] = hash_bits(x, COUNT);
            } else {
                sh->differing[rank][c] += memcmp(first, x, sizeof(x)) != 0;
            }
        }
    }
    return ina_finalize(ctx) || fails;
}

static void run_path(const struct path *p, int n)
{
    CHECK_EQ_INT(switch_start(&sw, p->sw_args), 0);
    if (p->shards > 1)
        CHECK_EQ_INT(switch_start(&sw2, p->sw_args), 0);
    ina_ctx *blocker = NULL;
    if (p->blocker) { /* one rank holds the whole pool: the test's job gets NOSPACE */
        char addr[64];
        ina_config cfg;
        worker_config(&cfg, &sw, "repro-blocker", 0, 1, addr, sizeof(addr));
        cfg.window = 16;
        CHECK_EQ_INT(ina_init(&blocker, &cfg), 0);
    }
    memset(sh, 0, sizeof(*sh));
    double t0 = ina__clock_s();
    int failed = run_workers(n, worker, (void *)p, 60);
    int distinct = 0;
    for (int c = 0; c < NCASES; c++) {
        int d = 0;
        for (int r = 0; r < n; r++) {
            d += sh->differing[r][c];
            d += sh->hash[r][c] != sh->hash[0][c]; /* every rank has the same bits, too */
        }
        distinct += d;
        CHECK_EQ_INT(d, 0);
    }
    printf("%-9s N=%d: %d calls per case, %d results differing from the first, %.2f s%s\n",
           p->name, n, CALLS, distinct, ina__clock_s() - t0, failed ? "  FAILED" : "");
    CHECK_EQ_INT(failed, 0);
    if (blocker)
        CHECK_EQ_INT(ina_finalize(blocker), 0);
    if (p->shards > 1)
        CHECK_EQ_INT(switch_stop(&sw2), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    if (sh == MAP_FAILED)
        return check_report("test_reproducible");
    static const char *const none[] = {NULL};
    static const char *const shm[] = {"--shm", NULL};
    static const char *const threads[] = {"--threads", "2", NULL};
    static const char *const tiny[] = {"--slots", "16", "--max-job-slots", "16", "--min-job-slots",
                                       "16", NULL};
    /* 1000 elements: one block of the default 2048, four of 256 (lanes and shards split them). */
    const struct path paths[] = {
        {"udp", none, 1, 0, 1, 0, INA_FLOAT_ADD_QUANTIZED, INA_PATH_SWITCH},
        {"rings", shm, 1, 0, 1, 0, INA_FLOAT_ADD_QUANTIZED, INA_PATH_SWITCH},
        {"lanes", threads, 2, 256, 1, 0, INA_FLOAT_ADD_QUANTIZED, INA_PATH_SWITCH},
        {"shards", none, 1, 256, 2, 0, INA_FLOAT_ADD_QUANTIZED, INA_PATH_SWITCH},
        {"fallback", tiny, 1, 0, 1, 1, INA_FLOAT_ADD_QUANTIZED, INA_PATH_HOST},
    };
    static const int worlds[] = {2, 3, 4, 8};
    const char *only = getenv("INA_TEST_PATH");
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        /* The eBPF dataplane has no rings or threads. */
        if ((only && strcmp(only, paths[i].name) != 0) ||
            (h_ebpf() && (paths[i].sw_args == shm || paths[i].sw_args == threads)))
            continue;
        for (size_t j = 0; j < sizeof(worlds) / sizeof(worlds[0]); j++)
            run_path(&paths[i], worlds[j]);
    }
    /* Float adds at the switch (opt-in) are reproducible at N = 2 only: a + b = b + a in
     * binary32, but three or more addends round in arrival order (API.md, PYTHON.md). */
    if (!h_ebpf() && (!only || strcmp(only, "float-add") == 0)) {
        const struct path fa = {"float-add", none, 1, 0, 1, 0, INA_FLOAT_ADD_SWITCH,
                                INA_PATH_SWITCH};
        run_path(&fa, 2);
    }
    munmap(sh, sizeof(*sh));
    return check_report("test_reproducible");
}
