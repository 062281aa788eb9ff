/* trace.c: reading and writing trace files (trace.h): a switch's input, to replay it. */
#include <errno.h>
#include <string.h>

#include "common/wire.h"
#include "switch/trace.h"

static const char trace_magic[8] = {'I', 'N', 'A', 'T', 'R', 'A', 'C', 'E'};

static void put64(uint8_t *p, uint64_t v)
{
    ina__put32(p, (uint32_t)(v >> 32));
    ina__put32(p + 4, (uint32_t)v);
}

static uint64_t get64(const uint8_t *p) { return (uint64_t)ina__get32(p) << 32 | ina__get32(p + 4); }

int ina__trace_write_header(FILE *f, const struct ina_trace_header *h)
{
    uint8_t b[INA_TRACE_HDR_LEN];
    memset(b, 0, sizeof(b));
    memcpy(b, trace_magic, 8);
    ina__put32(b + 8, INA_TRACE_VERSION); /* 2: a version-1 reader refuses it rather than
                                            replay a multicast trace as unicast */
    ina__put32(b + 12, INA_TRACE_HDR_LEN);
    put64(b + 16, h->seed);
    memcpy(b + 24, &h->sw.sin_addr.s_addr, 4);
    memcpy(b + 28, &h->sw.sin_port, 2);
    ina__put16(b + 30, (uint16_t)((h->p.int_ops_only ? 1 : 0) | (h->p.bpf_ops_only ? 2 : 0)));
    ina__put32(b + 32, h->p.nslots);
    ina__put32(b + 36, h->p.max_elems);
    ina__put32(b + 40, h->p.max_job_slots);
    ina__put32(b + 44, h->p.min_job_slots);
    put64(b + 48, h->p.join_timeout_ns);
    put64(b + 56, h->p.idle_timeout_ns);
    ina__put32(b + 64, h->p.mcast_base);
    ina__put16(b + 68, h->p.mcast_base ? h->p.mcast_port : 0);
    return fwrite(b, sizeof(b), 1, f) == 1 ? 0 : -EIO;
}

int ina__trace_write(FILE *f, const struct ina_trace_rec *r)
{
    uint8_t b[INA_TRACE_REC_LEN];
    memset(b, 0, sizeof(b));
    put64(b, r->t_ns);
    memcpy(b + 8, &r->src.sin_addr.s_addr, 4);
    memcpy(b + 12, &r->src.sin_port, 2);
    ina__put16(b + 14, r->len);
    b[16] = (uint8_t)r->type;
    if (fwrite(b, sizeof(b), 1, f) != 1 || (r->len && fwrite(r->data, r->len, 1, f) != 1))
        return -EIO;
    return 0;
}

int ina__trace_read_header(FILE *f, struct ina_trace_header *h)
{
    uint8_t b[INA_TRACE_HDR_LEN];
    memset(h, 0, sizeof(*h));
    memset(b, 0, sizeof(b));
    if (fread(b, INA_TRACE_HDR_LEN_V1, 1, f) != 1 || memcmp(b, trace_magic, 8) != 0)
        return -EINVAL;
    /* Version 1: at least 64 bytes, no multicast fields (they read as 0).
     * Version 2: at least 72. Either: the rest skipped. */
    uint32_t version = ina__get32(b + 8), hlen = ina__get32(b + 12);
    if ((version != 1 && version != INA_TRACE_VERSION) || hlen < INA_TRACE_HDR_LEN_V1 ||
        (version == INA_TRACE_VERSION && hlen < INA_TRACE_HDR_LEN))
        return -EINVAL;
    if (version == 1) {
        if (fseek(f, (long)hlen - INA_TRACE_HDR_LEN_V1, SEEK_CUR) != 0)
            return -EINVAL;
    } else if (fread(b + INA_TRACE_HDR_LEN_V1, INA_TRACE_HDR_LEN - INA_TRACE_HDR_LEN_V1, 1, f) != 1 ||
               fseek(f, (long)hlen - INA_TRACE_HDR_LEN, SEEK_CUR) != 0) {
        return -EINVAL;
    }
    h->seed = get64(b + 16);
    h->sw.sin_family = AF_INET;
    memcpy(&h->sw.sin_addr.s_addr, b + 24, 4);
    memcpy(&h->sw.sin_port, b + 28, 2);
    uint16_t flags = ina__get16(b + 30);
    h->p.int_ops_only = flags & 1;
    h->p.bpf_ops_only = (flags >> 1) & 1;
    h->p.nslots = ina__get32(b + 32);
    h->p.max_elems = ina__get32(b + 36);
    h->p.max_job_slots = ina__get32(b + 40);
    h->p.min_job_slots = ina__get32(b + 44);
    h->p.join_timeout_ns = get64(b + 48);
    h->p.idle_timeout_ns = get64(b + 56);
    h->p.mcast_base = ina__get32(b + 64);
    h->p.mcast_port = h->p.mcast_base ? ina__get16(b + 68) : 0;
    h->p.seed = h->seed;
    return 0;
}

int ina__trace_read(FILE *f, struct ina_trace_rec *r, uint8_t *buf, size_t cap)
{
    uint8_t b[INA_TRACE_REC_LEN];
    size_t got = fread(b, 1, sizeof(b), f);
    if (got == 0 && feof(f))
        return 0;
    if (got != sizeof(b))
        return -EINVAL;
    memset(r, 0, sizeof(*r));
    r->t_ns = get64(b);
    r->src.sin_family = AF_INET;
    memcpy(&r->src.sin_addr.s_addr, b + 8, 4);
    memcpy(&r->src.sin_port, b + 12, 2);
    r->len = ina__get16(b + 14);
    r->type = (enum ina_trace_type)b[16];
    if (r->len > cap || (r->len && fread(buf, r->len, 1, f) != 1))
        return -EINVAL;
    r->data = buf;
    return 1;
}
