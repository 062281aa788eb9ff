/* ctr_gen.c: ina-ctr-gen: write synthetic click logs, or print the update-coverage curve of the hot set. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kv_wire.h"
#include "ctr_data.h"
#include "ctr_file.h"
#include "ctr_plan.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-ctr-gen [--keys K] [--alpha A] [--seed S] --samples N [--format F]\n"
            "                   [--out FILE]\n"
            "       ina-ctr-gen [--keys K] [--alpha A] [--seed S] --coverage [--workers N]\n"
            "                   [--batch B] [--profile P] [--steps T] [--hot H1,H2,...]\n"
            "                   [--sample R]\n"
            "       ina-ctr-gen [--keys K] [--alpha A] [--seed S] --plan [--workers N]\n"
            "                   [--batch B] [--hosts A] [--hot H1,H2,...] [--profile P]\n"
            "                   [--steps T] [--sample R] [--rate RATE] [--unicast]\n"
            "\n"
            "Synthetic click logs for the CTR trainer (apps/ctr/ctr_data.h): 26 categorical\n"
            "fields with Zipf(A)-skewed values hashed into K keys (about 41 features a sample),\n"
            "labels from a planted logistic model. Every sample is a pure function of\n"
            "(seed, stream, index), so trainers generate their batches themselves.\n"
            "\n"
            "  --keys K       feature keys (default 1000000); key K is the bias\n"
            "  --alpha A      Zipf exponent of the field values (default 1.0)\n"
            "  --seed S       data seed (default 1)\n"
            "  --samples N    write N samples of stream 0 as text lines 'label key:1 key:1 ...'\n"
            "  --format F     with --samples: criteo or avazu, the public data sets' formats\n"
            "                 (apps/ctr/ctr_file.h) instead: fields drawn from Zipf(A), labels\n"
            "                 from a planted model of the keys ina-ctr --data hashes them to;\n"
            "                 the planted model's log-loss on them goes to stderr\n"
            "  --out FILE     to FILE (default stdout)\n"
            "  --coverage     print the update-coverage curve: the share of updates (a key in a\n"
            "                 worker's batch of a step, repeats counted once) whose key is in the\n"
            "                 top H keys of a profile of the first P steps, measured on the\n"
            "                 next T steps. Three profiles: every worker's batches counted\n"
            "                 exactly; rank 0's alone; and what ina_kv installs: every rank\n"
            "                 counts 1 in R of its entries, sends its top H, the switch sums\n"
            "                 them and keeps the top H\n"
            "  --plan         the bytes on every link of one step (docs/PS.md, apps/ctr/ctr_plan.h):\n"
            "                 all-PS on 1 and on A hosts, and hot/cold on A hosts (the switch\n"
            "                 beside shard 0), with the weight of shard 0 that balances the\n"
            "                 links; machine-readable PLAN lines\n"
            "  --workers N    workers (default 4)\n"
            "  --batch B      samples per worker per step (default 1024)\n"
            "  --profile P    profiled steps (default 8)\n"
            "  --steps T      measured steps (default 8)\n"
            "  --hot LIST     H values (default 0,1000,2000,4000,8000,16000,32000,64000,128000)\n"
            "  --sample R     the profile counts 1 in R entries (default 4, as INA_KV_SAMPLE)\n"
            "  --hosts A      aggregation hosts (--plan; default 2)\n"
            "  --rate RATE    every link's rate, e.g. 100mbit (--plan; default 100mbit)\n"
            "  --unicast      the switch sends each result to every worker (--plan; default:\n"
            "                 once, ina-switch --multicast)\n"
            "  --help         this text\n");
}

static int cmp_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Per key, the number of (worker, step) batches holding it, over steps [t0, t0 + n). */
static uint32_t *batch_counts(const struct ctr_gen *g, int workers, int only_rank0, int batch,
                              int t0, int n, uint32_t *seen_epoch)
{
    uint32_t *cnt = calloc(g->keys + 1, sizeof(uint32_t));
    if (!cnt)
        return NULL;
    struct ctr_sample s;
    uint32_t epoch = 0;
    for (int t = t0; t < t0 + n; t++)
        for (int w = 0; w < (only_rank0 ? 1 : workers); w++) {
            epoch++;
            for (int i = 0; i < batch; i++) {
                ctr_sample(g, (uint32_t)w, (uint64_t)t * (uint64_t)batch + (uint64_t)i, &s);
                for (int k = 0; k < s.nf; k++)
                    if (seen_epoch[s.key[k]] != epoch) {
                        seen_epoch[s.key[k]] = epoch;
                        cnt[s.key[k]]++;
                    }
            }
        }
    return cnt;
}

