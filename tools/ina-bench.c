/* ina-bench.c: all-reduce benchmark and verifier for libina: one worker, or a switch plus N workers on loopback. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* readlink, strsignal, mkdtemp, prctl, F_DUPFD_CLOEXEC */
#endif

/*
 * Two modes, one binary:
 *
 *  --local N       launcher: starts ina-switch on 127.0.0.1 (ephemeral port),
 *                  then re-executes itself N times as workers, waits for them
 *                  under an overall deadline, stops the switch and reports.
 *  --switch H:P    worker: joins the job as --rank R of --world N and runs the
 *                  benchmark. Rank 0 prints the results.
 *
 * Verification without a side channel: the data each rank sends is a pure
 * function of (rank, size, iteration, index), so every rank regenerates the
 * contributions of all ranks and computes the exact result locally (int32:
 * wrapping uint32 sum, max, min or truncated average, bit-exact; the float
 * types: double sum, which is exact for the values generated here, checked
 * against ina_error_bound(), or its AVG form). The
 * per-rank verdicts are combined with one more all-reduce per size, an int32
 * vector {failures, 1, retransmits}: rank 0 requires failures == 0 and the
 * second element == N (every rank reported).
 *
 * Exit status: 0 every result on every rank verified; 1 error (library error,
 * crash, deadline); 2 usage error; 3 ran to completion but some result failed
 * verification.
 */

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/host.h"
#include "common/clock.h"
#include "ina.h"

#define EXIT_USAGE 2
#define EXIT_VERIFY 3 /* completed, but results were wrong somewhere */

#define MAX_SIZES 64
#define MAX_REPORTED_MISMATCHES 5 /* per rank and size, to stderr */
#define PORT_FILE_WAIT_MS 10000
#define SWITCH_STOP_WAIT_MS 5000
#define KILL_GRACE_MS 2000

/* ---- Options ------------------------------------------------------------ */

struct opts {
    /* launcher */
    int local_n;            /* 0 = worker mode */
    const char *switch_bin; /* NULL = next to ourselves */
    /* worker */
    const char *switch_addr;
    int rank, world;
    const char *job;
    /* benchmark, passed from the launcher to its workers */
    const char *sizes_arg;
    unsigned long long sizes[MAX_SIZES];
    int nsizes;
    ina_dtype dtype;
    ina_op op;
    int iters, warmup;
    int json;
    int elems, window, timeout_ms, join_timeout_ms;
    int lanes, switch_threads;
    int inflight;   /* operations started together per iteration (ina_allreduce_start) */
    int switch_shm; /* --local: 1 start ina-switch --shm, -1 --no-shm, 0 its default */
    const char *switch_desc; /* (hidden, launcher to workers) the switch's threads, for the
                                report: "T auto" or "T set"; NULL: not started by us */
    int float_add; /* INA_FLOAT_ADD_*; -1: not given (the environment's INA_FLOAT_ADD, else quantized) */
    int sparse;    /* INA_SPARSE_*; INA_SPARSE_DEFAULT: not given (the environment's INA_SPARSE) */
    int sparse_block;        /* 0: the library's default (256) */
    double sparse_threshold; /* 0: exact */
    double density;          /* --density: the inputs' fraction of non-zero blocks (1: dense data) */
    int pattern;             /* SPARSE_* (bench_data.h) */
    int fixed_point; /* fractional bits (ina_config.fixed_point_bits); -1: INA_FIXED_POINT, else 0 */
    int busy_poll;   /* worker spin in us (ina_config.busy_poll_us; INA_BUSY_POLL_AUTO: auto);
                        -2: INA_BUSY_POLL_US, else auto */
    int switch_busy_poll; /* --local: ina-switch --busy-poll US (0 = never); -1: its default */
    int deadline_s;
    int verbose;
    /* loss sweep (--loss): the launcher reruns everything once per rate */
    double loss[MAX_SIZES];
    int nloss;
    double loss_cur;         /* rate of the current run; passed to workers as a label */
    const char *report_file; /* rank 0 appends "bytes time_s algbw_gbps ok" lines here */
};

static const char *prog = "ina-bench";

/* Names, element sizes and bits of the dtypes and ops, indexed by their values. */
static const char *const dtype_names[] = {"int32", "float32", "float16", "bfloat16", "float64"};
static const size_t dtype_size[] = {4, 4, 2, 2, 8};
static const char *const op_names[] = {"sum", "max", "min", "avg"};
#define NDTYPES (sizeof(dtype_names) / sizeof(dtype_names[0]))
#define NOPS (sizeof(op_names) / sizeof(op_names[0]))

static void usage(FILE *f)
{
    fprintf(f,
"Usage:\n"
"  ina-bench --local N [options]\n"
"  ina-bench --switch HOST:PORT --rank R --world N [--job NAME] [options]\n"
"  srun ina-bench --switch HOST:PORT [options]     (rank, world, job: environment)\n"
"\n"
"All-reduce benchmark and verifier for libina (in-network aggregation).\n"
"\n"
"Modes:\n"
"  --local N            start ina-switch on 127.0.0.1 and N worker processes\n"
"                       (1..%d), run the benchmark, stop everything. Rank 0's\n"
"                       results go to stdout. The workers learn that they share\n"
"                       this host (LOCAL_WORLD_SIZE=N, unless set), which sizes\n"
"                       their automatic lanes\n"
"  --switch HOST:PORT   run one worker against a running ina-switch (default:\n"
"                       INA_SWITCH). --rank, --world and --job left out come\n"
"                       from the environment as libina reads it (INA_RANK or\n"
"                       RANK, ...; then Slurm's srun, mpirun, PMI: ina(3)).\n"
"                       Only rank 0 prints results.\n"
"                       A list HOST:PORT,HOST:PORT,... spreads every operation\n"
"                       over those switches (shards, as INA_SWITCH does)\n"
"                       With --local N: start the N workers against that running\n"
"                       switch instead of a new one, so that several benchmarks\n"
"                       (each its own --job NAME) share one switch\n"
"\n"
"Worker options:\n"
"  --rank R             this worker's rank, 0..N-1\n"
"  --world N            number of workers in the job, 1..%d\n"
"  --job NAME           job name, 1..%d bytes (default: the library's \"default\";\n"
"                       with --local, bench-<pid>)\n"
"\n"
"Benchmark options (--local passes them on to its workers):\n"
"  --sizes LIST         comma-separated message sizes in bytes per rank, with\n"
"                       optional binary suffix K, M or G (4K = 4096).\n"
"                       Default 4K,64K,1M,16M. A size that is not a multiple of\n"
"                       4 is rounded down to whole 4-byte elements; it must be\n"
"                       at least 4. At most %d sizes.\n"
"  --dtype TYPE         float32 (default), int32, float16, bfloat16 or float64\n"
"  --op OP              sum (default), avg, max or min (max and min: not float64)\n"
"  --iters N            timed iterations per size (default 10, >= 1)\n"
"  --warmup N           untimed iterations per size before them (default 2)\n"
"  --json               one JSON object per size per line on stdout, nothing\n"
"                       else on stdout\n"
"  --elems K            elements per packet requested (0 = library default)\n"
"  --window W           outstanding packets requested, a power of 2\n"
"                       (0 = library default)\n"
"  --lanes L|auto       threads (lanes) per worker, each streaming 1/L of every\n"
"                       operation with its own socket and window (default auto:\n"
"                       the library's choice from the cores, ina_auto_lanes())\n"
"  --inflight K         each iteration starts K all-reduces of the size at once\n"
"                       (ina_allreduce_start, own buffers and data each), then\n"
"                       waits for all; time and algbw count all K (1..64,\n"
"                       default 1: one blocking ina_allreduce per iteration)\n"
"  --sparse MODE        block-sparse all-reduce: off (default), on or auto (ina.h\n"
"                       INA_SPARSE_*; env INA_SPARSE)\n"
"  --sparse-block B     elements per sparse block, 32..256 (0 = library default 256);\n"
"                       also the block of the --density masks\n"
"  --sparse-threshold T a block is zero when every |x| <= T (default 0: exact)\n"
"  --density D          inputs with a fraction D of non-zero blocks (default 1: dense\n"
"                       data); the other blocks are +0. Results verified as always\n"
"  --pattern P          which blocks: random (each rank its own, default), overlap\n"
"                       (every rank the same) or disjoint (no two ranks share one)\n"
"  --float-add MODE     quantized (default: block floating point, as SwitchML)\n"
"                       or switch (the switch adds float32 values as floats;\n"
"                       ina.h INA_FLOAT_ADD_SWITCH); env INA_FLOAT_ADD\n"
"  --fixed-point F      float sums and averages as 32-bit fixed point with F\n"
"                       fractional bits, one round, no exponents (P4SGD's Q8.23\n"
"                       is 23; ina.h fixed_point_bits); env INA_FIXED_POINT\n"
"  --busy-poll US|auto  workers spin up to US microseconds for results before\n"
"                       sleeping (ina.h busy_poll_us; 0: never); env INA_BUSY_POLL_US;\n"
"                       default auto: chosen from the host (ina_auto_busy_poll)\n"
"  --switch-busy-poll US|auto  --local: run ina-switch --busy-poll US (default\n"
"                       auto, the switch's own default; 0: never)\n"
"  --switch-shm         --local: run ina-switch --shm (workers on this host use\n"
"                       shared-memory rings; INA_SHM=0 keeps them on UDP). The\n"
"                       switch's default, except with --loss\n"
"  --switch-no-shm      --local: run ina-switch --no-shm (UDP only)\n"
"  --switch-threads T|auto  --local: run ina-switch --threads T (default auto:\n"
"                       the switch's choice, half the cores, 1..8)\n"
"  --timeout-ms MS      operation deadline without progress (0 = library default)\n"
"  --join-timeout-ms MS deadline for all ranks to join (0 = library default)\n"
"  --deadline-s S       overall wall-clock deadline; --local kills the workers\n"
"                       and the switch when it passes, a worker gives up\n"
"                       (default 600, 0 = none)\n"
"  --loss LIST          with --local: rerun everything once per loss rate, the\n"
"                       switch dropping that fraction of datagrams each way\n"
"                       (fault injection), e.g. 0,0.01%%,0.1%%,1%% or 0,0.001;\n"
"                       ends with a summary of throughput relative to the\n"
"                       first rate\n"
"  --verbose            progress to stderr; --local also shows ina-switch's\n"
"                       output (its counters on exit) on stderr\n"
"\n"
"Launcher options:\n"
"  --switch-bin PATH    ina-switch to start (default: ina-switch in the directory\n"
"                       of this executable)\n"
"\n"
"  --help               this text\n"
"  --version            versions of ina-bench and of the linked libina\n"
"\n"
"Every iteration (warmup included) is verified on every rank: int32 bit-exact\n"
"(sum wrapping, max, min, avg truncated toward zero), the float types per\n"
"element within ina_error_bound() for their packet block (elems_per_packet\n"
"elements; amax over all ranks), or for avg within the bound ina.h gives for\n"
"it; on the 16-bit wire (float16, bfloat16 sum and avg where the switch offers\n"
"it; float32 too with INA_WIRE_BITS=16, INA_WIRE_HALF=bf16|fp16, which the\n"
"workers read) within ina_wire16_error_bound() for their packet of 2 x\n"
"elems_per_packet elements. A size in bytes is rounded down to whole elements\n"
"of the dtype.\n"
"Before each iteration the ranks synchronise with a 1-element all-reduce (a\n"
"barrier, untimed); time is measured around each ina_allreduce() call only,\n"
"and the reported time is rank 0's median over the timed iterations.\n"
"With --inflight K an iteration is K operations in flight together, from the\n"
"first start to the last completion; bytes, algbw and ATE/s then count all K.\n"
"\n"
"Columns: algbw = bytes * 8 / time (Gbit/s, bytes per rank); busbw = algbw *\n"
"2(N-1)/N, the nccl-tests convention for ring all-reduce, given for comparison\n"
"(for an aggregator algbw is the natural figure); ATE/s = elements / time;\n"
"max_abs_err as seen on rank 0; retx = retransmits summed over all ranks during\n"
"the timed iterations; ok only if every result on every rank verified.\n"
"\n"
"JSON keys: workers, bytes, count, dtype, op, iters, warmup, elems_per_packet,\n"
"window, lanes, shards, levels, inflight, path, float_add, transport, fixed_point,\n"
"busy_poll_us, sparse, density, pattern, sparse_block, sparse_ops, sparse_auto_dense,\n"
"sparse_blocks_sent (all ranks, timed iterations), time_s, time_min_s, time_max_s,\n"
"time_p99_s (nearest rank), algbw_gbps, busbw_gbps, ate_per_s,\n"
"max_abs_err, max_rel_err (abs_err / the block's largest |input| x N: error\n"
"relative to the magnitudes summed, the scale of the quantization bound; a\n"
"ratio to |exact| would be meaningless where sums cancel), max_err_over_bound,\n"
"failures (elements out of bound, all ranks), retransmits, ok.\n"
"\n"
"A worker (--switch) takes INA_SECRET_FILE from the environment, as libina does.\n"
"\n"
"Exit status: 0 all results verified, 1 error, 2 usage error, 3 some result\n"
"failed verification.\n"
"\n"
"Example:\n"
"  ina-bench --local 4 --sizes 4K,1M,64M --dtype float32 --iters 20\n"
"  ina-bench --switch 10.0.0.1:48864 --rank 1 --world 4 --job j1 --json\n"
"  srun -n 4 ina-bench --switch 10.0.0.1:48864       (examples/slurm)\n",
            INA_MAX_WORKERS, INA_MAX_WORKERS, INA_JOB_NAME_MAX, MAX_SIZES);
}

