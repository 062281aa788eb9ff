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

/* ---- Messages: why the last call failed (ina_last_error) ------------------ */

#include <stdarg.h>
#include <stdio.h>

#include "lib/ctx.h"

/* Calls that fail without a context (ina_init, ina_config_from_env) say why
 * here, per thread, as errno and dlerror() do. */
static _Thread_local char thread_msg[INA_ERRMSG_LEN];

int ina__fail(struct ina_ctx *ctx, int code, const char *fmt, ...)
{
    char *buf = ctx ? ctx->errmsg : thread_msg;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, INA_ERRMSG_LEN, fmt, ap);
    va_end(ap);
    return code;
}

int ina__fail_once(struct ina_ctx *ctx, int code, const char *fmt, ...)
{
    char *buf = ctx ? ctx->errmsg : thread_msg;
    if (buf[0])
        return code; /* the first, most specific reason stays */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, INA_ERRMSG_LEN, fmt, ap);
    va_end(ap);
    return code;
}

void ina__fail_clear(struct ina_ctx *ctx)
{
    (ctx ? ctx->errmsg : thread_msg)[0] = '\0';
}

void ina__fail_to_thread(const struct ina_ctx *ctx)
{
    if (ctx && ctx->errmsg[0])
        snprintf(thread_msg, sizeof(thread_msg), "%s", ctx->errmsg);
}

const char *ina_last_error(const ina_ctx *ctx)
{
    if (!ctx)
        return thread_msg;
    if (ctx->magic == INA_CTX_CLOSED)
        return "the context was finalized (ina_finalize): every call returns INA_ERR_CLOSED";
    if (ctx->magic != INA_CTX_LIVE)
        return "not a context returned by ina_init()";
    return ctx->errmsg; /* a multi-lane context's: its failed lane's, copied up (lanes.c) */
}
