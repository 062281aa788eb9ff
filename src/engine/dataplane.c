/* dataplane.c: the per-packet rules of the slot pool: add, detect duplicates, complete, multicast. */
#include <string.h>

#include "common/be32.h"
#include "common/h16.h"
#include "common/sparse_wire.h"
#include "engine/internal.h"

static inline int bit_test(const uint64_t *bm, unsigned r) { return (bm[r >> 6] >> (r & 63)) & 1; }
static inline void bit_set(uint64_t *bm, unsigned r) { bm[r >> 6] |= 1ull << (r & 63); }

static inline int32_t *set_values(struct ina_switch *sw, uint32_t abs_slot, unsigned set)
{
    return sw->values + ((size_t)abs_slot * 2 + set) * sw->set_words;
}

/* A header from the switch to the ranks of job. */
static void job_hdr(struct ina_hdr *h, const struct ina_job *job, uint8_t kind)
{
    ina__hdr_init(h, kind);
    h->job = job->id;
    h->rank = INA_RANK_SWITCH;
    h->session = job->session;
    h->token = job->token;
}

/*
 * Put a RESULT in rank r's down ring if it attached rings (§5.9), else queue
 * it for UDP. Until the rank's up ring has delivered a datagram, UDP: a rank
 * that gave up waiting for SHM_ACK stays on UDP while the switch holds its
 * rings. A full or corrupt ring loses the datagram, like a full socket
 * buffer would: the rank's retransmission gets it resent. A rank asleep on
 * its ring gets a DOORBELL over UDP.
 */
static void send_to_rank(struct ina_switch *sw, const struct ina_job *job, int r,
                         const uint8_t *buf, size_t len)
{
    struct ina_shm *shm = job->members[r].shm;
    if (!shm || !job->members[r].shm_live) {
        ina__txq_push(&sw->txq, buf, len, &job->members[r].addr);
        return;
    }
    uint8_t *slot = ina__ring_slot(shm, 0);
    if (!slot || len > shm->slot_size - 4) {
        sw->c.drops[INA_DROP_SHM]++;
        return;
    }
    memcpy(slot, buf, len);
    ina__ring_push(shm, 0, len);
    sw->c.shm_tx_packets++;
    if (ina__ring_wake_needed(shm, 0)) {
        struct ina_hdr h;
        job_hdr(&h, job, INA_K_DOORBELL);
        uint8_t *bell = ina__txq_buf(&sw->txq);
        ina__hdr_encode(bell, &h);
        ina__txq_push(&sw->txq, bell, INA_HDR_LEN, &job->members[r].addr);
        sw->c.doorbells++;
    }
}

/*
 * Build a datagram of one slot set's round into a transmit buffer: header h
 * (its kind, job, rank, session and token already set) with the round's slot,
 * seq, count, exp, op and tag, and the set's values (a sparse round's
 * packed, §17.4, which sets h->count). @return the buffer; its length is
 * 32 + 4 * h->count.
 */
static uint8_t *build_round(struct ina_switch *sw, const struct ina_job *job, struct ina_hdr *h,
                            uint32_t rel_slot, unsigned set, const struct ina_slot_set *ss)
{
    h->slot = rel_slot | (set ? INA_SLOT_SET_BIT : 0);
    h->seq = ss->seq;
    h->count = ss->count;
    h->exp = ss->exp;
    h->op = ss->op;
    h->tag = ss->tag;
    uint8_t *buf = ina__txq_buf(&sw->txq);
    const int32_t *v = set_values(sw, job->slot_base + rel_slot, set);
    if (ina__op_is_sparse(ss->op)) /* only the blocks some rank sent (§17.4) */
        h->count = (uint16_t)ina__sparse_emit(buf + INA_HDR_LEN, v, ss->op, NULL);
    else if (ina__op_is_h16(ss->op) && !ss->raw) /* the lanes at the round's scale (§8.10.4) */
        ina__h16_store(buf + INA_HDR_LEN, v, ss->count, ss->exp, ina__h16_fmt_of_op(ss->op));
    else
        ina__be32_store(buf + INA_HDR_LEN, v, ss->count);
    ina__hdr_encode(buf, h);
    return buf;
}

/*
 * Build the RESULT datagram of one finished slot set once, and queue it for
 * one rank (dest >= 0) or every rank of the job (dest < 0).
 */
