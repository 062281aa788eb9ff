/* ina_sim.c: ina's all-reduce and a ring all-reduce on a SimGrid platform (docs/CLUSTER.md
 * "At scale"). One run simulates one all-reduce of --bytes per worker and prints its time.
 *
 * ina, at packet-window granularity: every worker cuts its data into shards x chunks; a chunk
 * is half a window of --window packets of --payload bytes (+ --header bytes each on the wire),
 * and each worker keeps two chunks (one window) in flight per aggregator, as libina's sliding
 * window does. An aggregator completes a chunk when every member's copy arrived, spends
 * --agg-cost seconds of CPU per packet received (measured on ina-switch), and sends the sum
 * to every member. A worker spends --worker-cost per packet sent and received. Under --loss p
 * each packet of a chunk is lost with probability p; the lost ones are resent after --rto, and
 * the aggregator waits for them (what ina's retransmission costs a window).
 * Layouts: one (a single aggregator; with --agg-bw a hardware switch with N ports at line
 * rate), dedicated (M aggregator hosts), colocated (an aggregator on every worker host),
 * tree (nodes of --per-node workers with a child aggregator on the node, whose partial sums go
 * to M parent shards).
 *
 * ring: 2(N-1) steps, each worker sends S/N bytes to the next and waits for its neighbour's
 * block. Steps are alike on a symmetric platform, so --ring-steps K simulates K of them and
 * scales to 2(N-1); --ring-step-cost adds a fixed cost per step, --ring-efficiency divides the
 * bandwidth (TCP's and the MPI library's overheads, fitted to OpenMPI's measured times).
 *
 * Hosts: worker i runs on host "w<i>" (a tree: node i's child and workers), aggregator
 * j on "a<j>"; with --cpu-host H every CPU cost runs on host H instead (the emulated cluster:
 * all namespaces share the VM's cores). The platform file names them (bench/sim/sim_platform.py).
 * A shard is at least one packet: with more aggregators than packets the extra ones get none.
 *
 * --group G (dedicated and colocated, no loss): the symmetry reduction of docs/CLUSTER.md. On a
 * non-blocking fat tree every worker behaves alike and so does every aggregator (they differ
 * only by where they start, a rotation), so G hosts that behave alike can be simulated as one
 * host whose link is G times as fast, and the G x H messages between G workers and H shards
 * as one message of G x H chunks: each of them gets 1/(G H) of that link share, the same
 * rate, so it ends at the same time. Actors: N/G members of G workers on "w<g>"; dedicated:
 * M/G aggregators of H = G shards on "a<j>"; colocated: the N' = min(N, packets) shards,
 * H = N'/(N/G) a group, on "w<g>", where the group's H workers that carry a shard are, and
 * its G - H other workers on "x<g>" (a second member; hosts with and without a shard differ).
 * The H worker-to-own-shard pairs of a colocated group stay on their host (the loopback):
 * they are left out of the group's messages. The platform: sim_platform.py grouped. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/actor.h>
#include <xbt/config.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/exec.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

enum layout { ONE, DEDICATED, COLOCATED, TREE, RING };

static struct {
    enum layout layout;
    int n, m, per_node, window, ring_steps, group;
    double bytes, payload, header, agg_cost, worker_cost, loss, rto, ring_step_cost, ring_eff;
    const char *cpu_host, *agg_host;
    uint64_t seed;
} cfg = {.layout = DEDICATED, .n = 4, .m = 0, .per_node = 1, .window = 128, .ring_steps = 0, .group = 1,
         .bytes = 64 << 20, .payload = 8192, .header = 74, .agg_cost = 0, .worker_cost = 0,
         .loss = 0, .rto = 0.005, .ring_step_cost = 0, .ring_eff = 1, .cpu_host = NULL,
         .agg_host = NULL, .seed = 1};

static double t_end;     /* when the last worker finished */
static long retransmits; /* packets resent */

