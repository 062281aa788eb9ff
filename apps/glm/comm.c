/* comm.c: ina-glm's all-reduce backends behind one interface: local (one process) and ina. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm.h"
#include "ina.h"

const char *const glm_comm_names[3] = {"local", "ina", "mpi"};

static const struct glm_comm_ops *ops_of(enum glm_comm_kind k)
{
    switch (k) {
    case GLM_COMM_LOCAL: return &glm_comm_local_ops;
    case GLM_COMM_INA: return &glm_comm_ina_ops;
    case GLM_COMM_MPI: return glm_comm_mpi_ops;
    }
    return NULL;
}

int glm_comm_open(struct glm_comm *c, const struct glm_comm_opts *o, int *argc, char ***argv,
                  char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    c->kind = o->kind;
    const struct glm_comm_ops *ops = ops_of(o->kind);
    if (!ops) {
        snprintf(err, errlen, "--comm mpi: this ina-glm was built without MPI (install "
                 "libopenmpi-dev and rebuild)");
        return -1;
    }
    return ops->open(c, o, argc, argv, err, errlen);
}

int glm_comm_start(struct glm_comm *c, int h, float *buf, size_t n)
{
    return ops_of(c->kind)->start(c, h, buf, n);
}

int glm_comm_wait(struct glm_comm *c, int h, char *err, size_t errlen)
{
    return ops_of(c->kind)->wait(c, h, err, errlen);
}

int glm_comm_allreduce(struct glm_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
    return ops_of(c->kind)->allreduce(c, buf, n, err, errlen);
}

void glm_comm_close(struct glm_comm *c)
{
    if (c->impl || c->kind == GLM_COMM_LOCAL)
        ops_of(c->kind)->close(c);
    c->impl = NULL;
}

/* ---- local: one process holds every feature; a sum over one worker is the value ---- */

static int local_open(struct glm_comm *c, const struct glm_comm_opts *o, int *argc, char ***argv,
                      char *err, size_t errlen)
{
    (void)argc, (void)argv;
    if (o->world > 1) {
        snprintf(err, errlen, "--comm local is one process: --world %d needs --comm ina or mpi",
                 o->world);
        return -1;
    }
    c->rank = 0;
    c->world = 1;
    snprintf(c->desc, sizeof(c->desc), "local (one process, no communication)");
    return 0;
}
static int local_start(struct glm_comm *c, int h, float *buf, size_t n)
{
    (void)c, (void)h, (void)buf, (void)n;
    return 0;
}
static int local_wait(struct glm_comm *c, int h, char *err, size_t errlen)
{
    (void)c, (void)h, (void)err, (void)errlen;
    return 0;
}
static int local_allreduce(struct glm_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
    (void)c, (void)buf, (void)n, (void)err, (void)errlen;
    return 0;
}
static void local_close(struct glm_comm *c) { (void)c; }

const struct glm_comm_ops glm_comm_local_ops = {local_open, local_start, local_wait,
                                                local_allreduce, local_close};

/* ---- ina: the partial dots through ina-switch ---------------------------------------- */

struct ina_impl {
    ina_ctx *ctx;
    ina_req *req[GLM_MAX_WINDOW];
    int start_rc[GLM_MAX_WINDOW]; /* a start that failed reports at its wait */
};

/* An environment variable as a rank or size, if it is one. */
static int env_int(const char *name, int *v)
{
    const char *s = getenv(name);
    char *e;
    if (!s || !*s)
        return 0;
    long x = strtol(s, &e, 10);
    if (*e || x < 0 || x > 1 << 20)
        return 0;
    *v = (int)x;
    return 1;
}

static void say_ina(char *err, size_t errlen, const struct glm_comm *c, ina_ctx *ctx,
                    const char *what, int rc)
{
    const char *why = ina_last_error(ctx);
    if (rc == INA_ERR_RANGE)
        snprintf(err, errlen, "%s: a value or sum left the fixed-point range of Q%d.%d "
                 "(|x| < %g): use fewer --fixed-bits, or --fixed-bits 0 for floats", what,
                 31 - c->fixed_bits, c->fixed_bits, (double)(1u << (31 - c->fixed_bits)));
    else
        snprintf(err, errlen, "%s: %s (%s)%s%s", what, ina_strerror(rc), ina_err_name(rc),
                 why[0] ? ": " : "", why);
}

