/* ctr_file.h: click logs from files: the Criteo display-ads TSV and the Avazu CSV formats, features hashed into K keys. */
#ifndef INA_CTR_FILE_H
#define INA_CTR_FILE_H

/*
 * Criteo (Kaggle display advertising challenge, train.txt; also the 1TB
 * logs' day_N files): one sample a line, 40 tab-separated fields: the label
 * (0 or 1), 13 integer features I1..I13 (decimal, may be negative, may be
 * empty) and 26 categorical features C1..C26 (8 hexadecimal digits, a hash
 * of the raw value, or empty).
 *
 * Avazu (Kaggle CTR prediction, train): comma-separated, a header line
 * "id,click,hour,C1,banner_pos,site_id,..." (24 columns), then one sample a
 * line: id, click (0 or 1), hour (YYMMDDHH), then 21 categorical columns
 * (strings or integers).
 *
 * Features. Every field f's value becomes one key, a hash of (f, value)
 * modulo K; an empty value is a value of its own (a "missing" key per
 * field). Criteo's integers are bucketed first as the competition's winners
 * did: v > 2 becomes floor(ln(v)^2), others stay. Avazu's id is not a
 * feature; its hour becomes the hour of the day (HH). Key K is the bias, in
 * every sample. A sample thus has 39 (Criteo) or 22 (Avazu) features and the
 * bias.
 *
 * A line that breaks the format (field count, a label other than 0 or 1, an
 * integer or a hash that does not parse) is an error with its line number:
 * nothing is skipped silently.
 */
#include <stdint.h>
#include <stdio.h>

#include "ctr_data.h"

enum ctr_format { CTR_FMT_CRITEO, CTR_FMT_AVAZU };

#define CTR_CRITEO_INTS 13
#define CTR_CRITEO_CATS 26
#define CTR_AVAZU_COLS 24

struct ctr_file {
    FILE *f;
    enum ctr_format fmt;
    uint64_t keys;
    uint64_t line; /* lines read so far (the header included) */
    char *buf;
    size_t cap;
    char err[256];
};

/* @return 0, or -1 with cf->err (the file does not open, or no memory). */
int ctr_file_open(struct ctr_file *cf, const char *path, enum ctr_format fmt, uint64_t keys);
void ctr_file_close(struct ctr_file *cf);
/* The next sample. @return 1, 0 at the end of the file, -1 with cf->err (a line that
 * breaks the format, or a read error). s->p is NAN (no planted model). */
int ctr_file_next(struct ctr_file *cf, struct ctr_sample *s);
/* Skip n samples without parsing them. @return the number skipped (fewer at the end). */
uint64_t ctr_file_skip(struct ctr_file *cf, uint64_t n);
/* Back to the first sample. @return 0 or -1. */
int ctr_file_rewind(struct ctr_file *cf);

/* Parse one line (no newline) of fmt into s. @return 0, or -1 with why. line is modified. */
int ctr_parse_line(enum ctr_format fmt, uint64_t keys, char *line, struct ctr_sample *s, char *why,
                   size_t wlen);
/* The key of value [v, v + len) of field f among keys. */
uint64_t ctr_feature_key(uint64_t keys, int f, const char *v, size_t len);
/* "criteo" or "avazu" -> fmt. @return 0 or -1. */
int ctr_format_parse(const char *name, enum ctr_format *fmt);

#endif
