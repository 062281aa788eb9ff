/* mac.c: session keys and datagram tags; see mac.h. */
#include "common/mac.h"

#include <string.h>

#include "common/wire.h"

void ina__session_key(uint8_t out[INA_SESSION_KEY_LEN], const struct ina_hmac_key *secret,
                     uint16_t job, uint32_t session, uint32_t token)
{
    uint8_t ids[10];
    ina__put16(ids, job);
    ina__put32(ids + 2, session);
    ina__put32(ids + 6, token);
    struct ina_hmac m;
    ina__hmac_init(&m, secret);
    ina__hmac_update(&m, INA_SESSION_KEY_LABEL, sizeof(INA_SESSION_KEY_LABEL) - 1);
    ina__hmac_update(&m, ids, sizeof(ids));
    ina__hmac_final(&m, out);
}

void ina__mac_key_init(struct ina_mac_key *k, const uint8_t key[INA_SESSION_KEY_LEN])
{
    ina__blake2b_init(&k->s, INA_MAC_LEN, key, INA_SESSION_KEY_LEN);
    /* Compress the key block now: a tagged datagram is never empty, so the
     * key block is never the last one, and each tag saves a compression. */
    struct ina_blake2b once = k->s;
    uint8_t one = 0;
    ina__blake2b_update(&once, &one, 1); /* compresses the key block (not last) */
    memcpy(k->s.h, once.h, sizeof(k->s.h));
    k->s.t = once.t; /* the key's 128 bytes */
    k->s.c = 0;
    memset(k->s.buf, 0, sizeof(k->s.buf));
}

void ina__mac_key_derive(struct ina_mac_key *k, const struct ina_hmac_key *secret, uint16_t job,
                        uint32_t session, uint32_t token)
{
    uint8_t key[INA_SESSION_KEY_LEN];
    ina__session_key(key, secret, job, session, token);
    ina__mac_key_init(k, key);
    memset(key, 0, sizeof(key));
}

void ina__mac(const struct ina_mac_key *k, const void *data, size_t len, uint8_t tag[INA_MAC_LEN])
{
    struct ina_blake2b s = k->s;
    ina__blake2b_update(&s, data, len);
    ina__blake2b_final(&s, tag);
}

size_t ina__mac_append(const struct ina_mac_key *k, uint8_t *buf, size_t len)
{
    ina__mac(k, buf, len, buf + len);
    return len + INA_MAC_LEN;
}

size_t ina__mac_strip(const struct ina_mac_key *k, const uint8_t *buf, size_t len)
{
    if (len <= INA_MAC_LEN)
        return 0;
    uint8_t tag[INA_MAC_LEN];
    ina__mac(k, buf, len - INA_MAC_LEN, tag);
    return ina__mem_equal_ct(tag, buf + len - INA_MAC_LEN, INA_MAC_LEN) ? len - INA_MAC_LEN : 0;
}
