/* launch.h: ina-glm --local N (launch.c). */
#ifndef INA_GLM_LAUNCH_H
#define INA_GLM_LAUNCH_H

struct glm_launch {
    int n;                    /* workers */
    const char *switch_bin;   /* NULL: ina-switch next to this executable */
    const char **switch_args; /* more ina-switch options (--switch-opt) */
    int nswitch_args;
};

/*
 * Start ina-switch on a free loopback port, then n copies of this program
 * with the same arguments and INA_SWITCH, INA_JOB, INA_RANK, INA_WORLD_SIZE
 * and INA_GLM_WORKER=1 in their environment; only rank 0's stdout is kept.
 * Waits for all; when one fails, the others are killed after a few seconds
 * (they normally fail at once: the switch aborts the job). Stops the switch.
 * @return 0 if every worker exited 0, else the first failure's status (>= 1).
 */
int glm_launch_local(const struct glm_launch *l, int argc, char **argv);

#endif
