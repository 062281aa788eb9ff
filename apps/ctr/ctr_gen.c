/* ctr_gen.c: ina-ctr-gen: write synthetic click logs, or print the update-coverage curve of the hot set. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctr_data.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-ctr-gen [--keys K] [--alpha A] [--seed S] --samples N [--out FILE]\n"
            "       ina-ctr-gen [--keys K] [--alpha A] [--seed S] --coverage [--workers N]\n"
            "                   [--batch B] [--profile P] [--steps T] [--hot H1,H2,...]\n"
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
            "  --out FILE     to FILE (default stdout)\n"
            "  --coverage     print the update-coverage curve: the share of updates (a key in a\n"
            "                 worker's batch of a step, repeats counted once) whose key is in the\n"
            "                 top H keys of a profile of the first P steps, measured on the\n"
            "                 next T steps. Two profiles: every worker's batches, and rank 0's\n"
            "                 alone (what ina_kv installs: rank 0 profiles its own pushes)\n"
            "  --workers N    workers (default 4)\n"
            "  --batch B      samples per worker per step (default 1024)\n"
            "  --profile P    profiled steps (default 8)\n"
            "  --steps T      measured steps (default 8)\n"
            "  --hot LIST     H values (default 0,1000,2000,4000,8000,16000,32000,64000,128000)\n"
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

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"keys", required_argument, 0, 'k'},   {"alpha", required_argument, 0, 'a'},
        {"seed", required_argument, 0, 's'},   {"samples", required_argument, 0, 'n'},
        {"out", required_argument, 0, 'o'},    {"coverage", no_argument, 0, 'c'},
        {"workers", required_argument, 0, 'w'}, {"batch", required_argument, 0, 'b'},
        {"profile", required_argument, 0, 'p'}, {"steps", required_argument, 0, 't'},
        {"hot", required_argument, 0, 'H'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    uint64_t keys = 1000000, seed = 1, samples = 0;
    double alpha = 1.0;
    const char *out = NULL, *hot = "0,1000,2000,4000,8000,16000,32000,64000,128000";
    int cov = 0, workers = 4, batch = 1024, profile = 8, steps = 8, c;
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
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    struct ctr_gen g;
    if (optind < argc || ctr_gen_init(&g, keys, alpha, seed) != 0 || workers < 1 || batch < 1 ||
        profile < 1 || steps < 1 || (!cov && !samples)) {
        fprintf(stderr, "ina-ctr-gen: want --samples N or --coverage; --keys >= 26, --alpha > 0, "
                        "positive --workers/--batch/--profile/--steps (see --help)\n");
        return 2;
    }
    if (!cov) {
        FILE *f = out ? fopen(out, "w") : stdout;
        if (!f) {
            perror(out);
            return 1;
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
    printf("%10s %22s %26s\n", "H", "hot share (all ranks)", "hot share (rank 0 profile)");
    for (const char *p = hot; *p;) {
        uint64_t H = strtoull(p, NULL, 10);
        printf("%10llu %21.1f%% %25.1f%%\n", (unsigned long long)H,
               100 * coverage(prof_all, meas, keys, H), 100 * coverage(prof_r0, meas, keys, H));
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
