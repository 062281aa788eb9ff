/* test_types.c: end to end on loopback: every dtype x op, N = 1..4, awkward counts, within each type's documented bound, with floats quantized, added as floats by the switch, and on the 16-bit wire (FLOAT32 too, as binary16); disagreeing ops and wires abort. */
#include <math.h>

#include "check.h"
#include "e2e/verify.h"

static struct sw_proc sw;

/* The run's float mode: asked for (cfg.float_add), and what ina_get_info()
 * must then report (INA_FLOAT_ADD_QUANTIZED from a switch without float ops). */
static int float_add_asked, float_add_expect;
/* ina_config.wire_bits and wire_half of the run, whether the switch must offer the
 * 16-bit wire (ina_info.wire_bits 16), and the float path joins found (verify.h). */
static int wire_bits_asked, wire_half_asked, wire16_expect, float_path;

#define K VFY_SPAN /* elements per packet */
#define WINDOW 2  /* smaller than the blocks of the larger counts: exponents run ahead */

/* ---- Workers ------------------------------------------------------------------------ */

static int join(int rank, int n, const char *job, ina_ctx **ctx)
{
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, job, rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = K;
    cfg.window = WINDOW;
    cfg.float_add = float_add_asked;
    cfg.wire_bits = wire_bits_asked;
    cfg.wire_half = wire_half_asked;
    int rc = ina_init(ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init: %s\n", rank, ina_strerror(rc));
        return rc;
    }
    ina_info info;
    if (ina_get_info(*ctx, &info) != 0 || info.float_add != float_add_expect ||
        info.wire_bits != (wire16_expect ? 16 : 32)) {
        fprintf(stderr, "rank %d: ina_info.float_add %d, want %d; wire_bits %d, want %d\n", rank,
                info.float_add, float_add_expect, info.wire_bits, wire16_expect ? 16 : 32);
        ina_finalize(*ctx);
        return 1;
    }
    float_path = vfy_float_path(&info, &cfg);
    return 0;
}

static long long ops_checked[2]; /* (ops, elements) of rank 0, for the summary; set in the child */

/* Every dtype x op, every count, once from a separate buffer and once in place. */
static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char job[32];
    snprintf(job, sizeof(job), "types-n%d-f%d-w%d%d", n, float_add_asked, wire_bits_asked,
             wire_half_asked);
    ina_ctx *ctx;
    if (join(rank, n, job, &ctx))
        return 1;
    const size_t counts[] = {0, 1, K - 1, K, K + 1, 3 * K + 5};
    uint8_t *in = malloc(8 * (3 * K + 5)), *out = malloc(8 * (3 * K + 5));
    int fails = 0;
    uint64_t op = 0;
    for (int dt = INA_INT32; dt <= INA_FLOAT64; dt++) {
        for (int opk = INA_SUM; opk <= INA_AVG; opk++) {
            /* MAX and MIN: every type but FLOAT64 (§8.9) */
            int supported = dt != INA_FLOAT64 || opk == INA_SUM || opk == INA_AVG;
            if (!supported) { /* refused up front; the context stays usable */
                int rc = ina_allreduce(ctx, in, out, 4, (ina_dtype)dt, (ina_op)opk);
                if (rc != INA_ERR_NOTSUP) {
                    fprintf(stderr, "rank %d: %s %s: %s, want INA_ERR_NOTSUP\n", rank,
                            vfy_dnames[dt], vfy_onames[opk], ina_err_name(rc));
                    fails++;
                }
                continue;
            }
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                for (int inplace = 0; inplace < 2; inplace++) {
                    size_t count = counts[c];
                    /* Non-finite values in one pass of the float types at the largest count. */
                    int special = dt != INA_INT32 && dt != INA_FLOAT32 && inplace && c == 5;
                    op++;
                    for (size_t i = 0; i < count; i++)
                        vfy_gen((ina_dtype)dt, rank, op, i, special, in + i * vfy_esize[dt]);
                    memset(out, 0xA5, 8 * (3 * K + 5));
                    void *dst = inplace ? in : out;
                    int rc = ina_allreduce(ctx, in, dst, count, (ina_dtype)dt, (ina_op)opk);
                    int bad = rc ? 1
                                 : vfy_check((ina_dtype)dt, n, (ina_op)opk, op, count, special, K,
                                             float_path, dst);
                    if (bad) {
                        fprintf(stderr, "rank %d: %s %s count %zu%s: rc %s, %d bad\n", rank,
                                vfy_dnames[dt], vfy_onames[opk], count, inplace ? " in place" : "",
                                ina_err_name(rc), bad);
                        fails++;
                    }
                    ops_checked[0]++;
                    ops_checked[1] += (long long)count;
                }
            }
        }
    }
    if (rank == 0)
        printf("N=%d rank 0: %lld all-reduces, %lld elements verified\n", n, ops_checked[0],
               ops_checked[1]);
    free(in);
    free(out);
    ina_finalize(ctx);
    return fails;
}

/* ---- Disagreeing ranks: abort, never a hang or a wrong result ----------------------- */

struct disagree {
    const char *name;
    ina_dtype dt[2];
    ina_op op[2];
    int float_add[2];
    int wire_bits[2];
};
static const struct disagree *cur;

