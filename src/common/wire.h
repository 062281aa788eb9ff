/* wire.h: the ina wire format, the one definition shared by libina and ina-switch. */
#ifndef INA_WIRE_H
#define INA_WIRE_H


/*
 * Every ina datagram starts with the same 32-byte header at fixed offsets, in
 * network byte order (big-endian). docs/PROTOCOL.md is the specification;
 * this file must agree with it byte for byte.
 *
 *  off len field     meaning
 *   0   2  magic     0x494E ("IN")
 *   2   1  version   INA_WIRE_VERSION
 *   3   1  kind      enum ina_kind
 *   4   2  job       job id assigned by the switch (0 = none yet)
 *   6   2  rank      sender's rank; 0xFFFF when the switch sends
 *   8   4  session   session id assigned at join (0 = none yet)
 *  12   4  token     per-job secret assigned at join
 *  16   4  slot      bit 31: set (shadow copy); bits 0..30: slot index within the job
 *  20   4  seq       round number of this slot (its use count); set == seq & 1
 *  24   2  count     number of 32-bit elements in the payload
 *  26   2  exp       int16, block exponent; the switch keeps the max
 *  28   2  flags     bit 0 (LEAVE only): abort the session; other bits reserved, 0
 *  30   1  op        aggregation op on int32 elements: 0 = wrapping add,
 *                    1 = signed max, 2 = signed min, 3..5, 7, 8, 10..13 below (INA_OP_*)
 *  31   1  tag       DATA/RESULT: operation tag; every contribution to a round
 *                    must carry the same tag (ranks disagreeing on the op)
 *  32  ... payload   count big-endian int32 values (DATA/RESULT) or a control body
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define INA_WIRE_MAGIC 0x494Eu
#define INA_WIRE_VERSION 1
#define INA_HDR_LEN 32
#define INA_SLOT_SET_BIT 0x80000000u
#define INA_SLOT_INDEX_MASK 0x7FFFFFFFu
#define INA_RANK_SWITCH 0xFFFFu
/* Wire op codes (byte 30): how the switch combines a round's int32 payloads.
 * Every contribution to a round must carry the round's op (else MISMATCH). */
#define INA_OP_ADD_I32 0 /* wrapping 32-bit add (SUM, AVG; every float dtype) */
#define INA_OP_MAX_I32 1 /* signed 32-bit max (INT32 MAX) */
#define INA_OP_MIN_I32 2 /* signed 32-bit min (INT32 MIN) */
/* Block floating point add, one round (small float sums; docs/PROTOCOL.md
 * §8.7): each contribution is quantized with its own block exponent, carried
 * in exp; the switch aligns the sum to the largest exponent by rounding
 * arithmetic shifts. Only a switch that sets INA_FLAG_CAP_BFP accepts it. */
#define INA_OP_ADD_BFP 3
/* IEEE-754 binary32 add, one round (docs/PROTOCOL.md §8.8): the payload is
 * float32 bit patterns, big-endian; the switch adds them as floats in
 * arrival order (round to nearest even). No exponents, no quantization: a
 * software switch's op, which a switch without floating point (a hardware
 * pipeline, an eBPF dataplane) does not offer. Only a switch that sets
 * INA_FLAG_CAP_F32 accepts it. */
#define INA_OP_ADD_F32 4
/* Fixed-point add, one round (docs/PROTOCOL.md §13; P4SGD's Q8.23): every
 * rank scales its values by the same 2^f, agreed at setup (ina_config.
 * fixed_point_bits, mixed into the tag), so there is no exponent; the
 * switch adds int32 exactly and turns any out-of-range sum, or a
 * contribution already carrying it, into the invalid code INT32_MIN
 * (INA_FIX_INVALID), which sticks. Integer arithmetic and a compare: a
 * dataplane without shifters or floating point can offer it. Only a switch
 * that sets INA_FLAG_CAP_FIX accepts it. */
