/* launcher.c: rank, world size and job name from a launcher's environment (Slurm's srun,
 * OpenMPI's mpirun, a PMI launcher), for what INA_* and torchrun's variables leave unset.
 *
 * The innermost launcher wins: mpirun inside an sbatch script inherits the batch step's
 * SLURM_PROCID=0 and SLURM_NTASKS, so OpenMPI's and PMI's variables are looked at before
 * Slurm's. Rank and size always come from one launcher together (a rank from one and a size
 * from another would join a job that does not exist). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/ctx.h"

/* Slurm's step ids at and above this are the batch, extern and interactive pseudo-steps
 * (SLURM_BATCH_SCRIPT = 0xfffffffb ... SLURM_PENDING_STEP = 0xfffffffd): the batch script
 * itself is not a step of N tasks, so its SLURM_PROCID/SLURM_NTASKS say nothing. */
#define SLURM_FIRST_PSEUDO_STEP 0xfffffff0UL

/* Slurm counts only inside a job step (srun), not in the batch script. */
static int slurm_in_step(void)
{
    const char *s = getenv("SLURM_STEP_ID");
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    return !errno && !*end && v < SLURM_FIRST_PSEUDO_STEP;
}

struct launcher {
    const char *rank_var; /* both must be set for the launcher to count */
    const char *size_var;
    const char *job_prefix; /* job name = prefix + the job variables, joined by '.' */
    const char *job_vars[2];
    int (*applies)(void); /* NULL, or a further condition for the launcher to count */
};

static const struct launcher launchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "ompi-",
     {"OMPI_MCA_ess_base_jobid", NULL}, NULL},
    {"PMI_RANK", "PMI_SIZE", "pmi-", {"PMI_JOBID", NULL}, NULL},
    {"SLURM_PROCID", "SLURM_NTASKS", "slurm-", {"SLURM_JOB_ID", "SLURM_STEP_ID"},
     slurm_in_step},
};

/* Decimal value of env var `name` in [lo, hi] into *out. @return 0, or INA_ERR_CONFIG. */
static int env_ulong(const char *name, unsigned long lo, unsigned long hi, unsigned long *out)
{
    const char *s = getenv(name);
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *s == '-' || *s == '+' || errno || *end || v < lo || v > hi)
        return ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not a decimal integer in %lu..%lu",
                         name, s, lo, hi);
    *out = v;
    return 0;
}

static int set(const char *name)
{
    const char *s = getenv(name);
    return s && *s;
}

/* A job name of a launcher's job, kept for the life of the process: ina_config.job points
 * at it. The few distinct names a process ever builds are interned (never freed). */
static const char *intern_job(const char *name)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char names[8][32];
    static unsigned used;
    const char *out = NULL;
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < used && !out; i++)
        if (strcmp(names[i], name) == 0)
            out = names[i];
    if (!out && used < sizeof(names) / sizeof(names[0])) {
        snprintf(names[used], sizeof(names[used]), "%s", name);
        out = names[used++];
    }
    pthread_mutex_unlock(&lock);
    return out;
}

int ina__launcher_env(int *rank, int *world_size, const char **job)
{
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
        const struct launcher *l = &launchers[i];
        if (!set(l->rank_var) || !set(l->size_var))
            continue;
        if (l->applies && !l->applies())
            continue;
        unsigned long r, n;
        if (env_ulong(l->size_var, 1, INT_MAX, &n) || env_ulong(l->rank_var, 0, n - 1, &r))
            return INA_ERR_CONFIG;
        if (rank)
            *rank = (int)r;
        if (world_size)
            *world_size = (int)n;
        if (!job)
            return 1;
        char name[32];
        int len = snprintf(name, sizeof(name), "%s", l->job_prefix);
        for (int k = 0; k < 2 && l->job_vars[k]; k++) {
            unsigned long id;
            if (!set(l->job_vars[k])) {
                len = 0; /* no job id: the default job name */
                break;
            }
            if (env_ulong(l->job_vars[k], 0, 0xffffffffUL, &id))
                return INA_ERR_CONFIG;
            len += snprintf(name + len, sizeof(name) - (size_t)len, "%s%lu", k ? "." : "", id);
        }
        if (len > 0) {
            const char *kept = intern_job(name);
            if (kept)
                *job = kept;
        }
        return 1;
    }
    return 0;
}
