/* libsvm.c: the libsvm text format ("label idx:val ..."), parsed without trusting it, and written. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "glm.h"

#define GLM_TOKEN_MAX 64         /* longest number we accept, in characters */
#define GLM_INDEX_MAX 0x7FFFFFFFu /* 1-based feature index limit (2^31 - 1) */

/* Make room for need elements of size elem in *p (capacity *cap), doubling. */
static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 1024;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return -1;
        n *= 2;
    }
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int fail(char *err, size_t errlen, size_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, size_t line, const char *fmt, ...)
{
    if (err && errlen) {
        int k = line ? snprintf(err, errlen, "line %zu: ", line) : 0;
        if (k < 0 || (size_t)k >= errlen)
            k = 0;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The token at *p (up to a blank, ':' if stop_colon, or the line's end),
 * copied NUL-terminated into tok. @return its length, or -1 if longer than
 * GLM_TOKEN_MAX - 1. */
static int take_token(const char **p, const char *end, int stop_colon, char *tok)
{
    size_t k = 0;
    const char *s = *p;
    while (s < end && *s != ' ' && *s != '\t' && *s != '\r' && !(stop_colon && *s == ':')) {
        if (k + 1 >= GLM_TOKEN_MAX || *s == 0)
            return -1; /* too long, or a NUL byte that strtod would take for the end */
        tok[k++] = *s++;
    }
    tok[k] = 0;
    *p = s;
    return (int)k;
}

static const char *skip_blanks(const char *s, const char *end)
{
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\r'))
        s++;
    return s;
}

/* A finite double that is the whole of tok. */
static int parse_double(const char *tok, double *v)
{
    char *e;
    errno = 0;
    *v = strtod(tok, &e);
    return *tok && !*e && isfinite(*v) ? 0 : -1;
}

int glm_libsvm_parse(const char *buf, size_t len, size_t nfeatures, struct glm_dataset *out,
                     char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    struct glm_csr *m = &out->x;
    size_t cap_rows = 0, cap_nnz = 0, cap_y = 0, maxidx = 0;
    const char *p = buf, *end = buf + len;
    char tok[GLM_TOKEN_MAX];
    int rc = -1;
    if (grow((void **)&m->rowptr, &cap_rows, 1, sizeof(size_t)) != 0)
        goto oom;
    m->rowptr[0] = 0;
    for (size_t line = 1; p < end; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *s = skip_blanks(p, eol);
        if (s == eol || *s == '#') { /* blank line or comment */
            p = eol + (eol < end);
            continue;
        }
        double label;
        if (take_token(&s, eol, 0, tok) < 0 || parse_double(tok, &label) != 0) {
            fail(err, errlen, line, "the label '%.20s' is not a finite number", tok);
            goto out;
        }
        size_t row = m->nrows, last = 0;
        for (s = skip_blanks(s, eol); s < eol; s = skip_blanks(s, eol)) {
            if (take_token(&s, eol, 1, tok) <= 0 || s >= eol || *s != ':') {
                fail(err, errlen, line, "expected INDEX:VALUE, got '%.20s'", tok);
                goto out;
            }
            char *e;
            errno = 0;
            unsigned long long idx = strtoull(tok, &e, 10);
            if (*e || tok[0] == '-' || tok[0] == '+' || errno || idx < 1 || idx > GLM_INDEX_MAX) {
                fail(err, errlen, line, "index '%.20s' is not an integer in 1..%u", tok,
                     GLM_INDEX_MAX);
                goto out;
            }
            if (idx <= last) {
                fail(err, errlen, line, "index %llu after %zu: indices must increase", idx, last);
                goto out;
            }
            if (nfeatures && idx > nfeatures) {
                fail(err, errlen, line, "index %llu is past the %zu features given", idx,
                     nfeatures);
                goto out;
            }
            s++; /* ':' */
            double v;
            if (take_token(&s, eol, 0, tok) <= 0 || parse_double(tok, &v) != 0 ||
                !isfinite((float)v)) {
                fail(err, errlen, line, "value '%.20s' of index %llu is not a finite float", tok,
                     idx);
                goto out;
            }
            last = (size_t)idx;
            if ((float)v == 0.0f)
                continue; /* an explicit zero (or one below float's range): sparse anyway */
            if (m->nnz == cap_nnz) { /* col and val grow alike: one capacity */
                size_t c1 = cap_nnz, c2 = cap_nnz;
                if (grow((void **)&m->col, &c1, m->nnz + 1, sizeof(uint32_t)) != 0 ||
                    grow((void **)&m->val, &c2, m->nnz + 1, sizeof(float)) != 0)
                    goto oom;
                cap_nnz = c1;
            }
            m->col[m->nnz] = (uint32_t)(idx - 1);
            m->val[m->nnz] = (float)v;
            m->nnz++;
            if (idx > maxidx)
                maxidx = (size_t)idx;
        }
        if (grow((void **)&m->rowptr, &cap_rows, row + 2, sizeof(size_t)) != 0 ||
            grow((void **)&out->y, &cap_y, row + 1, sizeof(double)) != 0)
            goto oom;
        out->y[row] = label;
        m->rowptr[row + 1] = m->nnz;
        m->nrows++;
        p = eol + (eol < end);
    }
    if (m->nrows == 0) {
        fail(err, errlen, 0, "no samples (every line blank or a comment)");
        goto out;
    }
    m->ncols = nfeatures ? nfeatures : maxidx;
    if (m->ncols == 0) {
        fail(err, errlen, 0, "no features: every sample is empty (give the count)");
        goto out;
    }
    return 0;
oom:
    fail(err, errlen, 0, "out of memory after %zu samples", m->nrows);
out:
    glm_dataset_free(out);
    return rc;
}

int glm_libsvm_load(const char *path, size_t nfeatures, struct glm_dataset *out, char *err,
                    size_t errlen)
{
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, errlen, 0, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    char *buf = NULL;
    size_t len = 0;
    if (fstat(fileno(f), &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size < SIZE_MAX) {
        len = (size_t)st.st_size;
        buf = malloc(len);
        if (buf && fread(buf, 1, len, f) != len) {
            int e = ferror(f) ? errno : EIO;
            free(buf);
            fclose(f);
            return fail(err, errlen, 0, "cannot read %s: %s", path, strerror(e));
        }
    }
    fclose(f);
    if (!buf)
        return fail(err, errlen, 0, "%s: %s", path, len ? "out of memory" : "empty file");
    int rc = glm_libsvm_parse(buf, len, nfeatures, out, err, errlen);
    free(buf);
    if (rc == 0) {
        const char *base = strrchr(path, '/');
        snprintf(out->name, sizeof(out->name), "%s", base ? base + 1 : path);
    } else if (err && errlen) {
        char tmp[512];
        snprintf(tmp, sizeof(tmp), "%s: %s", path, err);
        snprintf(err, errlen, "%s", tmp);
    }
    return rc;
}

int glm_libsvm_write(const struct glm_dataset *d, FILE *f)
{
    const struct glm_csr *m = &d->x;
    for (size_t i = 0; i < m->nrows; i++) {
        if (fprintf(f, "%.17g", d->y[i]) < 0)
            return -1;
        for (size_t k = m->rowptr[i]; k < m->rowptr[i + 1]; k++)
            if (fprintf(f, " %u:%.9g", m->col[k] + 1, (double)m->val[k]) < 0)
                return -1;
        if (fputc('\n', f) == EOF)
            return -1;
    }
    return fflush(f) == 0 ? 0 : -1;
}
