/* test_libsvm.c: ina-glm's libsvm parser (apps/glm/libsvm.c): valid files, every malformed form refused with its line, and 20,000 hostile mutations parsed without a crash, an overread or a matrix that breaks its invariants. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
/* The parser and the dataset helpers, compiled into the test (they are ina-glm's, not libina's). */
#include "../../apps/glm/data.c"
#include "../../apps/glm/libsvm.c"

/* Parse exactly len bytes from a copy with nothing after it: ASan sees any read past len. */
static int parse(const char *text, size_t len, size_t nfeatures, struct glm_dataset *d, char *err)
{
    char *copy = malloc(len ? len : 1);
    memcpy(copy, text, len);
    int rc = glm_libsvm_parse(copy, len, nfeatures, d, err, 160);
    free(copy);
    return rc;
}

/* The invariants every accepted dataset keeps. @return 1 if they hold. */
static int sane(const struct glm_dataset *d)
{
    const struct glm_csr *m = &d->x;
    if (m->nrows == 0 || m->ncols == 0 || m->rowptr[0] != 0 || m->rowptr[m->nrows] != m->nnz)
        return 0;
    for (size_t i = 0; i < m->nrows; i++) {
        if (!isfinite(d->y[i]) || m->rowptr[i] > m->rowptr[i + 1])
            return 0;
        for (size_t k = m->rowptr[i]; k < m->rowptr[i + 1]; k++)
            if (m->col[k] >= m->ncols || !isfinite(m->val[k]) || m->val[k] == 0 ||
                (k > m->rowptr[i] && m->col[k] <= m->col[k - 1]))
                return 0;
    }
    return 1;
}

static void test_valid(void)
{
    const char *t = "# a comment\n1 1:0.5 3:2\n\n-1 2:1e-3\t4:0 \r\n+1\n";
    struct glm_dataset d;
    char err[160] = "";
    CHECK_EQ_INT(parse(t, strlen(t), 0, &d, err), 0);
    CHECK_EQ_INT(d.x.nrows, 3);
    CHECK_EQ_INT(d.x.ncols, 3);  /* the largest index with a nonzero value */
    CHECK_EQ_INT(d.x.nnz, 3);    /* explicit zeros are dropped */
    CHECK(d.y[0] == 1 && d.y[1] == -1 && d.y[2] == 1);
    CHECK(d.x.col[0] == 0 && d.x.col[1] == 2 && d.x.col[2] == 1 && d.x.val[2] == 1e-3f);
    CHECK(sane(&d));
    glm_dataset_free(&d);
    /* the feature count given wins, and the last line needs no newline */
    CHECK_EQ_INT(parse("0 2:1", 5, 10, &d, err), 0);
    CHECK_EQ_INT(d.x.ncols, 10);
    glm_dataset_free(&d);
}

static void test_malformed(void)
{
    static const struct { const char *text, *says; } bad[] = {
        {"1 1:0.5 2:1\n-1 2:0.25 1:3\n", "line 2: index 1 after 2"},
        {"1 1:0.5 x:1\n", "line 1: index 'x' is not an integer"},
        {"1 0:1\n", "line 1: index '0'"},
        {"1 -3:1\n", "line 1: index '-3'"},
        {"1 1:nan\n", "not a finite float"},
        {"1 1:1e39\n", "not a finite float"},
        {"inf 1:1\n", "line 1: the label 'inf' is not a finite number"},
        {"1 1\n", "expected INDEX:VALUE"},
        {"1 1:\n", "not a finite float"},
        {"1 5:1\n", "past the 4 features given"},
        {"# only a comment\n\n", "no samples"},
        {"1\n-1\n", "no features"},
        {"1 99999999999999999999:1\n", "is not an integer"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct glm_dataset d;
        char err[160] = "";
        int rc = parse(bad[i].text, strlen(bad[i].text), 4 * (strstr(bad[i].says, "past") != NULL), &d, err);
        if (rc != -1 || !strstr(err, bad[i].says)) {
            fprintf(stderr, "'%s': rc %d, said '%s', want '%s'\n", bad[i].text, rc, err,
                    bad[i].says);
            CHECK(0);
        }
    }
}

/* Random edits of a valid file: whatever is accepted is sane, whatever is refused says why. */
static void test_mutations(void)
{
    const char *seed = "1 1:0.5 3:-2.25 17:1e-2\n-1 2:1 4:3\n0.5 5:7 6:8 9:0.125\n";
    const char alphabet[] = " :.-+e0123456789\n\t#nainfx";
    const size_t L = strlen(seed);
    uint64_t s = 12345;
    int accepted = 0, refused = 0, insane = 0;
    for (int it = 0; it < 20000; it++) {
        char buf[256];
        size_t len = L;
        memcpy(buf, seed, L);
        int edits = 1 + (int)(glm_rand64(&s) % 6);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(glm_rand64(&s) % (len + 1));
            char c = alphabet[glm_rand64(&s) % (sizeof(alphabet) - 1)];
            switch (glm_rand64(&s) % 4) {
            case 0: if (at < len) buf[at] = c; break;                         /* replace */
            case 1: if (len < sizeof(buf)) { memmove(buf + at + 1, buf + at, len - at); buf[at] = c; len++; } break;
            case 2: if (at < len) { memmove(buf + at, buf + at + 1, len - at - 1); len--; } break;
            default: len = at; break;                                          /* truncate */
            }
        }
        struct glm_dataset d;
        char err[160] = "";
        if (parse(buf, len, 0, &d, err) == 0) {
            accepted++;
            if (!sane(&d)) {
                insane++;
                fprintf(stderr, "accepted but broken: \"%.*s\"\n", (int)len, buf);
            }
            glm_dataset_free(&d);
        } else {
            refused++;
            if (!err[0]) { /* a refusal always says why */
                insane++;
                fprintf(stderr, "refused silently: \"%.*s\"\n", (int)len, buf);
            }
        }
    }
    printf("mutations: %d accepted, %d refused\n", accepted, refused);
    CHECK_EQ_INT(insane, 0);
    CHECK(accepted > 100 && refused > 100); /* both paths exercised */
}

int main(void)
{
    test_valid();
    test_malformed();
    test_mutations();
    return check_report("test_libsvm");
}
