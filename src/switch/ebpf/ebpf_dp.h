/* ebpf_dp.h: ina-switch --dataplane ebpf: load the slot-rule program, attach it to an interface, serve the control plane. */
#ifndef INA_EBPF_DP_H
#define INA_EBPF_DP_H

/*
 * The switch's slot rules run in the kernel (ina_dp.bpf.c, at TC ingress
 * of one interface); this process keeps the control plane (control.c) and
 * mirrors its job table into the program's maps through the hooks of
 * dp_ops.h. docs/EBPF.md describes the design, its limits and its setup.
 *
 * Built with clang, libbpf and bpftool (ebpf_dp.c); without them the same
 * API is ebpf_none.c, whose ina__ebpf_open() fails saying so.
 */

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

struct ina_ebpf;
struct ina_switch;

/* The largest k the program serves (its slot sets are fixed arrays): the
 * switch caps --max-elems to it. */
#define INA_EBPF_MAX_ELEMS 2048

struct ina_ebpf_opts {
    /* Attach to this interface. NULL: load only, attach nothing (tests run
     * the program by BPF_PROG_TEST_RUN); results then leave by ifindex. */
    const char *iface;
    int ifindex;
    struct sockaddr_in addr; /* the switch's bound address and port (0.0.0.0: any on iface) */
    int sock_fd;             /* the switch's socket: sends what fed-back DATA produced */
    uint32_t nslots;         /* the slot pool (the control plane's --slots) */
    /* iface is lo: turn its UDP segmentation offload off while the switch
     * runs (so GSO trains reach the program as datagrams), restored at exit. */
    int lo_gso_off;
    /* The switch sends finished sums to groups (--multicast): refused on a
     * loopback interface, whose input path drops multicast from a loopback
     * source (the program's results are input there, not a socket's). */
    int multicast;
};

/* 1 if this build has the eBPF dataplane; else 0, with the reason in err. */
int ina__ebpf_built(char *err, size_t errlen);
/* Load the program, configure and attach it.
 * @return 0, or a negative errno with a one-line explanation in err. */
int ina__ebpf_open(struct ina_ebpf **out, const struct ina_ebpf_opts *o, char *err, size_t errlen);
/* The largest k (int32 values per packet) whose DATA, and so whose RESULT,
 * fits the interface's MTU in one IPv4 datagram; 0 if the MTU is unknown.
 * The program aggregates only datagrams it sees whole, and sends results at
 * the link layer, where nothing fragments them: a larger k would reach it
 * in fragments (fed back only up to about 3.5 KiB) and its results would
 * not leave. */
uint32_t ina__ebpf_mtu_elems(const struct ina_ebpf *e);
/* Make e the dataplane of sw (sw->dp), a switch without jobs yet: from now
 * on sw's jobs are mirrored, and the program's counters fold into sw's. */
void ina__ebpf_bind(struct ina_ebpf *e, struct ina_switch *sw);
/* A descriptor that becomes readable when the program has events (poll it
 * with the socket), or -1. */
int ina__ebpf_event_fd(const struct ina_ebpf *e);
/* Act on the program's events: a MISMATCH aborts its job (ABORT queued to
 * every rank). Stops early when sw's transmit queue is full: flush, call
 * again. @return events handled, 0 if none waited. */
int ina__ebpf_poll(struct ina_ebpf *e);
/* One line per counter that the exit report of sw->c does not carry. */
void ina__ebpf_report(const struct ina_ebpf *e, FILE *f);
/* Detach and unload; restores what open changed on the interface. NULL is
 * fine. The switch it served must not call its hooks after this (main.c
 * frees that switch next). */
void ina__ebpf_close(struct ina_ebpf *e);

/* Tests: run the program once on an Ethernet frame as if it arrived on the
 * interface. out (outcap bytes) receives the frame as the program left it.
 * @return 0 or a negative errno; *retval is the program's TC verdict. */
int ina__ebpf_test_run(struct ina_ebpf *e, const void *frame, uint32_t len, void *out,
                      uint32_t *outlen, int *retval);

#endif
