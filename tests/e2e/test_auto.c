/* test_auto.c: the defaults chosen from the host: ranks with different cores agree on one lane
 * count at join (the smallest proposal, or a rank's fixed count), with one switch, an INA_SWITCH
 * list of two (shards) and under two child switches of a tree, sums verified; ina-switch
 * --threads auto and rings on by default (off with faults or --no-shm), as its log says; busy
 * polling by default from the cores per spinner (library and switch), and the library's auto
 * spin backing off while waits outlast it. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "e2e/harness.h"

#define ELEMS 256
static struct sw_proc sw, sw2, parent;

struct params {
    const char *job;
    const int *cores;  /* per rank: INA_AUTO_CORES */
    const int *lanes;  /* per rank: cfg.lanes (0 = auto) */
    int want_lanes;    /* what every rank must run (per switch) */
    int want_shm;
    int shards;        /* 2: INA_SWITCH lists sw and sw2; else sw */
    int tree;          /* ranks 0..n/2-1 join the child sw, the others the child sw2 */
    int host;          /* the switch has no room: the job runs on rank 0's host aggregator */
};

static int verify(const int32_t *ib, const float *fb, size_t count, int n, uint64_t op)
{
    int bad = 0;
    for (size_t j = 0; j < count; j++) {
        uint32_t exact = 0;
        for (int r = 0; r < n; r++)
            exact += (uint32_t)h_i32(r, op, j);
        bad += (uint32_t)ib[j] != exact;
    }
    for (size_t b0 = 0; b0 < count; b0 += ELEMS) {
        size_t b1 = b0 + ELEMS < count ? b0 + ELEMS : count;
        double amax = 0;
        for (int r = 0; r < n; r++)
            for (size_t k = b0; k < b1; k++)
                amax = fmax(amax, fabs(h_f32(r, op + 1, k)));
        for (size_t j = b0; j < b1; j++) {
            double exact = 0;
            for (int r = 0; r < n; r++)
                exact += h_f32(r, op + 1, j);
            bad += !(fabs(fb[j] - exact) <= ina_float_error_bound(n, amax, exact));
        }
    }
    return bad;
}

/* Join with this rank's cores and lanes setting; check what the job agreed; verified sums. */
static int auto_worker(int rank, int n, void *arg)
{
    const struct params *p = arg;
    char addr[64], cores[16];
    snprintf(cores, sizeof(cores), "%d", p->cores[rank]);
    setenv("INA_AUTO_CORES", cores, 1);
    ina_config cfg;
    const struct sw_proc *mine = p->tree && rank >= n / 2 ? &sw2 : &sw;
    worker_config(&cfg, mine, p->job, rank, n, addr, sizeof(addr));
    if (p->shards == 2) { /* "127.0.0.1:P1,127.0.0.1:P2" */
        size_t len = strlen(addr);
        addr[len++] = ',';
        switch_addr(&sw2, addr + len, sizeof(addr) - len);
    }
    cfg.elems_per_packet = ELEMS;
    cfg.window = 8;
    cfg.lanes = p->lanes[rank];
    int seen_cores = 0, seen_local = 0;
    int proposal = ina_auto_lanes(&cfg, &seen_cores, &seen_local);
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg), fails = 0;
    if (rc) {
        fprintf(stderr, "%s rank %d: ina_init: %s: %s\n", p->job, rank, ina_strerror(rc),
                ina_last_error(NULL));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);
    const int want_busy = ina_auto_busy_poll(&cfg, NULL, NULL); /* ina_config_init: auto */
    if (cfg.busy_poll_us != INA_BUSY_POLL_AUTO || info.busy_poll_us != want_busy) {
        fprintf(stderr, "%s rank %d: busy_poll_us %d (want auto), runs %d (want %d)\n", p->job,
                rank, cfg.busy_poll_us, info.busy_poll_us, want_busy);
        fails++;
    }
    const int want_proposed = p->lanes[rank] ? 0 : proposal;
    if (info.lanes != p->want_lanes || info.lanes_proposed != want_proposed ||
        seen_cores != p->cores[rank] || seen_local != n || info.shm != p->want_shm ||
        info.shards != (p->shards && !p->host ? p->shards : 1) ||
        info.levels != (p->tree ? 2 : 1) ||
        info.path != (p->host ? INA_PATH_HOST : INA_PATH_SWITCH)) {
        fprintf(stderr, "%s rank %d: lanes %d (want %d), proposed %d (want %d), cores %d, "
                "local %d, shm %d (want %d), shards %d, levels %d, path %d\n", p->job, rank,
                info.lanes, p->want_lanes, info.lanes_proposed, want_proposed, seen_cores,
                seen_local, info.shm, p->want_shm, info.shards, info.levels, info.path);
        fails++;
    }
    const size_t counts[] = {1, ELEMS + 3, 7 * ELEMS + 11, 40000};
    uint64_t op = 0;
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        int32_t *ib = malloc(count * 4);
        float *fb = malloc(count * 4);
        op += 2;
        for (size_t j = 0; j < count; j++) {
            ib[j] = h_i32(rank, op, j);
            fb[j] = h_f32(rank, op + 1, j);
        }
        if (ina_allreduce(ctx, ib, ib, count, INA_INT32, INA_SUM) ||
            ina_allreduce(ctx, fb, fb, count, INA_FLOAT32, INA_SUM) ||
            verify(ib, fb, count, n, op)) {
            fprintf(stderr, "%s rank %d: count %zu wrong or failed\n", p->job, rank, count);
            fails++;
        }
        free(ib);
        free(fb);
    }
    ina_finalize(ctx);
    return fails;
}

