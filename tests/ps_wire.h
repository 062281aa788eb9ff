/* ps_wire.h: what the tests and fuzz_ps send to ina-ps by hand: a PS_JOIN datagram, the header of a job's request. Include after ps/ps.h (or ps/ps.c). */
#ifndef INA_TEST_PS_WIRE_H
#define INA_TEST_PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* The PS_JOIN of rank with parameters j into b (INA_HDR_LEN + INA_PS_JOIN_BODY_LEN bytes).
 * @return its length. */
static inline size_t ps_join_datagram(uint8_t *b, int rank, const struct ina_ps_join *j)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_PS_JOIN);
    h.rank = (uint16_t)rank;
    ina__hdr_encode(b, &h);
    ina__ps_join_encode(b + INA_HDR_LEN, j);
    return INA_HDR_LEN + INA_PS_JOIN_BODY_LEN;
}

/* A request header of kind from rank with job's credentials (id, session, token). */
static inline void ps_job_hdr(struct ina_hdr *h, const struct ina_ps_job *job, uint8_t kind,
                              int rank)
{
    ina__hdr_init(h, kind);
    h->job = job->id;
    h->session = job->session;
    h->token = job->token;
    h->rank = (uint16_t)rank;
}

#endif
