/* auto.c: INA_LANES=auto and INA_BUSY_POLL_US=auto: lanes and spins from the cores a rank has per worker of its host. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/busy_poll.h"
#include "common/host.h"
#include "lib/ctx.h"

/*
 * Why this rule. A lane is a thread with its own socket and window, and at
 * the switch a job of its own, which ina-switch may serve on another
 * dataplane thread: lanes spread one worker's per-datagram work over cores,
 * and the switch's over its threads. They pay while there are cores for
 * them: a worker gets one lane per whole core it has to itself (the cores
 * of the host over the job's workers on it), at least 1 and at most
 * INA_AUTO_LANES_MAX (4 lanes with 8 switch threads was the best setting
 * measured on a 16-core host; issue 14). Each rank proposes its count at
 * JOIN and the job runs the smallest (PROTOCOL.md §5.6), so ranks on
 * different hosts agree.
 */

/* Workers of this job on this host: all of them when the switch (every
 * switch of an INA_SWITCH list) is on loopback (no other host can reach
 * it); else what the launcher says (torchrun, Open MPI, MPICH, Slurm), else 1. */
static int local_workers(const ina_config *cfg)
{
    struct sockaddr_in sw[INA_MAX_PARTS];
    char why[8];
    int n = ina__parse_hostport_list(cfg->switch_addr, 0, sw, INA_MAX_PARTS, why, sizeof(why));
    int loopback = n >= 1;
    for (int i = 0; i < n; i++) /* a list (shards): loopback only if every switch is */
        loopback &= (ntohl(sw[i].sin_addr.s_addr) >> 24) == 127;
    if (loopback)
        return cfg->world_size;
    static const char *const vars[] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *s = getenv(vars[i]);
        if (!s || !*s)
            continue;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10); /* Slurm may write "4(x2)": its first count */
        if (!errno && end != s && v >= 1 && v <= INA_MAX_WORKERS)
            return (int)v;
    }
    return 1;
}

int ina__lanes_auto(const ina_config *cfg, int *cores_out, int *local_out)
{
    int cores = ina__host_cores(NULL);
    int local = local_workers(cfg);
    if (cores_out)
        *cores_out = cores;
    if (local_out)
        *local_out = local;
    if (cfg->world_size <= 1)
        return 1; /* nothing to aggregate across */
    int lanes = cores / local;
    if (lanes < 1)
        lanes = 1;
    return lanes > INA_AUTO_LANES_MAX ? INA_AUTO_LANES_MAX : lanes;
}

/* 1 if a switch of cfg's list is on this host (it spins there too: --busy-poll auto). */
static int switch_here(const ina_config *cfg)
{
    struct sockaddr_in sw[INA_MAX_PARTS];
    char why[8];
    int n = ina__parse_hostport_list(cfg->switch_addr, 0, sw, INA_MAX_PARTS, why, sizeof(why));
    for (int i = 0; i < n; i++)
        if (ina__addr_is_this_host(&sw[i]))
            return 1;
    return 0;
}

/*
 * Busy polling (busy_poll.h has the rule and why): the spinners of this
 * host are the job's workers here, counted as for lanes, and the switch if
 * it is here. A world of 1 spins too: its round trip is the switch's.
 */
int ina__busy_poll_auto(const ina_config *cfg, int *cores_out, int *spinners_out)
{
    int cores = ina__host_cores(NULL);
    int spinners = local_workers(cfg) + switch_here(cfg);
    if (cores_out)
        *cores_out = cores;
    if (spinners_out)
        *spinners_out = spinners;
    return ina__busy_poll_auto_us(cores, spinners);
}

int ina_auto_busy_poll(const ina_config *cfg, int *cores, int *spinners)
{
    if (!cfg || !cfg->switch_addr || cfg->world_size < 1 || cfg->world_size > INA_MAX_WORKERS)
        return -EINVAL;
    return ina__busy_poll_auto(cfg, cores, spinners);
}

int ina_auto_lanes(const ina_config *cfg, int *cores, int *local_workers_out)
{
    if (!cfg || !cfg->switch_addr || cfg->world_size < 1 || cfg->world_size > INA_MAX_WORKERS)
        return -EINVAL;
    return ina__lanes_auto(cfg, cores, local_workers_out);
}
