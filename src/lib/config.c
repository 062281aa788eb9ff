/* config.c: configuration defaults and the environment (INA_*, torchrun's RANK/WORLD_SIZE,
 * then a launcher's: launcher.c). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/internal.h"

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
}

/* Parse a decimal int from env var `name` into *out if set. @return 0 or INA_ERR_CONFIG. */
static int env_int(const char *name, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 1; /* absent */
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < INT_MIN || v > INT_MAX)
        return ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not a decimal integer", name, s);
    *out = (int)v;
    return 0;
}

/* Env var `name`, if set, must be word a or word b: *out = va or vb.
 * @return 0 (absent, or set), or INA_ERR_CONFIG. */
static int env_choice(const char *name, const char *a, int va, const char *b, int vb, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
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
    const char *s = getenv("INA_SPARSE");
    if (!s || !*s)
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

/* A finite number >= 0 from env var `name`, if set. @return 0 or INA_ERR_CONFIG. */
static int env_double(const char *name, double *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= 0 && v < HUGE_VAL))
        return ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not a finite number >= 0", name, s);
    *out = v;
    return 0;
}

int ina_config_from_env(ina_config *cfg)
{
    ina__fail_clear(NULL);
    if (!cfg)
        return ina__fail(NULL, -EINVAL, "ina_config_from_env: cfg is NULL");
    ina_config_init(cfg);
    const char *s = getenv("INA_SWITCH");
    if (s && *s)
        cfg->switch_addr = s;
    s = getenv("INA_JOB");
    int job_set = s && *s;
    if (job_set)
        cfg->job = s;
    if (env_choice("INA_FALLBACK", "host", INA_FALLBACK_HOST, "none", INA_FALLBACK_NONE,
                   &cfg->fallback) ||
        env_choice("INA_FLOAT_ADD", "quantized", INA_FLOAT_ADD_QUANTIZED, "switch",
                   INA_FLOAT_ADD_SWITCH, &cfg->float_add) ||
        env_choice("INA_INTEGRITY", "0", 0, "1", 1, &cfg->integrity))
        return INA_ERR_CONFIG;
    s = getenv("INA_LANES");
    const int lanes_auto = s && strcmp(s, "auto") == 0; /* lanes 0, the default */
    s = getenv("INA_SECRET_FILE");
    if (s && *s)
        cfg->secret_file = s;
    if (env_sparse_mode(&cfg->sparse) || env_double("INA_SPARSE_THRESHOLD", &cfg->sparse_threshold) ||
        env_double("INA_SPARSE_CROSSOVER", &cfg->sparse_crossover))
        return INA_ERR_CONFIG;
    struct {
        const char *name, *fallback;
        int *field;
    } vars[] = {
        {"INA_RANK", "RANK", &cfg->rank},
        {"INA_WORLD_SIZE", "WORLD_SIZE", &cfg->world_size},
        {"INA_ELEMS", NULL, &cfg->elems_per_packet},
        {"INA_WINDOW", NULL, &cfg->window},
        {"INA_TIMEOUT_MS", NULL, &cfg->timeout_ms},
        {"INA_JOIN_TIMEOUT_MS", NULL, &cfg->join_timeout_ms},
        {"INA_RTO_MS", NULL, &cfg->rto_ms},
        {"INA_LANES", NULL, &cfg->lanes},
        {"INA_ADMISSION_WAIT_MS", NULL, &cfg->admission_wait_ms},
        {"INA_SPARSE_BLOCK", NULL, &cfg->sparse_block},
        {"INA_SPARSE_MIN_BYTES", NULL, &cfg->sparse_min_bytes},
        {"INA_BUSY_POLL_US", NULL, &cfg->busy_poll_us},
        {"INA_FIXED_POINT", NULL, &cfg->fixed_point_bits},
    };
    int absent[2] = {1, 1}; /* rank, world_size: neither INA_* nor torchrun's */
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        if (vars[i].field == &cfg->lanes && lanes_auto)
            continue;
        int rc = env_int(vars[i].name, vars[i].field);
        if (rc == 1 && vars[i].fallback)
            rc = env_int(vars[i].fallback, vars[i].field);
        if (rc < 0 && vars[i].field == &cfg->lanes)
            return ina__fail(NULL, rc, "INA_LANES='%s' is not 'auto' or a lane count 1..%d",
                             getenv("INA_LANES"), INA_MAX_LANES);
        if (rc < 0)
            return rc;
        if (i < 2)
            absent[i] = rc == 1;
    }
    /* What is still unset comes from the launcher (srun, mpirun, a PMI launcher), if any. */
    int rank = cfg->rank, world = cfg->world_size;
    int rc = ina__launcher_env(&rank, &world, job_set ? NULL : &cfg->job);
    if (rc < 0)
        return rc;
    if (absent[0])
        cfg->rank = rank;
    if (absent[1])
        cfg->world_size = world;
    return 0;
}