static _Noreturn void usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s: try '%s --help'\n", prog, prog);
    exit(EXIT_USAGE);
}

static int parse_int(const char *opt, const char *s, long lo, long hi)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0')
        usage_error("%s: '%s' is not an integer", opt, s);
    if (v < lo || v > hi)
        usage_error("%s: %ld is out of range %ld..%ld", opt, v, lo, hi);
    return (int)v;
}

/* "auto" (INA_BUSY_POLL_AUTO) or microseconds 0..1000000. */
static int parse_busy_poll(const char *opt, const char *s)
{
    return strcmp(s, "auto") == 0 ? INA_BUSY_POLL_AUTO : parse_int(opt, s, 0, 1000000);
}

/* A number in [0, hi]. */
static double parse_fraction(const char *opt, const char *s, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= 0 && v <= hi))
        usage_error("%s: '%s' is not a number in 0..%g", opt, s, hi);
    return v;
}

/* "4K,64K,1M" -> byte counts. */
static void parse_sizes(struct opts *o, const char *arg)
{
    const char *p = arg;
    o->nsizes = 0;
    if (!*p)
        usage_error("--sizes: empty list");
    for (;;) {
        char *end;
        unsigned long long v, mult = 1;
        if (*p < '0' || *p > '9')
            usage_error("--sizes: '%s': expected a number at '%s'", arg, p);
        errno = 0;
        v = strtoull(p, &end, 10);
        if (errno)
            usage_error("--sizes: '%s': number too large", arg);
        switch (*end) {
        case 'K': case 'k': mult = 1ull << 10; end++; break;
        case 'M': case 'm': mult = 1ull << 20; end++; break;
        case 'G': case 'g': mult = 1ull << 30; end++; break;
        default: break;
        }
        if (*end != ',' && *end != '\0')
            usage_error("--sizes: '%s': bad size at '%s' (use e.g. 4096, 4K, 1M, 1G)", arg, p);
        if (v > (1ull << 40) / mult)
            usage_error("--sizes: '%.*s' is too large (at most 1024G)", (int)(end - p), p);
        v *= mult;
        if (v < 4)
            usage_error("--sizes: '%.*s' is less than one 4-byte element", (int)(end - p), p);
        if (v / 4 > SIZE_MAX / 4)
            usage_error("--sizes: '%.*s' does not fit in memory", (int)(end - p), p);
        if (o->nsizes == MAX_SIZES)
            usage_error("--sizes: more than %d sizes", MAX_SIZES);
        o->sizes[o->nsizes++] = v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
}

static const char *const float_add_names[] = {"quantized", "switch"}; /* INA_FLOAT_ADD_* */
static const char *const sparse_names[] = {"off", "on", "auto"};      /* INA_SPARSE_* */
static const char *const pattern_names[] = {"random", "overlap", "disjoint"}; /* SPARSE_* */

/* The index of name in names[0..n), or a usage error naming the choices. */

static int name_index(const char *opt, const char *name, const char *const *names, size_t n)
{
    char list[128] = "";
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(name, names[i]))
            return (int)i;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    }
    usage_error("%s: '%s' is not one of %s", opt, name, list);
}

enum {
    OPT_LOCAL = 256, OPT_SWITCH_BIN, OPT_SWITCH, OPT_RANK, OPT_WORLD, OPT_JOB, OPT_SIZES,
    OPT_DTYPE, OPT_OP, OPT_ITERS, OPT_WARMUP, OPT_JSON, OPT_ELEMS, OPT_WINDOW, OPT_LANES, OPT_INFLIGHT,
    OPT_FLOAT_ADD, OPT_SWITCH_SHM, OPT_SWITCH_NO_SHM, OPT_SWITCH_THREADS, OPT_TIMEOUT,
    OPT_SPARSE, OPT_SPARSE_BLOCK, OPT_SPARSE_THRESHOLD, OPT_DENSITY, OPT_PATTERN,
    OPT_FIXED_POINT, OPT_BUSY_POLL, OPT_SWITCH_BUSY_POLL,
    OPT_JOIN_TIMEOUT, OPT_DEADLINE, OPT_VERBOSE,
    OPT_LOSS,
    OPT_LOSS_LABEL, OPT_SWITCH_DESC,
    OPT_REPORT_FILE, OPT_HELP, OPT_VERSION,
};

/* "0,0.01%,0.001": rates as fractions, or percents with a % suffix. */
static void parse_loss(struct opts *o, const char *arg)
{
    const char *p = arg;
    o->nloss = 0;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p)
            usage_error("--loss: '%s' is not a list of rates", arg);
        if (*end == '%') {
            v /= 100;
            end++;
        }
        if (!(v >= 0 && v <= 1) || o->nloss == MAX_SIZES)
            usage_error("--loss: rates must be in 0..1 (or 0%%..100%%), at most %d", MAX_SIZES);
        o->loss[o->nloss++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            usage_error("--loss: '%s' is not a list of rates", arg);
        p = end;
    }
}

/* Worker mode: what --rank, --world and --job leave unset comes from the environment as
 * ina_config_from_env() reads it (INA_RANK/RANK, INA_WORLD_SIZE/WORLD_SIZE, INA_JOB, then
 * srun's, mpirun's or PMI's variables): `srun ina-bench --switch H:P` needs no per-task
 * arguments. */
static void from_launcher(struct opts *o, int have_rank, int have_world)
{
    ina_config env;
    if (ina_config_from_env(&env) != 0)
        usage_error("%s", ina_last_error(NULL));
    if (!have_rank)
        o->rank = env.rank;
    if (!have_world) {
        if (env.world_size < 1 || env.world_size > INA_MAX_WORKERS)
            usage_error("world size %d from the environment: not in 1..%d", env.world_size,
                        INA_MAX_WORKERS);
        o->world = env.world_size;
    }
    if (!o->job && strcmp(env.job, "default") != 0)
        o->job = env.job;
}

