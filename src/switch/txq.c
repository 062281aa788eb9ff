/* txq.c: allocation of the transmit batch; see txq.h. */
#include "switch/txq.h"

#include <stdlib.h>
#include <string.h>

int ina_txq_init(struct ina_txq *q, unsigned maxbuf, size_t bufsize, unsigned maxmsg)
{
    memset(q, 0, sizeof(*q));
    q->maxbuf = maxbuf;
    q->bufsize = bufsize;
    q->maxmsg = maxmsg;
    q->bufmem = malloc((size_t)maxbuf * bufsize);
    q->msgs = calloc(maxmsg, sizeof(*q->msgs));
    q->iovs = calloc(maxmsg, sizeof(*q->iovs));
    q->addrs = calloc(maxmsg, sizeof(*q->addrs));
    if (!q->bufmem || !q->msgs || !q->iovs || !q->addrs) {
        ina_txq_free(q);
        return -1;
    }
    for (unsigned i = 0; i < maxmsg; i++) {
        q->msgs[i].msg_hdr.msg_name = &q->addrs[i];
        q->msgs[i].msg_hdr.msg_namelen = sizeof(q->addrs[i]);
        q->msgs[i].msg_hdr.msg_iov = &q->iovs[i];
        q->msgs[i].msg_hdr.msg_iovlen = 1;
    }
    return 0;
}

void ina_txq_free(struct ina_txq *q)
{
    free(q->bufmem);
    free(q->msgs);
    free(q->iovs);
    free(q->addrs);
    memset(q, 0, sizeof(*q));
}
