/* test_flushed.c: elements lost to a block's shared scale are counted (ina_stats.flushed_elems) and warned about once per context: 1e10 beside 1.0 in one block, a NaN beside finite values, and none for ordinary data (issue 36 item 2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "e2e/harness.h"

#define COUNT 2048 /* one block at the default elems per packet */

static struct sw_proc sw;

enum { CASE_BIG, CASE_NAN, CASE_PLAIN };

struct scenario {
    const char *name;
    int kind, n;
};

/* Rank r's input: CASE_BIG: 1e10 at element 0 of rank 0, 1.0 everywhere else; CASE_NAN:
 * a NaN at element 5 of rank 1, 1.0 elsewhere; CASE_PLAIN: uniform in [-1, 1). */
static float input(int kind, int rank, size_t i)
{
    if (kind == CASE_BIG)
        return rank == 0 && i == 0 ? 1e10f : 1.0f;
    if (kind == CASE_NAN)
        return rank == 1 && i == 5 ? NAN : 1.0f;
    return (float)((double)(h_mix((uint64_t)rank << 32 | i) >> 11) / 9007199254740992.0 * 2 - 1);
}

/* What rank r's counter must say after one operation (see ina.h, flushed_elems). */
static uint64_t expect_lost(int kind, int rank)
{
    if (kind == CASE_BIG)
        return rank == 0 ? COUNT - 1 : COUNT; /* every 1.0, beside 1e10 (2^34 > 2^(32-L) * 1) */
    if (kind == CASE_NAN)
        return rank == 1 ? COUNT - 1 : COUNT; /* every finite value, beside the NaN */
    return 0;
}

/* Lines of the file that contain s. */
static int count_lines(const char *path, const char *s)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int k = 0;
    while (f && fgets(line, sizeof(line), f))
        k += strstr(line, s) != NULL;
    if (f)
        fclose(f);
    return k;
}

static int worker(int rank, int n, void *arg)
{
    const struct scenario *sc = arg;
    char errpath[96], addr[64], job[32];
    snprintf(errpath, sizeof(errpath), "/tmp/ina-test-flushed.%d.%d", (int)getpid(), rank);
    if (!freopen(errpath, "w", stderr))
        return 1;
    snprintf(job, sizeof(job), "flushed-%s-%d", sc->name, n);
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = COUNT;
    cfg.timeout_ms = 10000;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg), fails = 0;
    static float x[COUNT];
    for (int op = 0; op < 2 && rc == 0; op++) { /* twice: counted twice, warned once */
        for (size_t i = 0; i < COUNT; i++)
            x[i] = input(sc->kind, rank, i);
        rc = ina_allreduce(ctx, x, x, COUNT, INA_FLOAT32, INA_SUM);
        /* The documented loss (the sums of 1.0 come back 0, not N; a NaN poisons the
         * block): counted, not cured. */
        for (size_t i = 1; rc == 0 && i < COUNT; i++)
            fails += sc->kind == CASE_BIG ? x[i] != 0.0f : sc->kind == CASE_NAN && !isnan(x[i]);
        ina_stats st;
        ina_get_stats(ctx, &st);
        if (st.flushed_elems != (uint64_t)(op + 1) * expect_lost(sc->kind, rank)) {
            fprintf(stdout, "%s N=%d rank %d op %d: flushed_elems %llu, want %llu\n", sc->name, n,
                    rank, op, (unsigned long long)st.flushed_elems,
                    (unsigned long long)((op + 1) * expect_lost(sc->kind, rank)));
            fails++;
        }
    }
    if (rc) {
        fprintf(stdout, "%s N=%d rank %d: %s (%s)\n", sc->name, n, rank, ina_err_name(rc),
                ina_last_error(ctx));
        fails++;
    }
    if (ctx)
        fails += ina_finalize(ctx) != 0;
    fflush(stderr);
    int warned = count_lines(errpath, "ina_stats.flushed_elems");
    if (warned != (expect_lost(sc->kind, rank) ? 1 : 0)) {
        fprintf(stdout, "%s N=%d rank %d: %d warnings, want %d\n", sc->name, n, rank, warned,
                expect_lost(sc->kind, rank) ? 1 : 0);
        fails++;
    }
    unlink(errpath);
    return fails;
}

int main(void)
{
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    unsetenv("INA_QUIET");
    const struct scenario sc[] = {
        {"big", CASE_BIG, 2}, /* one round (op 3): the switch's shift flushes rank 1's */
        {"big", CASE_BIG, 3}, /* two rounds: each rank quantizes at the agreed exponent */
        {"nan", CASE_NAN, 2},
        {"nan", CASE_NAN, 3},
        {"plain", CASE_PLAIN, 3},
    };
    for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); i++) {
        int failed = run_workers(sc[i].n, worker, (void *)&sc[i], 30);
        printf("%-5s N=%d: %s\n", sc[i].name, sc[i].n, failed ? "FAILED" : "ok");
        CHECK_EQ_INT(failed, 0);
    }
    CHECK_EQ_INT(switch_stop(&sw), 0);
    return check_report("test_flushed");
}