static void run(const struct params *p, int n)
{
    double t0 = ina__clock_s();
    int failed = run_workers(n, auto_worker, (void *)p, 60);
    printf("%-14s N=%d: every rank runs %d lanes: %s (%.2f s)\n", p->job, n, p->want_lanes,
           failed ? "FAILED" : "ok", ina__clock_s() - t0);
    CHECK_EQ_INT(failed, 0);
}

/* 1 if the switch's log has a line with every one of the words. */
static int log_has(const char *path, const char *const *words)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        found = 1;
        for (int i = 0; words[i]; i++)
            found &= strstr(line, words[i]) != NULL;
    }
    if (f)
        fclose(f);
    return found;
}

/* Start a switch with INA_AUTO_CORES=cores and args, stop it, and look for words in its log. */
static int switch_says(const char *log, int cores, const char *const *args,
                       const char *const *words)
{
    char c[16];
    snprintf(c, sizeof(c), "%d", cores);
    setenv("INA_AUTO_CORES", c, 1);
    sw.log_path = log;
    int ok = switch_start(&sw, args) == 0;
    ok = ok && switch_stop(&sw) == 0 && log_has(log, words);
    if (!ok) {
        fprintf(stderr, "the switch's log %s lacks: %s ... %s; it says:\n", log, words[0],
                words[1]);
        FILE *f = fopen(log, "r");
        char line[1024];
        while (f && fgets(line, sizeof(line), f))
            fputs(line, stderr);
        if (f)
            fclose(f);
    }
    return ok;
}

/* The auto spin's rule: what ina_auto_busy_poll says for world ranks on a loopback switch
 * (all of them on this host, and the switch: world + 1 spinners) with `cores` cores. */
static int auto_spin(int cores, int world, int *spinners)
{
    char c[16];
    snprintf(c, sizeof(c), "%d", cores);
    setenv("INA_AUTO_CORES", c, 1);
    ina_config cfg;
    ina_config_init(&cfg);
    cfg.world_size = world;
    return ina_auto_busy_poll(&cfg, NULL, spinners);
}

/* Rank 1 is slow (5 ms before each operation): rank 0's waits outlast any spin. With the auto
 * spin it stops spinning after 4 misses (then tries once every 8 waits); with a spin set by
 * number it spins every time. */
#define SLOW_OPS 60
static int slow_peer_worker(int rank, int n, void *arg)
{
    const int busy = *(const int *)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, busy == INA_BUSY_POLL_AUTO ? "spin-auto" : "spin-set", rank, n,
                  addr, sizeof(addr));
    cfg.busy_poll_us = busy;
    cfg.lanes = 1; /* the stream's spin: each lane thread's (and the caller's) learns alike */
    ina_ctx *ctx;
    if (ina_init(&ctx, &cfg))
        return 1;
    int fails = 0;
    for (int i = 0; i < SLOW_OPS; i++) {
        int32_t v = rank + i;
        if (rank == 1)
            usleep(5000);
        fails += ina_allreduce(ctx, &v, &v, 1, INA_INT32, INA_SUM) != 0 || v != 2 * i + 1;
    }
    ina_stats st;
    ina_get_stats(ctx, &st);
    ina_info info;
    ina_get_info(ctx, &info);
    if (rank == 0) {
        printf("busy poll %s (%d us): %llu spins slept, %llu hit, over %d slow operations "
               "(%llu retransmissions)\n", busy == INA_BUSY_POLL_AUTO ? "auto" : "set",
               info.busy_poll_us, (unsigned long long)st.busy_poll_sleeps,
               (unsigned long long)st.busy_poll_hits, SLOW_OPS,
               (unsigned long long)st.retransmits);
        if (busy == INA_BUSY_POLL_AUTO)
            fails += info.busy_poll_us == 0 || st.busy_poll_sleeps >= SLOW_OPS / 2; /* backed off */
        else
            fails += st.busy_poll_sleeps < SLOW_OPS; /* a number spins (and misses) every time */
    }
    ina_finalize(ctx);
    return fails;
}