static void parse_args(struct opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"local", required_argument, NULL, OPT_LOCAL},
        {"switch-bin", required_argument, NULL, OPT_SWITCH_BIN},
        {"switch", required_argument, NULL, OPT_SWITCH},
        {"rank", required_argument, NULL, OPT_RANK},
        {"world", required_argument, NULL, OPT_WORLD},
        {"job", required_argument, NULL, OPT_JOB},
        {"sizes", required_argument, NULL, OPT_SIZES},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"op", required_argument, NULL, OPT_OP},
        {"iters", required_argument, NULL, OPT_ITERS},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"json", no_argument, NULL, OPT_JSON},
        {"elems", required_argument, NULL, OPT_ELEMS},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"lanes", required_argument, NULL, OPT_LANES},
        {"inflight", required_argument, NULL, OPT_INFLIGHT},
        {"float-add", required_argument, NULL, OPT_FLOAT_ADD},
        {"sparse", required_argument, NULL, OPT_SPARSE},
        {"sparse-block", required_argument, NULL, OPT_SPARSE_BLOCK},
        {"sparse-threshold", required_argument, NULL, OPT_SPARSE_THRESHOLD},
        {"density", required_argument, NULL, OPT_DENSITY},
        {"pattern", required_argument, NULL, OPT_PATTERN},
        {"fixed-point", required_argument, NULL, OPT_FIXED_POINT},
        {"busy-poll", required_argument, NULL, OPT_BUSY_POLL},
        {"switch-busy-poll", required_argument, NULL, OPT_SWITCH_BUSY_POLL},
        {"switch-threads", required_argument, NULL, OPT_SWITCH_THREADS},
        {"switch-shm", no_argument, NULL, OPT_SWITCH_SHM},
        {"switch-no-shm", no_argument, NULL, OPT_SWITCH_NO_SHM},
        {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
        {"join-timeout-ms", required_argument, NULL, OPT_JOIN_TIMEOUT},
        {"deadline-s", required_argument, NULL, OPT_DEADLINE},
        {"verbose", no_argument, NULL, OPT_VERBOSE},
        {"loss", required_argument, NULL, OPT_LOSS},
        {"loss-label", required_argument, NULL, OPT_LOSS_LABEL},
        {"switch-desc", required_argument, NULL, OPT_SWITCH_DESC},
        {"report-file", required_argument, NULL, OPT_REPORT_FILE},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    int c, have_rank = 0, have_world = 0;

    memset(o, 0, sizeof *o);
    o->sizes_arg = "4K,64K,1M,16M";
    o->dtype = INA_FLOAT32;
    o->op = INA_SUM;
    o->iters = 10;
    o->inflight = 1;
    o->warmup = 2;
    o->deadline_s = 600;
    o->rank = -1;
    o->float_add = -1;
    o->sparse = INA_SPARSE_DEFAULT;
    o->density = 1;
    o->fixed_point = -1;
    o->busy_poll = -2;
    o->switch_busy_poll = -1;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        const char *a = optarg;
        switch (c) {
        case OPT_LOCAL: o->local_n = parse_int("--local", a, 1, INA_MAX_WORKERS); break;
        case OPT_SWITCH_BIN: o->switch_bin = a; break;
        case OPT_SWITCH:
            if (!*a)
                usage_error("--switch: empty address");
            o->switch_addr = a;
            break;
        case OPT_RANK: o->rank = parse_int("--rank", a, 0, INA_MAX_WORKERS - 1); have_rank = 1; break;
        case OPT_WORLD: o->world = parse_int("--world", a, 1, INA_MAX_WORKERS); have_world = 1; break;
        case OPT_JOB:
            if (strlen(a) < 1 || strlen(a) > INA_JOB_NAME_MAX)
                usage_error("--job: name must be 1..%d bytes", INA_JOB_NAME_MAX);
            o->job = a;
            break;
        case OPT_SIZES: o->sizes_arg = a; break;
        case OPT_DTYPE:
            o->dtype = (ina_dtype)name_index("--dtype", a, dtype_names, NDTYPES);
            break;
        case OPT_OP: o->op = (ina_op)name_index("--op", a, op_names, NOPS); break;
        case OPT_ITERS: o->iters = parse_int("--iters", a, 1, 1000000); break;
        case OPT_WARMUP: o->warmup = parse_int("--warmup", a, 0, 1000000); break;
        case OPT_JSON: o->json = 1; break;
        case OPT_ELEMS: o->elems = parse_int("--elems", a, 0, INT_MAX); break;
        case OPT_INFLIGHT:
            o->inflight = parse_int("--inflight", a, 1, 64);
            break;
        case OPT_LANES:
            o->lanes = strcmp(a, "auto") == 0 ? 0 : parse_int("--lanes", a, 1, 16);
            break;
        case OPT_FLOAT_ADD:
            o->float_add = name_index("--float-add", a, float_add_names, 2);
            break;
        case OPT_SPARSE: o->sparse = name_index("--sparse", a, sparse_names, 3); break;
        case OPT_SPARSE_BLOCK:
            o->sparse_block = parse_int("--sparse-block", a, 0, 256);
            if (o->sparse_block && o->sparse_block < 32)
                usage_error("--sparse-block: %d is not 0 or 32..256", o->sparse_block);
            break;
        case OPT_SPARSE_THRESHOLD: o->sparse_threshold = parse_fraction("--sparse-threshold", a, 1e30); break;
        case OPT_DENSITY: o->density = parse_fraction("--density", a, 1); break;
        case OPT_PATTERN: o->pattern = name_index("--pattern", a, pattern_names, 3);
            break;
        case OPT_SWITCH_SHM: o->switch_shm = 1; break;
        case OPT_FIXED_POINT: o->fixed_point = parse_int("--fixed-point", a, 0, 30); break;
        case OPT_BUSY_POLL: o->busy_poll = parse_busy_poll("--busy-poll", a); break;
        case OPT_SWITCH_BUSY_POLL:
            o->switch_busy_poll = parse_busy_poll("--switch-busy-poll", a);
            if (o->switch_busy_poll == INA_BUSY_POLL_AUTO)
                o->switch_busy_poll = -1; /* the switch's default */
            break;
        case OPT_SWITCH_NO_SHM: o->switch_shm = -1; break;
        case OPT_SWITCH_THREADS:
            o->switch_threads = strcmp(a, "auto") == 0 ? 0
                                : parse_int("--switch-threads", a, 1, 64);
            break;
        case OPT_WINDOW:
            o->window = parse_int("--window", a, 0, 1 << 30);
            if (o->window & (o->window - 1))
                usage_error("--window: %d is not a power of 2", o->window);
            break;
        case OPT_TIMEOUT: o->timeout_ms = parse_int("--timeout-ms", a, 0, INT_MAX); break;
        case OPT_JOIN_TIMEOUT: o->join_timeout_ms = parse_int("--join-timeout-ms", a, 0, INT_MAX); break;
        case OPT_DEADLINE: o->deadline_s = parse_int("--deadline-s", a, 0, 100000000); break;
        case OPT_VERBOSE: o->verbose = 1; break;
        case OPT_LOSS: parse_loss(o, a); break;
        case OPT_LOSS_LABEL: o->loss_cur = strtod(a, NULL); break;
        case OPT_SWITCH_DESC: o->switch_desc = a; break;
        case OPT_REPORT_FILE: o->report_file = a; break;
        case OPT_HELP: usage(stdout); exit(0);
        case OPT_VERSION:
            printf("ina-bench (built with ina.h %d.%d.%d), linked libina %s\n",
                   INA_VERSION_MAJOR, INA_VERSION_MINOR, INA_VERSION_PATCH,
                   ina_version_string());
            exit(0);
        case ':': usage_error("option '%s' needs a value", argv[optind - 1]);
        default: usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    parse_sizes(o, o->sizes_arg);
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] < dtype_size[o->dtype])
            usage_error("--sizes: %llu bytes is less than one %s element", o->sizes[i],
                        dtype_names[o->dtype]);
    if ((o->op == INA_MAX || o->op == INA_MIN) && o->dtype == INA_FLOAT64)
        usage_error("--op %s: not for float64 (libina refuses it: its order keys would need "
                    "64-bit lanes)", op_names[o->op]);

    if (o->local_n) {
        if (have_rank || have_world)
            usage_error("--local starts its own workers: do not combine it with --rank or --world");
        if (o->switch_addr && (o->switch_bin || o->nloss || o->switch_threads || o->switch_shm ||
                               o->switch_busy_poll >= 0))
            usage_error("--local with --switch uses that running switch: --switch-bin, --loss, "
                        "--switch-threads, --switch-shm and --switch-busy-poll only apply to "
                        "a switch --local starts");
    } else {
        const char *env_switch = getenv("INA_SWITCH");
        if (!o->switch_addr && env_switch && *env_switch)
            o->switch_addr = env_switch;
        if (!o->switch_addr)
            usage_error("need --local N, or --switch HOST:PORT (or INA_SWITCH) with --rank and "
                        "--world (or a launcher's environment)");
        if (o->switch_bin)
            usage_error("--switch-bin only applies to --local");
        if (o->nloss)
            usage_error("--loss only applies to --local (it sets the switch's fault injection)");
        if (!have_rank || !have_world || !o->job)
            from_launcher(o, have_rank, have_world);
        if (o->rank >= o->world)
            usage_error("--rank %d is out of range for --world %d", o->rank, o->world);
    }
    const char *fa = getenv("INA_FLOAT_ADD");
    if (o->float_add < 0 && fa && *fa) /* as ina_config_from_env() would read it */
        o->float_add = name_index("INA_FLOAT_ADD", fa, float_add_names, 2);
    const char *fx = getenv("INA_FIXED_POINT"), *bp = getenv("INA_BUSY_POLL_US");
    if (o->fixed_point < 0)
        o->fixed_point = fx && *fx ? parse_int("INA_FIXED_POINT", fx, 0, 30) : 0;
    if (o->busy_poll == -2)
        o->busy_poll = bp && *bp ? parse_busy_poll("INA_BUSY_POLL_US", bp) : INA_BUSY_POLL_AUTO;
    if (o->fixed_point && o->float_add == INA_FLOAT_ADD_SWITCH)
        usage_error("--fixed-point and --float-add switch both say how float sums travel: "
                    "choose one");
}

