/* error.c: error codes to text, generated from the one table in ina.h. */
#include <errno.h>
#include <string.h>

#include "ina.h"

const char *ina_strerror(int err)
{
    switch (err) {
    case INA_OK: return "success";
#define INA__ERR_MSG(name, value, msg) \
    case value: return msg;
        INA_ERRNO_MAP(INA__ERR_MSG)
#undef INA__ERR_MSG
    default: break;
    }
    if (err < 0 && err > -4096)
        return strerror(-err); /* glibc: static table for known values */
    return "unknown error";
}

const char *ina_err_name(int err)
{
    switch (err) {
    case INA_OK: return "INA_OK";
#define INA__ERR_NAME(name, value, msg) \
    case value: return #name;
        INA_ERRNO_MAP(INA__ERR_NAME)
#undef INA__ERR_NAME
    default: break;
    }
    if (err < 0 && err > -4096) {
        const char *n = strerrorname_np(-err);
        if (n)
            return n;
    }
    return "UNKNOWN";
}
