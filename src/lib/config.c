/* config.c: configuration defaults and the environment (INA_*, torchrun's RANK/WORLD_SIZE,
 * then a launcher's: launcher.c). */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/busy_poll.h"
#include "lib/ctx.h"
#include "lib/fixed.h"

/* The default switch address. A context whose config points here (not an
 * equal string: this object) was not told where the switch is, and its
 * join messages say so (session.c). */
const char ina__default_switch_addr[] = "127.0.0.1";

void ina_config_init(ina_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->switch_addr = ina__default_switch_addr;
    cfg->job = "default";
    cfg->rank = 0;
    cfg->world_size = 1;
    cfg->busy_poll_us = INA_BUSY_POLL_AUTO; /* a cleared struct (0) never spins, as before v0.6 */
}

/*
 * Env var `name` into *out: NULL if unset. Set but empty is INA_ERR_CONFIG:
 * an empty INA_* is a mistake (a shell variable that expanded to nothing),
 * not a request for the default, and must not let torchrun's or a
 * launcher's variable decide instead (INA_RANK="" with RANK=2 set).
 * @return 0 or INA_ERR_CONFIG.
 */
static int env_get(const char *name, const char **out)
{
    const char *s = getenv(name);
    *out = s;
    if (s && !*s)
        return ina__fail(NULL, INA_ERR_CONFIG, "%s is set but empty: unset it for the default",
                         name);
    return 0;
}

/* An integer variable and its range: INA_* (or a torchrun fallback) into *field. */
struct env_int_var {
    const char *name;
    const char *fallback; /* torchrun's, read (empty: unset) when name is unset; or NULL */
    int *field;
    int lo, hi;
    const char *what; /* the rule, for the message */
};

/* Parse var's decimal value s into *var->field if it is in lo..hi. @return 0 or INA_ERR_CONFIG. */
static int int_in_range(const struct env_int_var *var, const char *name, const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < INT_MIN || v > INT_MAX)
        return ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not a decimal integer", name, s);
    if (v < var->lo || v > var->hi)
        return ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is outside %d..%d (%s)", name, s,
                         var->lo, var->hi, var->what);
    *var->field = (int)v;
    return 0;
}

/* @return 1 if neither var nor its fallback is set, 0 if one was read, or INA_ERR_CONFIG. */
static int env_int(const struct env_int_var *var, const char **used)
{
    const char *s;
    if (env_get(var->name, &s))
        return INA_ERR_CONFIG;
    *used = var->name;
    if (!s && var->fallback) {
        s = getenv(var->fallback);
        if (s && !*s)
            s = NULL; /* torchrun's empty variable says nothing, as launcher.c reads theirs */
        *used = var->fallback;
    }
    return s ? int_in_range(var, *used, s) : 1;
}

/* Env var `name`, if set, must be word a or word b: *out = va or vb.
 * @return 0 (absent, or set), or INA_ERR_CONFIG. */
static int env_choice(const char *name, const char *a, int va, const char *b, int vb, int *out)
{
    const char *s;
    if (env_get(name, &s))
        return INA_ERR_CONFIG;
    if (!s)
        return 0;
    if (strcmp(s, a) == 0)
        *out = va;
    else if (strcmp(s, b) == 0)
        *out = vb;
    else
        return ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not '%s' or '%s'", name, s, a, b);
    return 0;
}

/* INA_SPARSE: off, on or auto. @return 0 (absent or set) or INA_ERR_CONFIG. */
static int env_sparse_mode(int *out)
{
    const char *s;
    if (env_get("INA_SPARSE", &s))
        return INA_ERR_CONFIG;
    if (!s)
        return 0;
    if (strcmp(s, "off") == 0)
        *out = INA_SPARSE_OFF;
    else if (strcmp(s, "on") == 0)
        *out = INA_SPARSE_ON;
    else if (strcmp(s, "auto") == 0)
        *out = INA_SPARSE_AUTO;
    else
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_SPARSE='%s' is not 'off', 'on' or 'auto'", s);
    return 0;
}