/* ---- Time ----------------------------------------------------------------- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- Deterministic data -------------------------------------------------- */

#include "bench_data.h"

/* ---- Worker -------------------------------------------------------------- */

static int g_rank = -1;
static int g_float_add; /* ina_info.float_add: which error bound the results must meet */
static int g_fixed_bits; /* ina_info.fixed_point_bits: the same, for fixed point */
/* The run's dtype and op on the 16-bit wire (PROTOCOL.md §8.10): its bound, per
 * packet of 2 elems_per_packet elements; the format FLOAT32 takes there. */
static int g_wire16, g_wire_half;
static ina_ctx *g_ctx;

static _Noreturn void die_ina(const char *what, int rc)
{
    const char *why = ina_last_error(g_ctx); /* g_ctx NULL: why ina_init failed */
    fprintf(stderr, "%s: rank %d: %s: %s (%s)%s%s\n", prog, g_rank, what, ina_strerror(rc),
            ina_err_name(rc), why[0] ? ": " : "", why);
    fflush(stdout);
    /* Leaving tells the switch, which ends the session: the other ranks fail
     * fast instead of waiting for their timeout. */
    ina_finalize(g_ctx);
    exit(1);
}

static _Noreturn void die_sys(const char *what)
{
    fprintf(stderr, "%s: rank %d: %s: %s\n", prog, g_rank, what, strerror(errno));
    ina_finalize(g_ctx);
    exit(1);
}

static char alarm_msg[128];
static size_t alarm_msg_len;

static void on_alarm(int sig)
{
    (void)sig;
    ssize_t r = write(STDERR_FILENO, alarm_msg, alarm_msg_len);
    (void)r;
    _exit(1);
}

/* Verification results of one size on this rank. */
struct verdict {
    uint64_t failures;        /* elements out of bound / wrong */
    double max_abs, max_rel;  /* over all iterations */
    double max_ratio;         /* max abs_err / bound (float types) */
    int reported;             /* mismatches printed so far */
};

/* Fill n elements of dtype dt, from element start of the tensor of seed. */
static void fill_dense(int dt, uint64_t seed, size_t start, size_t n, void *out)
{
    switch ((ina_dtype)dt) {
    case INA_INT32: fill_i32(seed, start, n, out); break;
    case INA_FLOAT32: fill_f32(seed, start, n, out); break;
    case INA_FLOAT16: fill_f16(seed, start, n, out); break;
    case INA_BFLOAT16: fill_bf16(seed, start, n, out); break;
    case INA_FLOAT64: fill_f64(seed, start, n, out); break;
    }
}

static struct sparse_pat g_pat; /* --density, --pattern, the block: the inputs' zero blocks */

/* Elements [start, start + n) of rank r's input for (bytes, iter), with the
 * blocks --density drops set to zero. */
static void fill(ina_dtype dt, int r, unsigned long long bytes, int iter, size_t start, size_t n,
                 void *out)
{
    sparse_fill(&g_pat, dt, dtype_size[dt], out, start, n, r, bytes, iter, fill_dense);
}

/* Element i of a float-type buffer, as a double (exact). */
static double float_at(ina_dtype dt, const void *x, size_t i)
{
    switch (dt) {
    case INA_FLOAT32: return ((const float *)x)[i];
    case INA_FLOAT16: return f16_value(((const uint16_t *)x)[i]);
    case INA_BFLOAT16: return bf16_value(((const uint16_t *)x)[i]);
    case INA_FLOAT64: return ((const double *)x)[i];
    case INA_INT32: break;
    }
    return NAN;
}

/* The bound of one element: ina_error_bound() for SUM; for AVG the form
 * ina.h gives (the sum's bound / N, the division's rounding in double, the
 * type's subnormal term), against exact / N. */
static double elem_bound(ina_dtype dt, ina_op op, int n, double amax, double abs_sum,
                         double exact)
{
    if (op == INA_MAX || op == INA_MIN)
        return 0.0; /* exact (PROTOCOL.md §8.9) */
    if (g_wire16) /* its own AVG form, against exact / N */
        return ina_wire16_error_bound(dt, g_wire_half, op, n, abs_sum, exact, amax);
    double b = g_fixed_bits ? ina_fixed_error_bound(dt, n, g_fixed_bits, exact)
               : g_float_add == INA_FLOAT_ADD_SWITCH ? ina_float_add_error_bound(dt, n, abs_sum, exact)
                                                     : ina_error_bound(dt, n, amax, exact);
    if (op != INA_AVG)
        return b;
    double sub = dt == INA_FLOAT32 ? 0x1p-149 : dt == INA_FLOAT16 ? 0x1p-25
                 : dt == INA_BFLOAT16 ? 0x1p-134 : 0.0;
    return b / n + 0x1p-52 * fabs(exact / n) + sub;
}

static void report_mismatch(struct verdict *v, unsigned long long bytes, int iter, size_t i,
                            const char *fmt, ...)
{
    va_list ap;
    if (v->reported++ >= MAX_REPORTED_MISMATCHES) {
        if (v->reported == MAX_REPORTED_MISMATCHES + 1)
            fprintf(stderr, "%s: rank %d: size %llu: more mismatches, not shown\n", prog,
                    g_rank, bytes);
        return;
    }
    fprintf(stderr, "%s: rank %d: size %llu iteration %d element %zu: ", prog, g_rank, bytes,
            iter, i);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/*
 * Check recv against the sum (or its average) over all ranks, regenerated
 * here. Also checks that the library left sendbuf untouched. scratch holds
 * epp elements; acc holds epp doubles.
 */
static void verify_float(const struct opts *o, int epp, unsigned long long bytes, int iter,
                         const void *send, const void *recv, size_t count, void *scratch,
                         double *acc, double *acc_abs, struct verdict *v)
{
    const size_t es = dtype_size[o->dtype];
    for (size_t b0 = 0; b0 < count; b0 += (size_t)epp) {
        size_t n = count - b0 < (size_t)epp ? count - b0 : (size_t)epp;
        double amax = 0.0;
        memset(acc, 0, n * sizeof *acc);
        memset(acc_abs, 0, n * sizeof *acc_abs);
        for (int r = 0; r < o->world; r++) {
            fill(o->dtype, r, bytes, iter, b0, n, scratch);
            if (r == o->rank && memcmp(scratch, (const uint8_t *)send + b0 * es, n * es)) {
                v->failures++;
                report_mismatch(v, bytes, iter, b0, "send buffer was modified in block");
            }
            for (size_t j = 0; j < n; j++) {
                double x = float_at(o->dtype, scratch, j);
                if (o->op == INA_MAX || o->op == INA_MIN) /* exact: the extreme itself */
                    acc[j] = r == 0 ? x : o->op == INA_MAX ? fmax(acc[j], x) : fmin(acc[j], x);
                else
                    acc[j] += x;
                acc_abs[j] += fabs(x);
                if (fabs(x) > amax)
                    amax = fabs(x);
            }
        }
        for (size_t j = 0; j < n; j++) {
            double sum = acc[j], res = float_at(o->dtype, recv, b0 + j);
            double exact = o->op == INA_AVG ? sum / o->world : sum;
            double err = fabs(res - exact);
            double bound = elem_bound(o->dtype, o->op, o->world, amax, acc_abs[j], sum);
            /* Relative to the magnitude being summed (N x block amax), not
             * to |exact|: sums that cancel to ~0 make that ratio meaningless. */
            double rel = err / fmax(amax * o->world, 1e-30);
            double ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0);
            /* written so that NaN results count as failures */
            if (!(err <= bound)) {
                v->failures++;
                report_mismatch(v, bytes, iter, b0 + j,
                                "got %.9g, exact %.9g, error %.3g > bound %.3g "
                                "(block amax %.6g)",
                                res, exact, err, bound, amax);
            }
            if (!(err <= v->max_abs))
                v->max_abs = err;
            if (!(rel <= v->max_rel))
                v->max_rel = rel;
            if (!(ratio <= v->max_ratio))
                v->max_ratio = ratio;
        }
    }
}

/* Combine rank r's value x into acc[j] by op (avg: the wrapping sum, divided later). */
static uint32_t combine_i32(ina_op op, int r, uint32_t acc, int32_t x)
{
    if (r == 0)
        return (uint32_t)x;
    if (op == INA_MAX)
        return x > (int32_t)acc ? (uint32_t)x : acc;
    if (op == INA_MIN)
        return x < (int32_t)acc ? (uint32_t)x : acc;
    return acc + (uint32_t)x;
}

