/* ctr_file.c: the Criteo TSV and Avazu CSV readers: line parsing, feature hashing, streaming with skip and rewind. */
#include "ctr_file.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ctr_format_parse(const char *name, enum ctr_format *fmt)
{
    if (!strcmp(name, "criteo"))
        *fmt = CTR_FMT_CRITEO;
    else if (!strcmp(name, "avazu"))
        *fmt = CTR_FMT_AVAZU;
    else
        return -1;
    return 0;
}

/* FNV-1a of the bytes, then mixed with the field: a key in 0..K-1. */
uint64_t ctr_feature_key(uint64_t keys, int f, const char *v, size_t len)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)v[i]) * 0x100000001B3ull;
    return ctr_mix(h ^ ((uint64_t)(f + 1) * 0x9E3779B97F4A7C15ull)) % keys;
}

/* The label field: exactly "0" or "1". @return 0 or 1, -1 otherwise. */
static int parse_label(const char *v, size_t len)
{
    return len == 1 && (v[0] == '0' || v[0] == '1') ? v[0] - '0' : -1;
}

/* A Criteo integer field: empty, or [-]digits within int64. Bucketed: v > 2 -> floor(ln(v)^2).
 * @return 0 and the canonical text of the bucket in out, or -1. */
static int criteo_int(const char *v, size_t len, char *out, size_t olen)
{
    if (len == 0) {
        out[0] = '\0';
        return 0;
    }
    size_t i = v[0] == '-';
    if (i == len || len > 20)
        return -1;
    for (size_t k = i; k < len; k++)
        if (v[k] < '0' || v[k] > '9')
            return -1;
    char tmp[24];
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    errno = 0;
    long long x = strtoll(tmp, NULL, 10);
    if (errno == ERANGE)
        return -1;
    if (x > 2) {
        double l = log((double)x);
        x = (long long)floor(l * l);
        snprintf(out, olen, "b%lld", x); /* a bucket, apart from the small values */
    } else {
        snprintf(out, olen, "%lld", x);
    }
    return 0;
}

static int is_hex8(const char *v, size_t len)
{
    if (len != 8)
        return 0;
    for (size_t i = 0; i < 8; i++) {
        char c = v[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return 0;
    }
    return 1;
}

/* Cut line at sep into at most max fields. @return the number of fields. */
static int split(char *line, char sep, char **fld, size_t *flen, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        char *e = strchr(p, sep);
        if (n < max) {
            fld[n] = p;
            flen[n] = e ? (size_t)(e - p) : strlen(p);
        }
        n++;
        if (!e)
            return n;
        p = e + 1;
    }
}

#define WHY(...) (snprintf(why, wlen, __VA_ARGS__), -1)

static int parse_criteo(uint64_t keys, char *line, struct ctr_sample *s, char *why, size_t wlen)
{
    char *fld[40];
    size_t len[40];
    int n = split(line, '\t', fld, len, 40);
    if (n != 1 + CTR_CRITEO_INTS + CTR_CRITEO_CATS)
        return WHY("%d tab-separated fields, want 40 (label, I1..I13, C1..C26)", n);
    if ((s->label = parse_label(fld[0], len[0])) < 0)
        return WHY("label '%.*s' is not 0 or 1", (int)(len[0] > 16 ? 16 : len[0]), fld[0]);
    s->nf = 0;
    for (int i = 0; i < CTR_CRITEO_INTS; i++) {
        char b[32];
        if (criteo_int(fld[1 + i], len[1 + i], b, sizeof(b)) != 0)
            return WHY("I%d '%.*s' is not an integer", i + 1,
                       (int)(len[1 + i] > 24 ? 24 : len[1 + i]), fld[1 + i]);
        s->key[s->nf++] = ctr_feature_key(keys, i, b, strlen(b));
    }
    for (int i = 0; i < CTR_CRITEO_CATS; i++) {
        const char *v = fld[1 + CTR_CRITEO_INTS + i];
        size_t l = len[1 + CTR_CRITEO_INTS + i];
        if (l && !is_hex8(v, l))
            return WHY("C%d '%.*s' is not 8 hexadecimal digits", i + 1, (int)(l > 24 ? 24 : l), v);
        s->key[s->nf++] = ctr_feature_key(keys, CTR_CRITEO_INTS + i, v, l);
    }
    return 0;
}