/* A finite number in [0, hi] from env var `name`, if set. @return 0 or INA_ERR_CONFIG. */
static int env_double(const char *name, double hi, const char *what, double *out)
{
    const char *s;
    if (env_get(name, &s))
        return INA_ERR_CONFIG;
    if (!s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= 0 && v <= hi && isfinite(v)))
        return hi < DBL_MAX
                   ? ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not a number in 0..%g (%s)",
                               name, s, hi, what)
                   : ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not a finite number >= 0 (%s)",
                               name, s, what);
    *out = v;
    return 0;
}

/* The strings: INA_SWITCH (its syntax: resolving is ina_init's), INA_JOB, INA_SECRET_FILE. */
static int env_strings(ina_config *cfg, int *job_set)
{
    const char *s;
    char why[300];
    if (env_get("INA_SWITCH", &s))
        return INA_ERR_CONFIG;
    if (s && ina__parse_hostport_list(s, 0, NULL, INA_MAX_PARTS, why, sizeof(why)) < 0)
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_SWITCH: %s", why);
    if (s)
        cfg->switch_addr = s;
    if (env_get("INA_JOB", &s))
        return INA_ERR_CONFIG;
    if (s && strlen(s) > INA_JOB_NAME_MAX)
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_JOB='%s' is longer than %d bytes", s,
                         INA_JOB_NAME_MAX);
    *job_set = s != NULL;
    if (s)
        cfg->job = s;
    if (env_get("INA_SECRET_FILE", &s))
        return INA_ERR_CONFIG;
    if (s)
        cfg->secret_file = s;
    return 0;
}

/* INA_WINDOW: 0 or a power of 2 up to INA_MAX_WINDOW. INA_SPARSE_BLOCK: 0 or 32..256. */
static int check_window_block(const ina_config *cfg)
{
    if (cfg->window & (cfg->window - 1))
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_WINDOW='%s' is not a power of 2 (or 0: the "
                         "default, %d)", getenv("INA_WINDOW"), INA_DEFAULT_WINDOW);
    if (cfg->sparse_block && cfg->sparse_block < INA_SPARSE_MIN_BLOCK)
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_SPARSE_BLOCK='%s' is not 0 (the default, "
                         "%d) or %d..%d elements", getenv("INA_SPARSE_BLOCK"),
                         INA_SPARSE_DEFAULT_BLOCK, INA_SPARSE_MIN_BLOCK, INA_SPARSE_MAX_BLOCK_CFG);
    return 0;
}