static void verify_i32(const struct opts *o, int epp, unsigned long long bytes, int iter,
                       const int32_t *send, const int32_t *recv, size_t count,
                       int32_t *scratch, uint32_t *acc, struct verdict *v)
{
    for (size_t b0 = 0; b0 < count; b0 += (size_t)epp) {
        size_t n = count - b0 < (size_t)epp ? count - b0 : (size_t)epp;
        for (int r = 0; r < o->world; r++) {
            fill(INA_INT32, r, bytes, iter, b0, n, scratch);
            if (r == o->rank && memcmp(scratch, send + b0, n * sizeof *scratch)) {
                v->failures++;
                report_mismatch(v, bytes, iter, b0, "send buffer was modified in block");
            }
            for (size_t j = 0; j < n; j++)
                acc[j] = combine_i32(o->op, r, acc[j], scratch[j]);
        }
        if (o->op == INA_AVG) /* truncation toward zero, as libina */
            for (size_t j = 0; j < n; j++)
                acc[j] = (uint32_t)((int32_t)acc[j] / o->world);
        for (size_t j = 0; j < n; j++) {
            uint32_t got = (uint32_t)recv[b0 + j];
            if (got != acc[j]) {
                /* the wrapped difference, as a magnitude */
                int64_t d = (int64_t)(int32_t)(got - acc[j]);
                double err = (double)(d < 0 ? -d : d);
                double rel = err / fmax(fabs((double)(int32_t)acc[j]), 1.0);
                v->failures++;
                report_mismatch(v, bytes, iter, b0 + j, "got %" PRId32 ", expected %" PRId32,
                                (int32_t)got, (int32_t)acc[j]);
                if (err > v->max_abs)
                    v->max_abs = err;
                if (rel > v->max_rel)
                    v->max_rel = rel;
                v->max_ratio = INFINITY;
            }
        }
    }
}

static void human_size(unsigned long long b, char *buf, size_t len)
{
    if (b >= (1ull << 30) && b % (1ull << 30) == 0)
        snprintf(buf, len, "%lluG", b >> 30);
    else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
        snprintf(buf, len, "%lluM", b >> 20);
    else if (b >= (1ull << 10) && b % (1ull << 10) == 0)
        snprintf(buf, len, "%lluK", b >> 10);
    else
        snprintf(buf, len, "%llu", b);
}

/* JSON has no Inf/NaN: print null for them. */
static void json_num(const char *key, double x, int last)
{
    if (isfinite(x))
        printf("\"%s\":%.9g%s", key, x, last ? "" : ",");
    else
        printf("\"%s\":null%s", key, last ? "" : ",");
}

static int32_t clamp_i32(uint64_t x)
{
    /* clamped so that a sum over INA_MAX_WORKERS ranks cannot wrap */
    const uint64_t cap = (uint64_t)INT32_MAX / INA_MAX_WORKERS;
    return (int32_t)(x > cap ? cap : x);
}

/* Peak resident set of this process, KiB. */
static double peak_rss_kib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss : -1;
}

