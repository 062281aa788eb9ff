/* test_ebpf_diff.c: one specification, two dataplanes: fuzzed and recorded traces through the userspace slot rules and the eBPF program, every output and counter compared. */

/*
 * Usage: test_ebpf_diff [--fuzz N] [--events M] [--seed S] [--fallback PCT]
 *                       [--save DIR] [--quiet] [TRACE...]
 *
 * Replays every TRACE file (ina-switch --record; a directory means every
 * *.inatrace in it), then N fuzzed traces of M events each (gen.h, seeds
 * S..S+N-1), through both dataplanes (replay.h) and fails at the first
 * difference, printing both sides. --save DIR writes each fuzzed trace to
 * DIR/fuzz-SEED.inatrace, to replay a failure with the other arguments.
 *
 * It runs in a network namespace of its own (unshare), so it needs root:
 * without it, or without BPF in the kernel, it prints SKIP and exits 77. A
 * program the kernel refuses (the verifier) is a failure, not a skip.
 */

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ebpf/gen.h"
#include "ebpf/replay.h"
#include "common/log.h"

#define TEST_NSLOTS 1024 /* the program's pool: the most a trace may use */

static int quiet;
/* What all the traces reached, summed (the userspace side's counters): a
 * trace that never gets past the first checks compares little. */
static struct ina_sw_counters reached;
static uint64_t group_results; /* results the program sent to a job's group (--multicast) */

static int skip(const char *why)
{
    printf("SKIP: test_ebpf_diff: %s\n", why);
    return 77;
}

/* lo up in this (new) namespace. @return 0 or -errno. */
static int lo_up(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq r;
    memset(&r, 0, sizeof(r));
    snprintf(r.ifr_name, sizeof(r.ifr_name), "lo");
    int rc = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &r) == 0 ? 0 : -errno;
    r.ifr_flags |= IFF_UP;
    if (rc == 0 && ioctl(fd, SIOCSIFFLAGS, &r) != 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* A capture of what leaves by lo. */
static int open_capture(int ifindex)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0)
        return -1;
    int big = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = ifindex};
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The replays' setting: the program (loaded once), the switch's address
 * and socket in this namespace, the capture of lo. */
struct bench {
    struct ina_ebpf *e;
    struct sockaddr_in sw;
    int cap, fallback;
};