int main(void)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-test-auto.%d.log", (int)getpid());

    /* ina-switch: threads from the cores (half, 1..8), rings by default but not with faults
     * or --no-shm, and --threads/--shm as given. */
    const char *const info[] = {"--log-level", "info", NULL};
    const char *const w6[] = {"threads=3", "threads_from=INA_AUTO_CORES", "cores=6", "shm=on",
                              "shm_from=default", NULL};
    CHECK(switch_says(log, 6, info, w6));
    const char *const w64[] = {"threads=8", "cores=64", NULL};
    CHECK(switch_says(log, 64, info, w64));
    const char *const w1[] = {"threads=1", "cores=1", NULL};
    CHECK(switch_says(log, 1, info, w1));
    const char *const faults[] = {"--log-level", "info", "--fault-rx", "drop=0", NULL};
    const char *const wf[] = {"shm=off", "shm_from=off_with_faults", NULL};
    CHECK(switch_says(log, 2, faults, wf));
    const char *const noshm[] = {"--log-level", "info", "--no-shm", "--threads", "2", NULL};
    const char *const wn[] = {"threads=2", "threads_from=option", "shm=off", "shm_from=option",
                              NULL};
    CHECK(switch_says(log, 16, noshm, wn));
    /* --busy-poll auto (the default): 50 us with a core per thread, scaled down by cores /
     * threads, off below 5 us; --busy-poll 0 is off. */
    const char *const wb[] = {"busy_poll_us=50", "busy_poll_from=auto", NULL};
    CHECK(switch_says(log, 2, info, wb));
    const char *const four[] = {"--log-level", "info", "--threads", "4", NULL};
    const char *const wb4[] = {"threads=4", "busy_poll_us=12", "busy_poll_from=auto", NULL};
    CHECK(switch_says(log, 1, four, wb4));
    const char *const off[] = {"--log-level", "info", "--busy-poll", "0", NULL};
    const char *const wb0[] = {"busy_poll_us=0", "busy_poll_from=option", NULL};
    CHECK(switch_says(log, 2, off, wb0));

    /* The library's rule: world + 1 spinners (a loopback switch is on this host). */
    int spinners = 0;
    ina_config dflt;
    ina_config_init(&dflt);
    CHECK_EQ_INT(dflt.busy_poll_us, INA_BUSY_POLL_AUTO);
    CHECK_EQ_INT(auto_spin(8, 4, &spinners), 50);
    CHECK_EQ_INT(spinners, 5);
    CHECK_EQ_INT(auto_spin(2, 4, &spinners), 20); /* this VM: 50 x 2 / 5 */
    CHECK_EQ_INT(auto_spin(1, 16, &spinners), 0); /* 50 / 17 < 5: sleep at once */
    CHECK_EQ_INT(spinners, 17);
    CHECK_EQ_INT(auto_spin(2, 1, NULL), 50);

    /* Waits that outlast the spin: the auto spin backs off, a set one does not. */
    setenv("INA_AUTO_CORES", "8", 1);
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    int busy = INA_BUSY_POLL_AUTO;
    CHECK_EQ_INT(run_workers(2, slow_peer_worker, &busy, 60), 0);
    busy = 20;
    CHECK_EQ_INT(run_workers(2, slow_peer_worker, &busy, 60), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);

    /* A switch of 3 threads (6 cores): lanes land on several of them. */
    setenv("INA_AUTO_CORES", "6", 1);
    sw.log_path = log;
    const char *const args[] = {"--slots", "96", NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    /* 3 ranks on this host with 6, 12 and 9 cores propose 2, 4 and 3 lanes: all run 2. */
    static const int c_mixed[] = {6, 12, 9}, l_auto[] = {0, 0, 0, 0};
    struct params agree = {"auto-agree", c_mixed, l_auto, 2, 1, 0, 0, 0};
    run(&agree, 3);
    /* Rank 0 fixes 3 lanes; the others propose 1 (3 cores for 3 workers): all run 3. */
    static const int c_small[] = {3, 3, 3}, l_fixed[] = {3, 0, 0, 0};
    struct params fixed = {"auto-fixed", c_small, l_fixed, 3, 1, 0, 0, 0};
    run(&fixed, 3);
    /* Everyone proposes 1 (2 cores, 2 workers): one lane, no threads. */
    static const int c_two[] = {2, 2}, l_two[] = {0, 0};
    struct params one = {"auto-one", c_two, l_two, 1, 1, 0, 0, 0};
    run(&one, 2);
    /* A world of one runs one lane whatever the cores. */
    static const int c_big[] = {64}, l_one[] = {0};
    struct params solo = {"auto-solo", c_big, l_one, 1, 1, 0, 0, 0};
    run(&solo, 1);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    /* auto-agree: 2 lanes, auto-fixed: 3, auto-one and auto-solo: 1 each. */
    CHECK_EQ_INT(switch_counter(&sw, "jobs_started"), 7);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_ended"), 7);
    CHECK(switch_counter(&sw, "join_redirects") > 0);
    CHECK(switch_counter(&sw, "shm_attached") >= 3 * 2 + 3 * 3 + 2 + 1);

    /* Two switches (shards): 3 ranks propose 2 x 2, 2 x 4 and 2 x 3 parts at the first; 4
     * agreed: 2 lanes at each switch. */
    char log2[64], logp[64];
    snprintf(log2, sizeof(log2), "/tmp/ina-test-auto.%d.2.log", (int)getpid());
    snprintf(logp, sizeof(logp), "/tmp/ina-test-auto.%d.p.log", (int)getpid());
    sw2.log_path = log2;
    parent.log_path = logp;
    setenv("INA_AUTO_CORES", "2", 1);
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    CHECK_EQ_INT(switch_start(&sw2, NULL), 0);
    struct params shards = {"auto-shards", c_mixed, l_auto, 2, 1, 2, 0, 0};
    run(&shards, 3);
    /* ... and rank 0 fixes 3 lanes: 3 at each switch. */
    struct params shards_fixed = {"auto-shards-fx", c_small, l_fixed, 3, 1, 2, 0, 0};
    run(&shards_fixed, 3);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_stop(&sw2), 0);
    CHECK_EQ_INT(switch_counter(&sw, "jobs_ended"), 2 + 3);
    CHECK_EQ_INT(switch_counter(&sw2, "jobs_ended"), 2 + 3);

    /* A tree: ranks 0, 1 under child sw propose 4 and 3, ranks 2, 3 under child sw2 propose 2
     * and 4 (their cores over 4 workers); each child passes its smallest up and the parent
     * agrees 2 for all. */
    CHECK_EQ_INT(switch_start(&parent, NULL), 0);
    char up[64];
    switch_addr(&parent, up, sizeof(up));
    const char *const child[] = {"--parent", up, NULL};
    CHECK_EQ_INT(switch_start(&sw, child), 0);
    CHECK_EQ_INT(switch_start(&sw2, child), 0);
    static const int c_tree[] = {16, 12, 8, 16}, l_tree[] = {0, 0, 0, 0, 0};
    struct params tree = {"auto-tree", c_tree, l_tree, 2, 1, 0, 1, 0};
    run(&tree, 4);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_stop(&sw2), 0);
    CHECK_EQ_INT(switch_stop(&parent), 0);
    CHECK_EQ_INT(switch_counter(&parent, "jobs_ended"), 2);
    CHECK(switch_counter(&parent, "tree_joins") >= 4);

    /* Room for one part (1 slot): the count is agreed at part 0 (2 lanes), part 1 is
     * refused, and every rank moves the job to rank 0's host aggregator with 2 lanes fixed.
     * The same with two switches (4 parts agreed; part 1 refused at the first in shard
     * order: by address and port, PROTOCOL.md §12.1). */
    const char *const small[] = {"--slots", "1", NULL};
    CHECK_EQ_INT(switch_start(&sw, small), 0);
    CHECK_EQ_INT(switch_start(&sw2, small), 0);
    struct params host = {"auto-host", c_mixed, l_auto, 2, 0, 0, 0, 1};
    run(&host, 3);
    struct params host2 = {"auto-host-sh", c_mixed, l_auto, 2, 0, 2, 0, 1};
    run(&host2, 3);
    /* No room at all (a one-rank job holds the slot): part 0 is refused before any count
     * is agreed, and the ranks propose again at rank 0's aggregator, which agrees 2. */
    char haddr[64];
    ina_config hc;
    worker_config(&hc, &sw, "auto-holder", 0, 1, haddr, sizeof(haddr));
    hc.window = 1;
    hc.lanes = 1;
    hc.fallback = INA_FALLBACK_NONE;
    ina_ctx *holder = NULL;
    CHECK_EQ_INT(ina_init(&holder, &hc), 0);
    struct params host0 = {"auto-host0", c_mixed, l_auto, 2, 0, 0, 0, 1};
    run(&host0, 3);
    struct params host0s = {"auto-host0-sh", c_mixed, l_auto, 2, 0, 2, 0, 1};
    run(&host0s, 3);
    CHECK_EQ_INT(ina_finalize(holder), 0);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    CHECK_EQ_INT(switch_stop(&sw2), 0);
    /* Each run refused at least once, at sw or (in shard order first) sw2. */
    CHECK(switch_counter(&sw, "jobs_refused") + switch_counter(&sw2, "jobs_refused") >= 4);
    unlink(log2);
    unlink(logp);
    unlink(log);
    return check_report("test_auto");
}