#define INA_OP_ADD_FIX 5
#define INA_FIX_INVALID INT32_MIN
#define INA_OP_LAST INA_OP_ADD_FIX
/* Block-sparse add (docs/PROTOCOL.md §17, payload in common/sparse_wire.h):
 * the payload lists block positions, each rank's next non-zero block and the
 * blocks it has; the switch adds the blocks present (7: as wrapping int32,
 * for INT32 and quantized floats; 8: as binary32) and keeps, per position,
 * the minimum next block and the largest exponent announced for it. Only a
 * switch that sets INA_FLAG_CAP_SPARSE accepts them (op 8: with
 * INA_FLAG_CAP_F32 too). */
#define INA_OP_SPARSE_I32 7
#define INA_OP_SPARSE_F32 8
/* The 16-bit wire (docs/PROTOCOL.md §8.10, since 0.6; kernels in common/h16.h):
 * two elements per 32-bit word, count in words; element w of a packet with
 * exp e stands for val(w) * 2^e. The switch adds them in binary32, one lane
 * per element, and sends the sums back in the same format with the RESULT's
 * own exp. 10: IEEE binary16 elements (FLOAT16, and FLOAT32 scaled per
 * block); 11: bfloat16 (BFLOAT16, FLOAT32 rounded); 12, 13: §17's
 * block-sparse payload with binary16 or bfloat16 blocks. Only a switch that
 * sets INA_FLAG_CAP_H16 accepts them (12, 13: with INA_FLAG_CAP_SPARSE too). */
#define INA_OP_ADD_F16 10
#define INA_OP_ADD_BF16 11
#define INA_OP_SPARSE_F16 12
#define INA_OP_SPARSE_BF16 13
#define INA_FLAG_ABORT 0x0001u /* in LEAVE: the sender failed; end the session for every rank */
#define INA_FLAG_CAP_BFP 0x0002u /* in JOIN_ACK: this switch implements INA_OP_ADD_BFP */
#define INA_FLAG_CAP_F32 0x0004u /* in JOIN_ACK: this switch implements INA_OP_ADD_F32 */
#define INA_FLAG_CAP_SHM 0x0008u /* in JOIN_ACK: a worker on this host may attach rings (§5.9) */
/* In JOIN_ACK, bits 4..5: how many aggregation levels lie above the switch that
 * sent it (0 = it aggregates every rank itself; a child of ina-switch --parent
 * says its parent's value + 1, at most 3 meaning "3 or more"; docs/PROTOCOL.md §12). */
#define INA_FLAG_LEVELS_SHIFT 4
#define INA_FLAG_LEVELS_MASK 0x0030u
static inline unsigned ina__flag_levels(uint16_t flags)
{
    return (flags & INA_FLAG_LEVELS_MASK) >> INA_FLAG_LEVELS_SHIFT;
}
#define INA_FLAG_CAP_SPARSE 0x0100u /* in JOIN_ACK: this switch implements ops 7 and 8 (§17) */
#define INA_FLAG_CAP_FIX 0x0040u /* in JOIN_ACK: this switch implements INA_OP_ADD_FIX (§13) */
/* In JOIN_ACK: this switch implements the 16-bit wire, ops 10 and 11 (and 12, 13
 * with INA_FLAG_CAP_SPARSE), for this job: it holds 2k binary32 sums per slot set
 * (PROTOCOL.md §8.10). */
#define INA_FLAG_CAP_H16 0x0200u
/* In a JOIN of lane 0: body byte 27 (nlanes) is this rank's proposal, and the
 * job runs the smallest of its ranks' (or the count of a rank that fixed it).
 * In the JOIN_ACK to such a rank: byte 27 is that agreed count (§5.6). */
