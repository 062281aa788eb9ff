/* rx_burst.c: one receive burst from a UDP socket; see rx_burst.h. */
#include "common/rx_burst.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ina__rx_init_mem(struct ina_rx *rx, unsigned nmsgs, size_t bufsize, uint8_t *mem)
{
    memset(rx, 0, sizeof(*rx));
    if (nmsgs == 0 || nmsgs > INA_RX_MAX_MSGS || bufsize == 0 || !mem)
        return -EINVAL;
    rx->mem = mem;
    rx->nmsgs = nmsgs;
    rx->bufsize = bufsize;
    return 0;
}

int ina__rx_init(struct ina_rx *rx, unsigned nmsgs, size_t bufsize)
{
    memset(rx, 0, sizeof(*rx));
    if (nmsgs == 0 || nmsgs > INA_RX_MAX_MSGS || bufsize == 0)
        return -EINVAL;
    uint8_t *mem = malloc((size_t)nmsgs * bufsize);
    if (!mem)
        return -ENOMEM;
    ina__rx_init_mem(rx, nmsgs, bufsize, mem);
    rx->own_mem = 1;
    return 0;
}

void ina__rx_free(struct ina_rx *rx)
{
    if (rx->own_mem)
        free(rx->mem);
    rx->mem = NULL;
    rx->own_mem = 0;
    rx->nmsgs = 0;
}

/* recvmmsg writes the lengths and flags back: every field is set again per burst. */
static void rx_arm(struct ina_rx *rx)
{
    for (unsigned i = 0; i < rx->nmsgs; i++) {
        rx->iovs[i].iov_base = rx->mem + (size_t)i * rx->bufsize;
        rx->iovs[i].iov_len = rx->bufsize;
        rx->msgs[i].msg_hdr = (struct msghdr){.msg_name = &rx->src[i],
                                              .msg_namelen = sizeof(rx->src[i]),
                                              .msg_iov = &rx->iovs[i],
                                              .msg_iovlen = 1,
                                              .msg_control = rx->ctrl[i],
                                              .msg_controllen = INA_GRO_CTRL_LEN};
        rx->msgs[i].msg_len = 0;
    }
}

int ina__rx_burst(struct ina_rx *rx, int fd, struct ina_rx_pkt *pkts, unsigned max)
{
    rx_arm(rx);
    int n = recvmmsg(fd, rx->msgs, rx->nmsgs, MSG_DONTWAIT, NULL);
    rx->got = n > 0 ? (unsigned)n : 0;
    if (n < 0)
        return -errno;
    unsigned npkts = 0;
    for (int i = 0; i < n; i++) {
        const struct msghdr *mh = &rx->msgs[i].msg_hdr;
        if (mh->msg_namelen != sizeof(struct sockaddr_in) || (mh->msg_flags & MSG_TRUNC)) {
            rx->truncated++; /* not IPv4, or more than a buffer: not a datagram of ours */
            continue;
        }
        size_t len = rx->msgs[i].msg_len, seg = ina__gro_segment_size(mh, len);
        const uint8_t *p = rx->iovs[i].iov_base;
        for (size_t off = 0; off < len; off += seg) {
            if (npkts == max) {
                rx->truncated++; /* the caller's array is full: the rest of the train is lost */
                break;
            }
            pkts[npkts].data = p + off;
            pkts[npkts].len = (uint32_t)(len - off < seg ? len - off : seg);
            pkts[npkts].src = &rx->src[i];
            npkts++;
        }
    }
    return (int)npkts;
}