static void emit_result(struct ina_switch *sw, const struct ina_job *job, uint32_t rel_slot,
                        unsigned set, const struct ina_slot_set *ss, int dest)
{
    struct ina_hdr h;
    job_hdr(&h, job, ss->hot ? INA_K_HOT_RESULT : INA_K_RESULT);
    uint8_t *buf = build_round(sw, job, &h, rel_slot, set, ss);
    size_t len = INA_HDR_LEN + 4 * (size_t)h.count;
    unsigned copies;
    if (ss->hot) { /* HOT_RESULT: the round's epoch and first position, then the sums */
        memmove(buf + INA_HDR_LEN + INA_HOT_PREFIX_LEN, buf + INA_HDR_LEN, 4 * (size_t)h.count);
        ina__put32(buf + INA_HDR_LEN, ss->hot_epoch);
        ina__put32(buf + INA_HDR_LEN + 4, ss->hot_base);
        len += INA_HOT_PREFIX_LEN;
    }
    if (job->tagged) /* once for every copy: the rank field is the switch's (§4.6) */
        len = ina__mac_append(&job->mac, buf, len);
    if (dest >= 0) {
        send_to_rank(sw, job, dest, buf, len);
        copies = 1;
    } else if (job->mcast.sin_family) { /* one send; the network (or the host) copies it */
        ina__txq_push(&sw->txq, buf, len, &job->mcast);
        copies = 1;
    } else {
        copies = 0;
        for (int r = 0; r < job->world; r++)
            if (job->members[r].weight) { /* a rank a child stands for gets it from the child */
                send_to_rank(sw, job, r, buf, len);
                copies++;
            }
    }
    if (ina__op_is_sparse(ss->op)) {
        sw->c.sparse_tx_packets += copies;
        sw->c.sparse_tx_bytes += copies * len;
        sw->c.sparse_tx_blocks += (uint64_t)copies * ina__sparse_blocks_in(buf + INA_HDR_LEN);
    }
}

/* The wire ops this switch combines: v1's integer ops always; the
 * fixed-point add unless the eBPF program keeps the slots (it has ops 0..3);
 * block floating point unless --int-ops-only (a dataplane without shifters);
 * float adds, the 16-bit wire and the block-sparse ops with neither restriction. */
static inline int op_offered(const struct ina_switch *sw, uint8_t op)
{
    switch (op) {
    case INA_OP_ADD_I32:
    case INA_OP_MAX_I32:
    case INA_OP_MIN_I32: return 1;
    case INA_OP_ADD_FIX: return !sw->p.bpf_ops_only;
    case INA_OP_ADD_BFP: return !sw->p.int_ops_only;
    case INA_OP_ADD_F32:
    case INA_OP_SPARSE_I32:
    case INA_OP_SPARSE_F32: return !sw->p.int_ops_only && !sw->p.bpf_ops_only;
    case INA_OP_ADD_F16:
    case INA_OP_ADD_BF16:
    case INA_OP_SPARSE_F16:
    case INA_OP_SPARSE_BF16: return ina__switch_h16(&sw->p);
    default: return 0;
    }
}

/*
 * Every contribution of a round is in (at a child: every local one, before
 * the partial sum goes up): the 16-bit wire fixes the scale s its lanes go
 * out with, once, so that every copy and every resend carries the same
 * bytes (§8.10.4, §8.10.7); a 16-bit sparse round, each place's (§17.11).
 */
static void round_done(struct ina_slot_set *ss, int32_t *v)
{
    if (ina__op_is_h16(ss->op) && !ina__op_is_sparse(ss->op))
        ss->exp = ina__h16_result_exp(v, ss->count, ss->exp, ina__h16_fmt_of_op(ss->op));
    else if (ina__op_is_sparse_h16(ss->op))
        ina__sparse_h16_finish(v, ss->op);
}

/*
 * A DATA packet that passed the job checks (job active, session, token,
 * rank, source address). The slot rules, with d = seq - set.seq (mod 2^32):
 *   d == 2  next round of this set: allowed once the set's round completed;
 *           the first contribution overwrites the values (no clearing pass).
 *   d == 0  same round: a new rank is combined by the round's op (add, max
 *           or min; the first contribution's op, count and tag must match,
 *           else MISMATCH); a rank already in the bitmap is a
 *           duplicate: answered with the result if complete, else dropped.
 *   d <  0  stale (an old retransmission): dropped.
 *   other   cannot happen in a correct protocol: dropped.
 * Why seq and not only bitmaps: the published design clears a worker's bit
 * in the other set, which cannot tell a delayed packet from two rounds ago
 * from a new one. The round number can.
 */