/* The count threshold of the top H keys (keys with a count above it are in; ties at
 * it are in partly, counted pro rata). */
static double coverage(const uint32_t *prof, const uint32_t *meas, uint64_t nkeys, uint64_t H)
{
    uint32_t *sorted = malloc((nkeys + 1) * sizeof(uint32_t));
    if (!sorted)
        return -1;
    memcpy(sorted, prof, (nkeys + 1) * sizeof(uint32_t));
    qsort(sorted, nkeys + 1, sizeof(uint32_t), cmp_desc);
    uint32_t thr = H ? sorted[(H < nkeys + 1 ? H : nkeys + 1) - 1] : UINT32_MAX;
    uint64_t above = 0;
    for (uint64_t i = 0; i < H && i < nkeys + 1; i++)
        above += sorted[i] > thr;
    uint64_t at = 0;
    for (uint64_t i = 0; i < nkeys + 1; i++)
        at += sorted[i] == thr;
    double frac_at = at ? (double)(H - above) / (double)at : 0; /* ties at the threshold */
    double hot = 0, total = 0;
    for (uint64_t k = 0; k < nkeys + 1; k++) {
        total += meas[k];
        if (H && prof[k] > thr)
            hot += meas[k];
        else if (H && prof[k] == thr && thr > 0)
            hot += frac_at * meas[k];
    }
    free(sorted);
    return total ? hot / total : 0;
}

/* ---- The public data sets' formats, with a planted model ------------------------------ */

struct lrng {
    uint64_t s;
};
static double lrnd(struct lrng *r) /* [0, 1) */
{
    r->s += 0x9E3779B97F4A7C15ull;
    return (double)(ctr_mix(r->s) >> 11) / 9007199254740992.0;
}

/* A field value of rank r (field f): 8 hexadecimal digits, as Criteo's hashed categoricals. */
static int hex_of(char *b, size_t len, uint64_t seed, int f, uint64_t r)
{
    return snprintf(b, len, "%08x", (unsigned)ctr_mix(seed ^ (uint64_t)(f + 1) << 40 ^ r));
}

/* Sample i as a line of fmt without its label (a '0' in its place), into b. */
static void format_line(const struct ctr_gen *g, enum ctr_format fmt, uint64_t i, char *b, size_t len)
{
    struct lrng r = {ctr_mix(g->seed ^ 0xF11Eull << 32 ^ i)};
    size_t o = 0;
    if (fmt == CTR_FMT_CRITEO) {
        o += (size_t)snprintf(b + o, len - o, "0");
        for (int f = 0; f < CTR_CRITEO_INTS; f++) { /* counts: heavy-tailed, some missing */
            double u = lrnd(&r);
            if (lrnd(&r) < 0.15)
                o += (size_t)snprintf(b + o, len - o, "\t");
            else if (f == 1 && u < 0.05)
                o += (size_t)snprintf(b + o, len - o, "\t-1");
            else
                o += (size_t)snprintf(b + o, len - o, "\t%lld",
                                      (long long)(exp(u * (2 + f % 6)) - 1));
        }
        for (int f = 0; f < CTR_CRITEO_CATS; f++) {
            double u = lrnd(&r);
            o += (size_t)snprintf(b + o, len - o, "\t");
            if (lrnd(&r) >= 0.04)
                o += (size_t)hex_of(b + o, len - o, g->seed, f, ctr_zipf_at(g, u));
        }
        return;
    }
    /* Avazu: id, click, hour, then 21 columns; strings where Avazu has hashes, else numbers */
    static const int hexcol[CTR_AVAZU_COLS] = {[5] = 1, [6] = 1, [7] = 1, [8] = 1, [9] = 1,
                                               [10] = 1, [11] = 1, [12] = 1, [13] = 1};
    o += (size_t)snprintf(b + o, len - o, "%llu,0,141021%02d", (unsigned long long)i,
                          (int)(lrnd(&r) * 24));
    for (int c = 3; c < CTR_AVAZU_COLS; c++) {
        uint64_t rank = ctr_zipf_at(g, lrnd(&r));
        o += (size_t)snprintf(b + o, len - o, ",");
        if (hexcol[c])
            o += (size_t)hex_of(b + o, len - o, g->seed, c, rank);
        else
            o += (size_t)snprintf(b + o, len - o, "%llu", (unsigned long long)(1000 + rank));
    }
}

