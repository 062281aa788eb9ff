/* busy_poll.h: what a bounded spin on a socket needs, shared by libina and ina-switch. */
#ifndef INA_BUSY_POLL_H
#define INA_BUSY_POLL_H


/*
 * Busy polling trades a core for the wake-up of a sleeping process: on this
 * project's VMs a wake-up is an interrupt to another CPU and an exit to the
 * hypervisor, several microseconds on the critical path of a small
 * all-reduce. Worker (INA_BUSY_POLL_US) and switch (--busy-poll US) spin
 * for a bounded time before they sleep, and only when asked. A spin yields
 * its CPU often (INA_BUSY_POLL_YIELD_NS), so that a process it waits for,
 * queued on the same CPU, is not kept off it for the whole spin.
 */

#define INA_BUSY_POLL_MAX_US 1000000 /* bound of INA_BUSY_POLL_US and --busy-poll */

/*
 * The default (INA_BUSY_POLL_US=auto, ina-switch --busy-poll auto): spin
 * when the host has a core for each spinner, shorter when it does not, and
 * not at all when it is badly oversubscribed. `spinners` are the processes
 * (threads) of this job that would spin on this host: a worker counts the
 * job's workers on its host (auto.c, as for lanes) and the switch if it is
 * here; the switch counts its dataplane threads. The budget is
 * INA_AUTO_BUSY_POLL_US while spinners <= cores, else that scaled by
 * cores / spinners (each spinner's share of a core), and 0 (sleep at once)
 * below INA_AUTO_BUSY_POLL_MIN_US. Why these values: on the 2-core VM, N = 4
 * and a switch (5 spinners), worker spins of 10 to 25 us gave the best p50
 * and p99 of a 32 B all-reduce, 50 us a worse p99 (the spinners keep each
 * other off the 2 cores longer); with a core each, 50 us covers a round
 * trip of a small operation several times over (docs/GLM.md, "Busy polling").
 */
#define INA_BUSY_POLL_AUTO (-1)     /* ina.h's INA_BUSY_POLL_AUTO: choose from the host */
#define INA_AUTO_BUSY_POLL_US 50
#define INA_AUTO_BUSY_POLL_MIN_US 5

/* The auto budget in microseconds for `spinners` spinning on `cores` cores (both >= 1). */
int ina__busy_poll_auto_us(int cores, int spinners);

/*
 * A spinner gives up its CPU (sched_yield) after every INA_BUSY_POLL_YIELD_NS
 * of spinning. The peer it waits for may be queued on the same CPU: on a
 * host with fewer cores than spinners, and even with a core to spare, since
 * a datagram or a doorbell wakes its reader with a "sync" wake-up, which the
 * scheduler may place on the waker's CPU (the waker is expected to sleep;
 * a spinner does not), and nothing moves the pair apart afterwards. Without
 * the yield each hop then costs the spinner's whole budget: a round trip at
 * N = 1 with 100 us spins took 214 us instead of 1 to 2 us (the 2-core VM;
 * 250 us at N = 4). With it the queued peer runs within a microsecond or
 * two (8 us a round trip on one shared CPU). Alone on its CPU, a yield is
 * one system call (about 0.5 us on the project's VMs) that returns at once.
 * The switch also moves itself off a CPU it keeps sharing (below).
 */
#define INA_BUSY_POLL_YIELD_NS 1000u

/* One turn of a spin loop: tell the CPU (and a hyperthread sibling) we wait. */
static inline void ina__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Let another task queued on this CPU run (see INA_BUSY_POLL_YIELD_NS). */
void ina__busy_yield(void);

/*
 * Yields keep a spinner and the peer it shares a CPU with going, but not
 * fast (a context switch each hop), and the scheduler does not part them:
 * each of the two has always run a moment ago, too recently ("cache hot")
 * for the load balancer to move it to an idle core. A spinner whose yields
 * keep giving the CPU away (INA_BUSY_POLL_SHARED_YIELDS in a row, each
 * taking longer than INA_BUSY_POLL_SHARED_NS) moves itself off its CPU with
 * ina__busy_move_off_cpu(), at most once per INA_BUSY_POLL_MOVE_EVERY_NS.
 */
#define INA_BUSY_POLL_SHARED_NS 2500u
#define INA_BUSY_POLL_SHARED_YIELDS 8
#define INA_BUSY_POLL_MOVE_EVERY_NS 10000000ull /* 10 ms */

/*
 * On a crowded CPU, yield every turn. A yield that gave the CPU away for
 * longer than INA_BUSY_POLL_SHARED_NS says that others are queued
 * on it, among them, likely, the peer we wait for (at N = 4 on the 2-core
 * VM, 4 workers and a switch all spin): then the next turn yields again
 * instead of spinning another microsecond, as OpenMPI's progress loop does
 * when oversubscribed. A 32 B all-reduce at N = 4 there went from 16 to 18
 * us at p50 to 9 to 12 us (interleaved runs, load 6). A yield that returns
 * at once (nobody queued) restores the microsecond between yields, so a
 * spinner with a core to itself does not spend its spin in system calls.
 * @return the spin between yields after a yield that took took_ns.
 */
static inline unsigned ina__busy_yield_every(unsigned long long took_ns)
{
    return took_ns > INA_BUSY_POLL_SHARED_NS ? 0u : INA_BUSY_POLL_YIELD_NS;
}

/*
 * Move the calling thread to another CPU of its affinity mask: leave the
 * CPU it runs on out of the mask, which migrates it at once, then restore
 * the mask (which leaves it where it is). Nothing happens when the mask has
 * a single CPU.
 * @return 1 if moved, 0 if there was nowhere to go, or -errno.
 */
int ina__busy_move_off_cpu(void);

/*
 * Ask the kernel to busy-poll the device queue for us microseconds in a
 * blocking receive or poll() on fd (SO_BUSY_POLL). It helps only on a NIC
 * whose driver uses NAPI; loopback and veth have no queue to poll, so there
 * it changes nothing. Best effort: raising it above net.core.busy_read
 * needs CAP_NET_ADMIN, and a refusal is not an error.
 * @return 0 if the kernel took it, else -errno.
 */
int ina__sock_busy_poll(int fd, int us);

#endif
