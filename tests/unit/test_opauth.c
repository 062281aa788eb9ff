/* test_opauth.c: the operator view's proofs of the secret: the read token only reads, a signed act is bound to its method, target, challenge and server, and plays once. */
#include <string.h>

#include "check.h"
#include "common/opauth.h"

#define T0 5000000ull /* ms on the server's monotonic clock */

static struct ina_hmac_key key_of(const char *secret)
{
    struct ina_hmac_key s, op;
    ina__hmac_key_init(&s, secret, strlen(secret));
    ina__opauth_key(&op, &s);
    return op;
}

static enum ina_opauth_verdict check(struct ina_opauth *a, const struct ina_hmac_key *op,
                                     const char *auth, const char *method, const char *target,
                                     uint64_t now)
{
    return ina__opauth_check(a, op, auth, method, target, now);
}

/* A signed act of op over a fresh challenge of a at time t. */
static void act(const struct ina_opauth *a, const struct ina_hmac_key *op, const char *method,
                const char *target, uint64_t t, char out[INA_OPAUTH_HEADER_LEN])
{
    char c[INA_OPAUTH_HEX + 1];
    CHECK_EQ_INT(ina__opauth_challenge(a, t, c), 0);
    CHECK_EQ_INT(strlen(c), INA_OPAUTH_HEX);
    ina__opauth_sign(op, method, target, c, out);
}

