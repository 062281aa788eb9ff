/* txq.h: the switch's transmit batch: datagram buffers plus (buffer, destination) pairs. */
#ifndef INA_SW_TXQ_H
#define INA_SW_TXQ_H

/*
 * The dataplane never sends: it builds each outgoing datagram once into a
 * buffer of this queue and pushes one entry per destination, so a result
 * multicast to N workers costs one copy and N iovecs pointing at the same
 * bytes. The I/O loop flushes the queue at the end of every receive burst
 * (or earlier when the queue is full), packing each destination's datagrams
 * into UDP GSO messages (main.c, udp_gso.h). All memory is sized at start;
 * nothing is allocated per packet.
 */

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ina_txq {
    unsigned nbuf, maxbuf;
    uint64_t overflows; /* datagrams lost to a full queue (a caller that did not flush) */
    size_t bufsize;
    uint8_t *bufmem;
    unsigned nmsg, maxmsg;
    struct iovec *iovs;
    struct sockaddr_in *addrs;
};

int ina__txq_init(struct ina_txq *q, unsigned maxbuf, size_t bufsize, unsigned maxmsg);
void ina__txq_free(struct ina_txq *q);

/* True if one more datagram to ndest destinations fits without a flush. */
static inline int ina__txq_room(const struct ina_txq *q, unsigned ndest)
{
    return q->nbuf < q->maxbuf && q->nmsg + ndest <= q->maxmsg;
}

/* The spare buffer past the last one: what a full queue hands out. */
static inline uint8_t *ina__txq_spare(const struct ina_txq *q)
{
    return q->bufmem + (size_t)q->maxbuf * q->bufsize;
}

/*
 * Next free buffer (bufsize bytes). The caller must have checked
 * ina__txq_room() (or flushed). If it did not, the queue is not overrun:
 * it hands out its spare buffer, and ina__txq_push() drops what is built
 * there, counted in overflows; a lost datagram is recovered by the
 * protocol like any lost datagram, where memory corruption would not be.
 */
static inline uint8_t *ina__txq_buf(struct ina_txq *q)
{
    if (q->nbuf >= q->maxbuf) {
        q->overflows++;
        return ina__txq_spare(q);
    }
    return q->bufmem + (size_t)q->nbuf++ * q->bufsize;
}

/* Queue buf (len bytes, from ina__txq_buf) for destination dst. */
static inline void ina__txq_push(struct ina_txq *q, const uint8_t *buf, size_t len,
                                const struct sockaddr_in *dst)
{
    if (q->nmsg >= q->maxmsg || buf == ina__txq_spare(q)) {
        q->overflows++;
        return;
    }
    unsigned i = q->nmsg++;
    q->addrs[i] = *dst;
    q->iovs[i].iov_base = (void *)buf;
    q->iovs[i].iov_len = len;
}

static inline void ina__txq_reset(struct ina_txq *q) { q->nbuf = q->nmsg = 0; }

#endif
