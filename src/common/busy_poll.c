/* busy_poll.c: SO_BUSY_POLL on a socket, best effort (busy_poll.h). */
#include <errno.h>
#include <sched.h>
#include <sys/socket.h>

#include "common/busy_poll.h"

#ifndef SO_BUSY_POLL
#define SO_BUSY_POLL 46 /* linux/socket.h, since Linux 3.11 */
#endif

int ina__sock_busy_poll(int fd, int us)
{
    if (us <= 0)
        return 0;
    return setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) == 0 ? 0 : -errno;
}

int ina__busy_poll_auto_us(int cores, int spinners)
{
    if (cores < 1)
        cores = 1;
    if (spinners <= cores)
        return INA_AUTO_BUSY_POLL_US;
    int us = (int)((long)INA_AUTO_BUSY_POLL_US * cores / spinners);
    return us < INA_AUTO_BUSY_POLL_MIN_US ? 0 : us;
}

void ina__busy_yield(void)
{
    sched_yield(); /* cannot fail on Linux */
}

int ina__busy_move_off_cpu(void)
{
    cpu_set_t mask, others;
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
        return -errno;
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mask) || CPU_COUNT(&mask) < 2)
        return 0;
    others = mask;
    CPU_CLR(cpu, &others);
    if (sched_setaffinity(0, sizeof(others), &others) != 0)
        return -errno;
    if (sched_setaffinity(0, sizeof(mask), &mask) != 0)
        return -errno;
    return 1;
}