/* A message: a chunk (or its retransmitted part) to an aggregator, or a result to a worker. */
struct msg {
    int from, shard, chunk;
    int retx_follows; /* 1: some packets of this copy were lost and come later */
    int is_retx;
};

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Packets of n lost at rate p: a draw per packet (chunks are small). */
static int lost_packets(uint64_t *s, int n)
{
    int lost = 0;
    if (cfg.loss <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        if ((double)(rng_next(s) >> 11) / 9007199254740992.0 < cfg.loss)
            lost++;
    return lost;
}

static void cpu(double seconds)
{
    if (seconds <= 0)
        return;
    sg_host_t h = cfg.cpu_host ? sg_host_by_name(cfg.cpu_host) : sg_host_self();
    sg_exec_t e = sg_actor_exec_init(seconds * sg_host_get_speed(h));
    if (cfg.cpu_host)
        sg_exec_set_host(e, h);
    sg_exec_start(e);
    sg_exec_wait(e);
}

static sg_mailbox_t mbox(char kind, int i)
{
    char name[32];
    snprintf(name, sizeof name, "%c%d", kind, i);
    return sg_mailbox_by_name(name);
}

static void set_receiver(char kind, int i)
{
    char name[32];
    snprintf(name, sizeof name, "%c%d", kind, i);
    sg_mailbox_set_receiver(name);
}

/* A member sends the chunks of one shard one after another (FIFO), as the packets of a
 * window leave one by one: the next starts when the previous one left. Different shards'
 * streams (their own sockets) share the member's link. */
static void send_fifo(sg_comm_t *last, sg_mailbox_t mb, struct msg m, double bytes)
{
    if (*last)
        sg_comm_wait(*last);
    struct msg *p = malloc(sizeof *p);
    *p = m;
    *last = sg_mailbox_put_async(mb, p, (long)bytes);
}

static void send_detached(sg_mailbox_t mb, struct msg m, double bytes)
{
    struct msg *p = malloc(sizeof *p);
    *p = m;
    sg_comm_t c = sg_mailbox_put_init(mb, p, (long)bytes);
    sg_comm_detach(c, free);
}

/* The geometry: how many aggregators (shards), members per aggregator, chunks per shard. */
static int total_packets(void) { return (int)ceil(cfg.bytes / cfg.payload); }
static int nshards(void)
{
    int want;
    switch (cfg.layout) {
    case ONE: want = 1; break;
    case COLOCATED: want = cfg.n; break;
    default: want = cfg.m;
    }
    return want < total_packets() ? want : total_packets(); /* a shard is at least a packet */
}
static int nodes(void) { return cfg.n / cfg.per_node; }
static int members(void) { return cfg.layout == TREE ? nodes() : cfg.n; }
static int chunk_packets(void) { return cfg.window / 2 > 0 ? cfg.window / 2 : 1; }
static int shard_packets(void) { return (total_packets() + nshards() - 1) / nshards(); }

/* The actors (--group G, the symmetry reduction; G = 1: one actor a worker and a shard). */
static int groups(void) { return cfg.n / cfg.group; }
static int group_shards(void) /* H: the shards of one aggregator actor */
{
    if (cfg.group == 1)
        return 1;
    return cfg.layout == COLOCATED ? nshards() / groups() : cfg.group;
}
static int agg_actors(void) { return nshards() / group_shards(); }
static int member_actors(void)
{
    if (cfg.group == 1)
        return members();
    return cfg.layout == COLOCATED && group_shards() < cfg.group ? 2 * groups() : groups();
}
/* The workers member actor w stands for: "w<g>" of a colocated group holds the H that carry
 * a shard, "x<g>" the others. */
static int member_weight(int w)
{
    if (cfg.group == 1)
        return 1;
    if (cfg.layout == COLOCATED)
        return w < groups() ? group_shards() : cfg.group - group_shards();
    return cfg.group;
}
/* Chunks that one message between member actor w and aggregator actor s carries over the
 * network: weight x H, less the pairs on one host (colocated; with G = 1 the one pair is
 * simulated, over the loopback, as before). */
static int pair_chunks(int w, int s)
{
    int k = member_weight(w) * group_shards();
    if (cfg.group > 1 && cfg.layout == COLOCATED && w == s)
        k -= group_shards();
    return k;
}
static int nchunks(void) { return (shard_packets() + chunk_packets() - 1) / chunk_packets(); }
static int packets_of(int chunk)
{
    int left = shard_packets() - chunk * chunk_packets();
    return left < chunk_packets() ? left : chunk_packets();
}
static double wire(int packets) { return packets * (cfg.payload + cfg.header); }

/* ---- the aggregator of shard s (for a tree: a parent shard) ---------------------------- */

static void aggregator(int argc, char **argv)
{
    (void)argc;
    int s = atoi(argv[1]), nm = member_actors(), nc = nchunks();
    int *first = calloc((size_t)nc, sizeof(int)), *extra = calloc((size_t)nc, sizeof(int));
    int *extra_seen = calloc((size_t)nc, sizeof(int));
    int done = 0;
    sg_mailbox_t in = mbox('a', s);
    set_receiver('a', s); /* datagrams: sent without waiting for a matching receive */
    while (done < nc) {
        struct msg *m = sg_mailbox_get(in);
        int c = m->chunk;
        if (m->is_retx)
            extra_seen[c]++;
        else {
            first[c]++;
            extra[c] += m->retx_follows;
        }
        free(m);
        if (first[c] == nm && extra_seen[c] == extra[c]) {
            cpu(cfg.agg_cost * packets_of(c) * members()); /* each of its shards, in parallel */
            for (int w = 0; w < nm; w++)
                send_detached(mbox('r', w), (struct msg){.shard = s, .chunk = c},
                              pair_chunks(w, s) * wire(packets_of(c)));
            first[c] = -1; /* complete */
            done++;
        }
    }
    free(first);
    free(extra);
    free(extra_seen);

}

/* ---- a member: a worker, or in a tree a node's child (its workers' sum) --------------- */

/* The retransmission of one chunk's lost packets: after the RTO, from the member's host.
 * An actor of its own, so that the member goes on with its other streams meanwhile. */
static void retransmit(int argc, char **argv)
{
    (void)argc;
    int me = atoi(argv[1]), s = atoi(argv[2]), c = atoi(argv[3]), packets = atoi(argv[4]);
    sg_actor_sleep_for(cfg.rto);
    send_detached(mbox('a', s), (struct msg){.from = me, .shard = s, .chunk = c, .is_retx = 1},
                  wire(packets));
}

static void member(int argc, char **argv)
{
    (void)argc;
    int me = atoi(argv[1]), ns = agg_actors(), nc = nchunks(), width = group_shards();
    uint64_t rng = cfg.seed * 0x9E3779B97F4A7C15ull + (uint64_t)me * 7919 + 1;
    int *next = calloc((size_t)ns, sizeof(int)), results = 0;
    sg_comm_t *last = calloc((size_t)ns, sizeof(*last));
    sg_mailbox_t in = mbox('r', me);
    set_receiver('r', me);
    /* The node's workers reach their child over shared memory: in a tree, the child first
     * waits for its node's (per_node) copies; a worker on the node costs CPU only. */
    double node_cpu = cfg.layout == TREE ? cfg.worker_cost * cfg.per_node : cfg.worker_cost;
    node_cpu *= width; /* a worker of a group sends to (hears from) H shards in turn */

    /* send chunk c of shard s; lost packets are resent after the RTO. */
#define SEND_CHUNK(s, c)                                                                      \
    do {                                                                                      \
        int np_ = packets_of(c), lost_ = lost_packets(&rng, np_);                              \
        cpu(node_cpu * np_);                                                                  \
        send_fifo(&last[(s)], mbox('a', (s)), (struct msg){.from = me, .shard = (s), .chunk = (c), \
                                                      .retx_follows = lost_ > 0},             \
                  pair_chunks(me, (s)) * wire(np_) - wire(lost_));                            \
        if (lost_) {                                                                          \
            char a0[] = "retx", a1[16], a2[16], a3[16], a4[16];                               \
            snprintf(a1, sizeof a1, "%d", me);                                                \
            snprintf(a2, sizeof a2, "%d", (s));                                               \
            snprintf(a3, sizeof a3, "%d", (c));                                               \
            snprintf(a4, sizeof a4, "%d", lost_);                                             \
            char *av_[] = {a0, a1, a2, a3, a4};                                               \
            cpu(node_cpu * lost_);                                                            \
            sg_actor_create("retx", sg_host_self(), retransmit, 5, av_);                      \
            retransmits += lost_;                                                             \
        }                                                                                     \
    } while (0)

    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ns; i++) {
            int s = (i + me) % ns; /* members start at different shards, as lanes do */
            if (next[s] < nc) {
                SEND_CHUNK(s, next[s]);
                next[s]++;
            }
        }
    void *data = NULL;
    sg_comm_t get = sg_mailbox_get_async(in, &data);
    while (results < ns * nc) {
        sg_comm_wait(get);
        struct msg *m = data;
        int s = m->shard;
        cpu(node_cpu * packets_of(m->chunk));
        free(m);
        results++;
        if (next[s] < nc) {
            SEND_CHUNK(s, next[s]);
            next[s]++;
        }
        if (results < ns * nc)
            get = sg_mailbox_get_async(in, &data);
    }
#undef SEND_CHUNK
    for (int s = 0; s < ns; s++)
        if (last[s])
            sg_comm_wait(last[s]);
    free(last);
    if (simgrid_get_clock() > t_end)
        t_end = simgrid_get_clock();
    free(next);

}

