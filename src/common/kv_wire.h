/* kv_wire.h: the key-value wire format: ina-ps's protocol and the switch's hot-table packets (PROTOCOL.md §14). */
#ifndef INA_KV_WIRE_H
#define INA_KV_WIRE_H

/*
 * Every datagram starts with the 32-byte ina header of wire.h (magic,
 * version 1, kind, job, rank, session, token, slot, seq, count, exp, flags,
 * op, tag). The kinds below reuse its fields; PROTOCOL.md §14 gives every
 * byte. Keys are 64-bit, values IEEE-754 binary32, all big-endian.
 *
 * Parameter-server kinds (worker <-> ina-ps shard):
 *   header field   PUSH    COMMIT  PULL    ASSIGN   their replies
 *   job/session/   the PS job's, from PS_JOIN_ACK
 *   token/rank
 *   slot           packet  packets request request  echoed
 *                  index   sent    id      id
 *   seq            step    step    0       step T   echoed
 *   count          entries 0       keys    entries  PULL_RESP: keys
 */
#include <stdint.h>
#include <string.h>

#include "common/kmap.h"
#include "common/wire.h"

/* Hot-key data at the switch (PROTOCOL.md §14.3). */
#define INA_K_HOT_DATA 5   /* worker -> switch: one block of the hot vector (dense or keyed) */
#define INA_K_HOT_RESULT 6 /* switch -> worker: the block's sums, dense */

/* ina-ps protocol (PROTOCOL.md §14.2). */
#define INA_K_PS_JOIN 32
#define INA_K_PS_JOIN_ACK 33
#define INA_K_PS_JOIN_NAK 34
#define INA_K_PS_PUSH 35
#define INA_K_PS_PUSH_ACK 36
#define INA_K_PS_COMMIT 37
#define INA_K_PS_COMMIT_ACK 38
#define INA_K_PS_PULL 39
#define INA_K_PS_PULL_RESP 40
#define INA_K_PS_ASSIGN 41
#define INA_K_PS_ASSIGN_ACK 42
#define INA_K_PS_LEAVE 43
#define INA_K_PS_ABORT 44
/* Hot-table control at the switch (§14.3), from the PS range. */
#define INA_K_HOT_INSTALL 45 /* rank 0 -> switch: keys [offset, offset+count) of epoch e */
#define INA_K_HOT_FETCH 46   /* worker -> switch: send me keys [offset, ...) of epoch e */
#define INA_K_HOT_KEYS 47    /* switch -> worker: the answer to all three */
#define INA_K_HOT_SAMPLE 64  /* worker -> switch: its sampled (key, count) pairs of epoch e */

/* MLfabric (PROTOCOL.md §15): bounded-staleness updates to ina-ps, and ina-sched. */
#define INA_K_PS_UPDATE 48     /* worker -> ina-ps: one update computed on model version seq */
#define INA_K_PS_UPDATE_ACK 49 /* ina-ps -> worker: applied or refused (status), version after */
#define INA_K_SCHED_REQ 50     /* worker -> ina-sched: may I send update slot (seq = base, bytes) */
#define INA_K_SCHED_GRANT 51   /* ina-sched -> worker: send it with stamp g, or refused (status) */
#define INA_K_SCHED_DONE 52    /* worker -> ina-sched: the update was answered (outcome, duration) */
#define INA_PS_UPDATE_PREFIX 8  /* UPDATE body before its entries: stamp (4), members (4) */
/* UPDATE body bytes 4..7: 0 (or 1) one rank's update; m >= 2 the sum of m ranks' updates of
 * one group grant, summed in an ina-switch and sent by the group's leader (§15.7) */
#define INA_PS_UPDATE_MAX_MEMBERS 256
#define INA_PS_UPDATE_ACK_LEN 16 /* status (4), version after (4), delay (4), stamp (4) */
/* UPDATE_ACK status of a stamped update kept until its turn: not an outcome, the server is
 * alive and waits for the stamps before it (§15.2) */