#define INA_FLAG_LANES_AUTO 0x0800u
/* In JOIN: this rank asks for per-packet integrity (every DATA and RESULT
 * tagged, PROTOCOL.md §4.6); in JOIN_ACK: the switch runs with it. Both sides
 * must agree: a switch refuses a JOIN that disagrees with it (JOIN_NAK
 * INA_ERR_NOTSUP). */
#define INA_FLAG_INTEGRITY 0x1000u

/* Largest UDP payload we ever build: fits a 64 KiB IPv4 datagram. */
#define INA_MAX_DATAGRAM 65507
#define INA_MAX_ELEMS ((INA_MAX_DATAGRAM - INA_HDR_LEN) / 4) /* 16368 */
/* A tagged datagram (PROTOCOL.md §4.6: a secret's session that multicasts its
 * results, or per-packet integrity) ends with a 16-byte tag, so its sessions'
 * k is at most this. */
#define INA_MAC_LEN 16
#define INA_MAX_ELEMS_TAGGED ((INA_MAX_DATAGRAM - INA_HDR_LEN - INA_MAC_LEN) / 4) /* 16364 */

/* Special block exponents (int16). The switch's max() treats them as numbers:
 * a zero block never wins over a real one, a non-finite block always wins. */
#define INA_EXP_ZERO INT16_MIN     /* every value in the block is +-0 */
#define INA_EXP_NONFINITE INT16_MAX /* some value in the block is NaN or Inf */

enum ina_kind {
    INA_K_DATA = 1,      /* worker -> switch: contribution to one slot round */
    INA_K_RESULT = 2,    /* switch -> worker: finished sum of one slot round */
    INA_K_JOIN = 16,     /* worker -> switch: register (body: struct ina_join) */
    INA_K_JOIN_ACK = 17, /* switch -> worker: job is complete (body: struct ina_join) */
    INA_K_JOIN_NAK = 18, /* switch -> worker: refused (body: struct ina_nak) */
    INA_K_LEAVE = 19,    /* worker -> switch: rank leaves, session ends */
    INA_K_ABORT = 20,    /* switch -> worker: session ended (body: struct ina_nak) */
    INA_K_REDIRECT = 21, /* switch -> worker: JOIN this lane at another port (body: ina_nak
                            layout; bytes 12..13 hold the port) */
    INA_K_MIGRATE = 22,  /* switch -> worker: the job loses its slots; move to the fallback
                            aggregator at stream position `bound` (body: INA_MIGRATE_BODY_LEN) */
    INA_K_SHM_ATTACH = 23, /* worker -> switch: use my shared-memory rings (body: below) */
    INA_K_SHM_ACK = 24,    /* switch -> worker: attached, or why not (body: ina_nak layout) */
    INA_K_DOORBELL = 25,   /* either way: a ring has data and you were asleep (no body) */
    INA_K_WITHDRAW = 26,   /* worker -> switch: I stop joining, forget my registration (body:
                              the JOIN body, with the nonce of my JOINs; PROTOCOL.md §5.2) */
    INA_K_JOIN_WAIT = 27,  /* switch -> worker: registered, the job still waits for ranks or
                              slots (body: INA_JOIN_WAIT_BODY_LEN, below) */
    INA_K_TREE_JOIN = 28,  /* child switch -> parent: register a set of ranks as one member
                              (body: JOIN body + INA_TREE_SET_LEN rank bitmap; §12) */
    INA_K_JOIN_COOKIE = 29, /* switch -> worker (or child), with a shared secret only: JOIN
                               again with this cookie (body: INA_JOIN_COOKIE_BODY_LEN, below) */
};

/* JOIN header field seq: the joiner's remaining join time in ms (0 = not
 * said). The switch forgets the registration when it passes (§5.2). */

/* JOIN_WAIT body, 48 bytes (PROTOCOL.md §4.5):
 *  off len
 *   0   8  nonce      of the JOIN answered
 *   8   2  world      the job's world size
 *  10   2  joined     ranks registered
 *  12   1  state      0: waiting for ranks to join; 1: every rank joined, waiting for
 *                     free slots (admission wait)
 *  13   3  reserved   0
 *  16  32  bitmap     rank r registered: bit (r & 7) of byte 16 + (r >> 3) */
