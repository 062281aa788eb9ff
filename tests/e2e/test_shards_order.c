/* test_shards_order.c: ranks that list the same switches in different orders (or spell one differently) join at once and get the same sums: every rank orders its shards by address and port (PROTOCOL.md §12.1), where they used to wait at different first switches until the join deadline. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "e2e/harness.h"

#define NSW 3
#define COUNT 30000

static struct sw_proc sw[NSW];

struct scenario {
    const char *job;
    int n, lanes;
    const char *order[4]; /* rank r's list: shard indices, e.g. "210"; 'L': index 0 as "localhost" */
};

static void list_for(const char *order, char *buf, size_t len)
{
    size_t off = 0;
    for (const char *c = order; *c; c++) {
        int i = *c == 'L' ? 0 : *c - '0';
        off += (size_t)snprintf(buf + off, len - off, "%s%s:%d", off ? "," : "",
                                *c == 'L' ? "localhost" : "127.0.0.1", sw[i].port);
    }
}

static int worker(int rank, int n, void *arg)
{
    const struct scenario *sc = arg;
    char addrs[256], one[64];
    ina_config cfg;
    worker_config(&cfg, &sw[0], sc->job, rank, n, one, sizeof(one));
    list_for(sc->order[rank], addrs, sizeof(addrs));
    cfg.switch_addr = addrs;
    cfg.lanes = sc->lanes;
    cfg.elems_per_packet = 256;
    cfg.join_timeout_ms = 20000;
    double t0 = ina__clock_s();
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    double dt = ina__clock_s() - t0;
    if (rc) {
        fprintf(stderr, "%s rank %d (%s): ina_init: %s after %.1f s (%s)\n", sc->job, rank, addrs,
                ina_err_name(rc), dt, ina_last_error(NULL));
        return 1;
    }
    static int32_t x[COUNT];
    for (size_t i = 0; i < COUNT; i++)
        x[i] = h_i32(rank, 1, i);
    rc = ina_allreduce(ctx, x, x, COUNT, INA_INT32, INA_SUM);
    int bad = rc ? -1 : h_check_sum(x, COUNT, 1, n, 1, 0, 0);
    ina_info info;
    ina_get_info(ctx, &info);
    int fails = rc || bad || info.shards != (int)strlen(sc->order[rank]) || dt > 10;
    if (fails)
        fprintf(stderr, "%s rank %d (%s): joined in %.1f s, %d shards, all-reduce %s, %d wrong\n",
                sc->job, rank, addrs, dt, info.shards, ina_err_name(rc), bad);
    return ina_finalize(ctx) || fails;
}

int main(void)
{
    for (int i = 0; i < NSW; i++)
        CHECK_EQ_INT(switch_start(&sw[i], NULL), 0);
    const struct scenario sc[] = {
        {"order-swapped", 2, 1, {"01", "10"}},
        {"order-three", 3, 1, {"012", "201", "120"}},
        {"order-lanes", 3, 2, {"021", "120", "210"}},
        {"order-auto-lanes", 2, 0, {"012", "210"}},
        {"order-spelling", 2, 1, {"L1", "10"}}, /* one switch named two ways */
    };
    for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++) {
        int failed = run_workers(sc[i].n, worker, (void *)&sc[i], 60);
        printf("%-17s N=%d lanes=%d: %s\n", sc[i].job, sc[i].n, sc[i].lanes,
               failed ? "FAILED" : "ok");
        CHECK_EQ_INT(failed, 0);
    }
    for (int i = 0; i < NSW; i++)
        CHECK_EQ_INT(switch_stop(&sw[i]), 0);
    return check_report("test_shards_order");
}