/* Write n samples of fmt, labels from the planted model of the keys ina-ctr --data hashes
 * them to. @return the planted model's mean log-loss on them, or NAN on an error. */
static double write_format(const struct ctr_gen *g, enum ctr_format fmt, uint64_t n, FILE *f)
{
    char line[1024], parsed[1024], why[160];
    struct ctr_sample s;
    double loss = 0;
    if (fmt == CTR_FMT_AVAZU)
        fputs("id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,"
              "app_category,device_id,device_ip,device_model,device_type,device_conn_type,C14,"
              "C15,C16,C17,C18,C19,C20,C21\n", f);
    for (uint64_t i = 0; i < n; i++) {
        format_line(g, fmt, i, line, sizeof(line));
        memcpy(parsed, line, sizeof(line));
        if (ctr_parse_line(fmt, g->keys, parsed, &s, why, sizeof(why)) != 0) {
            fprintf(stderr, "ina-ctr-gen: a line it wrote does not parse: %s\n", why);
            return NAN;
        }
        double logit = 0;
        for (int k = 0; k < s.nf; k++)
            logit += ctr_planted_weight(g, s.key[k]);
        double p = 1.0 / (1.0 + exp(-logit));
        struct lrng r = {ctr_mix(g->seed ^ 0x1AB1ull << 32 ^ i)};
        int y = lrnd(&r) < p;
        loss += ctr_logloss(p, y);
        char *label = fmt == CTR_FMT_CRITEO ? line : strchr(line, ',') + 1;
        *label = (char)('0' + y);
        fputs(line, f);
        fputc('\n', f);
    }
    return n ? loss / (double)n : 0;
}

/* "100mbit", "1gbit", "500kbit", "1000000" -> bits per second; <= 0 if it does not parse. */
static double parse_rate(const char *r)
{
    char *end;
    double x = strtod(r, &end);
    if (end == r)
        return -1;
    double m = !strncmp(end, "gbit", 4) ? 1e9 : !strncmp(end, "mbit", 4) ? 1e6
             : !strncmp(end, "kbit", 4) ? 1e3 : *end == '\0' ? 1 : -1;
    return x * m;
}