#define INA_JOIN_WAIT_BODY_LEN 48

/* TREE_JOIN (docs/PROTOCOL.md §12): the 64-byte JOIN body, then the set of
 * ranks the child stands for, a bitmap of INA_MAX_WORKERS bits: rank r is bit
 * (r & 7) of byte (r >> 3). With a shared secret the parent's cookie follows
 * (INA_COOKIE_LEN bytes), then the HMAC of the datagram's first 160 bytes. */
#define INA_TREE_SET_LEN 32
#define INA_TREE_JOIN_LEN (INA_JOIN_BODY_LEN + INA_TREE_SET_LEN)

/* SHM_ATTACH body, 88 bytes (PROTOCOL.md §5.9):
 *  off len
 *   0   8  nonce      echoed in SHM_ACK
 *   8   4  nslots     per ring, a power of 2
 *  12   4  slot_size  bytes per slot
 *  16  64  name       NUL-padded: the memfd's name ("ina.<uid>.<16 hex digits>"), or
 *                     a POSIX shm name of version 1 ("/ina.<uid>.<16 hex digits>")
 *  80   4  pid        a memfd: the worker's process id
 *  84   4  fd         a memfd: its descriptor there (the switch opens /proc/<pid>/fd/<fd>)
 * A POSIX shm name needs only the first 80 bytes. */
#define INA_SHM_ATTACH_BODY_LEN 88
#define INA_SHM_ATTACH_NAMED_LEN 80

/* A worker may split its stream into lanes (threads), each its own job at
 * the switch: same name, lane index 0..nlanes-1 (see docs/PROTOCOL.md). */
#define INA_MAX_LANES 16
/* With several switches (shards, PROTOCOL.md §12) a worker's stream is cut into
 * shards x lanes parts, each a lane of its own: lane index 0..nlanes-1 with
 * nlanes = shards x lanes <= INA_MAX_PARTS (the JOIN's byte 27). */
#define INA_MAX_PARTS 64

/* Decoded header, host byte order. */
struct ina_hdr {
    uint16_t magic;
    uint8_t version;
    uint8_t kind;
    uint16_t job;
    uint16_t rank;
    uint32_t session;
    uint32_t token;
    uint32_t slot; /* as on the wire: set bit + index */
    uint32_t seq;
    uint16_t count;
    int16_t exp;
    uint16_t flags;
    uint8_t op;
    uint8_t tag;
};

static inline uint16_t ina__get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t ina__get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void ina__put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void ina__put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static inline void ina__hdr_encode(uint8_t *b, const struct ina_hdr *h)
{
    ina__put16(b + 0, h->magic);
    b[2] = h->version;
    b[3] = h->kind;
    ina__put16(b + 4, h->job);
    ina__put16(b + 6, h->rank);
    ina__put32(b + 8, h->session);
    ina__put32(b + 12, h->token);
    ina__put32(b + 16, h->slot);
    ina__put32(b + 20, h->seq);
    ina__put16(b + 24, h->count);
    ina__put16(b + 26, (uint16_t)h->exp);
    ina__put16(b + 28, h->flags);
    b[30] = h->op;
    b[31] = h->tag;
}

/* Fill the fields every packet of a sender has: magic, version, kind. */
static inline void ina__hdr_init(struct ina_hdr *h, uint8_t kind)
{
    memset(h, 0, sizeof(*h));
    h->magic = INA_WIRE_MAGIC;
    h->version = INA_WIRE_VERSION;
    h->kind = kind;
}