void ina__dp_data(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                  const uint8_t *payload, size_t plen, const struct sockaddr_in *src)
{
    (void)src;
    uint32_t rel = h->slot & INA_SLOT_INDEX_MASK;
    unsigned set = (h->slot & INA_SLOT_SET_BIT) ? 1 : 0;
    const int hot = h->kind == INA_K_HOT_DATA;
    struct ina_hot_in hin;
    if (rel >= job->window)
        return ina__drop_job(sw, job, INA_DROP_SLOT);
    if (h->count > job->elems)
        return ina__drop_job(sw, job, INA_DROP_COUNT);
    int sparse = ina__op_is_sparse(h->op);
    if (hot) { /* PROTOCOL.md §14.3: only op 9, only where a hot table is offered, never in a
                  tree (a child has no hot table to forward) */
        if (h->op != INA_OP_HOT_F32 || !sw->p.hot_max || sw->p.int_ops_only ||
            sw->p.bpf_ops_only || job->tree || job->child)
            return ina__drop_job(sw, job, INA_DROP_OP);
        if (ina__hot_parse(h, payload, plen, &hin) != 0)
            return ina__drop_job(sw, job, INA_DROP_LENGTH);
    } else if (!op_offered(sw, h->op) ||
               ((job->tree || job->child) && (h->op == INA_OP_ADD_BFP || sparse)) ||
               (job->child && h->op == INA_OP_ADD_F32 && !(job->up.flags & INA_FLAG_CAP_F32)) ||
               (job->child && h->op == INA_OP_ADD_FIX && !(job->up.flags & INA_FLAG_CAP_FIX)) ||
               (job->child && ina__op_is_h16(h->op) && !(job->up.flags & INA_FLAG_CAP_H16))) {
        return ina__drop_job(sw, job, INA_DROP_OP); /* (a tree offers neither BFP nor sparse: §12, §17.1) */
    }
    if (set != (h->seq & 1))
        return ina__drop_job(sw, job, INA_DROP_SET);
    if (sparse) {
        sw->c.sparse_rx_packets++;
        sw->c.sparse_rx_bytes += INA_HDR_LEN + 4 * (size_t)h->count;
        if (!ina__sparse_valid(job, h, payload))
            return ina__drop_job(sw, job, INA_DROP_SPARSE);
    }

    if (job->evicted && (uint64_t)h->seq * job->window + rel >= job->evict_bound) {
        /* Past the bound: this rank has not heard that the job moved. */
        if (!ina__switch_tx_full(sw))
            ina__job_send_migrate(sw, job, (int)h->rank);
        return ina__drop_job(sw, job, INA_DROP_EVICTED);
    }
    if (sw->dp) /* its slots are not here: it passed up what it should have kept */
        return ina__drop_job(sw, job, INA_DROP_DATAPLANE);
    uint32_t abs_slot = job->slot_base + rel;
    struct ina_slot_set *ss = &sw->slots[abs_slot].set[set];
    int32_t d = (int32_t)(h->seq - ss->seq);
    unsigned rank = h->rank;
    const uint16_t weight = job->members[rank].weight; /* ranks it stands for (§12) */

    if (d == 2) {
        if (!ss->complete)
            return ina__drop_job(sw, job, INA_DROP_NOT_READY);
        if (hot && !ina__hot_valid(job, &hin, h->count))
            return ina__drop_job(sw, job, INA_DROP_HOT);
        ss->seq = h->seq;
        ss->count = h->count;
        ss->exp = h->exp;
        ss->tag = h->tag;
        ss->op = h->op;
        ss->nrecv = weight;
        ss->complete = 0;
        ss->up = 0;
        ss->raw = 0;
        memset(ss->bitmap, 0, sizeof(ss->bitmap));
        bit_set(ss->bitmap, rank);
        ss->hot = (uint8_t)hot;
        if (sparse) {
            ss->count = 0; /* ranks' counts differ: the RESULT's is computed at emit */
            ss->exp = 0;
            sw->c.sparse_rx_blocks += ina__sparse_first(set_values(sw, abs_slot, set), payload, h->op);
        } else if (hot) {
            ss->hot_epoch = hin.epoch;
            ss->hot_base = hin.base;
            ina__hot_load(job, set_values(sw, abs_slot, set), &hin, h->count);
            sw->c.hot_keyed += hin.nkeyed;
            sw->c.hot_bitmap += hin.nbitmap;
        } else if (ina__op_is_h16(h->op)) {
            ina__h16_load(set_values(sw, abs_slot, set), payload, h->count, h->exp,
                         ina__h16_fmt_of_op(h->op));
        } else {
            ina__be32_load(set_values(sw, abs_slot, set), payload, h->count);
        }
    } else if (d == 0) {
        if (bit_test(ss->bitmap, rank)) {
            job->c.retransmits++;
            if (ss->up) {
                /* A child's round waits for the parent, and a worker timed out
                 * on it: the partial sum, or the parent's RESULT, may have been
                 * lost. Send the partial sum again (the parent answers a
                 * duplicate with its RESULT, or drops it): recovery between
                 * child and parent is driven by the workers' timers. */
                sw->c.up_resent++;
                ina__tree_up_data(sw, job, rel, set, ss);
                return;
            }
            if (!ss->complete)
                return ina__drop_job(sw, job, INA_DROP_DUP_PENDING);
            sw->c.results_resent++;
            emit_result(sw, job, rel, set, ss, (int)rank);
            return;
        }
        if (h->tag != ss->tag || h->op != ss->op || hot != ss->hot ||
            (sparse ? !ina__sparse_same(set_values(sw, abs_slot, set), payload)
                    : h->count != ss->count) ||
            (hot && (hin.epoch != ss->hot_epoch || hin.base != ss->hot_base))) {
            /* Ranks are running different operations here: no sum exists. */
            ina__drop_job(sw, job, INA_DROP_MISMATCH);
            ina__job_abort(sw, job, INA_ERR_MISMATCH);
            return;
        }
        if (hot && !ina__hot_valid(job, &hin, h->count))
            return ina__drop_job(sw, job, INA_DROP_HOT);
        bit_set(ss->bitmap, rank);
        ss->nrecv = (uint16_t)(ss->nrecv + weight);
        if (sparse) {
            sw->c.sparse_rx_blocks +=
                ina__sparse_combine(set_values(sw, abs_slot, set), payload, ss->op);
        } else if (hot) {
            ina__hot_add(job, set_values(sw, abs_slot, set), &hin, h->count);
            sw->c.hot_keyed += hin.nkeyed;
            sw->c.hot_bitmap += hin.nbitmap;
        } else if (ss->op == INA_OP_ADD_BFP) {
            ina__combine(ss, set_values(sw, abs_slot, set), payload, h->count, h->exp);
        } else {
            if (h->exp > ss->exp)
                ss->exp = h->exp; /* the next block's exponent, one round ahead */
            ina__combine(ss, set_values(sw, abs_slot, set), payload, h->count, h->exp);
        }
    } else if (d < 0) {
        return ina__drop_job(sw, job, INA_DROP_STALE);
    } else {
        return ina__drop_job(sw, job, INA_DROP_FUTURE);
    }

    sw->c.contributions++;
    job->c.contributions++;
    if (ss->nrecv == job->need)
        round_done(ss, set_values(sw, abs_slot, set));
    if (ss->nrecv == job->need && job->child) {
        ss->up = 1; /* complete once the parent's RESULT is in (tree.c) */
        sw->c.up_packets++;
        ina__tree_up_data(sw, job, rel, set, ss);
    } else if (ss->nrecv == job->need) {
        ss->complete = 1;
        sw->c.completions++;
        job->c.completions++;
        emit_result(sw, job, rel, set, ss, -1);
    }
}

