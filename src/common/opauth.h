/* opauth.h: proof of the shared secret on the operator view (ina-switch --metrics with --secret-file) and in its client, ina-ctl. */
#ifndef INA_OPAUTH_H
#define INA_OPAUTH_H


#include <stddef.h>
#include <stdint.h>

#include "common/sha256.h"

/*
 * Two proofs, both keyed with the operator key K = HMAC-SHA256(secret,
 * "ina operator v1"), never with the secret itself, so nothing the view
 * accepts is also a JOIN's MAC (docs/TOOLS.md, "Operator view and ina-ctl"):
 *
 *  - reading (GET /jobs, the per-job series of GET /metrics):
 *      Authorization: Bearer <hex HMAC-SHA256(K, "read")>
 *    a fixed token, as a Prometheus scraper can send one;
 *  - acting (POST /jobs/ID/abort, /evict; it reads too):
 *      Authorization: INA-HMAC-SHA256 c=<challenge>,mac=<hex HMAC-SHA256(K,
 *          "INA-HMAC-SHA256\n" METHOD "\n" TARGET "\n" <challenge>)>
 *    over a challenge the server handed out (GET /challenge) at most
 *    INA_OPAUTH_CHALLENGE_MS ago and has not seen used: a captured act
 *    cannot be played again, here or at another switch with the same secret,
 *    and no clocks need to agree.
 *
 * A challenge is 32 bytes, in hex: the server's monotonic time in ms (8 bytes,
 * big-endian), 8 random bytes, and the first 16 bytes of their HMAC under a
 * key the server drew at start, so it keeps nothing for challenges it hands
 * out, only for those used (INA_OPAUTH_USED, each for its 10 s).
 */
#define INA_OPAUTH_SCHEME "INA-HMAC-SHA256"
#define INA_OPAUTH_HEX (2 * INA_SHA256_LEN) /* a token, a MAC or a challenge in hex */
#define INA_OPAUTH_CHALLENGE_MS 10000
#define INA_OPAUTH_USED 64
/* "INA-HMAC-SHA256 c=<64 hex>,mac=<64 hex>" and its NUL */
#define INA_OPAUTH_HEADER_LEN (sizeof(INA_OPAUTH_SCHEME) + 3 + INA_OPAUTH_HEX + 5 + INA_OPAUTH_HEX)

/* The operator key K of a secret. */
void ina__opauth_key(struct ina_hmac_key *op, const struct ina_hmac_key *secret);
/* The read token: hex, NUL-terminated. */
void ina__opauth_read_token(const struct ina_hmac_key *op, char out[INA_OPAUTH_HEX + 1]);
/* The Authorization value of an act: METHOD TARGET over challenge (hex). */
void ina__opauth_sign(const struct ina_hmac_key *op, const char *method, const char *target,
                     const char *challenge, char out[INA_OPAUTH_HEADER_LEN]);

/* The server's side: its challenge key and the challenges used lately. */
struct ina_opauth {
    struct ina_hmac_key chal_key;
    struct {
        uint64_t t_ms; /* 0: a free entry */
        uint8_t id[16];
    } used[INA_OPAUTH_USED];
};

/* Draw the challenge key. @return 0, or -errno (no randomness). */
int ina__opauth_init(struct ina_opauth *a);
/* A fresh challenge at monotonic time now_ms, hex, NUL-terminated. @return 0,
 * or -errno (no randomness). */
int ina__opauth_challenge(const struct ina_opauth *a, uint64_t now_ms,
                         char out[INA_OPAUTH_HEX + 1]);

enum ina_opauth_verdict {
    INA_OPAUTH_NONE = 0, /* no Authorization header */
    INA_OPAUTH_READ,     /* the read token: may read */
    INA_OPAUTH_ACT,      /* a signed request (its challenge is now used): may read and act */
    INA_OPAUTH_BAD,      /* an unknown scheme, a malformed value, a wrong token or MAC */
    INA_OPAUTH_STALE,    /* a challenge older than INA_OPAUTH_CHALLENGE_MS, or not this server's */
    INA_OPAUTH_REPLAY,   /* a challenge used already */
    INA_OPAUTH_BUSY,     /* INA_OPAUTH_USED challenges used in the last 10 s: try again */
};

/*
 * Check an Authorization value (NULL: none) of METHOD TARGET against op at
 * monotonic time now_ms; a valid signed request marks its challenge used.
 */
enum ina_opauth_verdict ina__opauth_check(struct ina_opauth *a, const struct ina_hmac_key *op,
                                         const char *authorization, const char *method,
                                         const char *target, uint64_t now_ms);
/* Why a verdict refuses, for the 401 body; and its short name for logs
 * (none, read, act, bad, stale, replay, busy). */
const char *ina__opauth_why(enum ina_opauth_verdict v);
const char *ina__opauth_name(enum ina_opauth_verdict v);

#endif