/* Why a datagram was refused by a parser; also the switch's drop causes. */
enum ina_parse_err {
    INA_PARSE_OK = 0,
    INA_PARSE_SHORT,       /* shorter than the header */
    INA_PARSE_MAGIC,       /* wrong magic */
    INA_PARSE_VERSION,     /* right magic, other version */
    INA_PARSE_LENGTH,      /* payload length disagrees with count / body size */
};

/*
 * Decode and check the fixed part: length, magic, version and, for DATA and
 * RESULT, that the datagram is exactly header + 4*count bytes.
 */
static inline int ina__hdr_decode(const uint8_t *b, size_t len, struct ina_hdr *h)
{
    if (len < INA_HDR_LEN)
        return INA_PARSE_SHORT;
    h->magic = ina__get16(b + 0);
    if (h->magic != INA_WIRE_MAGIC)
        return INA_PARSE_MAGIC;
    h->version = b[2];
    h->kind = b[3];
    h->job = ina__get16(b + 4);
    h->rank = ina__get16(b + 6);
    h->session = ina__get32(b + 8);
    h->token = ina__get32(b + 12);
    h->slot = ina__get32(b + 16);
    h->seq = ina__get32(b + 20);
    h->count = ina__get16(b + 24);
    h->exp = (int16_t)ina__get16(b + 26);
    h->flags = ina__get16(b + 28);
    h->op = b[30];
    h->tag = b[31];
    if (h->version != INA_WIRE_VERSION)
        return INA_PARSE_VERSION;
    if ((h->kind == INA_K_DATA || h->kind == INA_K_RESULT) &&
        len != INA_HDR_LEN + 4 * (size_t)h->count)
        return INA_PARSE_LENGTH;
    return INA_PARSE_OK;
}

/* ---- Control bodies (after the header) ---------------------------------- */

/* JOIN and JOIN_ACK body, 64 bytes. In JOIN the worker proposes; in JOIN_ACK
 * the switch answers with the job's final parameters (same layout).
 *  off len
 *   0   8  nonce          random per ina_init(); identifies the incarnation
 *   8   2  world_size
 *  10   2  elems          elements per packet (proposed / granted)
 *  12   4  window         slots per worker (proposed / granted), power of 2
 *  16   4  sw_version    sender's INA_VERSION_NUMBER
 *  20   4  mcast_group   JOIN_ACK: IPv4 group the switch multicasts finished sums
 *                        to (0 = none: results come by unicast); JOIN: 0
 *  24   2  mcast_port    JOIN_ACK: UDP port of that group; JOIN: 0
 *  26   1  lane           lane of this job, 0..nlanes-1 (echoed in JOIN_ACK)
 *  27   1  nlanes         lanes of every rank, 1..INA_MAX_LANES; 0 is read as 1
 *  28   2  fallback_port  JOIN of rank 0: UDP port, on rank 0's address, of the
 *                        host aggregator it would run if the switch has no room
 *                        (0 = none); others and JOIN_ACK: 0
 *  30   2  wait           JOIN: how long the job may wait for free slots, in
 *                        units of 100 ms (0 = refuse at once); JOIN_ACK: 0
 *  32  32  name           job name, NUL-padded
 */
#define INA_JOIN_BODY_LEN 64
struct ina_join {
    uint64_t nonce;
    uint16_t world_size;
    uint16_t elems;
    uint32_t window;
    uint32_t sw_version;
    uint32_t mcast_group; /* host byte order; 0 = none */
    uint16_t mcast_port;
    uint8_t lane, nlanes;
    uint16_t fallback_port;
    uint16_t wait_100ms;
    char name[32];
};

static inline void ina__join_encode(uint8_t *b, const struct ina_join *j)
{
    memset(b, 0, INA_JOIN_BODY_LEN);
    ina__put32(b + 0, (uint32_t)(j->nonce >> 32));
    ina__put32(b + 4, (uint32_t)j->nonce);
    ina__put16(b + 8, j->world_size);
    ina__put16(b + 10, j->elems);
    ina__put32(b + 12, j->window);
    ina__put32(b + 16, j->sw_version);
    ina__put32(b + 20, j->mcast_group);
    ina__put16(b + 24, j->mcast_port);
    b[26] = j->lane;
    b[27] = j->nlanes;
    ina__put16(b + 28, j->fallback_port);
    ina__put16(b + 30, j->wait_100ms);
    memcpy(b + 32, j->name, 32);
}