static int ina_open(struct glm_comm *c, const struct glm_comm_opts *o, int *argc, char ***argv,
                    char *err, size_t errlen)
{
    (void)argc, (void)argv;
    ina_config cfg;
    int rc = ina_config_from_env(&cfg);
    if (rc) {
        say_ina(err, errlen, c, NULL, "ina_config_from_env", rc);
        return -1;
    }
    /* Launched by mpirun (the same placement as --comm mpi): its rank and size. */
    if (!getenv("INA_RANK") && !getenv("RANK") && !env_int("OMPI_COMM_WORLD_RANK", &cfg.rank))
        env_int("PMI_RANK", &cfg.rank);
    if (!getenv("INA_WORLD_SIZE") && !getenv("WORLD_SIZE") &&
        !env_int("OMPI_COMM_WORLD_SIZE", &cfg.world_size))
        env_int("PMI_SIZE", &cfg.world_size);
    if (o->switch_addr)
        cfg.switch_addr = o->switch_addr;
    if (o->job)
        cfg.job = o->job;
    else if (!getenv("INA_JOB"))
        cfg.job = "ina-glm";
    if (o->rank >= 0)
        cfg.rank = o->rank;
    if (o->world > 0)
        cfg.world_size = o->world;
    cfg.fixed_point_bits = o->fixed_bits;
    if (o->busy_poll_us >= 0)
        cfg.busy_poll_us = o->busy_poll_us; /* else the environment's, or auto */
    /* Enough slots for W one-packet micro-batches in flight, a power of 2. */
    int w = 128;
    while (w < o->window && w < 4096)
        w *= 2;
    if (!cfg.window || cfg.window < w)
        cfg.window = w;
    struct ina_impl *im = calloc(1, sizeof(*im));
    if (!im) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rc = ina_init(&im->ctx, &cfg);
    if (rc) {
        say_ina(err, errlen, c, NULL, "ina_init", rc);
        free(im);
        return -1;
    }
    ina_info info;
    ina_get_info(im->ctx, &info);
    c->impl = im;
    c->rank = info.rank;
    c->world = info.world_size;
    c->fixed_bits = info.fixed_point_bits;
    if (o->fixed_bits && !c->fixed_bits)
        fprintf(stderr, "ina-glm: rank %d: the switch does not offer fixed point: floats go as "
                "block floating point\n", c->rank);
    char num[48];
    if (c->fixed_bits)
        snprintf(num, sizeof(num), "fixed point Q%d.%d", 31 - c->fixed_bits, c->fixed_bits);
    else
        snprintf(num, sizeof(num), "%s floats",
                 info.float_add == INA_FLOAT_ADD_SWITCH ? "switch-added" : "block floating point");
    snprintf(c->desc, sizeof(c->desc), "ina (switch %s, %s, window %d, %s%s)", cfg.switch_addr,
             num, info.window, info.shm ? "shared-memory rings" : "udp",
             info.busy_poll_us ? ", busy polling" : "");
    return 0;
}

static int ina_start(struct glm_comm *c, int h, float *buf, size_t n)
{
    struct ina_impl *im = c->impl;
    im->start_rc[h] = ina_allreduce_start(im->ctx, buf, buf, n, INA_FLOAT32, INA_SUM, &im->req[h]);
    return 0; /* reported by the wait, with the library's words */
}

static int ina_waitfor(struct glm_comm *c, int h, char *err, size_t errlen)
{
    struct ina_impl *im = c->impl;
    int rc = im->start_rc[h];
    if (rc == 0)
        rc = ina_wait(im->req[h]);
    im->req[h] = NULL;
    im->start_rc[h] = 0;
    if (rc) {
        say_ina(err, errlen, c, im->ctx, "all-reduce", rc);
        return -1;
    }
    return 0;
}

static int ina_sum(struct glm_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
    struct ina_impl *im = c->impl;
    int rc = ina_allreduce(im->ctx, buf, buf, n, INA_FLOAT32, INA_SUM);
    if (rc) {
        say_ina(err, errlen, c, im->ctx, "all-reduce", rc);
        return -1;
    }
    return 0;
}

static void ina_close(struct glm_comm *c)
{
    struct ina_impl *im = c->impl;
    ina_finalize(im->ctx); /* requests still out are failed and released with it */
    free(im);
}

const struct glm_comm_ops glm_comm_ina_ops = {ina_open, ina_start, ina_waitfor, ina_sum,
                                              ina_close};

#ifndef INA_GLM_MPI
const struct glm_comm_ops *const glm_comm_mpi_ops = NULL;
#endif