#define INA_PS_UPDATE_HELD 1
#define INA_SCHED_REQ_LEN 40     /* bytes (4), flags (4), job name (32) */
/* REQ flags bit 0: the worker can sum its update with others' in an ina-switch (§15.7) */
#define INA_SCHED_REQ_AGGREGATE 1u
/* status (4), stamp (4), version bound (4), straggler (4), group size (4), member index (4) */
#define INA_SCHED_GRANT_LEN 24
/* DONE status of a group member that is not its leader: its part went into the group's
 * update, whose outcome the leader reports (§15.7) */
#define INA_SCHED_DONE_MEMBER 2
#define INA_SCHED_DONE_LEN 16    /* status (4), bytes (4), duration in us (4), version (4) */
#define INA_STAMP_NONE 0xFFFFFFFFu /* UPDATE not stamped: applied in arrival order */
/* REQ base for a fetch request: the worker pulls the model after the grant (§15.3) */
#define INA_SCHED_BASE_AT_GRANT 0xFFFFFFFFu
/* Chain replication between two ina-ps (PROTOCOL.md §15.8). */
#define INA_K_PS_CHAIN_FWD 55      /* primary -> replica: a stamped UPDATE the primary took */
#define INA_K_PS_CHAIN_ACK 56      /* replica -> primary: taken there (outcome, next stamp) */
#define INA_PS_CHAIN_FWD_PREFIX 32 /* CHAIN_FWD body before the UPDATE body: the job's name */
#define INA_PS_CHAIN_ACK_LEN 20    /* status, version, delay, stamp (4 each), next stamp (4) */
/* Membership and failures (PROTOCOL.md §15.9): ina-sched <-> ina-ps (ina-ps --sched). */
#define INA_K_PS_SYNC 53   /* ina-sched -> ina-ps: a job's state, and an action on it */
#define INA_K_PS_STATE 54  /* ina-ps -> ina-sched: the answer */
#define INA_K_PS_REPLAY 57 /* ina-ps -> ina-sched -> ina-ps: a stamped update taken, sent again
                              (the CHAIN_FWD format, §15.8) */
#define INA_PS_SYNC_LEN 44   /* name (32), action (4), argument (4), count (4) */
#define INA_PS_STATE_LEN 140 /* name (32), action, argument, result, run, V, G, held, flags (4
                                each), world (2), start (2), digest (8), joined, left (32 each) */
/* PS_SYNC actions */
#define INA_PS_SYNC_STATE 0  /* report the state and the fate of stamp `argument`; nothing else */
#define INA_PS_SYNC_VOID 1   /* void the stamps argument .. argument + count - 1 not here */
#define INA_PS_SYNC_REPLAY 2 /* send the update taken with stamp `argument` again (PS_REPLAY) */
#define INA_PS_SYNC_DEPART 3 /* rank `argument` has gone: mark it left */
#define INA_PS_VOID_MAX 64   /* stamps one VOID may name */
/* PS_STATE result: the fate of the stamp asked about */
#define INA_PS_FATE_TAKEN 0   /* an update took it (applied or refused) */
#define INA_PS_FATE_VOIDED 1  /* voided: no update was taken with it */
#define INA_PS_FATE_HELD 2    /* its update is here, held until the stamps before it */
#define INA_PS_FATE_WAITING 3 /* not here yet */
#define INA_PS_FATE_UNKNOWN 4 /* resolved too long ago to tell taken from voided */
#define INA_PS_FATE_NO_JOB 5  /* no active STALE job of that name */
/* PS_STATE flags */
#define INA_PS_STATE_CHAIN_PRIMARY 1u /* ina-ps --chain-to */
#define INA_PS_STATE_CHAIN_REPLICA 2u /* ina-ps --chain-from */
#define INA_PS_STATE_CHAIN_BROKEN 4u  /* this job's chain is broken (§15.8 step 5) */
/* UPDATE_ACK status of an update whose stamp was voided before it came: not applied (§15.9) */
#define INA_PS_UPDATE_VOIDED 2
/* REQ flags bit 1: the rank leaves the job (no answer; §15.9) */
#define INA_SCHED_REQ_LEAVE 2u