/* @return 0, or INA_PARSE_LENGTH if the body is short or the name not terminated. */
static inline int ina__join_decode(const uint8_t *b, size_t len, struct ina_join *j)
{
    if (len < INA_JOIN_BODY_LEN)
        return INA_PARSE_LENGTH;
    j->nonce = (uint64_t)ina__get32(b) << 32 | ina__get32(b + 4);
    j->world_size = ina__get16(b + 8);
    j->elems = ina__get16(b + 10);
    j->window = ina__get32(b + 12);
    j->sw_version = ina__get32(b + 16);
    j->mcast_group = ina__get32(b + 20);
    j->mcast_port = ina__get16(b + 24);
    j->lane = b[26];
    j->nlanes = b[27] ? b[27] : 1;
    j->fallback_port = ina__get16(b + 28);
    j->wait_100ms = ina__get16(b + 30);
    memcpy(j->name, b + 32, 32);
    if (memchr(j->name, 0, 32) == NULL)
        return INA_PARSE_LENGTH;
    return INA_PARSE_OK;
}

/* Shared-secret extension (ina-switch --secret-file, docs/PROTOCOL.md 4.4):
 * 32 bytes right after a JOIN_ACK (or WITHDRAW) body, HMAC-SHA256 keyed with
 * the secret over the datagram's first 96 bytes (header + 64-byte body). A
 * JOIN (TREE_JOIN) carries the switch's cookie after its body (and set), then
 * the HMAC over everything before it: its freshness is proved too. */
#define INA_AUTH_LEN 32
/* The cookie a switch with a secret hands out in JOIN_COOKIE and a JOIN must
 * echo (zeros when it has none yet). Opaque to the worker. */
#define INA_COOKIE_LEN 32
/* JOIN_COOKIE body, 40 bytes: nonce (8) of the JOIN answered, cookie (32). */
#define INA_JOIN_COOKIE_BODY_LEN 40

/* JOIN_NAK, ABORT and REDIRECT body, 16 bytes: nonce (8, echoed; 0 in ABORT),
 * reason (4, a negative INA_ERR_* code as two's complement; 0 in REDIRECT),
 * then REDIRECT: port (2, the UDP port to JOIN at), reserved (2); JOIN_NAK:
 * below; others: reserved (4). A JOIN_NAK NOSPACE of a job whose rank 0 offered a fallback
 * aggregator is 8 bytes longer: IPv4 address (4) and port (2) of that
 * aggregator, reserved (2). */
#define INA_NAK_BODY_LEN 16
#define INA_NAK_FALLBACK_LEN 24
/* In a JOIN_NAK MISMATCH: bytes 12..13 the other party's world size, byte
 * 14 its nlanes (0: not known). */
#define INA_NAK_MISMATCH_WORLD 12
#define INA_NAK_MISMATCH_NLANES 14
/* In a JOIN_NAK of any other reason: bytes 12..15 the sender's INA_VERSION_NUMBER (0 from a
 * switch before 0.6), so that a worker can name both versions (PROTOCOL.md §4.2). */
#define INA_NAK_VERSION 12
/* A JOIN_NAK REJECTED (since 0.6) is 4 bytes longer: byte 16 the cause the switch saw
 * (INA_REJECT_*; 0: not said), bytes 17..19 reserved (PROTOCOL.md §4.2). */
