/* txq.c: allocation of the transmit batch; see txq.h. */
#include "engine/txq.h"

#include <stdlib.h>
#include <string.h>

int ina__txq_init(struct ina_txq *q, unsigned maxbuf, size_t bufsize, unsigned maxmsg)
{
    memset(q, 0, sizeof(*q));
    q->maxbuf = maxbuf;
    q->bufsize = bufsize;
    q->maxmsg = maxmsg;
    q->bufmem = malloc(((size_t)maxbuf + 1) * bufsize); /* + the spare */
    q->iovs = calloc(maxmsg, sizeof(*q->iovs));
    q->addrs = calloc(maxmsg, sizeof(*q->addrs));
    if (!q->bufmem || !q->iovs || !q->addrs) {
        ina__txq_free(q);
        return -1;
    }
    return 0;
}

void ina__txq_free(struct ina_txq *q)
{
    free(q->bufmem);
    free(q->iovs);
    free(q->addrs);
    memset(q, 0, sizeof(*q));
}
