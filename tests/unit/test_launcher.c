/* test_launcher.c: rank, world size and job name from a launcher's environment (Slurm's srun,
 * OpenMPI's mpirun, PMI), below INA_* and torchrun's RANK/WORLD_SIZE (ina_config_from_env). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ina.h"

static const char *const all_vars[] = {
    "INA_RANK", "INA_WORLD_SIZE", "INA_JOB", "RANK", "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid",
    "PMI_RANK", "PMI_SIZE", "PMI_JOBID",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID",
};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++)
        unsetenv(all_vars[i]);
}

static void slurm_step(const char *procid, const char *ntasks, const char *job, const char *step)
{
    setenv("SLURM_PROCID", procid, 1);
    setenv("SLURM_NTASKS", ntasks, 1);
    setenv("SLURM_JOB_ID", job, 1);
    setenv("SLURM_STEP_ID", step, 1);
}

static void test_slurm(void)
{
    ina_config cfg;
    clear_env();
    slurm_step("2", "4", "117", "3");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 2);
    CHECK_EQ_INT(cfg.world_size, 4);
    CHECK(strcmp(cfg.job, "slurm-117.3") == 0);
    /* Two steps of one allocation are two ina jobs. */
    setenv("SLURM_STEP_ID", "4", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK(strcmp(cfg.job, "slurm-117.4") == 0);
    /* The batch script (step "batch" = 0xfffffffb) is no step of N tasks: the defaults. */
    setenv("SLURM_STEP_ID", "4294967291", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 0);
    CHECK_EQ_INT(cfg.world_size, 1);
    CHECK(strcmp(cfg.job, "default") == 0);
    unsetenv("SLURM_STEP_ID");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.world_size, 1);
    /* Malformed or inconsistent: INA_ERR_CONFIG, naming the variable. */
    slurm_step("4", "4", "117", "3");
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    CHECK(strstr(ina_last_error(NULL), "SLURM_PROCID='4'") != NULL);
    slurm_step("1", "four", "117", "3");
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    CHECK(strstr(ina_last_error(NULL), "SLURM_NTASKS") != NULL);
    slurm_step("1", "4", "-117", "3");
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    CHECK(strstr(ina_last_error(NULL), "SLURM_JOB_ID") != NULL);
    slurm_step("-1", "4", "117", "3");
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    /* The largest ids still make a name of at most 31 bytes. */
    slurm_step("0", "2147483647", "4294967295", "4294967279");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK(strcmp(cfg.job, "slurm-4294967295.4294967279") == 0);
    CHECK(strlen(cfg.job) <= 31);
}

static void test_precedence(void)
{
    ina_config cfg;
    clear_env();
    slurm_step("2", "4", "117", "3");
    /* torchrun's variables win over the launcher's, each on its own. */
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "8", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 5);
    CHECK_EQ_INT(cfg.world_size, 8);
    CHECK(strcmp(cfg.job, "slurm-117.3") == 0);
    unsetenv("WORLD_SIZE");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 5);
    CHECK_EQ_INT(cfg.world_size, 4);
    /* INA_* win over both. */
    setenv("INA_RANK", "1", 1);
    setenv("INA_JOB", "mine", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 1);
    CHECK(strcmp(cfg.job, "mine") == 0);
    /* mpirun inside the allocation: OpenMPI's variables win over the inherited Slurm ones,
     * rank and size from OpenMPI together. */
    clear_env();
    slurm_step("0", "4", "117", "3");
    setenv("OMPI_COMM_WORLD_RANK", "6", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "7", 1);
    setenv("OMPI_MCA_ess_base_jobid", "838926337", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 6);
    CHECK_EQ_INT(cfg.world_size, 7);
    CHECK(strcmp(cfg.job, "ompi-838926337") == 0);
    /* A launcher with a rank and no size does not count: the next one does. */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 0);
    CHECK_EQ_INT(cfg.world_size, 4);
    CHECK(strcmp(cfg.job, "slurm-117.3") == 0);
    /* PMI (MPICH's hydra, srun --mpi=pmi2) is next after OpenMPI. */
    setenv("PMI_RANK", "3", 1);
    setenv("PMI_SIZE", "5", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 3);
    CHECK_EQ_INT(cfg.world_size, 5);
    CHECK(strcmp(cfg.job, "default") == 0); /* no PMI_JOBID: the default name */
    setenv("PMI_JOBID", "42", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK(strcmp(cfg.job, "pmi-42") == 0);
    setenv("PMI_SIZE", "0", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    CHECK(strstr(ina_last_error(NULL), "PMI_SIZE='0'") != NULL);
    clear_env();
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 0);
    CHECK_EQ_INT(cfg.world_size, 1);
    CHECK(strcmp(cfg.job, "default") == 0);
}

int main(void)
{
    test_slurm();
    test_precedence();
    return check_report("test_launcher");
}