static int parse_avazu(uint64_t keys, char *line, struct ctr_sample *s, char *why, size_t wlen)
{
    char *fld[CTR_AVAZU_COLS];
    size_t len[CTR_AVAZU_COLS];
    int n = split(line, ',', fld, len, CTR_AVAZU_COLS);
    if (n != CTR_AVAZU_COLS)
        return WHY("%d comma-separated fields, want %d (id, click, hour, C1, ...)", n,
                   CTR_AVAZU_COLS);
    if ((s->label = parse_label(fld[1], len[1])) < 0)
        return WHY("click '%.*s' is not 0 or 1", (int)(len[1] > 16 ? 16 : len[1]), fld[1]);
    if (len[2] != 8 || strspn(fld[2], "0123456789") < 8)
        return WHY("hour '%.*s' is not YYMMDDHH", (int)(len[2] > 16 ? 16 : len[2]), fld[2]);
    s->nf = 0;
    s->key[s->nf++] = ctr_feature_key(keys, 0, fld[2] + 6, 2); /* the hour of the day */
    for (int i = 3; i < CTR_AVAZU_COLS; i++)
        s->key[s->nf++] = ctr_feature_key(keys, i - 2, fld[i], len[i]);
    return 0;
}

int ctr_parse_line(enum ctr_format fmt, uint64_t keys, char *line, struct ctr_sample *s, char *why,
                   size_t wlen)
{
    size_t l = strlen(line);
    if (l && line[l - 1] == '\r')
        line[--l] = '\0';
    int rc = fmt == CTR_FMT_CRITEO ? parse_criteo(keys, line, s, why, wlen)
                                   : parse_avazu(keys, line, s, why, wlen);
    if (rc == 0) {
        s->key[s->nf++] = keys; /* bias */
        s->p = NAN;
    }
    return rc;
}

/* The next line into cf->buf, without its newline. @return its length, or -1 at the end. */
static long read_line(struct ctr_file *cf)
{
    size_t n = 0;
    int c;
    while ((c = getc(cf->f)) != EOF && c != '\n') {
        if (n + 1 >= cf->cap) {
            size_t cap = cf->cap * 2;
            char *b = cap <= (1u << 20) ? realloc(cf->buf, cap) : NULL;
            if (!b)
                return -2; /* a line of a megabyte is no click log */
            cf->buf = b;
            cf->cap = cap;
        }
        cf->buf[n++] = (char)c;
    }
    if (c == EOF && n == 0)
        return -1;
    cf->buf[n] = '\0';
    cf->line++;
    return (long)n;
}

static int skip_header(struct ctr_file *cf)
{
    if (cf->fmt != CTR_FMT_AVAZU)
        return 0;
    long n = read_line(cf);
    if (n < 0 || strncmp(cf->buf, "id,click,", 9) != 0) {
        snprintf(cf->err, sizeof(cf->err), "line 1: no Avazu header (\"id,click,hour,...\")");
        return -1;
    }
    return 0;
}

int ctr_file_open(struct ctr_file *cf, const char *path, enum ctr_format fmt, uint64_t keys)
{
    memset(cf, 0, sizeof(*cf));
    cf->fmt = fmt;
    cf->keys = keys;
    cf->cap = 4096;
    cf->buf = malloc(cf->cap);
    cf->f = cf->buf ? fopen(path, "r") : NULL;
    if (!cf->f) {
        snprintf(cf->err, sizeof(cf->err), "%s: %s", path, strerror(cf->buf ? errno : ENOMEM));
        free(cf->buf);
        cf->buf = NULL;
        return -1;
    }
    if (skip_header(cf) != 0) {
        ctr_file_close(cf);
        return -1;
    }
    return 0;
}

void ctr_file_close(struct ctr_file *cf)
{
    if (cf->f)
        fclose(cf->f);
    free(cf->buf);
    cf->f = NULL;
    cf->buf = NULL;
}

int ctr_file_next(struct ctr_file *cf, struct ctr_sample *s)
{
    long n = read_line(cf);
    if (n == -1) {
        if (ferror(cf->f)) {
            snprintf(cf->err, sizeof(cf->err), "read error after line %llu",
                     (unsigned long long)cf->line);
            return -1;
        }
        return 0;
    }
    if (n == -2) {
        snprintf(cf->err, sizeof(cf->err), "line %llu: longer than 1 MiB",
                 (unsigned long long)cf->line + 1);
        return -1;
    }
    char why[160];
    if (ctr_parse_line(cf->fmt, cf->keys, cf->buf, s, why, sizeof(why)) != 0) {
        snprintf(cf->err, sizeof(cf->err), "line %llu: %s", (unsigned long long)cf->line, why);
        return -1;
    }
    return 1;
}

uint64_t ctr_file_skip(struct ctr_file *cf, uint64_t n)
{
    uint64_t k = 0;
    int c, prev = '\n';
    while (k < n && (c = getc(cf->f)) != EOF) {
        if (c == '\n') {
            k++;
            cf->line++;
        }
        prev = c;
    }
    if (k < n && prev != '\n') { /* a last line without its newline */
        k++;
        cf->line++;
    }
    return k;
}

int ctr_file_rewind(struct ctr_file *cf)
{
    rewind(cf->f);
    cf->line = 0;
    return skip_header(cf);
}