#define INA_NAK_CAUSE 16
#define INA_NAK_REJECTED_LEN 20
enum {
    INA_REJECT_UNSAID = 0,          /* a switch before 0.6, or a tree's parent refused */
    INA_REJECT_PARAMETERS = 1,      /* §5.2 step 3: world, rank, name, elems, window */
    INA_REJECT_AUTH = 2,            /* §4.4: no valid proof of the shared secret */
    INA_REJECT_OTHER_JOB = 3,       /* a worker's private aggregator serves another job */
    INA_REJECT_TREE = 4,            /* a child switch, at a dataplane that serves workers only */
    INA_REJECT_SESSION_ENDED = 5,   /* the JOIN of a session that ended: a replay */
    INA_REJECT_RUNNING_ELSEWHERE = 6, /* the rank runs in an ACTIVE job from another host */
    INA_REJECT_JOINING_ELSEWHERE = 7, /* the rank is registered from another address */
};
/* The cause's name, as ina-switch logs it (join_refused reason=...); NULL if unknown. */
static inline const char *ina__reject_cause_name(unsigned cause)
{
    static const char *const names[] = {
        NULL, "bad_parameters", "auth", "not_this_aggregators_job", "tree_not_in_this_dataplane",
        "session_ended", "rank_running_elsewhere", "rank_joining_elsewhere"};
    return cause < sizeof(names) / sizeof(names[0]) ? names[cause] : NULL;
}
/* An ABORT that says its cause (since 0.6) is 28 bytes: byte 16 the cause
 * (INA_ABORT_*; 0: not said), 18..19 the rank it concerns, 20..23 an IPv4
 * address (network order) and 24..25 a port (PROTOCOL.md §4.2). */
#define INA_ABORT_CAUSE 16
#define INA_ABORT_RANK 18
#define INA_ABORT_ADDR 20
#define INA_ABORT_PORT 24
#define INA_ABORT_CAUSE_LEN 28
enum {
    INA_ABORT_UNSAID = 0,
    INA_ABORT_RANK_TAKEN = 1, /* the rank joined again: the address its JOIN came from */
    INA_ABORT_RANK_DEAD = 2,  /* the rank's port is closed: its registered address */
};
/* The cause's name, as ina-switch logs it (job_aborted reason=...); NULL if unknown. */
static inline const char *ina__abort_cause_name(unsigned cause)
{
    return cause == INA_ABORT_RANK_TAKEN ? "rank_taken"
           : cause == INA_ABORT_RANK_DEAD ? "rank_dead"
                                          : NULL;
}
/* MIGRATE body, 32 bytes: the NOSPACE NAK layout with the fallback address
 * (bytes 0..23; nonce 0), then bound (8): the first stream position of the
 * session, round * W + slot, that the switch no longer serves. */
#define INA_MIGRATE_BODY_LEN 32
static inline void ina__nak_encode(uint8_t *b, uint64_t nonce, int32_t reason)
{
    memset(b, 0, INA_NAK_BODY_LEN);
    ina__put32(b + 0, (uint32_t)(nonce >> 32));
    ina__put32(b + 4, (uint32_t)nonce);
    ina__put32(b + 8, (uint32_t)reason);
}
/* The switch's dataplane thread (shard) of a lane: lanes of one job, and
 * jobs, spread over the threads. FNV-1a of the name, plus the lane. */
static inline unsigned ina__lane_shard(const char *name, unsigned lane, unsigned nshards)
{
    uint32_t h = 2166136261u;
    for (const char *c = name; *c; c++)
        h = (h ^ (uint8_t)*c) * 16777619u;
    return (h + lane) % nshards;
}

static inline int ina__nak_decode(const uint8_t *b, size_t len, uint64_t *nonce, int32_t *reason)
{
    if (len < INA_NAK_BODY_LEN)
        return INA_PARSE_LENGTH;
    *nonce = (uint64_t)ina__get32(b) << 32 | ina__get32(b + 4);
    *reason = (int32_t)ina__get32(b + 8);
    return INA_PARSE_OK;
}

#endif /* INA_WIRE_H */
