/* comm_mpi.c: ina-glm's MPI backend, the authors' CPU baseline: MPI_Allreduce, or MPI_Iallreduce
 * when micro-batches are pipelined (W > 1), so that only the all-reduce differs from ina's. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm.h"

struct mpi_impl {
    int window;
    MPI_Request req[GLM_MAX_WINDOW];
};

static int mpi_fail(char *err, size_t errlen, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    snprintf(err, errlen, "%s: %.*s", what, len, msg);
    return -1;
}

static int mpi_open(struct glm_comm *c, const struct glm_comm_opts *o, int *argc, char ***argv,
                    char *err, size_t errlen)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Init failed");
        return -1;
    }
    /* Errors come back as codes, so that ina-glm says what failed. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    struct mpi_impl *im = calloc(1, sizeof(*im));
    if (!im) {
        snprintf(err, errlen, "out of memory");
        MPI_Finalize();
        return -1;
    }
    im->window = o->window;
    for (int i = 0; i < GLM_MAX_WINDOW; i++)
        im->req[i] = MPI_REQUEST_NULL;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->world);
    c->impl = im;
    int major = 0, minor = 0;
    MPI_Get_version(&major, &minor);
    snprintf(c->desc, sizeof(c->desc), "mpi (MPI %d.%d, %s of float32)", major, minor,
             o->window > 1 ? "MPI_Iallreduce pipeline" : "MPI_Allreduce");
    return 0;
}

static int mpi_start(struct glm_comm *c, int h, float *buf, size_t n)
{
    struct mpi_impl *im = c->impl;
    if (im->window == 1) /* the authors' baseline: blocking, nothing to overlap */
        return MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) ==
                       MPI_SUCCESS ? 0 : -1;
    return MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                          &im->req[h]) == MPI_SUCCESS ? 0 : -1;
}

static int mpi_waitfor(struct glm_comm *c, int h, char *err, size_t errlen)
{
    struct mpi_impl *im = c->impl;
    if (im->req[h] == MPI_REQUEST_NULL)
        return 0; /* W = 1: done in start */
    int rc = MPI_Wait(&im->req[h], MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, errlen, "MPI_Wait", rc);
}

static int mpi_sum(struct glm_comm *c, float *buf, size_t n, char *err, size_t errlen)
{
    (void)c;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, errlen, "MPI_Allreduce", rc);
}

static void mpi_close(struct glm_comm *c)
{
    free(c->impl);
    MPI_Finalize();
}

static const struct glm_comm_ops ops = {mpi_open, mpi_start, mpi_waitfor, mpi_sum, mpi_close};
const struct glm_comm_ops *const glm_comm_mpi_ops = &ops;
