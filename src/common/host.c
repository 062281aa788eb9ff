/* host.c: the cores a process may use and the addresses of this host, for the defaults chosen from the host. */
#include "common/host.h"

#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INA_HOST_MAX_CORES 4096

/* The CPU quota of a cgroup v2 directory (cpu.max: "QUOTA PERIOD" or "max
 * PERIOD"), in whole cores rounded up. @return 0 if none or unreadable. */
static int cgroup_dir_quota(const char *dir)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpu.max", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char quota[32];
    long long period = 0;
    int n = fscanf(f, "%31s %lld", quota, &period);
    fclose(f);
    if (n != 2 || period <= 0 || strcmp(quota, "max") == 0)
        return 0;
    char *end;
    long long q = strtoll(quota, &end, 10);
    if (*end || q <= 0)
        return 0;
    long long cores = (q + period - 1) / period;
    return cores > INA_HOST_MAX_CORES ? INA_HOST_MAX_CORES : (int)cores;
}

/*
 * The smallest cgroup v2 quota on the way from this process's cgroup up to
 * the root (a container's limit may sit on an ancestor). @return 0 if none.
 */
static int cgroup_quota(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[PATH_MAX + 8], dir[PATH_MAX + 8];
    dir[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "0::", 3) == 0) { /* the v2 hierarchy */
            snprintf(dir, sizeof(dir), "%s", line + 3);
            dir[strcspn(dir, "\n")] = '\0';
            break;
        }
    }
    fclose(f);
    int best = 0;
    while (dir[0] == '/') {
        int q = cgroup_dir_quota(dir);
        if (q > 0 && (best == 0 || q < best))
            best = q;
        char *slash = strrchr(dir, '/');
        if (slash == dir)
            break; /* the root has no cpu.max */
        *slash = '\0';
    }
    return best;
}

int ina__host_cores(const char **from)
{
    const char *dummy;
    if (!from)
        from = &dummy;
    const char *env = getenv("INA_AUTO_CORES");
    if (env && *env) {
        char *end;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (!errno && !*end && v >= 1 && v <= INA_HOST_MAX_CORES) {
            *from = "INA_AUTO_CORES";
            return (int)v;
        }
    }
    int cores = 1;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        cores = CPU_COUNT(&set);
    *from = "affinity";
    int quota = cgroup_quota();
    if (quota > 0 && quota < cores) {
        cores = quota;
        *from = "cgroup";
    }
    return cores;
}

int ina__auto_switch_threads(int cores)
{
    int t = cores / 2;
    if (t < 1)
        t = 1;
    return t > INA_AUTO_SWITCH_THREADS_MAX ? INA_AUTO_SWITCH_THREADS_MAX : t;
}

int ina__addr_is_this_host(const struct sockaddr_in *addr)
{
    if ((ntohl(addr->sin_addr.s_addr) >> 24) == 127)
        return 1;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return 0;
    int found = 0;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
                addr->sin_addr.s_addr)
            found = 1;
    freeifaddrs(ifs);
    return found;
}
