/* kv_harness.h: end-to-end helpers for the key-value tests: start ina-ps shards on free ports, fill a kv config. */
#ifndef INA_E2E_KV_HARNESS_H
#define INA_E2E_KV_HARNESS_H

#include "harness.h"

#ifndef INA_PS_BIN
#define INA_PS_BIN "build/bin/ina-ps"
#endif

/* Start ina-ps shard i of n with extra args (NULL-terminated, may be NULL). @return 0 or -1. */
static inline int ps_start(struct sw_proc *sp, int i, int n, const char *const *extra)
{
    snprintf(sp->port_file, sizeof(sp->port_file), "/tmp/ina-test-ps.%d.%d", (int)getpid(), i);
    unlink(sp->port_file);
    char shard[32];
    snprintf(shard, sizeof(shard), "%d/%d", i, n);
    const char *argv[40] = {INA_PS_BIN, "--listen", "127.0.0.1:0", "--port-file", sp->port_file,
                            "--shard", shard, "--quiet"};
    int argc = 8;
    for (int k = 0; extra && extra[k] && argc < 39; k++)
        argv[argc++] = extra[k];
    argv[argc] = NULL;
    fflush(NULL);
    sp->pid = fork();
    if (sp->pid < 0)
        return -1;
    if (sp->pid == 0) {
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

/* "127.0.0.1:P0,127.0.0.1:P1,..." of n shards. */
static inline void ps_addrs(const struct sw_proc *ps, int n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s127.0.0.1:%d", i ? "," : "", ps[i].port);
}

static inline void kv_config(ina_kv_config *c, const char *addrs, const char *job, int r, int n)
{
    ina_kv_config_init(c);
    c->ps_addrs = addrs;
    c->job = job;
    c->rank = r;
    c->world_size = n;
    c->timeout_ms = 20000;
    c->join_timeout_ms = 20000;
}

#endif
