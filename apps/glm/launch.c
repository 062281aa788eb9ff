/* launch.c: ina-glm --local N: an ina-switch on loopback and N workers (this program), for one host. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "launch.h"

#define PORT_WAIT_S 10.0 /* ina-switch must listen within this */
#define KILL_GRACE_S 3.0 /* after a worker fails, the others get this long to notice */

/* fork + exec argv, dying with the launcher; quiet 1: stdout to /dev/null,
 * 2: stderr too. */
static pid_t spawn(char *const argv[], int quiet)
{
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    if (quiet && !freopen("/dev/null", "w", stdout))
        _exit(127);
    if (quiet > 1 && !freopen("/dev/null", "w", stderr))
        _exit(127);
    execv(argv[0], argv);
    fprintf(stderr, "ina-glm: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* ina-switch next to this executable (or what the caller named). */
static void switch_path(const char *given, char *buf, size_t len)
{
    if (given) {
        snprintf(buf, len, "%s", given);
        return;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = 0;
    char *slash = strrchr(self, '/');
    if (slash)
        slash[1] = 0;
    snprintf(buf, len, "%sina-switch", n > 0 && slash ? self : "");
}

static int read_port(const char *path)
{
    FILE *f = fopen(path, "r");
    int port = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &port) != 1 || port <= 0 || port > 65535)
        port = 0;
    fclose(f);
    return port;
}

int glm_launch_local(const struct glm_launch *l, int argc, char **argv)
{
    char swbin[4200], dir[] = "/tmp/ina-glm-XXXXXX", portfile[64], addr[64], job[40];
    switch_path(l->switch_bin, swbin, sizeof(swbin));
    if (!mkdtemp(dir)) {
        fprintf(stderr, "ina-glm: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    snprintf(portfile, sizeof(portfile), "%s/port", dir);
    char listen[] = "--listen", any[] = "127.0.0.1:0", pf[] = "--port-file", quiet[] = "--quiet";
    char *swargv[64];
    int a = 0;
    swargv[a++] = swbin;
    swargv[a++] = listen;
    swargv[a++] = any;
    swargv[a++] = pf;
    swargv[a++] = portfile;
    swargv[a++] = quiet;
    for (int i = 0; i < l->nswitch_args && a < 63; i++)
        swargv[a++] = (char *)l->switch_args[i];
    swargv[a] = NULL;
    pid_t sw = spawn(swargv, 2), *pids = calloc((size_t)l->n, sizeof(pid_t));
    int port = 0, rc = 0;
    for (double end = ina__clock_s() + PORT_WAIT_S; sw > 0 && !port && ina__clock_s() < end;) {
        int st;
        if (waitpid(sw, &st, WNOHANG) == sw) {
            fprintf(stderr, "ina-glm: %s ended before it listened\n", swbin);
            sw = -1;
            break;
        }
        port = read_port(portfile);
        if (!port)
            usleep(10000);
    }
    unlink(portfile);
    rmdir(dir);
    if (sw <= 0 || !port || !pids) {
        if (sw > 0 && !port)
            fprintf(stderr, "ina-glm: %s wrote no port within %.0f s\n", swbin, PORT_WAIT_S);
        rc = 1;
        goto out;
    }
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    snprintf(job, sizeof(job), "glm-%ld", (long)getpid());
    /* The workers: this program again, told by the environment where and who they are. */
    setenv("INA_SWITCH", addr, 1);
    setenv("INA_JOB", job, 1);
    setenv("INA_GLM_WORKER", "1", 1);
    char ws[16], rs[16];
    snprintf(ws, sizeof(ws), "%d", l->n);
    setenv("INA_WORLD_SIZE", ws, 1);
    char self[4096];
    ssize_t sn = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[sn > 0 ? sn : 0] = 0;
    char **wargv = calloc((size_t)argc + 1, sizeof(char *));
    if (!wargv || sn <= 0) {
        rc = 1;
        goto out;
    }
    wargv[0] = self;
    for (int i = 1; i < argc; i++)
        wargv[i] = argv[i];
    for (int r = 0; r < l->n; r++) {
        snprintf(rs, sizeof(rs), "%d", r);
        setenv("INA_RANK", rs, 1);
        pids[r] = spawn(wargv, r != 0); /* rank 0 speaks for all */
        if (pids[r] < 0) {
            fprintf(stderr, "ina-glm: fork: %s\n", strerror(errno));
            rc = 1;
            break;
        }
    }
    free(wargv);
    /* Wait for every worker; after a failure, the others get a grace period. */
    int left = 0;
    for (int r = 0; r < l->n; r++)
        left += pids[r] > 0;
    double kill_at = 0;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < l->n; r++)
                if (pids[r] == p) {
                    pids[r] = 0;
                    left--;
                    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        if (!rc)
                            fprintf(stderr, "ina-glm: worker %d %s %d\n", r,
                                    WIFEXITED(st) ? "exited with status" : "was killed by signal",
                                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                        rc = rc ? rc : (WIFEXITED(st) ? WEXITSTATUS(st) : 1);
                        if (!kill_at)
                            kill_at = ina__clock_s() + KILL_GRACE_S;
                    }
                }
            continue;
        }
        if (kill_at && ina__clock_s() > kill_at) {
            for (int r = 0; r < l->n; r++)
                if (pids[r] > 0)
                    kill(pids[r], SIGKILL);
            kill_at = ina__clock_s() + 3600; /* once */
        }
        usleep(2000);
    }
out:
    if (sw > 0) {
        kill(sw, SIGTERM);
        waitpid(sw, NULL, 0);
    }
    if (pids && rc)
        for (int r = 0; r < l->n; r++)
            if (pids[r] > 0)
                kill(pids[r], SIGKILL);
    free(pids);
    return rc;
}
