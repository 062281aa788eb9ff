/* sha256.h: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the shared-secret JOIN extension. */
#ifndef INA_SHA256_H
#define INA_SHA256_H


#include <stddef.h>
#include <stdint.h>

#define INA_SHA256_LEN 32
#define INA_SHA256_BLOCK 64

struct ina_sha256 {
    uint32_t h[8];
    uint64_t len;   /* bytes hashed so far */
    uint8_t buf[INA_SHA256_BLOCK];
    unsigned nbuf;
};

void ina__sha256_init(struct ina_sha256 *s);
void ina__sha256_update(struct ina_sha256 *s, const void *data, size_t len);
void ina__sha256_final(struct ina_sha256 *s, uint8_t out[INA_SHA256_LEN]);
void ina__sha256(const void *data, size_t len, uint8_t out[INA_SHA256_LEN]);

/* An HMAC key, already padded to one block (a key longer than a block is
 * hashed first, RFC 2104). */
struct ina_hmac_key {
    uint8_t k[INA_SHA256_BLOCK];
};

struct ina_hmac {
    struct ina_sha256 inner;
    const struct ina_hmac_key *key;
};

void ina__hmac_key_init(struct ina_hmac_key *key, const void *secret, size_t len);
void ina__hmac_init(struct ina_hmac *m, const struct ina_hmac_key *key);
void ina__hmac_update(struct ina_hmac *m, const void *data, size_t len);
void ina__hmac_final(struct ina_hmac *m, uint8_t out[INA_SHA256_LEN]);
void ina__hmac_sha256(const struct ina_hmac_key *key, const void *data, size_t len,
                     uint8_t out[INA_SHA256_LEN]);

/* Compare n bytes in time independent of where they differ. @return 1 if equal. */
int ina__mem_equal_ct(const void *a, const void *b, size_t n);

/*
 * Read a shared secret from a file: its whole content, less trailing CR/LF
 * characters (so `echo secret > file` and `printf secret > file` agree), at
 * most 4096 bytes, not empty. @return 0, -errno if unreadable, -EINVAL if
 * empty or too long.
 */
int ina__hmac_key_from_file(struct ina_hmac_key *key, const char *path);

#endif
