/* blake2b.h: BLAKE2b (RFC 7693), keyed, for the tags of a session's datagrams (PROTOCOL.md §4.6). */
#ifndef INA_BLAKE2B_H
#define INA_BLAKE2B_H


#include <stddef.h>
#include <stdint.h>

#define INA_BLAKE2B_BLOCK 128
#define INA_BLAKE2B_MAX_OUT 64
#define INA_BLAKE2B_MAX_KEY 64

/* Why BLAKE2b: a MAC in one pass (no HMAC double hashing), portable C at
 * about 3 cycles per byte on 64-bit CPUs, and in Python's hashlib, so that a
 * peer written from the protocol text computes the same tags. */
struct ina_blake2b {
    uint64_t h[8];
    uint64_t t;  /* bytes compressed so far (a datagram never reaches 2^64) */
    size_t c;    /* bytes in buf */
    size_t outlen;
    uint8_t buf[INA_BLAKE2B_BLOCK];
};

/* outlen 1..64, keylen 0..64 (0: unkeyed). */
void ina__blake2b_init(struct ina_blake2b *s, size_t outlen, const void *key, size_t keylen);
void ina__blake2b_update(struct ina_blake2b *s, const void *in, size_t len);
void ina__blake2b_final(struct ina_blake2b *s, uint8_t *out);
void ina__blake2b(uint8_t *out, size_t outlen, const void *key, size_t keylen, const void *in,
                 size_t len);

#endif