/* "1000,2000" -> values (at most max). @return how many. */
static int parse_list(const char *s, uint64_t *v, int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        v[n++] = strtoull(p, NULL, 10);
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    return n;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"keys", required_argument, 0, 'k'},   {"alpha", required_argument, 0, 'a'},
        {"seed", required_argument, 0, 's'},   {"samples", required_argument, 0, 'n'},
        {"out", required_argument, 0, 'o'},    {"coverage", no_argument, 0, 'c'},
        {"workers", required_argument, 0, 'w'}, {"batch", required_argument, 0, 'b'},
        {"profile", required_argument, 0, 'p'}, {"steps", required_argument, 0, 't'},
        {"hot", required_argument, 0, 'H'},     {"help", no_argument, 0, 'h'},
        {"format", required_argument, 0, 'f'},  {"plan", no_argument, 0, 'P'},
        {"hosts", required_argument, 0, 'A'},   {"rate", required_argument, 0, 'r'},
        {"unicast", no_argument, 0, 'u'},       {"sample", required_argument, 0, 'S'},
        {0, 0, 0, 0}};
    uint64_t keys = 1000000, seed = 1, samples = 0;
    double alpha = 1.0, rate = 100e6;
    const char *out = NULL, *hot = "0,1000,2000,4000,8000,16000,32000,64000,128000";
    int cov = 0, plan = 0, workers = 4, batch = 1024, profile = 8, steps = 8, hosts = 2, c;
    int unicast = 0, sample = INA_HOT_SAMPLE_RATE, fmt_set = 0, bad = 0;
    enum ctr_format fmt = CTR_FMT_CRITEO;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'k': keys = strtoull(optarg, NULL, 10); break;
        case 'a': alpha = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'n': samples = strtoull(optarg, NULL, 10); break;
        case 'o': out = optarg; break;
        case 'c': cov = 1; break;
        case 'w': workers = atoi(optarg); break;
        case 'b': batch = atoi(optarg); break;
        case 'p': profile = atoi(optarg); break;
        case 't': steps = atoi(optarg); break;
        case 'H': hot = optarg; break;
        case 'f': bad |= ctr_format_parse(optarg, &fmt) != 0; fmt_set = 1; break;
        case 'P': plan = 1; break;
        case 'A': hosts = atoi(optarg); break;
        case 'r': rate = parse_rate(optarg); break;
        case 'u': unicast = 1; break;
        case 'S': sample = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    struct ctr_gen g;
    if (optind < argc || bad || workers < 1 || batch < 1 || profile < 1 || steps < 1 ||
        hosts < 1 || hosts > 16 || !(rate > 0) || sample < 1 || cov + plan + !!samples != 1 ||
        (fmt_set && !samples) || ctr_gen_init(&g, keys, alpha, seed) != 0) {
        fprintf(stderr, "ina-ctr-gen: want one of --samples N, --coverage, --plan; --keys >= 26, "
                        "--alpha > 0, positive --workers/--batch/--profile/--steps/--sample, "
                        "--hosts 1..16, --format criteo|avazu with --samples (see --help)\n");
        return 2;
    }
    if (plan) {
        uint64_t H[64];
        struct ctr_plan_opts po = {.workers = workers, .batch = batch, .hosts = hosts,
                                   .profile = profile, .steps = steps, .sample = sample,
                                   .hot = H, .nhot = parse_list(hot, H, 64), .rate_bps = rate,
                                   .dgram = 1472, .multicast = !unicast};
        int rc = ctr_plan(&g, &po, stdout);
        ctr_gen_free(&g);
        if (rc)
            fprintf(stderr, "ina-ctr-gen: out of memory\n");
        return rc ? 1 : 0;
    }
    if (!cov) {
        FILE *f = out ? fopen(out, "w") : stdout;
        if (!f) {
            perror(out);
            return 1;
        }
        if (fmt_set) {
            double floor = write_format(&g, fmt, samples, f);
            ctr_gen_free(&g);
            if (isnan(floor))
                return 1;
            fprintf(stderr, "ina-ctr-gen: %llu samples; the planted model's log-loss on them: "
                    "%.5f\n", (unsigned long long)samples, floor);
            return f == stdout ? 0 : fclose(f) != 0;
        }
        struct ctr_sample s;
        for (uint64_t i = 0; i < samples; i++) {
            ctr_sample(&g, 0, i, &s);
            fprintf(f, "%d", s.label);
            for (int k = 0; k < s.nf; k++)
                fprintf(f, " %llu:1", (unsigned long long)s.key[k]);
            fputc('\n', f);
        }
        ctr_gen_free(&g);
        return f == stdout ? 0 : fclose(f) != 0;
    }
    uint32_t *seen = calloc(keys + 1, sizeof(uint32_t));
    uint32_t *prof_all = seen ? batch_counts(&g, workers, 0, batch, 0, profile, seen) : NULL;
    if (seen)
        memset(seen, 0, (keys + 1) * sizeof(uint32_t));
    uint32_t *prof_r0 = seen ? batch_counts(&g, workers, 1, batch, 0, profile, seen) : NULL;
    if (seen)
        memset(seen, 0, (keys + 1) * sizeof(uint32_t));
    uint32_t *meas = seen ? batch_counts(&g, workers, 0, batch, profile, steps, seen) : NULL;
    if (!prof_all || !prof_r0 || !meas) {
        fprintf(stderr, "ina-ctr-gen: out of memory\n");
        return 1;
    }
    uint64_t updates = 0, distinct = 0;
    for (uint64_t k = 0; k <= keys; k++) {
        updates += meas[k];
        distinct += meas[k] > 0;
    }
    printf("# update coverage: K=%llu alpha=%.2f N=%d batch=%d, profile steps 0..%d, measured "
           "steps %d..%d\n", (unsigned long long)keys, alpha, workers, batch, profile - 1, profile,
           profile + steps - 1);
    printf("# updates per worker-step (distinct keys in a batch): %.0f; distinct keys updated: "
           "%llu\n", (double)updates / ((double)workers * steps), (unsigned long long)distinct);
    printf("%10s %22s %26s %30s\n", "H", "hot share (all ranks)", "hot share (rank 0 profile)",
           "hot share (1 in R sampled)");
    for (const char *p = hot; *p;) {
        uint64_t H = strtoull(p, NULL, 10);
        uint32_t *smp = ctr_sampled_sums(&g, workers, batch, profile, (uint32_t)sample, H);
        if (!smp) {
            fprintf(stderr, "ina-ctr-gen: out of memory\n");
            return 1;
        }
        printf("%10llu %21.1f%% %25.1f%% %29.1f%%\n", (unsigned long long)H,
               100 * coverage(prof_all, meas, keys, H), 100 * coverage(prof_r0, meas, keys, H),
               100 * coverage(smp, meas, keys, H));
        free(smp);
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    ctr_gen_free(&g);
    free(seen);
    free(prof_all);
    free(prof_r0);
    free(meas);
    return 0;
}
