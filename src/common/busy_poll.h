/* busy_poll.h: what a bounded spin on a socket needs, shared by libina and ina-switch. */
#ifndef INA_BUSY_POLL_H
#define INA_BUSY_POLL_H

/*
 * Busy polling trades a core for the wake-up of a sleeping process: on this
 * project's VMs a wake-up is an interrupt to another CPU and an exit to the
 * hypervisor, several microseconds on the critical path of a small
 * all-reduce. Worker (INA_BUSY_POLL_US) and switch (--busy-poll US) spin
 * for a bounded time before they sleep, and only when asked: on a host with
 * fewer cores than spinning processes the spin takes the CPU the others
 * need, and every operation gets slower (docs/GLM.md, "Busy polling").
 */

#define INA_BUSY_POLL_MAX_US 1000000 /* bound of INA_BUSY_POLL_US and --busy-poll */

/* One turn of a spin loop: tell the CPU (and a hyperthread sibling) we wait. */
static inline void ina_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/*
 * Ask the kernel to busy-poll the device queue for us microseconds in a
 * blocking receive or poll() on fd (SO_BUSY_POLL). It helps only on a NIC
 * whose driver uses NAPI; loopback and veth have no queue to poll, so there
 * it changes nothing. Best effort: raising it above net.core.busy_read
 * needs CAP_NET_ADMIN, and a refusal is not an error.
 * @return 0 if the kernel took it, else -errno.
 */
int ina_sock_busy_poll(int fd, int us);

#endif
