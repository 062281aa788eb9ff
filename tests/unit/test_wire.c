/* test_wire.c: the wire format (src/common/wire.h): header layout byte by byte, decode errors, control bodies. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/wire.h"
#include "ina.h"

/* Compare every field of two decoded headers. */
static void check_hdr_eq(const struct ina_hdr *a, const struct ina_hdr *b)
{
    CHECK_EQ_INT(a->magic, b->magic);
    CHECK_EQ_INT(a->version, b->version);
    CHECK_EQ_INT(a->kind, b->kind);
    CHECK_EQ_INT(a->job, b->job);
    CHECK_EQ_INT(a->rank, b->rank);
    CHECK_EQ_INT(a->session, b->session);
    CHECK_EQ_INT(a->token, b->token);
    CHECK_EQ_INT(a->slot, b->slot);
    CHECK_EQ_INT(a->seq, b->seq);
    CHECK_EQ_INT(a->count, b->count);
    CHECK_EQ_INT(a->exp, b->exp);
    CHECK_EQ_INT(a->flags, b->flags);
    CHECK_EQ_INT(a->op, b->op);
    CHECK_EQ_INT(a->tag, b->tag);
}

/* Encode h into a buffer of exactly the length decode wants, decode, compare. */
static void round_trip(const struct ina_hdr *h)
{
    uint8_t buf[INA_HDR_LEN + 4 * 8];
    size_t len = INA_HDR_LEN;
    if (h->kind == INA_K_DATA || h->kind == INA_K_RESULT)
        len += 4 * (size_t)h->count;
    CHECK(len <= sizeof(buf));
    memset(buf, 0xA5, sizeof(buf));
    ina__hdr_encode(buf, h);
    struct ina_hdr d;
    memset(&d, 0x5A, sizeof(d));
    CHECK_EQ_INT(ina__hdr_decode(buf, len, &d), INA_PARSE_OK);
    check_hdr_eq(&d, h);
}

static void test_round_trip_extremes(void)
{
    struct ina_hdr h;

    /* All zero where allowed (count 0: a DATA of header only). */
    ina__hdr_init(&h, INA_K_DATA);
    CHECK_EQ_INT(h.magic, INA_WIRE_MAGIC);
    CHECK_EQ_INT(h.version, INA_WIRE_VERSION);
    CHECK_EQ_INT(h.kind, INA_K_DATA);
    CHECK_EQ_INT(h.job, 0);
    CHECK_EQ_INT(h.session, 0);
    CHECK_EQ_INT(h.count, 0);
    round_trip(&h);

    /* Every field at its maximum (count small so the buffer stays small, and a
     * control kind so the length rule does not apply). */
    ina__hdr_init(&h, INA_K_LEAVE);
    h.job = UINT16_MAX;
    h.rank = UINT16_MAX;
    h.session = UINT32_MAX;
    h.token = UINT32_MAX;
    h.slot = UINT32_MAX;
    h.seq = UINT32_MAX;
    h.count = UINT16_MAX;
    h.exp = INT16_MAX;
    h.flags = UINT16_MAX;
    h.op = UINT8_MAX;
    h.tag = UINT8_MAX;
    round_trip(&h);

    /* Negative and extreme exponents, on a DATA with a payload. */
    const int16_t exps[] = {INT16_MIN, INT16_MIN + 1, -1, 0, 1, -150, 127, INT16_MAX};
    for (size_t i = 0; i < sizeof(exps) / sizeof(exps[0]); i++) {
        ina__hdr_init(&h, INA_K_RESULT);
        h.job = 7;
        h.rank = INA_RANK_SWITCH;
        h.session = 0x80000000u;
        h.token = 0x00000001u;
        h.slot = INA_SLOT_SET_BIT | INA_SLOT_INDEX_MASK;
        h.seq = 0x7FFFFFFFu;
        h.count = 8;
        h.exp = exps[i];
        round_trip(&h);
    }

    /* The special exponents keep their meaning through the wire. */
    ina__hdr_init(&h, INA_K_DATA);
    h.exp = INA_EXP_ZERO;
    round_trip(&h);
    h.exp = INA_EXP_NONFINITE;
    round_trip(&h);

    /* Distinct bytes in every field, so a swapped offset cannot cancel out. */
    ina__hdr_init(&h, INA_K_JOIN);
    h.job = 0x0102;
    h.rank = 0x0304;
    h.session = 0x05060708u;
    h.token = 0x090A0B0Cu;
    h.slot = 0x0D0E0F10u;
    h.seq = 0x11121314u;
    h.count = 0x1516;
    h.exp = 0x1718;
    h.flags = 0x191A;
    h.op = 0x1B;
    h.tag = 0x1C;
    round_trip(&h);
}