/* ---- ring ------------------------------------------------------------------------------- */

static void ring_worker(int argc, char **argv)
{
    (void)argc;
    int me = atoi(argv[1]), n = cfg.n;
    double block = cfg.bytes / n / cfg.ring_eff;
    sg_mailbox_t in = mbox('r', me), out = mbox('r', (me + 1) % n);
    for (int step = 0; step < cfg.ring_steps; step++) {
        static int token;
        sg_comm_t put = sg_mailbox_put_async(out, &token, (long)block);
        void *d = sg_mailbox_get(in);
        (void)d;
        sg_comm_wait(put);
        if (cfg.ring_step_cost > 0)
            sg_actor_sleep_for(cfg.ring_step_cost);
    }
    if (simgrid_get_clock() > t_end)
        t_end = simgrid_get_clock();

}

/* ---- main --------------------------------------------------------------------------------- */

static void usage(void)
{
    printf("Usage: ina_sim PLATFORM.xml --layout one|dedicated|colocated|tree|ring --n N [options]\n"
           "  --m M              aggregator hosts (dedicated; parent shards of a tree)\n"
           "  --per-node G       workers per node (tree)\n"
           "  --bytes S          bytes per worker (default 64Mi)\n"
           "  --payload P --header H --window W   packet payload, header bytes, window (8192, 74, 128)\n"
           "  --agg-cost C       aggregator CPU seconds per packet received (default 0)\n"
           "  --worker-cost C    worker CPU seconds per packet sent or received (default 0)\n"
           "  --cpu-host H       run every CPU cost on host H (the emulated cluster's shared cores)\n"
           "  --agg-host H       layout one: the aggregator's host (default a0; \"hw\": a hardware switch)\n"
           "  --loss P --rto S   packet loss rate and retransmission timeout (0, 0.005)\n"
           "  --ring-steps K     ring: simulate K of the 2(N-1) steps and scale (0: all)\n"
           "  --ring-step-cost S --ring-efficiency E   ring: fixed cost per step, bandwidth factor\n"
           "  --group G          dedicated, colocated: simulate G alike hosts as one (the symmetry\n"
           "                     reduction; platform: sim_platform.py grouped; default 1: none)\n"
           "  --seed N\n"
           "Prints one line: layout n m per_node bytes time_s retransmits.\n");
}

