/* port_guard.h: the sockets that make a UDP address:port one's own on this host: a --multicast switch's, and its workers' (PROTOCOL.md §4.1). */
#ifndef INA_PORT_GUARD_H
#define INA_PORT_GUARD_H


/*
 * A worker takes a RESULT from the job's group only if it comes from the
 * switch's address and port (§7.5). That check means something only if no
 * other local user can send from that port. Binding the listen address:port
 * exclusively is not enough: Linux lets any user bind the same port on
 * another address (another local address, a multicast address, or any
 * address with IP_FREEBIND), and a datagram sent from a socket bound to a
 * multicast address takes the outgoing interface's address as its source,
 * which is the switch's. So a --multicast switch also holds its port on the
 * wildcard address (the guard): every bind of that port by another user then
 * fails. The guard and the listen socket share the port with SO_REUSEPORT,
 * which the kernel grants only to sockets of the same effective uid (and a
 * datagram goes to the socket whose address matches best: the listen one).
 * The group's port cannot be the guarded one (workers must bind it), so the
 * switch names another in its JOIN_ACK and keeps it reserved itself.
 * The group shows the job's token, so the switch's check of a rank's source
 * address:port needs the same: a worker of such a job guards its own port
 * (libina net.c).
 */

#include <netinet/in.h>
#include <stdint.h>

/* The socket that will share its port with the guard (before or after its bind). @return 0 or -errno. */
int ina__mcast_listen_opts(int fd);

/* After bind(): no other socket is bound to exactly addr (the listen socket
 * took SO_REUSEPORT, which would let a second switch of this user share it
 * silently). @return 0, or -EADDRINUSE; 0 if /proc/net/udp cannot be read. */
int ina__mcast_port_exclusive(int fd, const struct sockaddr_in *addr);

/* The guard of port: a socket bound to 0.0.0.0:port, sharing it (SO_REUSEPORT)
 * with the caller's socket on that port, which must have SO_REUSEPORT too
 * (ina__mcast_listen_opts, before or after its bind). It is never read.
 * @return its fd, or -errno (-EADDRINUSE: another user's socket holds the
 * port on some address). */
int ina__mcast_guard_open(uint16_t port);

/* Reserve the groups' port: 0.0.0.0:port with SO_REUSEADDR, so that workers
 * (which bind group:port with it) may share it and an exclusive bind may not.
 * @return its fd, or -errno. */
int ina__mcast_group_port_open(uint16_t port);

#endif /* INA_PORT_GUARD_H */