/* Peak resident set (VmHWM) of another process, KiB, or -1. */
static long proc_peak_rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static int run_worker(const struct opts *o)
{
    ina_config cfg;
    ina_info info;
    ina_stats st0, st1;
    int rc, any_fail = 0, epp;
    const char *dname = dtype_names[o->dtype], *oname = op_names[o->op];
    const size_t es = dtype_size[o->dtype];
    double *times, *acc, *acc_abs;
    void *scratch;

    g_rank = o->rank;
    if (o->deadline_s > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, NULL);
        snprintf(alarm_msg, sizeof alarm_msg,
                 "%s: rank %d: deadline of %d s passed, giving up\n", prog, o->rank,
                 o->deadline_s);
        alarm_msg_len = strlen(alarm_msg);
        alarm((unsigned)o->deadline_s);
    }

    ina_config_init(&cfg);
    cfg.switch_addr = o->switch_addr;
    if (o->job)
        cfg.job = o->job;
    cfg.rank = o->rank;
    cfg.world_size = o->world;
    cfg.elems_per_packet = o->elems;
    cfg.window = o->window;
    cfg.lanes = o->lanes;
    if (o->float_add >= 0)
        cfg.float_add = o->float_add;
    cfg.fixed_point_bits = o->fixed_point;
    cfg.busy_poll_us = o->busy_poll;
    if (o->sparse != INA_SPARSE_DEFAULT)
        cfg.sparse = o->sparse;
    cfg.sparse_block = o->sparse_block;
    cfg.sparse_threshold = o->sparse_threshold;
    g_pat.density = o->density;
    g_pat.pattern = o->pattern;
    g_pat.block = o->sparse_block ? (size_t)o->sparse_block : 256;
    g_pat.world = o->world;
    cfg.timeout_ms = o->timeout_ms;
    cfg.join_timeout_ms = o->join_timeout_ms;
    const char *secret = getenv("INA_SECRET_FILE"); /* as ina_config_from_env() reads it */
    if (secret && *secret)
        cfg.secret_file = secret;
    const char *integrity = getenv("INA_INTEGRITY"); /* likewise ("1": every packet tagged) */
    if (integrity && strcmp(integrity, "1") == 0)
        cfg.integrity = 1;
    const char *wire_bits = getenv("INA_WIRE_BITS"); /* "16": FLOAT32 on the 16-bit wire too */
    if (wire_bits && (strcmp(wire_bits, "16") == 0 || strcmp(wire_bits, "32") == 0))
        cfg.wire_bits = atoi(wire_bits);
    const char *wire_half = getenv("INA_WIRE_HALF"); /* its format: "bf16" (default) or "fp16" */
    if (wire_half && strcmp(wire_half, "fp16") == 0)
        cfg.wire_half = INA_WIRE_HALF_FP16;

    rc = ina_init(&g_ctx, &cfg);
    if (rc) {
        char what[128];
        snprintf(what, sizeof what, "ina_init (switch %s, job %s, world %d)", o->switch_addr,
                 cfg.job ? cfg.job : "?", o->world);
        die_ina(what, rc);
    }
    rc = ina_get_info(g_ctx, &info);
    if (rc)
        die_ina("ina_get_info", rc);
    g_float_add = info.float_add;
    g_fixed_bits = info.fixed_point_bits;
    g_wire_half = cfg.wire_half;
    g_wire16 = info.wire_bits == 16 && !g_fixed_bits && (o->op == INA_SUM || o->op == INA_AVG) &&
               (o->dtype == INA_FLOAT16 || o->dtype == INA_BFLOAT16 ||
                (o->dtype == INA_FLOAT32 && cfg.wire_bits == 16));
    epp = info.elems_per_packet;
    if (epp <= 0) {
        fprintf(stderr, "%s: rank %d: library reports %d elements per packet\n", prog,
                o->rank, epp);
        ina_finalize(g_ctx);
        return 1;
    }
    if (o->verbose)
        fprintf(stderr, "%s: rank %d: joined job %s (id %" PRIu32 ", session %" PRIu32
                "), %d elems/packet, window %d, libina %s\n",
                prog, o->rank, cfg.job ? cfg.job : "?", info.job_id, info.session_id, epp,
                info.window, ina_version_string());

    /* What the defaults chose here (lanes: this rank's proposal and what the
     * job agreed; the switch's threads: as the launcher started it). */
    int auto_cores = 0, auto_local = 0;
    ina_auto_lanes(&cfg, &auto_cores, &auto_local);
    char lanes_desc[160], sw_desc[96], busy_desc[160];
    if (info.lanes_proposed)
        snprintf(lanes_desc, sizeof lanes_desc, "lanes %d (auto: this rank proposed %d from %d "
                 "cores for %d workers on this host; the job runs the smallest proposal)",
                 info.lanes, info.lanes_proposed, auto_cores, auto_local);
    else
        snprintf(lanes_desc, sizeof lanes_desc, "lanes %d (set)", info.lanes);
    if (o->busy_poll == INA_BUSY_POLL_AUTO) {
        int bp_cores = 0, bp_spinners = 0;
        ina_auto_busy_poll(&cfg, &bp_cores, &bp_spinners);
        snprintf(busy_desc, sizeof busy_desc, "busy poll %d us (auto: %d spinners on %d cores "
                 "here)", info.busy_poll_us, bp_spinners, bp_cores);
    } else {
        snprintf(busy_desc, sizeof busy_desc, "busy poll %d us (set)", info.busy_poll_us);
    }
    if (o->switch_desc)
        snprintf(sw_desc, sizeof sw_desc, "switch threads %s", o->switch_desc);
    else
        snprintf(sw_desc, sizeof sw_desc, "switch threads: not started here");
    if (o->rank == 0 && !o->json) {
        printf("# defaults: %s; %s; %s; transport %s\n", lanes_desc, busy_desc, sw_desc,
               info.shm ? "shm (rings)" : "udp");
        printf("# ina-bench: %d workers, dtype %s, op %s, %d elems/packet, window %d, lanes %d, "
               "shards %d, levels %d, in flight %d, path %s, float add %s, transport %s, "
               "%d iterations + %d warmup, libina %s\n",
               o->world, dname, oname, epp, info.window, info.lanes, info.shards, info.levels,
               o->inflight,
               info.path == INA_PATH_HOST ? "host (fallback: the switch had no room)" : "switch",
               float_add_names[info.float_add], info.shm ? "shm" : "udp",
               o->iters, o->warmup, ina_version_string());
        printf("# algbw = bytes*8/time; busbw = algbw*2(N-1)/N (nccl-tests ring convention, "
               "for comparison; for an aggregator algbw is the natural figure)\n");
        printf("# time: rank 0's median, min, max over the timed iterations; retx: all ranks\n");
        printf("%8s %12s %11s %10s %10s %10s %10s %10s %10s %11s %6s %s\n", "size", "bytes",
               "count", "time_ms", "min_ms", "max_ms", "algbw_Gbps", "busbw_Gbps", "ATE/s",
               "max_abs_err", "retx", "result");
        fflush(stdout);
    }

    times = malloc((size_t)o->iters * sizeof *times);
    /* Verified per packet: 2 epp elements on the 16-bit wire */
    const int vb = g_wire16 ? 2 * epp : epp;
    acc = malloc((size_t)vb * sizeof(double));
    acc_abs = malloc((size_t)vb * sizeof(double));
    scratch = malloc((size_t)vb * es);
    if (!times || !acc || !acc_abs || !scratch)
        die_sys("malloc");

    for (int s = 0; s < o->nsizes; s++) {
        unsigned long long req = o->sizes[s];
        size_t count = (size_t)(req / es);
        unsigned long long bytes = (unsigned long long)count * es;
        const int K = o->inflight;
        struct verdict v;
        int32_t status[6], status_sum[6];
        void *send[64], *recv[64];
        ina_req *reqs[64];
        char what[96];

        for (int j = 0; j < K; j++) {
            send[j] = malloc(count * es);
            recv[j] = malloc(count * es);
            if (!send[j] || !recv[j]) {
                snprintf(what, sizeof what, "allocating 2 x %d x %llu bytes", K, bytes);
                die_sys(what);
            }
        }
        memset(&v, 0, sizeof v);
        memset(&st0, 0, sizeof st0);
        for (int it = 0; it < o->warmup + o->iters; it++) {
            double t0, t1;

            /* Operation j of iteration it has the data of "iteration" it*K+j. */
            for (int j = 0; j < K; j++) {
                fill(o->dtype, o->rank, bytes, it * K + j, 0, count, send[j]);
                /* poison: stale or missing results show up (NaN / -1) */
                memset(recv[j], 0xff, count * es);
            }
            if (it == o->warmup && (rc = ina_get_stats(g_ctx, &st0)))
                die_ina("ina_get_stats", rc);

            /* Barrier (untimed): a 1-element all-reduce, so that every rank
             * has finished generating and verifying before the clock starts;
             * otherwise the timed op would include the slowest rank's
             * verification of the previous iteration. */
            int32_t one = 1, ranks = 0;
            rc = ina_allreduce_sparse(g_ctx, &one, &ranks, 1, INA_INT32, INA_SUM, INA_SPARSE_OFF);
            if (rc)
                die_ina("ina_allreduce (barrier)", rc);
            t0 = ina__clock_s();
            if (K == 1) {
                rc = ina_allreduce_sparse(g_ctx, send[0], recv[0], count, o->dtype, o->op,
                                          INA_SPARSE_DEFAULT);
            } else {
                for (int j = 0; j < K && (rc = ina_allreduce_sparse_start(
                                              g_ctx, send[j], recv[j], count, o->dtype, o->op,
                                              INA_SPARSE_DEFAULT, &reqs[j])) == 0;
                     j++)
                    ;
                for (int j = 0; j < K && rc == 0; j++)
                    rc = ina_wait(reqs[j]);
            }
            t1 = ina__clock_s();
            if (rc) {
                snprintf(what, sizeof what, "ina_allreduce (%llu bytes, iteration %d%s)", bytes,
                         it, K > 1 ? ", in flight" : "");
                die_ina(what, rc);
            }
            if (it >= o->warmup)
                times[it - o->warmup] = t1 - t0;

            for (int j = 0; j < K; j++) {
                if (o->dtype == INA_INT32)
                    verify_i32(o, epp, bytes, it * K + j, send[j], recv[j], count, scratch,
                               (uint32_t *)acc, &v);
                else
                    verify_float(o, vb, bytes, it * K + j, send[j], recv[j], count, scratch, acc,
                                 acc_abs, &v);
            }
        }
        if ((rc = ina_get_stats(g_ctx, &st1)))
            die_ina("ina_get_stats", rc);
        for (int j = 0; j < K; j++) {
            free(send[j]);
            free(recv[j]);
        }

        /* Every rank's verdict: {failures, 1, retransmits}, summed. */
        status[0] = clamp_i32(v.failures);
        status[1] = 1;
        status[2] = clamp_i32(st1.retransmits - st0.retransmits);
        status[3] = clamp_i32(st1.sparse_ops - st0.sparse_ops);
        status[4] = clamp_i32(st1.sparse_auto_dense - st0.sparse_auto_dense);
        status[5] = clamp_i32(st1.sparse_blocks_sent - st0.sparse_blocks_sent);
        memset(status_sum, 0xff, sizeof status_sum);
        rc = ina_allreduce_sparse(g_ctx, status, status_sum, 6, INA_INT32, INA_SUM, INA_SPARSE_OFF);
        if (rc) {
            snprintf(what, sizeof what, "ina_allreduce of the verdicts (size %llu)", bytes);
            die_ina(what, rc);
        }
        if (v.failures) {
            fprintf(stderr, "%s: rank %d: size %llu: %" PRIu64 " elements failed verification\n",
                    prog, o->rank, bytes, v.failures);
            any_fail = 1;
        }

        if (o->rank == 0) {
            int ok = status_sum[0] == 0 && status_sum[1] == o->world;
            double med, tmin, tmax, p99, algbw, busbw, ate;
            char hs[32];

            if (!ok) {
                any_fail = 1;
                if (status_sum[1] != o->world)
                    fprintf(stderr, "%s: rank 0: size %llu: verdict all-reduce counted %" PRId32
                            " ranks, expected %d\n", prog, bytes, status_sum[1], o->world);
                else
                    fprintf(stderr, "%s: rank 0: size %llu: %" PRId32
                            " elements failed verification over all ranks\n",
                            prog, bytes, status_sum[0]);
            }
            qsort(times, (size_t)o->iters, sizeof *times, cmp_double);
            tmin = times[0];
            tmax = times[o->iters - 1];
            /* nearest rank: the smallest time with at least 99% of the iterations at or below */
            p99 = times[(size_t)ceil(0.99 * o->iters) - 1];
            med = o->iters % 2 ? times[o->iters / 2]
                               : 0.5 * (times[o->iters / 2 - 1] + times[o->iters / 2]);
            algbw = med > 0 ? (double)bytes * K * 8 / med / 1e9 : 0;
            busbw = algbw * 2.0 * (o->world - 1) / o->world;
            ate = med > 0 ? (double)count * K / med : 0;

            if (o->json) {
                printf("{\"workers\":%d,\"bytes\":%llu,\"count\":%zu,\"dtype\":\"%s\","
                       "\"op\":\"%s\",\"iters\":%d,\"warmup\":%d,\"elems_per_packet\":%d,"
                       "\"window\":%d,\"lanes\":%d,\"shards\":%d,\"levels\":%d,"
                       "\"inflight\":%d,\"path\":\"%s\","
                       "\"float_add\":\"%s\",\"transport\":\"%s\",\"fixed_point\":%d,"
                       "\"busy_poll_us\":%d,\"lanes_proposed\":%d,"
                       "\"cores\":%d,\"local_workers\":%d,\"switch_threads\":%d,"
                       "\"switch_threads_auto\":%s,",
                       o->world, bytes, count, dname, oname, o->iters, o->warmup, epp,
                       info.window, info.lanes, info.shards, info.levels, o->inflight,
                       info.path == INA_PATH_HOST ? "host" : "switch",
                       float_add_names[info.float_add], info.shm ? "shm" : "udp",
                       info.fixed_point_bits, info.busy_poll_us,
                       info.lanes_proposed, auto_cores, auto_local,
                       o->switch_desc ? atoi(o->switch_desc) : 0,
                       o->switch_desc && strstr(o->switch_desc, "auto") ? "true" : "false");
                printf("\"sparse\":\"%s\",\"density\":%.9g,\"pattern\":\"%s\",\"sparse_block\":%d,"
                       "\"sparse_ops\":%" PRId32 ",\"sparse_auto_dense\":%" PRId32 ","
                       "\"sparse_blocks_sent\":%" PRId32 ",",
                       o->sparse == INA_SPARSE_DEFAULT ? "default" : sparse_names[o->sparse],
                       o->density, pattern_names[o->pattern],
                       o->sparse_block ? o->sparse_block : 256, status_sum[3], status_sum[4],
                       status_sum[5]);
                json_num("time_s", med, 0);
                json_num("time_min_s", tmin, 0);
                json_num("time_max_s", tmax, 0);
                json_num("time_p99_s", p99, 0);
                json_num("algbw_gbps", algbw, 0);
                json_num("busbw_gbps", busbw, 0);
                json_num("ate_per_s", ate, 0);
                json_num("max_abs_err", v.max_abs, 0);
                json_num("max_rel_err", v.max_rel, 0);
                json_num("max_err_over_bound", v.max_ratio, 0);
                if (o->loss_cur > 0 || o->report_file)
                    json_num("loss", o->loss_cur, 0);
                /* Memory: peak RSS of this worker so far, and how much of it
                 * is the caller's two buffers; the rest is libina + ina-bench. */
                json_num("worker_peak_rss_kib", peak_rss_kib(), 0);
                json_num("buffers_kib", (double)bytes * 2 * K / 1024, 0);
                printf("\"failures\":%" PRId32 ",\"retransmits\":%" PRId32 ",\"ok\":%s}\n",
                       status_sum[0], status_sum[2], ok ? "true" : "false");
            } else {
                human_size(req, hs, sizeof hs);
                printf("%8s %12llu %11zu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3e %11.3e %6"
                       PRId32 " %s\n",
                       hs, bytes, count, med * 1e3, tmin * 1e3, tmax * 1e3, algbw, busbw, ate,
                       v.max_abs, status_sum[2], ok ? "ok" : "FAIL");
            }
            fflush(stdout);
            if (o->report_file) {
                FILE *rf = fopen(o->report_file, "a");
                if (rf) {
                    fprintf(rf, "%llu %.9g %.9g %d\n", bytes, med, algbw, ok);
                    fclose(rf);
                }
            }
        }
    }

    if (o->rank == 0 && !o->json) {
        printf("# rank 0 peak RSS %.1f MiB, of which the largest size's send+recv buffers "
               "%.1f MiB\n", peak_rss_kib() / 1024.0,
               (double)o->sizes[o->nsizes - 1] * 2 * o->inflight / (1 << 20));
        printf(any_fail ? "# FAILED: some results did not verify (details on stderr)\n"
                        : "# all results verified on all ranks\n");
        fflush(stdout);
    }
    if (o->verbose) {
        ina_stats st;
        if (ina_get_stats(g_ctx, &st) == 0)
            fprintf(stderr, "%s: rank %d: %llu packets, %llu retransmits (fast %llu, probe %llu, "
                    "timeout %llu), %llu stale results\n", prog, o->rank,
                    (unsigned long long)st.packets_sent, (unsigned long long)st.retransmits,
                    (unsigned long long)st.rtx_fast, (unsigned long long)st.rtx_probe,
                    (unsigned long long)st.rtx_timeout, (unsigned long long)st.stale_results);
    }
    free(times);
    free(acc);
    free(acc_abs);
    free(scratch);
    ina_finalize(g_ctx);
    g_ctx = NULL;
    return any_fail ? EXIT_VERIFY : 0;
}

