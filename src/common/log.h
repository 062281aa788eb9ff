/* log.h: ina-switch's structured log: one line per event, levels, text or JSON, thread-safe. */
#ifndef INA_SW_LOG_H
#define INA_SW_LOG_H


#include <stdint.h>

enum ina_log_level { INA_LOG_ERROR = 0, INA_LOG_WARN, INA_LOG_INFO, INA_LOG_DEBUG };
enum ina_log_format { INA_LOG_TEXT = 0, INA_LOG_JSON };

/* One key=value field: a string (s != NULL) or an integer. */
struct ina_kv {
    const char *k;
    const char *s;
    long long i;
    int is_str;
};
#define INA_KV_S(key, str) {(key), (str), 0, 1}
#define INA_KV_I(key, num) {(key), NULL, (long long)(num), 0}

/*
 * ina__log(level, "event", INA_KV_I("job", 3), INA_KV_S("reason", "timeout")), with at
 * least one field,
 * writes, if level is enabled, one line to stderr with one write(2):
 *   text: 2024-05-01T12:00:00.123Z level=info event=job_started job=3 name=train
 *   json: {"ts":"2024-05-01T12:00:00.123Z","level":"info","event":"job_started","job":3,...}
 * Text values with spaces, quotes or '=' are double-quoted; bytes outside
 * printable ASCII are written as '?' (names come from the network).
 */
#define ina__log(level, event, ...)                                                           \
    do {                                                                                     \
        if ((int)(level) <= ina__log_level_now)                                               \
            ina__log_write((level), (event), (const struct ina_kv[]){__VA_ARGS__, {NULL, NULL, 0, 0}}); \
    } while (0)

extern int ina__log_level_now; /* set once at startup, before any thread starts */

void ina__log_setup(enum ina_log_level level, enum ina_log_format format);
/* @return 0 and *out, or -1 if the name is not error|warn|info|debug (or text|json). */
int ina__log_level_parse(const char *s, enum ina_log_level *out);
int ina__log_format_parse(const char *s, enum ina_log_format *out);
void ina__log_write(enum ina_log_level level, const char *event, const struct ina_kv *kv);

#endif