static void test_byte_positions(void)
{
    struct ina_hdr h;
    uint8_t b[INA_HDR_LEN];
    ina__hdr_init(&h, INA_K_JOIN);
    h.job = 0x0102;
    h.rank = 0x0304;
    h.session = 0x05060708u;
    h.token = 0x090A0B0Cu;
    h.slot = INA_SLOT_SET_BIT | 0x0E0F10u; /* 0x800E0F10 */
    h.seq = 0x11121314u;
    h.count = 0x1516;
    h.exp = -2; /* 0xFFFE */
    h.flags = 0x191A;
    h.op = 0x1B;
    h.tag = 0x1C;
    memset(b, 0xEE, sizeof(b));
    ina__hdr_encode(b, &h);
    const uint8_t want[INA_HDR_LEN] = {
        0x49, 0x4E,             /* 0  magic "IN" */
        INA_WIRE_VERSION,       /* 2  version */
        INA_K_JOIN,             /* 3  kind */
        0x01, 0x02,             /* 4  job */
        0x03, 0x04,             /* 6  rank */
        0x05, 0x06, 0x07, 0x08, /* 8  session */
        0x09, 0x0A, 0x0B, 0x0C, /* 12 token */
        0x80, 0x0E, 0x0F, 0x10, /* 16 slot, set bit = bit 7 of byte 16 */
        0x11, 0x12, 0x13, 0x14, /* 20 seq */
        0x15, 0x16,             /* 24 count */
        0xFF, 0xFE,             /* 26 exp, two's complement */
        0x19, 0x1A,             /* 28 flags */
        0x1B,                   /* 30 op */
        0x1C,                   /* 31 tag */
    };
    for (int i = 0; i < INA_HDR_LEN; i++) {
        if (b[i] != want[i])
            fprintf(stderr, "byte %d: got 0x%02x want 0x%02x\n", i, b[i], want[i]);
        CHECK_EQ_INT(b[i], want[i]);
    }
    CHECK_EQ_INT(b[0], 'I');
    CHECK_EQ_INT(b[1], 'N');

    /* INT16_MIN exponent: 0x8000. */
    h.exp = INT16_MIN;
    ina__hdr_encode(b, &h);
    CHECK_EQ_INT(b[26], 0x80);
    CHECK_EQ_INT(b[27], 0x00);

    /* The helpers themselves. */
    uint8_t p[4];
    ina__put32(p, 0xDEADBEEFu);
    CHECK_EQ_INT(p[0], 0xDE);
    CHECK_EQ_INT(p[3], 0xEF);
    CHECK_EQ_INT(ina__get32(p), 0xDEADBEEFu);
    ina__put16(p, 0xBEEF);
    CHECK_EQ_INT(p[0], 0xBE);
    CHECK_EQ_INT(p[1], 0xEF);
    CHECK_EQ_INT(ina__get16(p), 0xBEEF);
}

