/* clock.h: the monotonic clock, once for every room, tool and test: nanoseconds for timers, seconds for reports. */
#ifndef INA_CLOCK_H
#define INA_CLOCK_H


/*
 * CLOCK_MONOTONIC: deadlines, timers and rates never jump with the time of
 * day. Inline (a vDSO call, no system call): the daemons read it per burst.
 * libina's own clock, ina__now_ns() (lib/internal.h), is a function of its
 * own so that the reply fuzzer can take it over (cmake/fuzz.cmake); the
 * wall-clock time of log lines is log.c's.
 */

#include <stdint.h>
#include <time.h>

/* The monotonic clock in nanoseconds. */
static inline uint64_t ina__clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same in seconds, for durations that a tool prints or compares to a limit. */
static inline double ina__clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
