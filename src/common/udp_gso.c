/* udp_gso.c: UDP GSO send batching and GRO receive helpers; see udp_gso.h. */
#include "common/udp_gso.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>


#define INA_GSO_CTRL_LEN CMSG_SPACE(sizeof(uint16_t))

int ina__udp_enable_gro(int fd)
{
    int one = 1;
    return setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0 ? 0 : -errno;
}

size_t ina__gro_segment_size(const struct msghdr *mh, size_t len)
{
    if (mh->msg_controllen == 0)
        return len;
    for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)mh); c;
         c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int seg;
            memcpy(&seg, CMSG_DATA(c), sizeof(seg));
            return seg > 0 ? (size_t)seg : len;
        }
    }
    return len;
}

int ina__gso_batch_init(struct ina_gso_batch *b, unsigned max_msgs, unsigned max_iovs)
{
    memset(b, 0, sizeof(*b));
    b->max_msgs = max_msgs;
    b->max_iovs = max_iovs;
    b->msgs = calloc(max_msgs, sizeof(*b->msgs));
    b->iovs = calloc(max_iovs, sizeof(*b->iovs));
    b->ctrl = calloc(max_msgs, INA_GSO_CTRL_LEN);
    if (!b->msgs || !b->iovs || !b->ctrl) {
        ina__gso_batch_free(b);
        return -ENOMEM;
    }
    return 0;
}

void ina__gso_batch_free(struct ina_gso_batch *b)
{
    free(b->msgs);
    free(b->iovs);
    free(b->ctrl);
    b->msgs = NULL;
    b->iovs = NULL;
    b->ctrl = NULL;
}

void ina__gso_batch_reset(struct ina_gso_batch *b)
{
    b->nmsgs = b->niovs = 0;
    b->cur_dst = NULL;
    b->cur_segs = 0;
}

/* Give the current message its UDP_SEGMENT cmsg if it holds several segments. */
static void close_msg(struct ina_gso_batch *b)
{
    if (b->nmsgs == 0 || b->cur_segs == 0)
        return;
    struct msghdr *mh = &b->msgs[b->nmsgs - 1].msg_hdr;
    if (b->cur_segs > 1) {
        char *ctrl = b->ctrl + (size_t)(b->nmsgs - 1) * INA_GSO_CTRL_LEN;
        memset(ctrl, 0, INA_GSO_CTRL_LEN);
        mh->msg_control = ctrl;
        mh->msg_controllen = INA_GSO_CTRL_LEN;
        struct cmsghdr *c = CMSG_FIRSTHDR(mh);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = (uint16_t)b->cur_seg;
        memcpy(CMSG_DATA(c), &seg, sizeof(seg));
    }
    b->cur_segs = 0;
}

static int same_dst(const struct sockaddr_in *a, const struct sockaddr_in *c)
{
    if (!a || !c)
        return a == c;
    return a->sin_addr.s_addr == c->sin_addr.s_addr && a->sin_port == c->sin_port;
}

void ina__gso_batch_add(struct ina_gso_batch *b, const void *buf, size_t len,
                       const struct sockaddr_in *dst)
{
    int extend = !b->gso_off && b->cur_segs > 0 && !b->cur_closed && same_dst(b->cur_dst, dst) &&
                 len <= b->cur_seg && b->cur_segs < INA_GSO_MAX_SEGS &&
                 b->cur_bytes + len <= INA_GSO_MAX_BYTES && len > 0;
    if (!extend) {
        close_msg(b);
        struct msghdr *mh = &b->msgs[b->nmsgs++].msg_hdr;
        memset(mh, 0, sizeof(*mh));
        mh->msg_name = (void *)dst;
        mh->msg_namelen = dst ? sizeof(*dst) : 0;
        mh->msg_iov = &b->iovs[b->niovs];
        b->cur_dst = dst;
        b->cur_seg = len;
        b->cur_bytes = 0;
        b->cur_closed = 0;
    }
    struct msghdr *mh = &b->msgs[b->nmsgs - 1].msg_hdr;
    b->iovs[b->niovs].iov_base = (void *)buf;
    b->iovs[b->niovs].iov_len = len;
    b->niovs++;
    mh->msg_iovlen++;
    b->cur_segs++;
    b->cur_bytes += len;
    if (len < b->cur_seg)
        b->cur_closed = 1; /* a short segment can only be the last */
}

/* Resend a refused GSO message as one datagram per iovec. */
static unsigned send_unbatched(int fd, struct msghdr *mh, uint64_t *errors)
{
    unsigned sent = 0;
    for (size_t i = 0; i < mh->msg_iovlen; i++) {
        struct msghdr one = {.msg_name = mh->msg_name,
                             .msg_namelen = mh->msg_namelen,
                             .msg_iov = &mh->msg_iov[i],
                             .msg_iovlen = 1};
        if (sendmsg(fd, &one, 0) < 0)
            (*errors)++;
        else
            sent++;
    }
    return sent;
}

unsigned ina__gso_batch_send(struct ina_gso_batch *b, int fd, uint64_t *errors)
{
    close_msg(b);
    unsigned done = 0, sent = 0;
    while (done < b->nmsgs) {
        int n = sendmmsg(fd, b->msgs + done, b->nmsgs - done, 0);
        if (n > 0) {
            for (int i = 0; i < n; i++)
                sent += (unsigned)b->msgs[done + (unsigned)i].msg_hdr.msg_iovlen;
            done += (unsigned)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        struct msghdr *mh = &b->msgs[done].msg_hdr;
        if ((errno == EIO || errno == EINVAL || errno == EOPNOTSUPP || errno == EMSGSIZE) &&
            mh->msg_controllen) {
            /* The path cannot segment, or a segment is longer than its MTU (EMSGSIZE:
             * the kernel fragments a datagram sent alone, never a GSO segment): send
             * these one by one and stop batching. */
            b->gso_off = 1;
            sent += send_unbatched(fd, mh, errors);
        } else {
            /* Refused (no listener) or buffer full: these datagrams are lost,
             * like any other loss; retransmission recovers them. */
            *errors += mh->msg_iovlen;
        }
        done++;
    }
    ina__gso_batch_reset(b);
    return sent;
}