int main(int argc, char **argv)
{
    /* before simgrid_init, which answers --help with SimGrid's own options and exits */
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        usage();
        return argc < 2;
    }
    simgrid_init(&argc, argv);
    /* Max-min sharing without the TCP latency and bandwidth factors of the default model:
     * ina's traffic is UDP; the ring's TCP overheads are fitted (--ring-*). */
    sg_cfg_set_string("network/model", "CM02");
    const char *platform = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "ina_sim: %s needs a value\n", k);
            return 2;
        }
        i++;
        if (!strcmp(k, "--layout")) {
            static const char *const names[] = {"one", "dedicated", "colocated", "tree", "ring"};
            int found = -1;
            for (int j = 0; j < 5; j++)
                if (!strcmp(v, names[j]))
                    found = j;
            if (found < 0) {
                fprintf(stderr, "ina_sim: unknown layout '%s'\n", v);
                return 2;
            }
            cfg.layout = (enum layout)found;
        } else if (!strcmp(k, "--n")) cfg.n = atoi(v);
        else if (!strcmp(k, "--m")) cfg.m = atoi(v);
        else if (!strcmp(k, "--per-node")) cfg.per_node = atoi(v);
        else if (!strcmp(k, "--bytes")) cfg.bytes = atof(v);
        else if (!strcmp(k, "--payload")) cfg.payload = atof(v);
        else if (!strcmp(k, "--header")) cfg.header = atof(v);
        else if (!strcmp(k, "--window")) cfg.window = atoi(v);
        else if (!strcmp(k, "--agg-cost")) cfg.agg_cost = atof(v);
        else if (!strcmp(k, "--worker-cost")) cfg.worker_cost = atof(v);
        else if (!strcmp(k, "--cpu-host")) cfg.cpu_host = v;
        else if (!strcmp(k, "--agg-host")) cfg.agg_host = v;
        else if (!strcmp(k, "--loss")) cfg.loss = atof(v);
        else if (!strcmp(k, "--rto")) cfg.rto = atof(v);
        else if (!strcmp(k, "--ring-steps")) cfg.ring_steps = atoi(v);
        else if (!strcmp(k, "--ring-step-cost")) cfg.ring_step_cost = atof(v);
        else if (!strcmp(k, "--ring-efficiency")) cfg.ring_eff = atof(v);
        else if (!strcmp(k, "--group")) cfg.group = atoi(v);
        else if (!strcmp(k, "--seed")) cfg.seed = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "ina_sim: unknown option %s (--help)\n", k);
            return 2;
        }
    }
    if (cfg.n < 2 || cfg.per_node < 1 || cfg.n % cfg.per_node || cfg.window < 1 ||
        cfg.bytes < cfg.payload || cfg.ring_eff <= 0 ||
        ((cfg.layout == DEDICATED || cfg.layout == TREE) && cfg.m < 1) || cfg.group < 1) {
        fprintf(stderr, "ina_sim: bad arguments (--help)\n");
        return 2;
    }
    if (cfg.group > 1) {
        const char *why = NULL;
        if (cfg.layout != DEDICATED && cfg.layout != COLOCATED)
            why = "only dedicated and colocated";
        else if (cfg.loss > 0)
            why = "no loss (a loss draw is per worker)";
        else if (cfg.n % cfg.group)
            why = "N a multiple of G";
        else if (cfg.layout == DEDICATED && (cfg.m % cfg.group || cfg.m > total_packets()))
            why = "M a multiple of G and at most the packets of a worker (every host a shard)";
        else if (cfg.layout == COLOCATED && nshards() % groups())
            why = "the shards (min(N, packets)) a multiple of N/G";
        if (why) {
            fprintf(stderr, "ina_sim: --group needs %s\n", why);
            return 2;
        }
    }
    simgrid_load_platform(platform);
    char name[32], idx[16];
    if (cfg.layout == RING) {
        int full = 2 * (cfg.n - 1);
        if (cfg.ring_steps <= 0 || cfg.ring_steps > full)
            cfg.ring_steps = full;
        for (int i = 0; i < cfg.n; i++) {
            snprintf(name, sizeof name, "w%d", i);
            snprintf(idx, sizeof idx, "%d", i);
            char *av[] = {name, idx};
            sg_actor_create(name, sg_host_by_name(name), ring_worker, 2, av);
        }
        simgrid_run();
        double t = t_end * full / cfg.ring_steps;
        printf("ring %d 0 1 %.0f %.6f 0\n", cfg.n, cfg.bytes, t);
        return 0;
    }
    int ns = agg_actors(), nm = member_actors();
    for (int s = 0; s < ns; s++) {
        /* one: "a0"; dedicated and tree parents: "a<s>"; colocated: the worker's host. */
        if (cfg.layout == COLOCATED)
            snprintf(name, sizeof name, "w%d", s);
        else if (cfg.layout == ONE && cfg.agg_host)
            snprintf(name, sizeof name, "%s", cfg.agg_host);
        else
            snprintf(name, sizeof name, "a%d", s);
        snprintf(idx, sizeof idx, "%d", s);
        char *av[] = {name, idx};
        sg_host_t h = sg_host_by_name(name);
        if (!h) {
            fprintf(stderr, "ina_sim: the platform has no host %s\n", name);
            return 2;
        }
        sg_actor_create("agg", h, aggregator, 2, av);
    }
    for (int w = 0; w < nm; w++) {
        /* a tree: node w, its per_node workers; a colocated group's workers without a shard: x */
        if (w >= groups())
            snprintf(name, sizeof name, "x%d", w - groups());
        else
            snprintf(name, sizeof name, "w%d", w);
        snprintf(idx, sizeof idx, "%d", w);
        char *av[] = {name, idx};
        sg_host_t h = sg_host_by_name(name);
        if (!h) {
            fprintf(stderr, "ina_sim: the platform has no host %s\n", name);
            return 2;
        }
        sg_actor_create("member", h, member, 2, av);
    }
    simgrid_run();
    static const char *const names[] = {"one", "dedicated", "colocated", "tree", "ring"};
    printf("%s %d %d %d %.0f %.6f %ld\n", names[cfg.layout], cfg.n, nshards(), cfg.per_node, cfg.bytes,
           t_end, retransmits);
    return 0;
}