/* ---- Launcher ------------------------------------------------------------ */

static volatile sig_atomic_t g_stop_signal;

static void on_stop(int sig) { g_stop_signal = sig; }

static void lerr(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void describe_status(int st, char *buf, size_t len)
{
    if (WIFEXITED(st))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "ended with wait status 0x%x", (unsigned)st);
}

/*
 * fork + exec. quiet: stdout and stderr of the child go to /dev/null.
 * If exec fails, the child says so on the original stderr and exits 127.
 */
static pid_t spawn(const char *const argv[], int quiet)
{
    pid_t parent = getpid(), pid;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid != 0)
        return pid; /* parent, or -1 */

    /* child: die with the launcher, so nothing outlives a killed run */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    int errfd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (quiet) {
        int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
    }
    /* execv's prototype predates const; it does not modify argv */
    execv(argv[0], (char *const *)argv);
    if (errfd >= 0)
        dprintf(errfd, "%s: cannot execute %s: %s\n", prog, argv[0], strerror(errno));
    _exit(127);
}

/* Wait for pid up to ms; SIGKILL it after that. Returns its wait status. */
static int reap(pid_t pid, int ms, int *killed)
{
    int st = 0;
    double end = ina__clock_s() + ms / 1e3;
    *killed = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return st;
        if (ina__clock_s() > end && !*killed) {
            kill(pid, SIGKILL);
            *killed = 1;
            end = ina__clock_s() + 5;
        }
        sleep_ms(5);
    }
}

static int read_port_file(const char *path)
{
    char buf[32];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (buf[n - 1] != '\n')
        return 0; /* not completely written yet */
    char *end;
    long port = strtol(buf, &end, 10);
    if (end == buf || *end != '\n' || port < 1 || port > 65535)
        return -1;
    return (int)port;
}

/* The port file, the switch's own temporary next to it, and their directory. */
static void remove_tmp(const char *tmpdir, const char *portfile)
{
    char t[PATH_MAX + 32];
    snprintf(t, sizeof t, "%s.tmp", portfile);
    unlink(t);
    unlink(portfile);
    rmdir(tmpdir);
}

static int run_local(const struct opts *o)
{
    char self[PATH_MAX], swbin[PATH_MAX + 16], tmpdir[PATH_MAX], portfile[PATH_MAX + 16];
    char job[INA_JOB_NAME_MAX + 1], addr[64];
    const char *tmp = getenv("TMPDIR");
    pid_t sw, *pids;
    int *done, port = 0, n = o->local_n, result = 0, verify_fail = 0, ndone = 0;
    int killing = 0, st, killed;
    double t_start = ina__clock_s(), kill_at = 0;
    char desc[96];
    ssize_t len;
    struct sigaction sa;

    len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len < 0 || len >= (ssize_t)sizeof self - 1) {
        lerr("readlink /proc/self/exe: %s", len < 0 ? strerror(errno) : "path too long");
        return 1;
    }
    self[len] = '\0';
    /* The N workers share this host: say so, as torchrun does, so that
     * each proposes lanes from its share of the cores (auto.c). Against a
     * switch on another address the library cannot tell otherwise, and
     * every worker would take the whole host's cores for itself. */
    snprintf(desc, sizeof desc, "%d", n);
    setenv("LOCAL_WORLD_SIZE", desc, 0);
    if (o->switch_bin) {
        snprintf(swbin, sizeof swbin, "%s", o->switch_bin);
    } else {
        char *slash = strrchr(self, '/');
        snprintf(swbin, sizeof swbin, "%.*s/ina-switch", slash ? (int)(slash - self) : 1,
                 slash ? self : ".");
    }
    if (!o->switch_addr && access(swbin, X_OK)) {
        lerr("cannot execute switch '%s': %s (use --switch-bin PATH)", swbin, strerror(errno));
        return 1;
    }

    snprintf(tmpdir, sizeof tmpdir, "%s/ina-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmpdir)) {
        lerr("mkdtemp %s: %s", tmpdir, strerror(errno));
        return 1;
    }
    snprintf(portfile, sizeof portfile, "%s/port", tmpdir);

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    /* 1. the switch: ours, or (--switch) a running one that other jobs may share */
    sw = -1;
    if (o->switch_addr) {
        remove_tmp(tmpdir, portfile);
        snprintf(addr, sizeof addr, "%s", o->switch_addr);
        goto have_switch;
    }
    {
        char frx[64], ftx[64], thr[16], bpu[16];
        const char *argv[20] = {swbin, "--listen", "127.0.0.1:0", "--port-file", portfile, "--quiet",
                                NULL};
        int a = 6;
        if (o->loss_cur > 0) {
            /* The same rate each way: a datagram is lost on the way in or out. */
            snprintf(frx, sizeof frx, "drop=%.9g,seed=1", o->loss_cur);
            snprintf(ftx, sizeof ftx, "drop=%.9g,seed=2", o->loss_cur);
            argv[a++] = "--fault-rx"; argv[a++] = frx;
            argv[a++] = "--fault-tx"; argv[a++] = ftx;
        }
        if (o->switch_threads > 0) {
            snprintf(thr, sizeof thr, "%d", o->switch_threads);
            argv[a++] = "--threads"; argv[a++] = thr;
        }
        if (o->switch_shm)
            argv[a++] = o->switch_shm > 0 ? "--shm" : "--no-shm";
        if (o->switch_busy_poll >= 0) {
            snprintf(bpu, sizeof bpu, "%d", o->switch_busy_poll);
            argv[a++] = "--busy-poll"; argv[a++] = bpu;
        }
        argv[a] = NULL;
        if (o->verbose)
            lerr("starting %s --listen 127.0.0.1:0 --port-file %s --quiet", swbin, portfile);
        sw = spawn(argv, !o->verbose);
        if (sw < 0) {
            lerr("fork: %s", strerror(errno));
            remove_tmp(tmpdir, portfile);
            return 1;
        }
    }
    {
        double end = ina__clock_s() + PORT_FILE_WAIT_MS / 1e3;
        while ((port = read_port_file(portfile)) == 0) {
            if (waitpid(sw, &st, WNOHANG) == sw) {
                describe_status(st, desc, sizeof desc);
                lerr("ina-switch %s before it listened%s", desc,
                     o->verbose ? "" : " (--verbose shows its output)");
                remove_tmp(tmpdir, portfile);
                return 1;
            }
            if (ina__clock_s() > end || g_stop_signal) {
                if (!g_stop_signal)
                    lerr("ina-switch wrote no port to %s within %d s", portfile,
                         PORT_FILE_WAIT_MS / 1000);
                kill(sw, SIGKILL);
                reap(sw, 1000, &killed);
                remove_tmp(tmpdir, portfile);
                return 1;
            }
            sleep_ms(10);
        }
        if (port < 0) {
            lerr("ina-switch wrote a malformed port file %s", portfile);
            kill(sw, SIGKILL);
            reap(sw, 1000, &killed);
            remove_tmp(tmpdir, portfile);
            return 1;
        }
    }
    remove_tmp(tmpdir, portfile);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
