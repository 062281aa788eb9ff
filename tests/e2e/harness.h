/* harness.h: end-to-end test helpers: start an ina-switch on a free port, fork N workers, reap with a deadline. */
#ifndef INA_E2E_HARNESS_H
#define INA_E2E_HARNESS_H

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#include "ina.h"

#ifndef INA_SWITCH_BIN
#define INA_SWITCH_BIN "build/bin/ina-switch"
#endif

struct sw_proc {
    pid_t pid;
    int port;
    char port_file[64];
    const char *log_path; /* if set, the switch's stderr (its counters at exit) goes here */
};

/*
 * INA_TEST_DATAPLANE=ebpf (tests/scripts/test_ebpf_e2e.sh runs the suite so,
 * each test in a network namespace of its own): every switch runs with
 * --dataplane ebpf --iface lo, without the options that dataplane refuses
 * (--shm, --threads, --fault-rx/tx; --multicast, which it refuses on lo); a test
 * skips what needs them.
 */
static inline int h_ebpf(void)
{
    const char *d = getenv("INA_TEST_DATAPLANE");
    return d && strcmp(d, "ebpf") == 0;
}

/*
 * Start ina-switch with extra args (NULL-terminated list, may be NULL). @return 0 or -1.
 * The switch's threads and the workers' lanes default to counts chosen from the host's
 * cores; the tests count jobs, lanes and slots as on the 2-core host they were written
 * for, so unless INA_AUTO_CORES is set already, the switch and the workers forked after
 * this call see 2 cores (one switch thread; one lane for N >= 2). test_auto.c sets its own.
 */
static inline int switch_start(struct sw_proc *sp, const char *const *extra)
{
    setenv("INA_AUTO_CORES", "2", 0);
    static int nstarted; /* a test may run several switches: one port file each */
    snprintf(sp->port_file, sizeof(sp->port_file), "/tmp/ina-test-port.%d.%d", (int)getpid(),
             nstarted++);
    unlink(sp->port_file);
    const char *argv[40] = {INA_SWITCH_BIN, "--listen", "127.0.0.1:0", "--port-file",
                            sp->port_file, "--quiet"};
    int argc = 6;
    for (int i = 0; extra && extra[i] && argc < 35; i++) {
        if (h_ebpf() && (strcmp(extra[i], "--shm") == 0 || strcmp(extra[i], "--multicast") == 0))
            continue;
        if (h_ebpf() && (strcmp(extra[i], "--threads") == 0 || strcmp(extra[i], "--fault-rx") == 0 ||
                         strcmp(extra[i], "--fault-tx") == 0)) {
            i += extra[i + 1] != NULL; /* and its value */
            continue;
        }
        argv[argc++] = extra[i];
    }
    if (h_ebpf()) {
        argv[argc++] = "--dataplane";
        argv[argc++] = "ebpf";
        argv[argc++] = "--iface";
        argv[argc++] = "lo";
    }
    argv[argc] = NULL;
    fflush(NULL);
    sp->pid = fork();
    if (sp->pid < 0)
        return -1;
    if (sp->pid == 0) {
        /* Die with the test: a test killed by ctest's timeout must not
         * leave its switch running. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (sp->log_path) {
            if (!freopen(sp->log_path, "w", stderr))
                _exit(127);
        } else if (!getenv("INA_TEST_SWITCH_STDERR") && !freopen("/dev/null", "w", stderr)) {
            _exit(127);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (double t0 = ina__clock_s(); ina__clock_s() - t0 < 10;) {
        FILE *f = fopen(sp->port_file, "r");
        if (f) {
            int ok = fscanf(f, "%d", &sp->port) == 1;
            fclose(f);
            if (ok)
                return 0;
        }
        usleep(10000);
    }
    kill(sp->pid, SIGKILL);
    waitpid(sp->pid, NULL, 0);
    return -1;
}

/* SIGTERM the switch and reap it. @return its exit status (0 = clean). */
static inline int switch_stop(struct sw_proc *sp)
{
    int st = 0;
    kill(sp->pid, SIGTERM);
    waitpid(sp->pid, &st, 0);
    unlink(sp->port_file);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Value of counter `name` in the switch's exit report at sp->log_path, or -1. */
static inline long long switch_counter(const struct sw_proc *sp, const char *name)
{
    FILE *f = sp->log_path ? fopen(sp->log_path, "r") : NULL;
    char line[256], key[64];
    long long v, found = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, " %63s %lld", key, &v) == 2 && strcmp(key, name) == 0)
            found = v;
    if (f)
        fclose(f);
    return found;
}

static inline void switch_addr(const struct sw_proc *sp, char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1:%d", sp->port);
}

/* ina-ctl CMD ID against a switch's --metrics port. The switch publishes its
 * job list every 100 ms, so a job just started may not be listed yet: retry
 * for up to 3 s. @return ina-ctl's exit status (0 = done). */
static inline int ctl_job(int metrics_port, const char *cmd, unsigned id)
{
    char bin[512], line[700];
    snprintf(bin, sizeof(bin), "%s", INA_SWITCH_BIN);
    char *slash = strrchr(bin, '/');
    if (slash)
        *slash = '\0';
    snprintf(line, sizeof(line), "%s/ina-ctl --metrics 127.0.0.1:%d %s %u >/dev/null 2>&1",
             slash ? bin : ".", metrics_port, cmd, id);
    int rc = -1;
    for (int i = 0; i < 30 && rc != 0; i++)
        if ((rc = system(line)) != 0)
            usleep(100 * 1000);
    return rc;
}

/* Write text into a new file (a secret file, say). @return 0, or -1. */
static inline int h_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Fill a config for rank r of n against the switch. */
static inline void worker_config(ina_config *cfg, const struct sw_proc *sp, const char *job, int r,
                          int n, char *addrbuf, size_t addrlen)
{
    ina_config_init(cfg);
    switch_addr(sp, addrbuf, addrlen);
    cfg->switch_addr = addrbuf;
    cfg->job = job;
    cfg->rank = r;
    cfg->world_size = n;
    cfg->timeout_ms = 20000;
    cfg->join_timeout_ms = 20000;
}

/*
 * Fork n workers running fn(rank, n, arg); each exits with fn's return value.
 * Wait for all at most deadline_s seconds (then kill them).
 * @return number of workers that failed (nonzero exit, signal, or deadline).
 */
static inline int run_workers(int n, int (*fn)(int rank, int n, void *arg), void *arg, double deadline_s)
{
    pid_t pids[512];
    fflush(NULL); /* children must not inherit unflushed output */
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = fn(r, n, arg);
            fflush(NULL);
            _exit(rc ? 1 : 0);
        }
    }
    int failed = 0, left = n;
    double t0 = ina__clock_s();
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < n; r++)
                if (pids[r] == p) {
                    pids[r] = 0;
                    left--;
                    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        fprintf(stderr, "worker rank %d failed (status 0x%x)\n", r, st);
                        failed++;
                    }
                }
            continue;
        }
        if (ina__clock_s() - t0 > deadline_s) {
            fprintf(stderr, "workers passed the %.0f s deadline: killing %d\n", deadline_s, left);
            for (int r = 0; r < n; r++)
                if (pids[r] > 0) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    failed++;
                }
            break;
        }
        usleep(2000);
    }
    return failed;
}