/* Wire op of HOT_DATA / HOT_RESULT (byte 30): binary32 add into the hot table's slots. */
#define INA_OP_HOT_F32 9

/* JOIN_ACK flag: this switch has a hot table (kinds 5, 6, 45..47, 64, op 9). */
#define INA_FLAG_CAP_HOT 0x0080u
/* HOT_DATA flag: the entries are (key, value) pairs, not the dense block. */
#define INA_FLAG_HOT_KEYED 0x0001u
/* PULL / PULL_RESP flag: with the optimizer state after the values. */
#define INA_FLAG_PS_STATE 0x0002u

/* HOT_DATA flag: a bitmap of the block's positions present (bit i of byte i / 8, from the
 * least significant), then their values in position order: no key bytes. */
#define INA_FLAG_HOT_BITMAP 0x0002u

#define INA_HOT_PREFIX_LEN 8   /* HOT_DATA/HOT_RESULT: epoch (4), base position (4) */
#define INA_HOT_KEYED_LEN 12   /* key (8) + value (4) */
#define INA_PS_JOIN_BODY_LEN 96
/* A PS_JOIN body with a weighted split (byte 94, split 1): the 96 bytes, then the shard's
 * range of the key hash, first u32 and last u32 (PROTOCOL.md §14.1, §14.2.1). */
#define INA_PS_JOIN_SPLIT_LEN 104
#define INA_PS_SPLIT_MOD 0   /* key k on shard (mix(k) >> 32) mod S */
#define INA_PS_SPLIT_RANGE 1 /* key k on the shard whose [first, last] holds mix(k) >> 32 */
#define INA_PS_ABORT_BODY_LEN 24
#define INA_PS_LEAVE_BODY_LEN 8
#define INA_HOT_INSTALL_HDR 16 /* epoch, total, offset, count, reserved */
#define INA_HOT_FETCH_LEN 12
#define INA_HOT_SAMPLE_HDR 16  /* epoch, want, chunk, nchunks, count, reserved */
#define INA_HOT_SAMPLE_PAIR 12 /* key (8) + count (4) */
#define INA_HOT_KEYS_HDR 20    /* epoch, total, offset, count, reserved, status */
#define INA_PS_MAX_DIM 64
#define INA_PS_MODE_SYNC 0     /* synchronous steps (PUSH/COMMIT) */
#define INA_PS_MODE_STALE 1    /* bounded staleness: UPDATE applied if its delay <= max_delay (§15) */
#define INA_PS_DELAY_UNBOUNDED 255 /* max_delay 255: no bound, every UPDATE applied (§15.1) */
/* HOT_KEYS status: the epoch asked for is not installed yet (ask again). */
#define INA_HOT_PENDING 1

/* The body of a HOT_DATA block of count positions, nnz of them nonzero, after its prefix,
 * in the shortest of its three encodings (PROTOCOL.md §14.3): dense 4 count; bitmap
 * ceil(count / 8) + 4 nnz; keyed 12 nnz. *flags gets its flag (0 for dense). Ties go to
 * dense, then to the bitmap. */
static inline size_t ina__hot_block_len(size_t count, size_t nnz, uint16_t *flags)
{
    size_t dense = 4 * count, bitmap = (count + 7) / 8 + 4 * nnz, keyed = 12 * nnz;
    uint16_t f = 0;
    size_t len = dense;
    if (bitmap < len) {
        len = bitmap;
        f = INA_FLAG_HOT_BITMAP;
    }
    if (keyed < len) {
        len = keyed;
        f = INA_FLAG_HOT_KEYED;
    }
    if (flags)
        *flags = f;
    return len;
}

