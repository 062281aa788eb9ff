/* test_busy_poll.c: ina__busy_move_off_cpu() of busy_poll.h, the switch's cure for a worker
 * woken onto the CPU it spins on: it leaves that CPU, and the thread's mask comes back intact. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/busy_poll.h"

static int same_mask(const cpu_set_t *a, const cpu_set_t *b) { return CPU_EQUAL(a, b); }

/* A one-CPU mask leaves nowhere to go: nothing happens, and the mask stays. */
static void test_single_cpu(const cpu_set_t *orig)
{
    int cpu = sched_getcpu();
    CHECK(cpu >= 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    CHECK_EQ_INT(sched_setaffinity(0, sizeof(one), &one), 0);
    CHECK_EQ_INT(ina__busy_move_off_cpu(), 0);
    cpu_set_t now;
    CHECK_EQ_INT(sched_getaffinity(0, sizeof(now), &now), 0);
    CHECK(same_mask(&now, &one));
    CHECK_EQ_INT(sched_getcpu(), cpu);
    CHECK_EQ_INT(sched_setaffinity(0, sizeof(*orig), orig), 0);
}

/* Two CPUs or more: the thread leaves the CPU it was on, and its own mask comes back intact
 * (a library must not change what the application set). */
static void test_move(const cpu_set_t *orig)
{
    int a = -1, b = -1;
    for (int c = 0; c < CPU_SETSIZE && b < 0; c++)
        if (CPU_ISSET(c, orig)) {
            if (a < 0)
                a = c;
            else
                b = c;
        }
    if (b < 0) {
        printf("SKIP [move]: one CPU in this process's mask\n");
        return;
    }
    /* Two CPUs, the thread pinned to the first, then allowed both: the move must take it to
     * the second. The scheduler may also migrate it between our reading of the CPU and the
     * move's own reading, which would make the move look like no move: a few tries. */
    cpu_set_t two, first, now;
    CPU_ZERO(&first);
    CPU_SET(a, &first);
    CPU_ZERO(&two);
    CPU_SET(a, &two);
    CPU_SET(b, &two);
    int before = -1, after = -1, r = 0, moved = 0;
    for (int t = 0; t < 5 && !moved; t++) {
        CHECK_EQ_INT(sched_setaffinity(0, sizeof(first), &first), 0);
        CHECK_EQ_INT(sched_getcpu(), a); /* a one-CPU mask migrates the caller at once */
        CHECK_EQ_INT(sched_setaffinity(0, sizeof(two), &two), 0);
        before = sched_getcpu();
        r = ina__busy_move_off_cpu();
        after = sched_getcpu();
        moved = r == 1 && after != before;
        CHECK_EQ_INT(sched_getaffinity(0, sizeof(now), &now), 0);
        CHECK(same_mask(&now, &two)); /* every time: the mask comes back */
    }
    CHECK_EQ_INT(r, 1);
    CHECK(moved); /* left out of the mask, it had to migrate at once */
    printf("moved from CPU %d to CPU %d, mask restored\n", before, after);
    CHECK_EQ_INT(sched_setaffinity(0, sizeof(*orig), orig), 0);
}

int main(void)
{
    cpu_set_t orig;
    if (sched_getaffinity(0, sizeof(orig), &orig) != 0 ||
        sched_setaffinity(0, sizeof(orig), &orig) != 0) {
        printf("SKIP: this process may not read or set its CPU affinity here\n");
        return 77;
    }
    test_single_cpu(&orig);
    test_move(&orig);
    cpu_set_t end;
    CHECK_EQ_INT(sched_getaffinity(0, sizeof(end), &end), 0);
    CHECK(same_mask(&end, &orig));
    return check_report("test_busy_poll");
}