/*
 * What the test's parent and its workers share to kill a switch under a
 * joined job (an anonymous shared mapping): the workers count themselves
 * joined, the parent kills, then says so.
 */
struct h_kill {
    volatile int joined, killed;
    volatile double worst_s; /* the slowest failure after the kill */
};

/*
 * A switch of the job dies: count this rank joined, wait for the kill, then
 * one all-reduce must fail by itself within limit_s, with INA_ERR_TIMEOUT,
 * INA_ERR_ABORTED or -ECONNREFUSED, and the next call with INA_ERR_CLOSED.
 * @return 0 if so, else 1 (and says why).
 */
static inline int h_fail_after_kill(ina_ctx *ctx, struct h_kill *k, double limit_s,
                                    const char *what, int rank)
{
    static float buf[20000];
    __sync_fetch_and_add(&k->joined, 1);
    for (double t0 = ina__clock_s(); !k->killed && ina__clock_s() - t0 < 30;)
        usleep(1000);
    double t0 = ina__clock_s();
    int rc = ina_allreduce(ctx, buf, buf, 20000, INA_FLOAT32, INA_SUM);
    double dt = ina__clock_s() - t0;
    if (dt > k->worst_s)
        k->worst_s = dt;
    int rc2 = ina_allreduce(ctx, buf, buf, 10, INA_FLOAT32, INA_SUM);
    if ((rc == INA_ERR_TIMEOUT || rc == INA_ERR_ABORTED || rc == -ECONNREFUSED) &&
        rc2 == INA_ERR_CLOSED && dt <= limit_s)
        return 0;
    fprintf(stderr, "%s rank %d: %s after %.2f s, then %s\n", what, rank, ina_err_name(rc), dt,
            ina_err_name(rc2));
    return 1;
}

/* Deterministic per (rank, op, index) test data: splitmix64. */
static inline uint64_t h_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline int32_t h_i32(int rank, uint64_t op, uint64_t i)
{
    return (int32_t)(uint32_t)h_mix(((uint64_t)rank << 56) ^ (op << 40) ^ i);
}

/* Floats of mixed sign over a few orders of magnitude, varying by block. */
static inline float h_f32(int rank, uint64_t op, uint64_t i)
{
    uint64_t x = h_mix(((uint64_t)rank << 56) ^ (op << 40) ^ i ^ 0x5555);
    double u = (double)(x >> 11) / 9007199254740992.0 - 0.5;
    int sh = (int)((i / 97) % 9) - 4;
    return (float)(u * ((sh >= 0) ? (double)(1 << sh) : 1.0 / (1 << -sh)));
}

/*
 * Check every stride-th element of an all-reduce of n ranks' h_i32 (f = 0,
 * exact mod 2^32) or h_f32 (f = 1, within the float32 bound for a block
 * maximum of amax) data of operation op. @return the elements that are wrong.
 */
static inline int h_check_sum(const void *out, size_t count, size_t stride, int n, uint64_t op,
                              int f, double amax)
{
    int bad = 0;
    for (size_t j = 0; j < count; j += stride) {
        if (f) {
            double exact = 0;
            for (int r = 0; r < n; r++)
                exact += h_f32(r, op, j);
            bad += !(fabs(((const float *)out)[j] - exact) <=
                     ina_float_error_bound(n, amax, exact));
        } else {
            uint32_t exact = 0;
            for (int r = 0; r < n; r++)
                exact += (uint32_t)h_i32(r, op, j);
            bad += ((const uint32_t *)out)[j] != exact;
        }
    }
    return bad;
}

#endif