/* PS_JOIN / PS_JOIN_ACK body, 96 bytes (PROTOCOL.md §14.2.1). */
struct ina_ps_join {
    uint64_t nonce;
    uint16_t world, shard, nshards, dim;
    uint8_t optim, mode, init;
    uint8_t max_delay; /* MODE_STALE: D, the most versions an applied update may lag */
    float lr, eps, init_acc, init_scale;
    uint32_t sw_version;
    uint64_t init_seed;
    char name[32];
    uint32_t hot_keys, profile_steps, reprofile_steps; /* the hot-set schedule, checked alike */
    uint16_t start; /* MODE_STALE: ranks that start the job (0 = world); later ones join it
                       running (PROTOCOL.md §15.9) */
    uint8_t split;                 /* INA_PS_SPLIT_MOD or INA_PS_SPLIT_RANGE */
    uint32_t range_first, range_last; /* SPLIT_RANGE: this shard's hashes, inclusive */
};

static inline void ina__put64(uint8_t *p, uint64_t v)
{
    ina__put32(p, (uint32_t)(v >> 32));
    ina__put32(p + 4, (uint32_t)v);
}
static inline uint64_t ina__get64(const uint8_t *p)
{
    return (uint64_t)ina__get32(p) << 32 | ina__get32(p + 4);
}
static inline void ina__putf(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    ina__put32(p, u);
}
static inline float ina__getf(const uint8_t *p)
{
    uint32_t u = ina__get32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The first INA_PS_JOIN_BODY_LEN bytes of the body (a range split: ina__ps_join_encode_split). */
static inline void ina__ps_join_encode(uint8_t *b, const struct ina_ps_join *j)
{
    memset(b, 0, INA_PS_JOIN_BODY_LEN);
    ina__put64(b, j->nonce);
    ina__put16(b + 8, j->world);
    ina__put16(b + 10, j->shard);
    ina__put16(b + 12, j->nshards);
    ina__put16(b + 14, j->dim);
    b[16] = j->optim;
    b[17] = j->mode;
    b[18] = j->init;
    b[19] = j->max_delay;
    ina__putf(b + 20, j->lr);
    ina__putf(b + 24, j->eps);
    ina__putf(b + 28, j->init_acc);
    ina__putf(b + 32, j->init_scale);
    ina__put32(b + 36, j->sw_version);
    ina__put64(b + 40, j->init_seed);
    memcpy(b + 48, j->name, 32);
    ina__put32(b + 80, j->hot_keys);
    ina__put32(b + 84, j->profile_steps);
    ina__put32(b + 88, j->reprofile_steps);
    ina__put16(b + 92, j->start);
    b[94] = j->split;
}

/* The whole body into b (room for INA_PS_JOIN_SPLIT_LEN bytes). @return its length:
 * INA_PS_JOIN_BODY_LEN, or INA_PS_JOIN_SPLIT_LEN with a range split. */
static inline size_t ina__ps_join_encode_split(uint8_t *b, const struct ina_ps_join *j)
{
    ina__ps_join_encode(b, j);
    if (j->split == INA_PS_SPLIT_MOD)
        return INA_PS_JOIN_BODY_LEN;
    ina__put32(b + 96, j->range_first);
    ina__put32(b + 100, j->range_last);
    return INA_PS_JOIN_SPLIT_LEN;
}

/* @return 0, or INA_PARSE_LENGTH (short body, name not terminated, a range split without
 * its range). A split other than MOD and RANGE is decoded as is (the shard refuses it). */
static inline int ina__ps_join_decode(const uint8_t *b, size_t len, struct ina_ps_join *j)
{
    if (len < INA_PS_JOIN_BODY_LEN)
        return INA_PARSE_LENGTH;
    j->nonce = ina__get64(b);
    j->world = ina__get16(b + 8);
    j->shard = ina__get16(b + 10);
    j->nshards = ina__get16(b + 12);
    j->dim = ina__get16(b + 14);
    j->optim = b[16];
    j->mode = b[17];
    j->init = b[18];
    j->max_delay = b[19];
    j->lr = ina__getf(b + 20);
    j->eps = ina__getf(b + 24);
    j->init_acc = ina__getf(b + 28);
    j->init_scale = ina__getf(b + 32);
    j->sw_version = ina__get32(b + 36);
    j->init_seed = ina__get64(b + 40);
    memcpy(j->name, b + 48, 32);
    j->hot_keys = ina__get32(b + 80);
    j->profile_steps = ina__get32(b + 84);
    j->reprofile_steps = ina__get32(b + 88);
    j->start = ina__get16(b + 92);
    j->split = b[94];
    j->range_first = j->range_last = 0;
    if (j->split == INA_PS_SPLIT_RANGE) {
        if (len < INA_PS_JOIN_SPLIT_LEN)
            return INA_PARSE_LENGTH;
        j->range_first = ina__get32(b + 96);
        j->range_last = ina__get32(b + 100);
    }
    return memchr(j->name, 0, 32) ? INA_PARSE_OK : INA_PARSE_LENGTH;
}

/* The shard that owns key among nshards (PROTOCOL.md §14.1): the high half of
 * splitmix64's finalizer of the key, modulo nshards. */
static inline unsigned ina__ps_shard_of(uint64_t key, unsigned nshards)
{
    return (unsigned)((ina__key_mix(key) >> 32) % nshards);
}

/* The hot-set profile's sample (PROTOCOL.md §14.4): entry i of rank r's push of step t is
 * counted when ina__hot_sampled(ina__hot_sample_base(r, t), i, R): 1 in R entries, by a hash.
 * libina's R: INA_KV_SAMPLE, else this. */
#define INA_HOT_SAMPLE_RATE 2
static inline uint64_t ina__hot_sample_base(uint32_t rank, uint32_t step)
{
    return ina__key_mix((uint64_t)rank << 32 | step);
}
static inline int ina__hot_sampled(uint64_t base, uint64_t i, uint32_t R)
{
    return R <= 1 || ina__key_mix(base ^ i) % R == 0;
}

/* A weighted split's ranges (PROTOCOL.md §14.1): shard s of nshards, weight w[s] (1..65535),
 * holds the hashes [first[s], first[s + 1]), first[s] = floor(2^32 (w[0] + ... + w[s-1]) / W),
 * W the sum of all weights; in integers, so that every rank computes the same. */
static inline void ina__ps_split_first(const uint32_t *w, unsigned nshards, uint64_t *first)
{
    uint64_t total = 0, before = 0;
    for (unsigned s = 0; s < nshards; s++)
        total += w[s];
    for (unsigned s = 0; s <= nshards; s++) {
        first[s] = (before << 32) / total;
        if (s < nshards)
            before += w[s];
    }
}

/* The shard of key with a weighted split (INA_PS_SPLIT_RANGE): shard s holds the hashes
 * [first[s], first[s + 1]), first[0] = 0, first[nshards] = 2^32. */
static inline unsigned ina__ps_shard_in(uint64_t key, const uint64_t *first, unsigned nshards)
{
    uint64_t u = ina__key_mix(key) >> 32;
    unsigned lo = 0, hi = nshards - 1; /* the last s with first[s] <= u */
    while (lo < hi) {
        unsigned mid = (lo + hi + 1) / 2;
        if (first[mid] <= u)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* An UPDATE_ACK body (INA_PS_UPDATE_ACK_LEN bytes), which a CHAIN_ACK's begins with too
 * (§15.4, §15.8). */
static inline void ina__ps_update_ack_encode(uint8_t *p, int32_t status, uint32_t version,
                                            uint32_t delay, uint32_t stamp)
{
    ina__put32(p, (uint32_t)status);
    ina__put32(p + 4, version);
    ina__put32(p + 8, delay);
    ina__put32(p + 12, stamp);
}

/* Bytes of one PUSH entry (key + dim values), one ASSIGN entry (+ dim state). */
static inline size_t ina__ps_entry_len(unsigned dim) { return 8 + 4 * (size_t)dim; }
static inline size_t ina__ps_assign_len(unsigned dim) { return 8 + 8 * (size_t)dim; }

#endif
