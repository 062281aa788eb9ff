/* version.c: the run-time version, shared by libina and ina-switch. */
#include "ina.h"

#define INA__STR2(x) #x
#define INA__STR(x) INA__STR2(x)

unsigned ina_version_number(void) { return INA_VERSION_NUMBER; }

const char *ina_version_string(void)
{
    return INA__STR(INA_VERSION_MAJOR) "." INA__STR(INA_VERSION_MINOR) "." INA__STR(INA_VERSION_PATCH);
}
