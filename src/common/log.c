/* log.c: ina-switch's structured log lines (text key=value or JSON), one write(2) per line. */
#include "common/log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ina-switch logs job events (info); libina, which embeds the switch's state
 * machine as its fallback aggregator, builds this with INA_LOG_DEFAULT =
 * INA_LOG_WARN, so a worker process prints only what goes wrong. */
#ifndef INA_LOG_DEFAULT
#define INA_LOG_DEFAULT INA_LOG_INFO
#endif
int ina__log_level_now = INA_LOG_DEFAULT;
static enum ina_log_format log_format = INA_LOG_TEXT;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void ina__log_setup(enum ina_log_level level, enum ina_log_format format)
{
    ina__log_level_now = (int)level;
    log_format = format;
}

int ina__log_level_parse(const char *s, enum ina_log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum ina_log_level)i;
            return 0;
        }
    return -1;
}

int ina__log_format_parse(const char *s, enum ina_log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = INA_LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = INA_LOG_JSON;
    else
        return -1;
    return 0;
}

struct line {
    char b[1024];
    size_t n;
};

static void put(struct line *l, const char *s, size_t n)
{
    if (n > sizeof(l->b) - 2 - l->n) /* keep room for the newline */
        n = sizeof(l->b) - 2 - l->n;
    memcpy(l->b + l->n, s, n);
    l->n += n;
}
static void puts_(struct line *l, const char *s) { put(l, s, strlen(s)); }

/* A string value: JSON-escaped, or in text quoted when it needs to be. */
static void put_str(struct line *l, const char *s, int json)
{
    int quote = json || *s == '\0' || strpbrk(s, " \"=\\") != NULL;
    if (quote)
        put(l, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char c = (char)*p;
        if (*p < 0x20 || *p > 0x7e)
            c = '?';
        if (c == '"' || c == '\\')
            put(l, "\\", 1);
        put(l, &c, 1);
    }
    if (quote)
        put(l, "\"", 1);
}

void ina__log_write(enum ina_log_level level, const char *event, const struct ina_kv *kv)
{
    struct line l = {.n = 0};
    int json = log_format == INA_LOG_JSON;
    struct timespec ts;
    struct tm tm;
    char tbuf[40], num[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t tn = strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(tbuf + tn, sizeof(tbuf) - tn, ".%03ldZ", ts.tv_nsec / 1000000);
    const char *lv = (unsigned)level < 4 ? level_names[level] : "?";
    if (json) {
        puts_(&l, "{\"ts\":\"");
        puts_(&l, tbuf);
        puts_(&l, "\",\"level\":\"");
        puts_(&l, lv);
        puts_(&l, "\",\"event\":");
        put_str(&l, event, 1);
    } else {
        puts_(&l, tbuf);
        puts_(&l, " level=");
        puts_(&l, lv);
        puts_(&l, " event=");
        put_str(&l, event, 0);
    }
    for (; kv && kv->k; kv++) {
        if (json) {
            puts_(&l, ",\"");
            puts_(&l, kv->k);
            puts_(&l, "\":");
        } else {
            puts_(&l, " ");
            puts_(&l, kv->k);
            puts_(&l, "=");
        }
        if (kv->is_str) {
            put_str(&l, kv->s ? kv->s : "", json);
        } else {
            snprintf(num, sizeof(num), "%lld", kv->i);
            puts_(&l, num);
        }
    }
    if (json)
        put(&l, "}", 1);
    l.b[l.n++] = '\n';
    ssize_t w = write(STDERR_FILENO, l.b, l.n); /* one write: lines of threads never interleave */
    (void)w;
}