/*
 * A child's partial sum of a round (PROTOCOL.md §12.4): a DATA of the
 * parent's job, as member up.rep, in the same slot and round as the workers'
 * packets (the child's window is the parent's), with the round's count, tag,
 * op and exponent (the largest of its ranks'), and the values held in the set.
 */
void ina__tree_up_data(struct ina_switch *sw, const struct ina_job *job, uint32_t rel,
                       unsigned set, const struct ina_slot_set *ss)
{
    if (job->up.gone || !ina__txq_room(&sw->txq, 1))
        return; /* (the caller flushed before this input: never full) */
    struct ina_hdr h;
    ina__up_hdr(&h, job, INA_K_DATA);
    uint8_t *buf = build_round(sw, job, &h, rel, set, ss);
    ina__txq_push(&sw->txq, buf, INA_HDR_LEN + 4 * (size_t)ss->count, &job->up.addr);
}

/*
 * The parent's RESULT of a round this child sent up (§12.4): the sum over
 * every rank. It must name a set that waits for it (same round, count, tag
 * and op); then it becomes the set's result, complete, and goes to every
 * local rank. Anything else is a duplicate or stale (drop UPSTREAM).
 */
void ina__tree_dp_result(struct ina_switch *sw, struct ina_job *job, const struct ina_hdr *h,
                         const uint8_t *payload)
{
    uint32_t rel = h->slot & INA_SLOT_INDEX_MASK;
    unsigned set = (h->slot & INA_SLOT_SET_BIT) ? 1 : 0;
    if (rel >= job->window || set != (h->seq & 1))
        return ina__drop_job(sw, job, INA_DROP_UPSTREAM);
    struct ina_slot_set *ss = &sw->slots[job->slot_base + rel].set[set];
    if (!ss->up || ss->seq != h->seq || h->count != ss->count || h->tag != ss->tag ||
        h->op != ss->op)
        return ina__drop_job(sw, job, INA_DROP_UPSTREAM);
    ina__be32_load(set_values(sw, job->slot_base + rel, set), payload, h->count);
    ss->exp = h->exp; /* every rank's maximum (two-round floats), as the parent saw it */
    ss->raw = ina__op_is_h16(ss->op); /* 16-bit words, passed down as received (§8.10.7) */
    ss->up = 0;
    ss->complete = 1;
    sw->c.up_results++;
    sw->c.completions++;
    job->c.completions++;
    emit_result(sw, job, rel, set, ss, -1);
}