int ina_config_from_env(ina_config *cfg)
{
    ina__fail_clear(NULL);
    if (!cfg)
        return ina__fail(NULL, -EINVAL, "ina_config_from_env: cfg is NULL");
    ina_config_init(cfg);
    int job_set = 0;
    if (env_strings(cfg, &job_set) ||
        env_choice("INA_FALLBACK", "host", INA_FALLBACK_HOST, "none", INA_FALLBACK_NONE,
                   &cfg->fallback) ||
        env_choice("INA_FLOAT_ADD", "quantized", INA_FLOAT_ADD_QUANTIZED, "switch",
                   INA_FLOAT_ADD_SWITCH, &cfg->float_add) ||
        env_choice("INA_INTEGRITY", "0", 0, "1", 1, &cfg->integrity) ||
        env_choice("INA_WIRE_BITS", "16", 16, "32", 32, &cfg->wire_bits) ||
        env_choice("INA_WIRE_HALF", "bf16", INA_WIRE_HALF_BF16, "fp16", INA_WIRE_HALF_FP16,
                   &cfg->wire_half) ||
        env_sparse_mode(&cfg->sparse) ||
        env_double("INA_SPARSE_THRESHOLD", DBL_MAX, "|x| at or below it is zero; 0: exact",
                   &cfg->sparse_threshold) ||
        env_double("INA_SPARSE_CROSSOVER", 256, "a summed density; 0: the default",
                   &cfg->sparse_crossover))
        return INA_ERR_CONFIG;
    const char *lanes;
    if (env_get("INA_LANES", &lanes))
        return INA_ERR_CONFIG;
    const int lanes_auto = lanes && strcmp(lanes, "auto") == 0; /* lanes 0, the default */
    if (lanes && !lanes_auto) {
        char *end;
        long v = strtol(lanes, &end, 10);
        if (*end || end == lanes || v < 0 || v > INA_MAX_LANES)
            return ina__fail(NULL, INA_ERR_CONFIG, "INA_LANES='%s' is not 'auto' or a lane "
                             "count 1..%d", lanes, INA_MAX_LANES);
        cfg->lanes = (int)v;
    }
    const char *busy;
    if (env_get("INA_BUSY_POLL_US", &busy))
        return INA_ERR_CONFIG;
    const int busy_auto = busy && strcmp(busy, "auto") == 0;
    if (busy_auto)
        cfg->busy_poll_us = INA_BUSY_POLL_AUTO;
    const struct env_int_var vars[] = {
        {"INA_RANK", "RANK", &cfg->rank, 0, INA_MAX_WORKERS - 1, "a rank below the world size"},
        {"INA_WORLD_SIZE", "WORLD_SIZE", &cfg->world_size, 1, INA_MAX_WORKERS, "ranks of the job"},
        {"INA_ELEMS", NULL, &cfg->elems_per_packet, 0, INA_MAX_ELEMS,
         "elements per packet; 0: the default"},
        {"INA_WINDOW", NULL, &cfg->window, 0, INA_MAX_WINDOW, "a power of 2; 0: the default"},
        {"INA_TIMEOUT_MS", NULL, &cfg->timeout_ms, 0, INT_MAX, "0: the default"},
        {"INA_JOIN_TIMEOUT_MS", NULL, &cfg->join_timeout_ms, 0, INT_MAX, "0: the default"},
        {"INA_RTO_MS", NULL, &cfg->rto_ms, 0, INT_MAX, "0: the default"},
        {"INA_ADMISSION_WAIT_MS", NULL, &cfg->admission_wait_ms, 0, INT_MAX, "0: do not wait"},
        {"INA_SPARSE_BLOCK", NULL, &cfg->sparse_block, 0, INA_SPARSE_MAX_BLOCK_CFG,
         "elements per block, 32..256; 0: the default"},
        {"INA_SPARSE_MIN_BYTES", NULL, &cfg->sparse_min_bytes, 0, INT_MAX, "0: the default"},
        {"INA_BUSY_POLL_US", NULL, &cfg->busy_poll_us, 0, INA_BUSY_POLL_MAX_US,
         "'auto' or microseconds; 0: never spin"},
        {"INA_FIXED_POINT", NULL, &cfg->fixed_point_bits, 0, INA_FIXED_MAX_BITS,
         "fractional bits; 0: off"},
    };
    int absent[2] = {1, 1}; /* rank, world_size: neither INA_* nor torchrun's */
    const char *used[2] = {NULL, NULL};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *name;
        if (busy_auto && vars[i].field == &cfg->busy_poll_us)
            continue; /* "auto": set above */
        int rc = env_int(&vars[i], &name);
        if (rc < 0)
            return rc;
        if (i < 2) {
            absent[i] = rc == 1;
            used[i] = name;
        }
    }
    if (check_window_block(cfg))
        return INA_ERR_CONFIG;
    if (cfg->fixed_point_bits && cfg->float_add == INA_FLOAT_ADD_SWITCH)
        return ina__fail(NULL, INA_ERR_CONFIG, "INA_FIXED_POINT=%d and INA_FLOAT_ADD=switch both "
                         "say how float sums travel: choose one", cfg->fixed_point_bits);
    /* What is still unset comes from the launcher (srun, mpirun, a PMI launcher), if any. */
    int rank = cfg->rank, world = cfg->world_size;
    int rc = ina__launcher_env(&rank, &world, job_set ? NULL : &cfg->job);
    if (rc < 0)
        return rc;
    if (absent[0])
        cfg->rank = rank;
    if (absent[1])
        cfg->world_size = world;
    /* Both from the environment: they must fit each other (a launcher's pair does). */
    if (!absent[0] && !absent[1] && cfg->rank >= cfg->world_size)
        return ina__fail(NULL, INA_ERR_CONFIG, "%s=%d is not below %s=%d", used[0], cfg->rank,
                         used[1], cfg->world_size);
    return 0;
}