static int worker_disagree(int rank, int n, void *arg)
{
    (void)arg;
    char job[32];
    snprintf(job, sizeof(job), "mismatch-%s", cur->name);
    ina_ctx *ctx;
    float_add_asked = float_add_expect = cur->float_add[rank];
    wire_bits_asked = cur->wire_bits[rank];
    wire16_expect = !h_ebpf() && wire_bits_asked != 32;
    if (join(rank, n, job, &ctx))
        return 1;
    double in[3 * K + 5] = {0}, out[3 * K + 5];
    for (size_t i = 0; i < 3 * K + 5; i++)
        vfy_gen(INA_INT32, rank, 1, i, 0, (int32_t *)in + i);
    double t0 = ina__clock_s();
    int rc = ina_allreduce(ctx, in, out, 3 * K + 5, cur->dt[rank], cur->op[rank]);
    double s = ina__clock_s() - t0;
    ina_finalize(ctx);
    if ((rc != INA_ERR_MISMATCH && rc != INA_ERR_ABORTED) || s > 5) {
        fprintf(stderr, "rank %d: %s: rc %s after %.2f s, want MISMATCH or ABORTED at once\n",
                rank, cur->name, ina_err_name(rc), s);
        return 1;
    }
    return 0;
}

/* Every dtype x op at N = 1..4, with floats added as asked; expect: what the switch grants. */
static void all_types(int asked, int expect)
{
    float_add_asked = asked;
    float_add_expect = expect;
    for (int n = 1; n <= 4; n++) {
        double t0 = ina__clock_s();
        int failed = run_workers(n, worker, NULL, 240);
        printf("float add %s%s, wire bits %d%s, N=%d: %d workers failed (%.2f s)\n",
               asked ? "switch" : "quantized", asked != expect ? " (not offered)" : "",
               wire_bits_asked, wire_half_asked ? " fp16" : "", n, failed, ina__clock_s() - t0);
        CHECK_EQ_INT(failed, 0);
    }
}

int main(void)
{
    const char *const args[] = {"--max-elems", "16000", "--slots", "256", NULL};
    CHECK_EQ_INT(switch_start(&sw, args), 0);
    /* FLOAT16 and BFLOAT16 sums on the 16-bit wire, but where the eBPF dataplane
     * keeps them at 32 bits (it does not offer it); then everything at 32 bits;
     * then FLOAT32 on the 16-bit wire too, in binary16 (test_inflight has bfloat16). */
    wire16_expect = !h_ebpf();
    all_types(INA_FLOAT_ADD_QUANTIZED, INA_FLOAT_ADD_QUANTIZED);
    wire_bits_asked = 32;
    wire16_expect = 0;
    all_types(INA_FLOAT_ADD_QUANTIZED, INA_FLOAT_ADD_QUANTIZED);
    wire_bits_asked = 16;
    wire_half_asked = INA_WIRE_HALF_FP16;
    wire16_expect = !h_ebpf();
    all_types(INA_FLOAT_ADD_QUANTIZED, INA_FLOAT_ADD_QUANTIZED);
    wire_bits_asked = 0;
    wire_half_asked = INA_WIRE_HALF_BF16;
    /* The eBPF dataplane adds no floats: it does not offer op 4. The 16-bit
     * wire comes first where offered (FLOAT16, BFLOAT16), op 4 for FLOAT32. */
    all_types(INA_FLOAT_ADD_SWITCH, h_ebpf() ? INA_FLOAT_ADD_QUANTIZED : INA_FLOAT_ADD_SWITCH);
    static const struct disagree cases[] = {
        {"max-min", {INA_INT32, INA_INT32}, {INA_MAX, INA_MIN}, {0, 0}, {0, 0}}, /* wire ops differ */
        {"sum-max", {INA_INT32, INA_INT32}, {INA_SUM, INA_MAX}, {0, 0}, {0, 0}},
        {"sum-avg", {INA_FLOAT32, INA_FLOAT32}, {INA_SUM, INA_AVG}, {0, 0}, {0, 0}}, /* same wire op, tag differs */
        {"f16-bf16", {INA_FLOAT16, INA_BFLOAT16}, {INA_SUM, INA_SUM}, {0, 0}, {0, 0}},
        /* one rank adds floats at the switch, the other quantizes: wire ops differ */
        {"float-add", {INA_FLOAT32, INA_FLOAT32}, {INA_SUM, INA_SUM}, {1, 0}, {0, 0}},
        /* one rank sends FLOAT32 on the 16-bit wire, the other at 32 bits */
        {"wire-bits", {INA_FLOAT32, INA_FLOAT32}, {INA_SUM, INA_SUM}, {0, 0}, {16, 32}},
        /* one rank keeps BFLOAT16 at 32 bits */
        {"wire-bits-bf16", {INA_BFLOAT16, INA_BFLOAT16}, {INA_SUM, INA_SUM}, {0, 0}, {0, 32}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        cur = &cases[c];
        if (h_ebpf() && (cur->float_add[0] != cur->float_add[1] ||
                         cur->wire_bits[0] != cur->wire_bits[1]))
            continue; /* without op 4 or the 16-bit wire on offer, both ranks quantize: they agree */
        int failed = run_workers(2, worker_disagree, NULL, 60);
        printf("disagreeing ranks (%s): %d workers failed\n", cur->name, failed);
        CHECK_EQ_INT(failed, 0);
    }
    CHECK_EQ_INT(switch_stop(&sw), 0);

    /* A switch without float ops (as hardware or eBPF): asked-for float
     * adds fall back to quantized sums, within the quantized bound. */
    const char *const int_args[] = {"--max-elems", "16000", "--slots", "256", "--int-ops-only",
                                    NULL};
    CHECK_EQ_INT(switch_start(&sw, int_args), 0);
    wire_bits_asked = 16; /* nor the 16-bit wire: every float sum on the 32-bit one */
    wire16_expect = 0;
    all_types(INA_FLOAT_ADD_SWITCH, INA_FLOAT_ADD_QUANTIZED);
    wire_bits_asked = 0;
    CHECK_EQ_INT(switch_stop(&sw), 0);
    return check_report("test_types");
}