int main(void)
{
    struct ina_hmac_key op = key_of("s3cret"), other = key_of("another");
    struct ina_opauth a, b;
    CHECK_EQ_INT(ina__opauth_init(&a), 0);
    CHECK_EQ_INT(ina__opauth_init(&b), 0);

    /* The read token is HMAC(HMAC(secret, "ina operator v1"), "read") in hex
     * (docs/TOOLS.md gives the same recipe with openssl). */
    char token[INA_OPAUTH_HEX + 1], bearer[80];
    ina__opauth_read_token(&op, token);
    CHECK(strcmp(token, "ce4ce965813220e54e2eeaf2aad2bc8729ddda94c6e2b3b900ede5b719828d17") == 0);
    snprintf(bearer, sizeof(bearer), "Bearer %s", token);
    CHECK_EQ_INT(check(&a, &op, NULL, "GET", "/jobs", T0), INA_OPAUTH_NONE);
    CHECK_EQ_INT(check(&a, &op, bearer, "GET", "/jobs", T0), INA_OPAUTH_READ);
    bearer[0] = 'b'; /* scheme names are case-insensitive */
    CHECK_EQ_INT(check(&a, &op, bearer, "GET", "/jobs", T0), INA_OPAUTH_READ);
    CHECK_EQ_INT(check(&a, &other, bearer, "GET", "/jobs", T0), INA_OPAUTH_BAD);
    /* It stays a read token on a POST: the view refuses acts with it. */
    CHECK_EQ_INT(check(&a, &op, bearer, "POST", "/jobs/1/abort", T0), INA_OPAUTH_READ);
    bearer[20] ^= 1;
    CHECK_EQ_INT(check(&a, &op, bearer, "GET", "/jobs", T0), INA_OPAUTH_BAD);

    /* A signed act: accepted once, at this server, for this method and target. */
    char h[INA_OPAUTH_HEADER_LEN];
    act(&a, &op, "POST", "/jobs/3/abort", T0, h);
    CHECK_EQ_INT(strncmp(h, "INA-HMAC-SHA256 c=", 18), 0);
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/4/abort", T0 + 1), INA_OPAUTH_BAD);
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/3/evict", T0 + 1), INA_OPAUTH_BAD);
    CHECK_EQ_INT(check(&a, &op, h, "GET", "/jobs/3/abort", T0 + 1), INA_OPAUTH_BAD);
    CHECK_EQ_INT(check(&a, &other, h, "POST", "/jobs/3/abort", T0 + 1), INA_OPAUTH_BAD);
    CHECK_EQ_INT(check(&b, &op, h, "POST", "/jobs/3/abort", T0 + 1), INA_OPAUTH_STALE);
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/3/abort", T0 + 1), INA_OPAUTH_ACT);
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/3/abort", T0 + 2), INA_OPAUTH_REPLAY);
    /* Still refused once the memory of it is gone: the challenge is too old by then. */
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/3/abort", T0 + INA_OPAUTH_CHALLENGE_MS + 1),
                 INA_OPAUTH_STALE);

    /* A challenge used at its last millisecond, and one from the future (another clock). */
    act(&a, &op, "POST", "/jobs/3/evict", T0, h);
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/3/evict", T0 + INA_OPAUTH_CHALLENGE_MS),
                 INA_OPAUTH_ACT);
    act(&a, &op, "POST", "/jobs/3/evict", T0 + 100, h);
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/3/evict", T0), INA_OPAUTH_STALE);

    /* A forged challenge (its MAC part changed), correctly signed: not this server's. */
    act(&a, &op, "POST", "/jobs/5/abort", T0, h);
    char forged[INA_OPAUTH_HEADER_LEN], c[INA_OPAUTH_HEX + 1];
    memcpy(c, h + 18, INA_OPAUTH_HEX);
    c[INA_OPAUTH_HEX] = '\0';
    c[INA_OPAUTH_HEX - 1] = c[INA_OPAUTH_HEX - 1] == '0' ? '1' : '0';
    ina__opauth_sign(&op, "POST", "/jobs/5/abort", c, forged);
    CHECK_EQ_INT(check(&a, &op, forged, "POST", "/jobs/5/abort", T0), INA_OPAUTH_STALE);

    /* Malformed values: refused, never read past their end. */
    static const char *const bad[] = {
        "", "Bearer", "Bearer ", "bearer 00", "Basic dXNlcjpwYXNz", "INA-HMAC-SHA256",
        "INA-HMAC-SHA256 ", "INA-HMAC-SHA256 c=", "INA-HMAC-SHA256 c=00,mac=00",
        "INA-HMAC-SHA256 mac=00,c=00",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ_INT(check(&a, &op, bad[i], "POST", "/jobs/5/abort", T0), INA_OPAUTH_BAD);
    char mangled[INA_OPAUTH_HEADER_LEN + 8];
    snprintf(mangled, sizeof(mangled), "%s ", h); /* a trailing blank */
    CHECK_EQ_INT(check(&a, &op, mangled, "POST", "/jobs/5/abort", T0), INA_OPAUTH_BAD);
    snprintf(mangled, sizeof(mangled), "%s", h);
    mangled[40] = 'g'; /* not hex */
    CHECK_EQ_INT(check(&a, &op, mangled, "POST", "/jobs/5/abort", T0), INA_OPAUTH_BAD);
    snprintf(mangled, sizeof(mangled), "%.*s", (int)strlen(h) - 1, h); /* one digit short */
    CHECK_EQ_INT(check(&a, &op, mangled, "POST", "/jobs/5/abort", T0), INA_OPAUTH_BAD);
    CHECK_EQ_INT(check(&a, &op, h, "POST", "/jobs/5/abort", T0), INA_OPAUTH_ACT);

    /* The memory of used challenges is bounded: full of live ones, a new act
     * waits (BUSY); once they expire there is room again. Only signed acts fill it. */
    struct ina_opauth f;
    CHECK_EQ_INT(ina__opauth_init(&f), 0);
    for (int i = 0; i < INA_OPAUTH_USED; i++) {
        act(&f, &op, "POST", "/jobs/1/abort", T0, h);
        CHECK_EQ_INT(check(&f, &op, h, "POST", "/jobs/1/abort", T0), INA_OPAUTH_ACT);
    }
    act(&f, &op, "POST", "/jobs/1/abort", T0, h);
    CHECK_EQ_INT(check(&f, &other, h, "POST", "/jobs/1/abort", T0), INA_OPAUTH_BAD);
    CHECK_EQ_INT(check(&f, &op, h, "POST", "/jobs/1/abort", T0 + 5), INA_OPAUTH_BUSY);
    act(&f, &op, "POST", "/jobs/1/abort", T0 + INA_OPAUTH_CHALLENGE_MS + 1, h);
    CHECK_EQ_INT(check(&f, &op, h, "POST", "/jobs/1/abort", T0 + INA_OPAUTH_CHALLENGE_MS + 1),
                 INA_OPAUTH_ACT);

    for (int v = INA_OPAUTH_NONE; v <= INA_OPAUTH_BUSY; v++)
        CHECK(strlen(ina__opauth_why(v)) > 0 && strcmp(ina__opauth_name(v), "?") != 0);
    return check_report("test_opauth");
}
