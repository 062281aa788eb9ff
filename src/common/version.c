/* version.c: the run-time version and struct sizes, shared by libina and the daemons. */
#include <stdio.h>

#include "common/version.h"
#include "ina.h"

#define INA__STR2(x) #x
#define INA__STR(x) INA__STR2(x)

unsigned ina_version_number(void) { return INA_VERSION_NUMBER; }

const char *ina_version_string(void)
{
    return INA__STR(INA_VERSION_MAJOR) "." INA__STR(INA_VERSION_MINOR) "." INA__STR(INA_VERSION_PATCH);
}

/* The caller compares these with its own sizeof before it passes a struct
 * (include/ina.h, "ABI"). */
size_t ina_config_size(void) { return sizeof(ina_config); }
size_t ina_stats_size(void) { return sizeof(ina_stats); }
size_t ina_info_size(void) { return sizeof(ina_info); }
size_t ina_kv_config_size(void) { return sizeof(ina_kv_config); }
size_t ina_kv_stats_size(void) { return sizeof(ina_kv_stats); }

const char *ina__version_str(uint32_t v, char *buf, size_t len)
{
    if (v == 0)
        snprintf(buf, len, "unknown");
    else
        snprintf(buf, len, "%u.%u.%u", (unsigned)(v / 10000), (unsigned)(v / 100 % 100),
                 (unsigned)(v % 100));
    return buf;
}
