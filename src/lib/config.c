/* config.c: configuration defaults and the environment (INA_*, torchrun's RANK/WORLD_SIZE). */
#include <errno.h>
#include <limits.h>
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
    if (s && *s)
        cfg->job = s;
    if (env_choice("INA_FALLBACK", "host", INA_FALLBACK_HOST, "none", INA_FALLBACK_NONE,
                   &cfg->fallback) ||
        env_choice("INA_FLOAT_ADD", "quantized", INA_FLOAT_ADD_QUANTIZED, "switch",
                   INA_FLOAT_ADD_SWITCH, &cfg->float_add))
        return INA_ERR_CONFIG;
    s = getenv("INA_LANES");
    const int lanes_auto = s && strcmp(s, "auto") == 0; /* lanes 0, the default */
    s = getenv("INA_SECRET_FILE");
    if (s && *s)
        cfg->secret_file = s;
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
    };
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
    }
    return 0;
}
