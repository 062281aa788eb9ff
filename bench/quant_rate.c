/* quant_rate.c: single-core throughput of the quantization kernels (scalar vs SIMD) against memcpy. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/wire.h"
#include "common/clock.h"
#include "lib/dtype.h"
#include "lib/quant.h"
#include "lib/quant_simd.h"

/*
 * For each buffer size (default 1 MiB, about L2-resident on most cores, and
 * 64 KiB, L1/L2) and each call granularity (the whole buffer in one call, and
 * one call per packet of --block elements, as the library does), measure
 * GB/s of
 *   memcpy      bytes copied
 *   encode      float bytes in   (ina__quant_encode: scale, round, clamp, big-endian)
 *   decode      int32 bytes in   (ina__quant_decode: big-endian sum -> float)
 *   block_exp   float bytes in
 *   i32_encode  int32 bytes in   (byte swap)
 *   i32_decode  int32 bytes in
 *   lost        float bytes in   (ina__block_lost: the values a block's scale flushes to
 *                                 zero, counted on every result; one implementation, which
 *                                 the compiler vectorizes: both columns run it)
 * for the scalar reference and the SIMD path, as the median of --runs runs
 * of about --ms milliseconds each. Encode and decode are checked against the
 * target (--target GB/s, default 4) on the SIMD path.
 * 1 GB = 1e9 bytes.
 */

enum op {
    OP_MEMCPY, OP_ENCODE, OP_DECODE, OP_BLOCK_EXP, OP_I32_ENCODE, OP_I32_DECODE, OP_LOST,
    OP_COUNT
};
static const char *op_names[OP_COUNT] = {"memcpy", "encode", "decode", "block_exp", "i32_encode",
                                         "i32_decode", "lost"};

struct bufs {
    float *x;       /* input floats */
    uint8_t *q;     /* big-endian int32 (encode output, decode input) */
    float *y;       /* decode output */
    int32_t *iy;    /* i32 decode output */
    size_t n;       /* elements */
    size_t block;   /* elements per call */
};

static volatile int sink;

