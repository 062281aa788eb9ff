/* host.h: what this host offers a process (its usable cores, its own addresses), for the
 * defaults that ina-switch and libina choose from the host (docs/PYTHON.md, README). */
#ifndef INA_HOST_H
#define INA_HOST_H


#include <netinet/in.h>

/*
 * The cores this process may run on: the CPUs of its affinity mask
 * (sched_getaffinity), capped by a cgroup v2 CPU quota (cpu.max, rounded
 * up) when one is set. INA_AUTO_CORES=N (1..4096) in the environment
 * replaces the measurement: to predict what the defaults would pick on
 * another host, and for tests. *from (may be NULL) gets "affinity",
 * "cgroup" or "INA_AUTO_CORES". @return at least 1.
 */
int ina__host_cores(const char **from);

/* ina-switch --threads auto: dataplane threads for a switch that may use
 * `cores` cores: half of them (the workers of a job on the same host need
 * the rest), at least 1 and at most INA_AUTO_SWITCH_THREADS_MAX. */
#define INA_AUTO_SWITCH_THREADS_MAX 8
int ina__auto_switch_threads(int cores);

/* 1 if addr is an IPv4 address of this host in this network namespace:
 * 127.0.0.0/8, or the address of one of its interfaces (getifaddrs). */
int ina__addr_is_this_host(const struct sockaddr_in *addr);

#endif
