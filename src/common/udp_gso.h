/* udp_gso.h: UDP GSO/GRO batching shared by ina-switch and libina: many datagrams per kernel crossing. */
#ifndef INA_UDP_GSO_H
#define INA_UDP_GSO_H


/*
 * Why: on these hosts each datagram crossing the kernel costs 3-6 us, and
 * that, not arithmetic, bounds throughput. With UDP_SEGMENT (GSO) one
 * sendmsg carries up to 64 equal-sized datagrams to one destination; with
 * UDP_GRO the receiver gets such a train back in one recvmsg, with the
 * segment size in a control message. The protocol fits: a worker streams
 * equal-sized packets to the switch, and the switch answers each worker with
 * a train of equal-sized results.
 *
 * The batch builder below packs a list of datagrams, in order, into
 * messages: consecutive datagrams to the same destination and of the same
 * size share a message; a shorter one may end it (GSO allows a short last
 * segment). Callers that interleave destinations sort by destination first.
 * All memory is sized at init; nothing is allocated per packet.
 */

#include <netinet/in.h>
#include <netinet/udp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Older headers lack these (values from linux/udp.h). */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define INA_GSO_MAX_SEGS 64       /* kernel UDP_MAX_SEGMENTS */
#define INA_GSO_MAX_BYTES 65000   /* one GSO message must fit an IP datagram */
#define INA_GRO_BUF 65536         /* a receive buffer that holds a whole GRO train */

struct ina_gso_batch {
    unsigned max_msgs, max_iovs;
    unsigned nmsgs, niovs;
    struct mmsghdr *msgs;
    struct iovec *iovs;
    char *ctrl; /* max_msgs * INA_GSO_CTRL_LEN */
    /* the message being filled */
    const struct sockaddr_in *cur_dst;
    size_t cur_seg, cur_bytes;
    unsigned cur_segs;
    int cur_closed;
    int gso_off; /* 1: build one datagram per message (no GSO) */
};

/* Enable UDP_GRO on a socket. @return 0, or -errno (then datagrams arrive one by one). */
int ina__udp_enable_gro(int fd);

/* Segment size of a received message: the UDP_GRO cmsg if present, else len. */
size_t ina__gro_segment_size(const struct msghdr *mh, size_t len);

/* Space for the control buffer of a receive msghdr that may carry UDP_GRO. */
#define INA_GRO_CTRL_LEN 64

int ina__gso_batch_init(struct ina_gso_batch *b, unsigned max_msgs, unsigned max_iovs);
void ina__gso_batch_free(struct ina_gso_batch *b);
void ina__gso_batch_reset(struct ina_gso_batch *b);

/* Room for one more datagram (the caller flushes otherwise). */
static inline int ina__gso_batch_room(const struct ina_gso_batch *b)
{
    return b->nmsgs < b->max_msgs && b->niovs < b->max_iovs;
}

/*
 * Append one datagram (buf, len) for dst (NULL on a connected socket; the
 * pointed-to address must stay valid until the flush). Caller checked room.
 */
void ina__gso_batch_add(struct ina_gso_batch *b, const void *buf, size_t len,
                       const struct sockaddr_in *dst);

/*
 * Send every message with sendmmsg. A message the kernel refuses as GSO
 * (EIO/EINVAL: no segmentation offload on the path) is resent as single
 * datagrams and GSO is switched off for this batch object.
 * @return datagrams handed to the kernel; *errors counts those lost.
 */
unsigned ina__gso_batch_send(struct ina_gso_batch *b, int fd, uint64_t *errors);

#endif
