/* input.c: the engine's entry point: each datagram to the control plane (control.c) or, once its job's checks pass, to the slot rules (dataplane.c). */
#include "common/mac.h"
#include "engine/internal.h"

void ina__switch_input_ring(struct ina_switch *sw, struct ina_job *job, int r,
                           const uint8_t *buf, size_t len, uint64_t now_ns)
{
    struct sockaddr_in src = job->members[r].addr;
    job->members[r].shm_live = 1;
    sw->c.shm_rx_packets++;
    ina__switch_input(sw, buf, len, &src, now_ns);
}

/* A datagram the in-kernel dataplane would have taken: header of a DATA. */
static int is_data(const uint8_t *buf, size_t len)
{
    return len >= INA_HDR_LEN && ina__get16(buf) == INA_WIRE_MAGIC && buf[2] == INA_WIRE_VERSION &&
           buf[3] == INA_K_DATA;
}

void ina__switch_input(struct ina_switch *sw, const uint8_t *buf, size_t len,
                      const struct sockaddr_in *src, uint64_t now_ns)
{
    /* Another dataplane keeps the slots: DATA that still reached the socket
     * goes to it (dp_ops.h); it hands back only what the control plane answers. */
    if (sw->dp && is_data(buf, len) && sw->dp->data(sw->dp_ctx, sw, buf, len, src))
        return;
    struct ina_hdr h;
    sw->c.rx_packets++;
    sw->c.rx_bytes += len;
    /* --integrity: DATA ends with its tag (§4.6), checked once the job is
     * known; the checks before see the datagram without it. */
    const int tagged = sw->p.integrity && len >= INA_HDR_LEN &&
                       (buf[3] == INA_K_DATA || buf[3] == INA_K_HOT_DATA);
    const int no_room = tagged && len < INA_HDR_LEN + INA_MAC_LEN; /* LENGTH, after magic, version */
    const size_t tagged_len = len;
    if (tagged && !no_room)
        len -= INA_MAC_LEN;
    int perr = ina__hdr_decode(buf, len, &h);
    if (perr == INA_PARSE_OK && no_room)
        perr = INA_PARSE_LENGTH;
    switch (perr) {
    case INA_PARSE_OK: break;
    case INA_PARSE_SHORT: return ina__drop(sw, INA_DROP_SHORT);
    case INA_PARSE_MAGIC: return ina__drop(sw, INA_DROP_MAGIC);
    case INA_PARSE_VERSION:
        /* A JOIN from another version deserves an answer, not silence. */
        if (h.kind == INA_K_JOIN)
            ina__ctl_input(sw, &h, buf + INA_HDR_LEN, len - INA_HDR_LEN, src, now_ns);
        return ina__drop(sw, INA_DROP_VERSION);
    default: return ina__drop(sw, INA_DROP_LENGTH);
    }

    if (h.kind != INA_K_DATA && h.kind != INA_K_HOT_DATA) {
        ina__ctl_input(sw, &h, buf + INA_HDR_LEN, len - INA_HDR_LEN, src, now_ns);
        return;
    }

    struct ina_job *job = ina__job_by_id(sw, h.job);
    if (!job || job->state != INA_JOB_ACTIVE)
        return ina__drop(sw, INA_DROP_NO_JOB);
    job->c.rx_packets++;
    job->c.rx_bytes += tagged_len;
    if (h.session != job->session)
        return ina__drop_job(sw, job, INA_DROP_SESSION);
    if (h.token != job->token)
        return ina__drop_job(sw, job, INA_DROP_TOKEN);
    if (h.rank >= job->world || !job->members[h.rank].weight)
        return ina__drop_job(sw, job, INA_DROP_RANK); /* (a rank a child stands for sends nothing) */
    struct ina_member *m = &job->members[h.rank];
    if (!ina__addr_eq(src, &m->addr))
        return ina__drop_job(sw, job, INA_DROP_SOURCE);
    if (tagged && !ina__mac_strip(&job->mac, buf, tagged_len))
        return ina__drop_job(sw, job, INA_DROP_MAC); /* forged, or changed on the way */
    m->rx_packets++;
    m->rx_bytes += tagged_len;
    job->last_rx_ns = now_ns;
    ina__dp_data(sw, job, &h, buf + INA_HDR_LEN, len - INA_HDR_LEN, src);
}