static void test_decode_errors(void)
{
    struct ina_hdr h, d;
    uint8_t b[INA_HDR_LEN + 4 * 4 + 8];
    memset(b, 0, sizeof(b));

    /* Every length below the header is SHORT, whatever the bytes say. */
    ina__hdr_init(&h, INA_K_LEAVE);
    ina__hdr_encode(b, &h);
    for (size_t len = 0; len < INA_HDR_LEN; len++)
        CHECK_EQ_INT(ina__hdr_decode(b, len, &d), INA_PARSE_SHORT);
    CHECK_EQ_INT(ina__hdr_decode(b, INA_HDR_LEN, &d), INA_PARSE_OK);

    /* Wrong magic, in either byte. */
    ina__hdr_encode(b, &h);
    b[0] = 0x4E;
    b[1] = 0x49;
    CHECK_EQ_INT(ina__hdr_decode(b, INA_HDR_LEN, &d), INA_PARSE_MAGIC);
    ina__hdr_encode(b, &h);
    b[1] ^= 1;
    CHECK_EQ_INT(ina__hdr_decode(b, INA_HDR_LEN, &d), INA_PARSE_MAGIC);
    ina__hdr_encode(b, &h);
    b[0] = 0;
    CHECK_EQ_INT(ina__hdr_decode(b, INA_HDR_LEN, &d), INA_PARSE_MAGIC);

    /* Wrong version: refused, but the kind (and the rest) is decoded so the
     * switch can answer a JOIN from another version. */
    const uint8_t versions[] = {0, INA_WIRE_VERSION + 1, 0xFF};
    for (size_t i = 0; i < sizeof(versions); i++) {
        ina__hdr_init(&h, INA_K_JOIN);
        h.version = versions[i];
        h.rank = 3;
        ina__hdr_encode(b, &h);
        memset(&d, 0, sizeof(d));
        CHECK_EQ_INT(ina__hdr_decode(b, sizeof(b), &d), INA_PARSE_VERSION);
        CHECK_EQ_INT(d.kind, INA_K_JOIN);
        CHECK_EQ_INT(d.version, versions[i]);
        CHECK_EQ_INT(d.rank, 3);
    }
    /* Version is checked before the DATA length rule. */
    ina__hdr_init(&h, INA_K_DATA);
    h.version = 2;
    h.count = 100;
    ina__hdr_encode(b, &h);
    CHECK_EQ_INT(ina__hdr_decode(b, INA_HDR_LEN, &d), INA_PARSE_VERSION);
    CHECK_EQ_INT(d.kind, INA_K_DATA);

    /* DATA and RESULT: exactly header + 4 * count. */
    const uint8_t dkinds[] = {INA_K_DATA, INA_K_RESULT};
    for (size_t k = 0; k < 2; k++) {
        for (unsigned count = 0; count <= 4; count++) {
            ina__hdr_init(&h, dkinds[k]);
            h.count = (uint16_t)count;
            ina__hdr_encode(b, &h);
            for (size_t len = INA_HDR_LEN; len <= sizeof(b); len++) {
                int want = len == INA_HDR_LEN + 4 * count ? INA_PARSE_OK : INA_PARSE_LENGTH;
                CHECK_EQ_INT(ina__hdr_decode(b, len, &d), want);
            }
        }
        /* A count whose payload could never fit. */
        ina__hdr_init(&h, dkinds[k]);
        h.count = UINT16_MAX;
        ina__hdr_encode(b, &h);
        CHECK_EQ_INT(ina__hdr_decode(b, sizeof(b), &d), INA_PARSE_LENGTH);
    }

    /* Control kinds (and unknown kinds) accept any length >= 32, whatever count says. */
    const uint8_t ckinds[] = {INA_K_JOIN, INA_K_JOIN_ACK, INA_K_JOIN_NAK, INA_K_LEAVE,
                              INA_K_ABORT, 0, 3, 255};
    for (size_t k = 0; k < sizeof(ckinds); k++) {
        ina__hdr_init(&h, ckinds[k]);
        h.count = 3;
        ina__hdr_encode(b, &h);
        for (size_t len = INA_HDR_LEN; len <= sizeof(b); len++)
            CHECK_EQ_INT(ina__hdr_decode(b, len, &d), INA_PARSE_OK);
        CHECK_EQ_INT(d.kind, ckinds[k]);
    }
}

