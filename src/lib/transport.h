/* transport.h: the ways a stream's datagrams travel, behind one small ops table: the switch's socket, the job's multicast group, the shared-memory rings. */
#ifndef INA_TRANSPORT_H
#define INA_TRANSPORT_H

/*
 * A lane's stream (stream.c) sends and receives through the transports its
 * context has, without knowing which (as the switch's dataplanes sit behind
 * src/switch/dp_ops.h):
 *
 *   ina__udp_ops    the socket connected to the switch (udp.c): always;
 *                   it also carries what the others do not (JOIN, ABORT,
 *                   MIGRATE, a DOORBELL, resent results)
 *   ina__group_ops  the job's multicast group (udp.c, PROTOCOL.md §7.5):
 *                   receives only, when the switch multicasts results
 *   ina__shm_ops    shared-memory rings to a switch on this host (shm.c,
 *                   §5.9): sends and receives in place of the socket
 *
 * A transport adds itself to its context when it starts (udp.c at open,
 * shm.c when the switch takes the rings) and removes itself when it stops.
 * The stream receives from every transport of its context, in `order`, and
 * sends through one: the transport of highest order that sends. Every hook
 * is called once per burst, never per datagram, and may be NULL where it
 * has nothing to do. No hook allocates or takes a lock.
 *
 * Received datagrams go to ina__stream_on_datagram() directly, one call
 * per datagram: the transports sit above the window they deliver into, and
 * the window reaches them only through this table.
 */

#include <poll.h>
#include <stdint.h>
#include <sys/uio.h>

struct ina_ctx;

struct ina_transport_ops {
    const char *name;
    unsigned order; /* receive order, lower first; the sender: the highest that sends */
    /* Send the datagrams iov[order[0]], ..., iov[order[n - 1]]. What does not fit is
     * lost like any datagram: its timer runs. NULL: receives only. */
    void (*send_burst)(struct ina_ctx *ctx, const struct iovec *iov, const unsigned *order,
                       unsigned n);
    /* Receive one burst without waiting, and hand each datagram to
     * ina__stream_on_datagram(). @return how many messages it took (0: none). */
    int (*rx_burst)(struct ina_ctx *ctx, uint64_t now);
    /* Busy polling: 1 if a receive would find something, 0 if not, told without a
     * system call (memory). NULL: cannot tell (a socket). */
    int (*readable)(const struct ina_ctx *ctx);
    /* About to sleep in poll(): arm the peer's wake-up. @return 0 if something is
     * there already (do not sleep). */
    int (*may_sleep)(struct ina_ctx *ctx);
    /* After poll(): disarm it. */
    void (*awake)(struct ina_ctx *ctx);
    /* The descriptor poll() waits on for input, -1 none. */
    int (*poll_fd)(const struct ina_ctx *ctx);
    /* A timer expired (no result came): make a dead peer show itself (-ECONNREFUSED). */
    void (*probe)(struct ina_ctx *ctx);
    /* The session ends and the stream moves to another aggregator (migrate.c): drop
     * what belonged to the session (and remove itself). */
    void (*session_end)(struct ina_ctx *ctx);
};

#define INA_XP_MAX 3

/* A context's transports, in receive order, and the one that sends. */
struct ina_transports {
    const struct ina_transport_ops *rx[INA_XP_MAX];
    unsigned n;
    const struct ina_transport_ops *tx;
};

extern const struct ina_transport_ops ina__udp_ops;
extern const struct ina_transport_ops ina__group_ops;
extern const struct ina_transport_ops ina__shm_ops;

/* transport.c: add t to ctx's transports (once), or remove it. */
void ina__transport_add(struct ina_ctx *ctx, const struct ina_transport_ops *t);
void ina__transport_remove(struct ina_ctx *ctx, const struct ina_transport_ops *t);

/* transport.c: the hooks over every transport of ctx. readable: 1 if one that can
 * tell has input, 0 if none has, -1 if none can tell (sockets only). may_sleep: 0 if
 * one has input. pollfds: fills pfd (room for INA_XP_MAX) and returns how many. */
int ina__transport_readable(const struct ina_ctx *ctx);
int ina__transport_may_sleep(struct ina_ctx *ctx);
void ina__transport_awake(struct ina_ctx *ctx);
int ina__transport_pollfds(const struct ina_ctx *ctx, struct pollfd *pfd);
void ina__transport_session_end(struct ina_ctx *ctx);

/* shm.c: shared-memory rings to a switch on this host (PROTOCOL.md §5.9), a
 * transport (transport.h: ina__shm_ops) while attached. */
int ina__shm_attach(struct ina_ctx *ctx); /* @return 1 attached, 0 stays on UDP */
void ina__shm_detach(struct ina_ctx *ctx);
/* Process what the down ring holds. @return datagrams taken. */
int ina__shm_recv(struct ina_ctx *ctx, uint64_t now);

/* udp.c: the socket (and the group's, if the job has one) start carrying the stream:
 * GRO on (unless INA_NO_GSO), added to ctx's transports. After ina__stream_init. */
void ina__udp_start(struct ina_ctx *ctx);

#endif
