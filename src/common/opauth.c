/* opauth.c: the operator view's proofs of the shared secret: the read token, challenges, signed acts (opauth.h). */
#include "common/opauth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#define OP_LABEL "ina operator v1"
#define READ_LABEL "read"
#define CHAL_RAW 32 /* time (8), random (8), MAC (16) */

static void to_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Exactly 2n hex digits at s into p. @return 0 or -1. */
static int from_hex(const char *s, uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(s[2 * i]), lo = hi < 0 ? -1 : hex_digit(s[2 * i + 1]);
        if (lo < 0)
            return -1;
        p[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void ina__opauth_key(struct ina_hmac_key *op, const struct ina_hmac_key *secret)
{
    uint8_t k[INA_SHA256_LEN];
    ina__hmac_sha256(secret, OP_LABEL, sizeof(OP_LABEL) - 1, k);
    ina__hmac_key_init(op, k, sizeof(k));
}

void ina__opauth_read_token(const struct ina_hmac_key *op, char out[INA_OPAUTH_HEX + 1])
{
    uint8_t t[INA_SHA256_LEN];
    ina__hmac_sha256(op, READ_LABEL, sizeof(READ_LABEL) - 1, t);
    to_hex(t, sizeof(t), out);
}

/* HMAC(K, "INA-HMAC-SHA256\n" METHOD "\n" TARGET "\n" CHALLENGE). */
static void act_mac(const struct ina_hmac_key *op, const char *method, const char *target,
                    const char *challenge, uint8_t out[INA_SHA256_LEN])
{
    struct ina_hmac m;
    ina__hmac_init(&m, op);
    ina__hmac_update(&m, INA_OPAUTH_SCHEME "\n", sizeof(INA_OPAUTH_SCHEME));
    ina__hmac_update(&m, method, strlen(method));
    ina__hmac_update(&m, "\n", 1);
    ina__hmac_update(&m, target, strlen(target));
    ina__hmac_update(&m, "\n", 1);
    ina__hmac_update(&m, challenge, INA_OPAUTH_HEX);
    ina__hmac_final(&m, out);
}

void ina__opauth_sign(const struct ina_hmac_key *op, const char *method, const char *target,
                     const char *challenge, char out[INA_OPAUTH_HEADER_LEN])
{
    uint8_t mac[INA_SHA256_LEN];
    char hex[INA_OPAUTH_HEX + 1];
    act_mac(op, method, target, challenge, mac);
    to_hex(mac, sizeof(mac), hex);
    snprintf(out, INA_OPAUTH_HEADER_LEN, INA_OPAUTH_SCHEME " c=%.*s,mac=%s", INA_OPAUTH_HEX,
             challenge, hex);
}

int ina__opauth_init(struct ina_opauth *a)
{
    uint8_t k[INA_SHA256_LEN];
    memset(a, 0, sizeof(*a));
    if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k))
        return -(errno ? errno : EIO);
    ina__hmac_key_init(&a->chal_key, k, sizeof(k));
    return 0;
}

/* The MAC part of a challenge over its time and random bytes. */
static void chal_mac(const struct ina_opauth *a, const uint8_t raw[16], uint8_t out[16])
{
    uint8_t full[INA_SHA256_LEN];
    ina__hmac_sha256(&a->chal_key, raw, 16, full);
    memcpy(out, full, 16);
}

int ina__opauth_challenge(const struct ina_opauth *a, uint64_t now_ms,
                         char out[INA_OPAUTH_HEX + 1])
{
    uint8_t raw[CHAL_RAW];
    for (int i = 0; i < 8; i++)
        raw[i] = (uint8_t)(now_ms >> (56 - 8 * i));
    if (getrandom(raw + 8, 8, 0) != 8)
        return -(errno ? errno : EIO);
    chal_mac(a, raw, raw + 16);
    to_hex(raw, sizeof(raw), out);
    return 0;
}

/* Remember a challenge as used until it expires. @return 0, 1 if it was
 * used already, -1 if the memory is full of live ones. */
static int chal_use(struct ina_opauth *a, const uint8_t raw[16], uint64_t t_ms, uint64_t now_ms)
{
    int free_at = -1;
    for (int i = 0; i < INA_OPAUTH_USED; i++) {
        if (a->used[i].t_ms && now_ms - a->used[i].t_ms > INA_OPAUTH_CHALLENGE_MS)
            a->used[i].t_ms = 0; /* expired: a replay of it is refused as stale */
        if (!a->used[i].t_ms) {
            if (free_at < 0)
                free_at = i;
        } else if (memcmp(a->used[i].id, raw, 16) == 0) {
            return 1;
        }
    }
    if (free_at < 0)
        return -1;
    a->used[free_at].t_ms = t_ms ? t_ms : 1;
    memcpy(a->used[free_at].id, raw, 16);
    return 0;
}