have_switch:
    if (o->job)
        snprintf(job, sizeof job, "%s", o->job);
    else
        snprintf(job, sizeof job, "bench-%ld", (long)getpid());
    if (o->verbose)
        lerr("ina-switch (pid %ld) listens on %s; starting %d workers, job %s", (long)sw, addr,
             n, job);

    /* 2. the workers */
    pids = calloc((size_t)n, sizeof *pids);
    done = calloc((size_t)n, sizeof *done);
    if (!pids || !done) {
        lerr("out of memory");
        if (sw > 0) {
            kill(sw, SIGKILL);
            reap(sw, 1000, &killed);
        }
        return 1;
    }
    for (int r = 0; r < n; r++) {
        char s_rank[16], s_world[16], s_iters[16], s_warm[16], s_elems[16], s_win[16],
            s_to[16], s_jto[16], s_dl[16];
        const char *argv[72];
        int a = 0;
        snprintf(s_rank, sizeof s_rank, "%d", r);
        snprintf(s_world, sizeof s_world, "%d", n);
        snprintf(s_iters, sizeof s_iters, "%d", o->iters);
        snprintf(s_warm, sizeof s_warm, "%d", o->warmup);
        snprintf(s_elems, sizeof s_elems, "%d", o->elems);
        snprintf(s_win, sizeof s_win, "%d", o->window);
        char s_lanes[16], s_inflight[16], s_swdesc[64];
        if (o->lanes)
            snprintf(s_lanes, sizeof s_lanes, "%d", o->lanes);
        else
            snprintf(s_lanes, sizeof s_lanes, "auto");
        snprintf(s_inflight, sizeof s_inflight, "%d", o->inflight);
        snprintf(s_to, sizeof s_to, "%d", o->timeout_ms);
        snprintf(s_jto, sizeof s_jto, "%d", o->join_timeout_ms);
        /* a little later than ours, so that the launcher reports first */
        snprintf(s_dl, sizeof s_dl, "%d", o->deadline_s ? o->deadline_s + 10 : 0);
        argv[a++] = self;
        argv[a++] = "--switch"; argv[a++] = addr;
        argv[a++] = "--rank"; argv[a++] = s_rank;
        argv[a++] = "--world"; argv[a++] = s_world;
        argv[a++] = "--job"; argv[a++] = job;
        argv[a++] = "--sizes"; argv[a++] = o->sizes_arg;
        argv[a++] = "--dtype"; argv[a++] = dtype_names[o->dtype];
        argv[a++] = "--op"; argv[a++] = op_names[o->op];
        argv[a++] = "--iters"; argv[a++] = s_iters;
        argv[a++] = "--warmup"; argv[a++] = s_warm;
        argv[a++] = "--elems"; argv[a++] = s_elems;
        argv[a++] = "--window"; argv[a++] = s_win;
        argv[a++] = "--lanes"; argv[a++] = s_lanes;
        if (sw > 0) {
            /* The switch we started: its threads, by the rule it applies itself
             * (common/host.c) to the same affinity and environment. */
            if (o->switch_threads)
                snprintf(s_swdesc, sizeof s_swdesc, "%d (--switch-threads)", o->switch_threads);
            else
                snprintf(s_swdesc, sizeof s_swdesc, "%d (auto: half of %d cores)",
                         ina__auto_switch_threads(ina__host_cores(NULL)), ina__host_cores(NULL));
            argv[a++] = "--switch-desc"; argv[a++] = s_swdesc;
        }
        argv[a++] = "--inflight"; argv[a++] = s_inflight;
        if (o->float_add >= 0) {
            argv[a++] = "--float-add";
            argv[a++] = float_add_names[o->float_add];
        }
        char s_sblock[16], s_sthr[32], s_dens[32];
        if (o->sparse != INA_SPARSE_DEFAULT) {
            argv[a++] = "--sparse";
            argv[a++] = sparse_names[o->sparse];
        }
        snprintf(s_sblock, sizeof s_sblock, "%d", o->sparse_block);
        snprintf(s_sthr, sizeof s_sthr, "%.17g", o->sparse_threshold);
        snprintf(s_dens, sizeof s_dens, "%.17g", o->density);
        argv[a++] = "--sparse-block"; argv[a++] = s_sblock;
        argv[a++] = "--sparse-threshold"; argv[a++] = s_sthr;
        argv[a++] = "--density"; argv[a++] = s_dens;
        argv[a++] = "--pattern"; argv[a++] = pattern_names[o->pattern];
        char s_fixed[16], s_bp[16];
        snprintf(s_fixed, sizeof s_fixed, "%d", o->fixed_point);
        if (o->busy_poll == INA_BUSY_POLL_AUTO)
            snprintf(s_bp, sizeof s_bp, "auto");
        else
            snprintf(s_bp, sizeof s_bp, "%d", o->busy_poll);
        argv[a++] = "--fixed-point"; argv[a++] = s_fixed;
        argv[a++] = "--busy-poll"; argv[a++] = s_bp;
        argv[a++] = "--timeout-ms"; argv[a++] = s_to;
        argv[a++] = "--join-timeout-ms"; argv[a++] = s_jto;
        argv[a++] = "--deadline-s"; argv[a++] = s_dl;
        if (o->json)
            argv[a++] = "--json";
        if (o->verbose)
            argv[a++] = "--verbose";
        char s_loss[32];
        if (o->nloss) {
            snprintf(s_loss, sizeof s_loss, "%.9g", o->loss_cur);
            argv[a++] = "--loss-label"; argv[a++] = s_loss;
        }
        if (o->report_file && r == 0) {
            argv[a++] = "--report-file"; argv[a++] = o->report_file;
        }
        argv[a] = NULL;
        pids[r] = spawn(argv, 0);
        if (pids[r] < 0) {
            lerr("fork: %s", strerror(errno));
            result = 1;
            killing = 1;
            kill_at = ina__clock_s() + KILL_GRACE_MS / 1e3;
            for (int q = 0; q < r; q++)
                kill(pids[q], SIGTERM);
            for (int q = r; q < n; q++)
                done[q] = 1, ndone++;
            break;
        }
    }

    /* 3. wait for the workers, under the deadline */
    while (ndone < n) {
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid > 0) {
            int r = -1;
            for (int q = 0; q < n; q++)
                if (pids[q] == pid && !done[q])
                    r = q;
            if (pid == sw) {
                describe_status(st, desc, sizeof desc);
                lerr("ina-switch %s while workers were running", desc);
                sw = -1;
                result = 1;
                if (!killing) {
                    killing = 1;
                    kill_at = ina__clock_s() + KILL_GRACE_MS / 1e3;
                    for (int q = 0; q < n; q++)
                        if (!done[q])
                            kill(pids[q], SIGTERM);
                }
            } else if (r >= 0) {
                done[r] = 1;
                ndone++;
                if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                    continue;
                if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_VERIFY) {
                    /* finished the protocol; the others finish too */
                    verify_fail = 1;
                    continue;
                }
                if (!killing) {
                    describe_status(st, desc, sizeof desc);
                    lerr("worker rank %d %s; stopping the others", r, desc);
                    result = 1;
                    killing = 1;
                    kill_at = ina__clock_s() + KILL_GRACE_MS / 1e3;
                    for (int q = 0; q < n; q++)
                        if (!done[q])
                            kill(pids[q], SIGTERM);
                }
            }
            continue;
        }
        if (!killing && g_stop_signal) {
            lerr("got signal %d; stopping the workers", (int)g_stop_signal);
            result = 1;
            killing = 1;
            kill_at = ina__clock_s() + KILL_GRACE_MS / 1e3;
            for (int q = 0; q < n; q++)
                if (!done[q])
                    kill(pids[q], SIGTERM);
        }
        if (!killing && o->deadline_s > 0 && ina__clock_s() - t_start > o->deadline_s) {
            lerr("deadline of %d s passed; killing the workers", o->deadline_s);
            result = 1;
            killing = 1;
            kill_at = ina__clock_s();
        }
        if (killing && ina__clock_s() >= kill_at) {
            for (int q = 0; q < n; q++)
                if (!done[q])
                    kill(pids[q], SIGKILL);
            kill_at = ina__clock_s() + 3600; /* once */
        }
        sleep_ms(5);
    }

    /* 4. stop the switch */
    if (sw > 0) {
        long hwm = proc_peak_rss_kib(sw);
        if (hwm >= 0)
            fprintf(o->json ? stderr : stdout, "# ina-switch peak RSS %.1f MiB\n", hwm / 1024.0);
        kill(sw, SIGTERM);
        st = reap(sw, SWITCH_STOP_WAIT_MS, &killed);
        if (killed) {
            lerr("ina-switch did not exit within %d s of SIGTERM; killed it",
                 SWITCH_STOP_WAIT_MS / 1000);
            result = 1;
        } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) &&
                   !(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM)) {
            describe_status(st, desc, sizeof desc);
            lerr("ina-switch %s after SIGTERM", desc);
            result = 1;
        }
    }
    free(pids);
    free(done);
    if (result)
        return 1;
    return verify_fail ? EXIT_VERIFY : 0;
}

/*
 * --loss: one full --local run per loss rate (the switch drops that fraction
 * of datagrams on receive and on send), then a summary of each size's median
 * throughput relative to the first rate's.
 */
static int run_loss_sweep(struct opts *o)
{
    char path[] = "/tmp/ina-bench-loss.XXXXXX";
    int fd = mkstemp(path), worst = 0;
    if (fd < 0) {
        lerr("mkstemp: %s", strerror(errno));
        return 1;
    }
    close(fd);
    o->report_file = path;
    for (int i = 0; i < o->nloss; i++) {
        o->loss_cur = o->loss[i];
        if (!o->json) {
            printf("# loss %.4g%% each way (switch --fault-rx/--fault-tx drop=%.9g)\n",
                   o->loss_cur * 100, o->loss_cur);
            fflush(stdout);
        }
        int rc = run_local(o);
        if (rc > worst)
            worst = rc;
        if (g_stop_signal)
            break;
    }
    FILE *f = fopen(path, "r");
    unsigned long long bytes[MAX_SIZES * MAX_SIZES];
    double t[MAX_SIZES * MAX_SIZES], bw[MAX_SIZES * MAX_SIZES];
    int ok[MAX_SIZES * MAX_SIZES], n = 0;
    while (f && n < MAX_SIZES * MAX_SIZES &&
           fscanf(f, "%llu %lf %lf %d", &bytes[n], &t[n], &bw[n], &ok[n]) == 4)
        n++;
    if (f)
        fclose(f);
    unlink(path);
    if (!o->json && n == o->nloss * o->nsizes) {
        printf("# loss summary: median algbw per size; ratio = relative to loss %.4g%%\n",
               o->loss[0] * 100);
        printf("%10s %12s %10s %12s %8s %s\n", "loss_%", "bytes", "time_ms", "algbw_Gbps",
               "ratio", "result");
        for (int i = 0; i < o->nloss; i++)
            for (int j = 0; j < o->nsizes; j++) {
                int k = i * o->nsizes + j;
                double base = bw[j];
                printf("%10.4g %12llu %10.3f %12.3f %8.3f %s\n", o->loss[i] * 100, bytes[k],
                       t[k] * 1e3, bw[k], base > 0 ? bw[k] / base : 0, ok[k] ? "ok" : "FAIL");
            }
    }
    return worst;
}

int main(int argc, char **argv)
{
    struct opts o;

    signal(SIGPIPE, SIG_IGN);
    parse_args(&o, argc, argv);
    if (o.local_n && o.nloss)
        return run_loss_sweep(&o);
    if (o.local_n)
        return run_local(&o);
    return run_worker(&o);
}
