/* rx_burst.h: one receive burst from a UDP socket, the receive half of udp_gso.h: shared by ina-switch, ina-ps, libina's stream and its host aggregator. */
#ifndef INA_RX_BURST_H
#define INA_RX_BURST_H


/*
 * DPDK's shape: a burst fills an array of datagrams and returns a count. One
 * recvmmsg takes up to nmsgs messages, each of which may be a GRO train of
 * equal-sized datagrams from one sender (udp_gso.h); the burst splits them
 * into datagrams, in arrival order. Every buffer is sized at init: nothing
 * is allocated per burst, and a burst's datagrams stay valid until the next
 * burst on the same context.
 */

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/udp_gso.h"

#define INA_RX_MAX_MSGS 16 /* messages per recvmmsg */
#define INA_RX_MAX_PKTS (INA_RX_MAX_MSGS * INA_GSO_MAX_SEGS) /* datagrams per burst, at most */

/* One datagram of a burst. */
struct ina_rx_pkt {
    const uint8_t *data; /* in the context's buffers (writable by the caller: fault injection) */
    uint32_t len;
    const struct sockaddr_in *src; /* its sender, as recvmmsg reported it */
};

/* A receive context: the descriptors and buffers of one socket's bursts. */
struct ina_rx {
    unsigned nmsgs; /* messages per recvmmsg, 1..INA_RX_MAX_MSGS */
    size_t bufsize; /* bytes per message: INA_GRO_BUF holds a whole GRO train */
    uint8_t *mem;   /* nmsgs * bufsize: the context's own (ina__rx_init) or the caller's */
    int own_mem;
    struct mmsghdr msgs[INA_RX_MAX_MSGS];
    struct iovec iovs[INA_RX_MAX_MSGS];
    struct sockaddr_in src[INA_RX_MAX_MSGS];
    char ctrl[INA_RX_MAX_MSGS][INA_GRO_CTRL_LEN];
    /* Messages a burst dropped: longer than a buffer (the kernel truncated
     * them: never a whole datagram of ours), or not from an IPv4 sender.
     * Counted here, for the caller to read and report. */
    uint64_t truncated;
    /* Messages the last burst took from the socket (recvmmsg's count, the
     * dropped ones included; 0 after an error): nmsgs says more may be queued. */
    unsigned got;
};

/* Allocate nmsgs buffers of bufsize bytes. @return 0, or -EINVAL / -ENOMEM. */
int ina__rx_init(struct ina_rx *rx, unsigned nmsgs, size_t bufsize);
/* The same over the caller's nmsgs * bufsize bytes at mem, which stay the caller's
 * (ina__rx_free leaves them). @return 0, or -EINVAL. */
int ina__rx_init_mem(struct ina_rx *rx, unsigned nmsgs, size_t bufsize, uint8_t *mem);
void ina__rx_free(struct ina_rx *rx);

/*
 * Take what is queued on fd without waiting (MSG_DONTWAIT), split GRO trains,
 * and fill pkts with at most max datagrams (max >= INA_RX_MAX_PKTS takes every
 * datagram of the burst; a smaller max drops the rest of a train, counted in
 * truncated). @return the number of datagrams (0 when a message carried none),
 * or -errno of recvmmsg: -EAGAIN when nothing was queued, -ECONNREFUSED after
 * an ICMP port unreachable on a connected socket.
 */
int ina__rx_burst(struct ina_rx *rx, int fd, struct ina_rx_pkt *pkts, unsigned max);

#endif