/* One pass over the buffer with implementation `simd` (0 scalar, 1 avx2). */
static void pass(enum op op, int simd, const struct bufs *b)
{
    const int nw = 4;
    for (size_t off = 0; off < b->n; off += b->block) {
        size_t k = b->n - off < b->block ? b->n - off : b->block;
        switch (op) {
        case OP_MEMCPY: memcpy(b->q + 4 * off, b->x + off, 4 * k); break;
        case OP_ENCODE:
            (simd ? ina__quant_encode_avx2 : ina__quant_encode_scalar)(b->x + off, k, 3, nw,
                                                                      b->q + 4 * off);
            break;
        case OP_DECODE:
            (simd ? ina__quant_decode_avx2 : ina__quant_decode_scalar)(b->q + 4 * off, k, 3, nw,
                                                                      b->y + off);
            break;
        case OP_BLOCK_EXP:
            sink += (simd ? ina__quant_block_exp_avx2 : ina__quant_block_exp_scalar)(b->x + off, k);
            break;
        case OP_I32_ENCODE:
            (simd ? ina__i32_encode_avx2 : ina__i32_encode_scalar)((const int32_t *)(b->x + off), k,
                                                                   b->q + 4 * off);
            break;
        case OP_I32_DECODE:
            (simd ? ina__i32_decode_avx2 : ina__i32_decode_scalar)(b->q + 4 * off, k, b->iy + off);
            break;
        case OP_LOST: sink += (int)ina__block_lost(INA_FLOAT32, b->x + off, k, 3, nw); break;
        default: break;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median GB/s over `runs` runs of about `ms` milliseconds. */
static double measure(enum op op, int simd, const struct bufs *b, int runs, double ms)
{
    double bytes = 4.0 * (double)b->n;
    /* Calibrate: passes per run. */
    pass(op, simd, b);
    long iters = 1;
    for (;;) {
        double t0 = ina__clock_s();
        for (long i = 0; i < iters; i++)
            pass(op, simd, b);
        double dt = ina__clock_s() - t0;
        if (dt > ms * 1e-3 / 4 || iters > (1L << 30))
            {
                iters = (long)((double)iters * (ms * 1e-3) / (dt > 0 ? dt : 1e-9)) + 1;
                break;
            }
        iters *= 2;
    }
    double rates[64];
    if (runs > 64)
        runs = 64;
    for (int r = 0; r < runs; r++) {
        double t0 = ina__clock_s();
        for (long i = 0; i < iters; i++)
            pass(op, simd, b);
        double dt = ina__clock_s() - t0;
        rates[r] = bytes * (double)iters / dt / 1e9;
    }
    qsort(rates, (size_t)runs, sizeof(double), cmp_double);
    return rates[runs / 2];
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: quant_rate [--sizes KIB,KIB..] [--block N] [--runs R] [--ms MS]\n"
            "                  [--target GBPS] [--cpu C]\n"
            "  --sizes   buffer sizes in KiB (default 1024,64)\n"
            "  --block   elements per call for the per-packet rows (default 256; 0: no such rows)\n"
            "  --runs    runs per measurement, median reported (default 7)\n"
            "  --ms      duration of one run in ms (default 40)\n"
            "  --target  GB/s target for encode/decode on the SIMD path (default 4)\n"
            "  --cpu     pin to this CPU first\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"sizes", required_argument, 0, 's'},
                                         {"block", required_argument, 0, 'b'},
                                         {"runs", required_argument, 0, 'r'},
                                         {"ms", required_argument, 0, 'm'},
                                         {"target", required_argument, 0, 't'},
                                         {"cpu", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *sizes_s = "1024,64";
    long pkt_block = 256;
    int runs = 7, cpu = -1, c;
    double ms = 40, target = 4.0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': sizes_s = optarg; break;
        case 'b': pkt_block = strtol(optarg, NULL, 10); break;
        case 'r': runs = atoi(optarg); break;
        case 'm': ms = atof(optarg); break;
        case 't': target = atof(optarg); break;
        case 'c': cpu = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (runs < 1)
        runs = 1;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            fprintf(stderr, "quant_rate: cannot pin to CPU %d: %s\n", cpu, strerror(errno));
    }
    int have_simd = ina__quant_avx2_supported();
    printf("quant_rate: SIMD path %s; dispatched path in this process: %s%s\n",
           have_simd ? "avx2" : "unavailable (scalar only)",
           ina__quant_impl_name(ina__quant_impl_active()),
           getenv("INA_NO_SIMD") ? " (INA_NO_SIMD set)" : "");
    printf("GB/s = 1e9 bytes/s of input (float or int32 bytes), median of %d runs x ~%.0f ms, "
           "one core%s\n\n",
           runs, ms, cpu >= 0 ? " (pinned)" : "");
    printf("%-10s %8s %6s %9s %9s %7s %9s %8s %7s\n", "op", "buffer", "block", "scalar", "simd",
           "speedup", "memcpy", "simd/cpy", "target");

    int all_pass = 1;
    const char *p = sizes_s;
    while (*p) {
        char *end;
        long kib = strtol(p, &end, 10);
        if (end == p || kib <= 0) {
            fprintf(stderr, "quant_rate: bad --sizes '%s'\n", sizes_s);
            return 2;
        }
        p = *end == ',' ? end + 1 : end;
        size_t n = (size_t)kib * 1024 / 4;
        struct bufs b;
        b.n = n;
        b.x = aligned_alloc(64, 4 * n + 64);
        b.q = aligned_alloc(64, 4 * n + 64);
        b.y = aligned_alloc(64, 4 * n + 64);
        b.iy = aligned_alloc(64, 4 * n + 64);
        if (!b.x || !b.q || !b.y || !b.iy) {
            fprintf(stderr, "quant_rate: out of memory\n");
            return 1;
        }
        /* Gradient-like data: normal-ish values, |x| < 8 (block exponent 3). */
        uint64_t s = 12345;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(s >> 11) * 0x1p-53;
            b.x[i] = (float)(7.9 * (2 * u - 1) * u);
        }
        ina__quant_encode_scalar(b.x, n, 3, 4, b.q); /* valid input for decode */
        memset(b.y, 0, 4 * n);
        memset(b.iy, 0, 4 * n);

        size_t blocks[2] = {n, pkt_block > 0 ? (size_t)pkt_block : 0};
        for (int g = 0; g < 2; g++) {
            if (blocks[g] == 0 || (g == 1 && blocks[1] >= n))
                continue;
            b.block = blocks[g];
            double mc = measure(OP_MEMCPY, 0, &b, runs, ms);
            char bufname[32], blockname[32];
            snprintf(bufname, sizeof(bufname), "%ldKiB", kib);
            if (g == 0)
                snprintf(blockname, sizeof(blockname), "all");
            else
                snprintf(blockname, sizeof(blockname), "%zu", blocks[g]);
            printf("%-10s %8s %6s %9s %9s %7s %9.2f %8s %7s\n", "memcpy", bufname, blockname, "-",
                   "-", "-", mc, "1.00", "-");
            for (int op = OP_ENCODE; op < OP_COUNT; op++) {
                double sc = measure((enum op)op, 0, &b, runs, ms);
                double sv = have_simd ? measure((enum op)op, 1, &b, runs, ms) : sc;
                const char *verdict = "-";
                if (op == OP_ENCODE || op == OP_DECODE) {
                    verdict = sv >= target ? "PASS" : "MISS";
                    if (sv < target)
                        all_pass = 0;
                }
                printf("%-10s %8s %6s %9.2f %9.2f %6.2fx %9.2f %8.2f %7s\n", op_names[op], bufname,
                       blockname, sc, sv, sv / sc, mc, sv / mc, verdict);
            }
        }
        free(b.x);
        free(b.q);
        free(b.y);
        free(b.iy);
        printf("\n");
    }
    printf("target %.1f GB/s per core each way (encode, decode on the SIMD path): %s\n", target,
           all_pass ? "PASS" : "MISS");
    return 0;
}