/* Replay one trace file. @return 0 if both agreed on all of it, 1 if not, 77 for a skip. */
static int replay_file(const char *path, const struct bench *b)
{
    FILE *f = fopen(path, "rb");
    struct ina_trace_header h;
    if (!f || ina__trace_read_header(f, &h) != 0) {
        fprintf(stderr, "%s: not a trace file\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    struct rp r;
    char err[512];
    if (h.p.nslots > TEST_NSLOTS || rp_open(&r, &h, b->e, &b->sw, b->cap, b->fallback, h.seed, err,
                                            sizeof(err)) != 0) {
        fclose(f);
        fprintf(stderr, "%s: %s\n", path, h.p.nslots > TEST_NSLOTS ? "more slots than the test's program has" : err);
        return 1;
    }
    static uint8_t buf[INA_MAX_DATAGRAM];
    struct ina_trace_rec rec;
    int n, bad = 0;
    while (!bad && (n = ina__trace_read(f, &rec, buf, sizeof(buf))) > 0)
        bad = !rp_input(&r, &rec);
    if (!bad && n < 0) {
        fprintf(stderr, "%s: truncated trace\n", path);
        bad = 1;
    }
    if (!quiet || bad)
        printf("%s: %s: %llu inputs, %llu outputs compared, %llu DATA fed back\n", path,
               bad ? "DIFFERENT" : "same", (unsigned long long)r.inputs,
               (unsigned long long)r.compared, (unsigned long long)r.fed_back);
    ina__sw_counters_add(&reached, &r.u->c);
    group_results += r.group_out;
    rp_close(&r);
    fclose(f);
    return bad;
}

/* Generate and replay one fuzzed trace. @return as replay_file. */
static int fuzz_one(uint64_t seed, int events, const struct bench *b, const char *save_dir)
{
    static struct gen g;
    gen_init(&g, seed);
    struct ina_trace_header h;
    memset(&h, 0, sizeof(h));
    h.seed = seed * 2654435761u + 17;
    h.sw.sin_family = AF_INET;
    h.sw.sin_addr.s_addr = htonl(0x7F000001);
    h.sw.sin_port = htons(47500);
    h.p.nslots = 24;
    h.p.max_elems = 320; /* some jobs propose more: granted 320 */
    h.p.max_job_slots = 8;
    h.p.min_job_slots = 2;
    h.p.join_timeout_ns = 2000000000ull;
    h.p.idle_timeout_ns = 0; /* the program's clock is the kernel's, not the trace's */
    if (seed % 3 == 2) { /* every third trace: --multicast, finished sums to the job's group */
        h.p.mcast_base = 0xEFFF4900u; /* 239.255.73.0, the default */
        h.p.mcast_port = 47500;
    }
    h.p.seed = h.seed;
    FILE *out = NULL;
    char path[512];
    if (save_dir) {
        snprintf(path, sizeof(path), "%s/fuzz-%llu.inatrace", save_dir, (unsigned long long)seed);
        out = fopen(path, "wb");
        if (!out || ina__trace_write_header(out, &h) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            if (out)
                fclose(out);
            return 1;
        }
    }
    struct rp r;
    char err[512];
    if (rp_open(&r, &h, b->e, &b->sw, b->cap, b->fallback, seed, err, sizeof(err)) != 0) {
        if (out)
            fclose(out);
        fprintf(stderr, "fuzz seed %llu: %s\n", (unsigned long long)seed, err);
        return 1;
    }
    int bad = 0;
    uint64_t kinds[4] = {0};
    for (int i = 0; i < events && !bad; i++) {
        struct ina_trace_rec rec;
        gen_next(&g, &rec);
        kinds[rec.type & 3]++;
        if (out)
            ina__trace_write(out, &rec);
        bad = !rp_input(&r, &rec);
        for (int o = 0; o < r.nu; o++)
            gen_observe(&g, r.uo[o].data, r.uo[o].len);
    }
    if (!quiet || bad)
        printf("fuzz seed %llu: %s: %llu inputs (%llu ticks, %llu operator), %llu outputs "
               "compared, %llu DATA fed back; completions %llu, drops %llu\n",
               (unsigned long long)seed, bad ? "DIFFERENT" : "same",
               (unsigned long long)r.inputs, (unsigned long long)kinds[1],
               (unsigned long long)(kinds[2] + kinds[3]), (unsigned long long)r.compared,
               (unsigned long long)r.fed_back, (unsigned long long)r.u->c.completions,
               (unsigned long long)(r.u->c.rx_packets - r.u->c.contributions));
    if (bad && out)
        printf("  the trace: %s\n", path);
    ina__sw_counters_add(&reached, &r.u->c);
    group_results += r.group_out;
    rp_close(&r);
    if (out)
        fclose(out);
    return bad;
}

/* Every *.inatrace in dir, sorted, into list. @return how many. */
static int list_traces(const char *dir, char list[][512], int max)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) && n < max) {
        size_t l = strlen(de->d_name);
        if (l > 9 && strcmp(de->d_name + l - 9, ".inatrace") == 0)
            snprintf(list[n++], 512, "%s/%s", dir, de->d_name);
    }
    if (d)
        closedir(d);
    qsort(list, (size_t)n, 512, (int (*)(const void *, const void *))strcmp);
    return n;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"fuzz", required_argument, 0, 'f'},     {"events", required_argument, 0, 'e'},
        {"seed", required_argument, 0, 's'},     {"fallback", required_argument, 0, 'b'},
        {"save", required_argument, 0, 'S'},     {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    int nfuzz = 24, events = 3000, fallback = 15, c;
    uint64_t seed0 = 1;
    const char *save = NULL;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'f': nfuzz = atoi(optarg); break;
        case 'e': events = atoi(optarg); break;
        case 's': seed0 = strtoull(optarg, NULL, 0); break;
        case 'b': fallback = atoi(optarg); break;
        case 'S': save = optarg; break;
        case 'q': quiet = 1; break;
        case 'h':
            printf("usage: %s [--fuzz N] [--events M] [--seed S] [--fallback PCT] [--save DIR] "
                   "[--quiet] [TRACE|DIR...]\n",
                   argv[0]);
            return 0;
        default: return 2;
        }
    }
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT); /* the fuzzer's joins are refused a lot */
    if (geteuid() != 0)
        return skip("needs root (a network namespace of its own, BPF programs, a packet socket)");
    if (unshare(CLONE_NEWNET) != 0)
        return skip("cannot create a network namespace (unshare: not permitted here)");
    if (lo_up() != 0)
        return skip("cannot bring lo up in the test's network namespace");
    int ifindex = (int)if_nametoindex("lo");
    struct bench b = {.fallback = fallback};
    b.cap = open_capture(ifindex);
    if (b.cap < 0)
        return skip("cannot open a packet socket on lo");
    b.sw.sin_family = AF_INET;
    b.sw.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    b.sw.sin_port = htons(47500);
    /* The switch's socket: where fed-back DATA's redirected results leave from. */
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || bind(sock, (const struct sockaddr *)&b.sw, sizeof(b.sw)) != 0) {
        fprintf(stderr, "cannot bind the switch's socket: %s\n", strerror(errno));
        return 1;
    }
    char err[1024];
    struct ina_ebpf_opts o = {.iface = NULL, .ifindex = ifindex, .addr = b.sw, .sock_fd = sock,
                              .nslots = TEST_NSLOTS};
    int rc = ina__ebpf_open(&b.e, &o, err, sizeof(err));
    if (rc != 0) {
        /* Not permitted, no BPF in this kernel, or built without it: a
         * skip. Any other refusal (the verifier's) is a failure. */
        if (rc == -EPERM || rc == -ENOSYS || rc == -ENOTSUP)
            return skip(err);
        fprintf(stderr, "test_ebpf_diff: %s\n", err);
        return 1;
    }

    static char traces[256][512];
    int ntraces = 0;
    for (int i = optind; i < argc && ntraces < 256; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
            ntraces += list_traces(argv[i], traces + ntraces, 256 - ntraces);
        else
            snprintf(traces[ntraces++], 512, "%s", argv[i]);
    }
    int failed = 0, ran = 0;
    for (int i = 0; i < ntraces && !failed; i++, ran++)
        failed |= replay_file(traces[i], &b);
    for (int i = 0; i < nfuzz && !failed; i++, ran++)
        failed |= fuzz_one(seed0 + (uint64_t)i, events, &b, save);
    ina__ebpf_close(b.e);
    close(sock);
    close(b.cap);
    printf("reached: %llu contributions, %llu completions, %llu results resent, %llu jobs "
           "started, %llu aborted, %llu evicted; drops:",
           (unsigned long long)reached.contributions, (unsigned long long)reached.completions,
           (unsigned long long)reached.results_resent, (unsigned long long)reached.jobs_started,
           (unsigned long long)reached.jobs_aborted, (unsigned long long)reached.jobs_evicted);
    for (int d = 0; d < INA_DROP__COUNT; d++)
        if (reached.drops[d])
            printf(" %s %llu", ina__drop_name((enum ina_drop)d), (unsigned long long)reached.drops[d]);
    printf("\n");
    printf("multicast: %llu results to a job's group compared\n", (unsigned long long)group_results);
    if (!failed && nfuzz >= 3 && group_results == 0) {
        printf("FAIL: no fuzzed trace with --multicast completed a round\n");
        failed = 1;
    }
    printf("test_ebpf_diff: %d traces (%d recorded, %d fuzzed), %s\n", ran, ntraces, nfuzz,
           failed ? "FAILED: the dataplanes differ" : "the dataplanes agree on all of them");
    return failed ? 1 : 0;
}