static void test_join_body(void)
{
    uint8_t b[INA_JOIN_BODY_LEN + 8];
    struct ina_join j, d;

    /* Extremes. */
    memset(&j, 0, sizeof(j));
    j.nonce = UINT64_MAX;
    j.world_size = UINT16_MAX;
    j.elems = UINT16_MAX;
    j.window = UINT32_MAX;
    j.sw_version = UINT32_MAX;
    memset(j.name, 'x', 31); /* longest name: 31 chars + NUL */
    memset(b, 0xA5, sizeof(b));
    ina__join_encode(b, &j);
    memset(&d, 0, sizeof(d));
    CHECK_EQ_INT(ina__join_decode(b, INA_JOIN_BODY_LEN, &d), INA_PARSE_OK);
    CHECK(d.nonce == UINT64_MAX);
    CHECK_EQ_INT(d.world_size, UINT16_MAX);
    CHECK_EQ_INT(d.elems, UINT16_MAX);
    CHECK_EQ_INT(d.window, UINT32_MAX);
    CHECK_EQ_INT(d.sw_version, UINT32_MAX);
    CHECK(memcmp(d.name, j.name, 32) == 0);
    CHECK_EQ_INT(strlen(d.name), 31);
    /* The reserved bytes are zero and the trailing byte untouched. */
    for (int i = 20; i < 32; i++)
        CHECK_EQ_INT(b[i], 0);
    CHECK_EQ_INT(b[INA_JOIN_BODY_LEN], 0xA5);

    /* Zeros (an empty name is a valid encoding; the switch refuses it). */
    memset(&j, 0, sizeof(j));
    ina__join_encode(b, &j);
    memset(&d, 0xFF, sizeof(d));
    CHECK_EQ_INT(ina__join_decode(b, INA_JOIN_BODY_LEN, &d), INA_PARSE_OK);
    CHECK(d.nonce == 0);
    CHECK_EQ_INT(d.world_size, 0);
    CHECK_EQ_INT(d.elems, 0);
    CHECK_EQ_INT(d.window, 0);
    CHECK_EQ_INT(d.sw_version, 0);
    CHECK_EQ_INT(d.name[0], 0);

    /* Byte layout. */
    memset(&j, 0, sizeof(j));
    j.nonce = 0x0102030405060708ull;
    j.world_size = 0x090A;
    j.elems = 0x0B0C;
    j.window = 0x0D0E0F10u;
    j.sw_version = 0x11121314u;
    snprintf(j.name, sizeof(j.name), "job-a");
    ina__join_encode(b, &j);
    for (int i = 0; i < 20; i++)
        CHECK_EQ_INT(b[i], i + 1);
    CHECK(memcmp(b + 32, "job-a", 6) == 0);
    for (int i = 38; i < 64; i++)
        CHECK_EQ_INT(b[i], 0);
    CHECK_EQ_INT(ina__join_decode(b, INA_JOIN_BODY_LEN + 8, &d), INA_PARSE_OK); /* longer is fine */
    CHECK(d.nonce == j.nonce);
    CHECK(strcmp(d.name, "job-a") == 0);

    /* Short bodies. */
    for (size_t len = 0; len < INA_JOIN_BODY_LEN; len++)
        CHECK_EQ_INT(ina__join_decode(b, len, &d), INA_PARSE_LENGTH);

    /* A name with no NUL in its 32 bytes. */
    ina__join_encode(b, &j);
    memset(b + 32, 'n', 32);
    CHECK_EQ_INT(ina__join_decode(b, INA_JOIN_BODY_LEN, &d), INA_PARSE_LENGTH);
    /* ...but a NUL in the very last byte is enough. */
    b[63] = 0;
    CHECK_EQ_INT(ina__join_decode(b, INA_JOIN_BODY_LEN, &d), INA_PARSE_OK);
    CHECK_EQ_INT(strlen(d.name), 31);
}

static void test_nak_body(void)
{
    uint8_t b[INA_NAK_BODY_LEN + 4];
    uint64_t nonce;
    int32_t reason;
    const struct {
        uint64_t nonce;
        int32_t reason;
    } cases[] = {
        {0, 0},
        {UINT64_MAX, INT32_MIN},
        {0x0102030405060708ull, INA_ERR_REJECTED},
        {42, INA_ERR_NOSPACE},
        {1ull << 63, INA_ERR_ABORTED},
        {7, -1},
        {8, INT32_MAX},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(b, 0xA5, sizeof(b));
        ina__nak_encode(b, cases[i].nonce, cases[i].reason);
        CHECK_EQ_INT(b[INA_NAK_BODY_LEN], 0xA5);
        for (int k = 12; k < 16; k++)
            CHECK_EQ_INT(b[k], 0); /* reserved */
        nonce = 1;
        reason = 1;
        CHECK_EQ_INT(ina__nak_decode(b, INA_NAK_BODY_LEN, &nonce, &reason), INA_PARSE_OK);
        CHECK(nonce == cases[i].nonce);
        CHECK_EQ_INT(reason, cases[i].reason);
    }
    /* Layout: reason -1003 = 0xFFFFFC15 at bytes 8..11. */
    ina__nak_encode(b, 0x0102030405060708ull, -1003);
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(b[i], i + 1);
    CHECK_EQ_INT(b[8], 0xFF);
    CHECK_EQ_INT(b[9], 0xFF);
    CHECK_EQ_INT(b[10], 0xFC);
    CHECK_EQ_INT(b[11], 0x15);
    CHECK_EQ_INT(INA_ERR_REJECTED, -1003);
    for (size_t len = 0; len < INA_NAK_BODY_LEN; len++)
        CHECK_EQ_INT(ina__nak_decode(b, len, &nonce, &reason), INA_PARSE_LENGTH);
}

int main(void)
{
    test_round_trip_extremes();
    test_byte_positions();
    test_decode_errors();
    test_join_body();
    test_nak_body();
    return check_report("test_wire");
}