static enum ina_opauth_verdict check_signed(struct ina_opauth *a, const struct ina_hmac_key *op,
                                            const char *v, const char *method,
                                            const char *target, uint64_t now_ms)
{
    /* c=<64 hex>,mac=<64 hex>, nothing else */
    const size_t mac_at = 2 + INA_OPAUTH_HEX + 5;
    uint8_t raw[CHAL_RAW], want[INA_SHA256_LEN], got[INA_SHA256_LEN], cm[16];
    if (strlen(v) != mac_at + INA_OPAUTH_HEX || strncmp(v, "c=", 2) != 0 ||
        strncmp(v + 2 + INA_OPAUTH_HEX, ",mac=", 5) != 0 ||
        from_hex(v + 2, raw, sizeof(raw)) != 0 || from_hex(v + mac_at, got, sizeof(got)) != 0)
        return INA_OPAUTH_BAD;
    act_mac(op, method, target, v + 2, want);
    if (!ina__mem_equal_ct(want, got, sizeof(want)))
        return INA_OPAUTH_BAD;
    /* Signed by someone with the secret: is the challenge ours, fresh and unused? */
    chal_mac(a, raw, cm);
    uint64_t t = 0;
    for (int i = 0; i < 8; i++)
        t = t << 8 | raw[i];
    if (!ina__mem_equal_ct(cm, raw + 16, sizeof(cm)) || t > now_ms ||
        now_ms - t > INA_OPAUTH_CHALLENGE_MS)
        return INA_OPAUTH_STALE;
    int used = chal_use(a, raw, t, now_ms);
    return used > 0 ? INA_OPAUTH_REPLAY : used < 0 ? INA_OPAUTH_BUSY : INA_OPAUTH_ACT;
}

enum ina_opauth_verdict ina__opauth_check(struct ina_opauth *a, const struct ina_hmac_key *op,
                                         const char *authorization, const char *method,
                                         const char *target, uint64_t now_ms)
{
    if (!authorization)
        return INA_OPAUTH_NONE;
    const char *v = authorization;
    /* Scheme names are case-insensitive (RFC 9110 11.1). */
    if (strncasecmp(v, "Bearer ", 7) == 0) {
        char want[INA_OPAUTH_HEX + 1];
        uint8_t w[INA_SHA256_LEN], g[INA_SHA256_LEN];
        ina__opauth_read_token(op, want);
        v += 7;
        if (strlen(v) != INA_OPAUTH_HEX || from_hex(v, g, sizeof(g)) != 0)
            return INA_OPAUTH_BAD;
        from_hex(want, w, sizeof(w));
        return ina__mem_equal_ct(w, g, sizeof(w)) ? INA_OPAUTH_READ : INA_OPAUTH_BAD;
    }
    if (strncasecmp(v, INA_OPAUTH_SCHEME " ", sizeof(INA_OPAUTH_SCHEME)) == 0)
        return check_signed(a, op, v + sizeof(INA_OPAUTH_SCHEME), method, target, now_ms);
    return INA_OPAUTH_BAD;
}

const char *ina__opauth_why(enum ina_opauth_verdict v)
{
    switch (v) {
    case INA_OPAUTH_NONE:
        return "this needs proof of the switch's shared secret (--secret-file): "
               "ina-ctl --secret-file F, or Authorization: Bearer <read token> to read";
    case INA_OPAUTH_READ:
        return "a read token only reads: acting needs a signed request (ina-ctl --secret-file F)";
    case INA_OPAUTH_BAD:
        return "wrong proof of the shared secret (another secret, or a malformed "
               "Authorization header)";
    case INA_OPAUTH_STALE:
        return "the challenge is older than 10 s or not this server's: get a new one "
               "(GET /challenge)";
    case INA_OPAUTH_REPLAY:
        return "the challenge was used already: get a new one (GET /challenge)";
    case INA_OPAUTH_BUSY:
        return "too many signed requests in the last 10 s: try again";
    default:
        return "accepted";
    }
}

const char *ina__opauth_name(enum ina_opauth_verdict v)
{
    static const char *const names[] = {"none", "read", "act", "bad", "stale", "replay", "busy"};
    return (unsigned)v < sizeof(names) / sizeof(names[0]) ? names[v] : "?";
}
