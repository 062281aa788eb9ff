/* mac.h: a session's key and the 16-byte tags of its datagrams (docs/PROTOCOL.md §4.6). */
#ifndef INA_MAC_H
#define INA_MAC_H


/*
 * With a shared secret S (--secret-file), the switch and each worker derive
 * one key per session from S and what the JOIN_ACK says, which only holders
 * of S can do:
 *   K = HMAC-SHA256(S, "ina/session-key/v1" || job || session || token)
 * (job 2 bytes, session and token 4, big-endian). A tagged datagram is the
 * datagram, then its tag: the first 16 bytes of keyed BLAKE2b (key K, digest
 * length 16) over every byte before the tag. Which datagrams carry one:
 * §4.6 (a session that multicasts its results, and every DATA and RESULT
 * under per-packet integrity).
 */

#include <stddef.h>
#include <stdint.h>

#include "common/blake2b.h"
#include "common/sha256.h"
#include "common/wire.h" /* INA_MAC_LEN */

#define INA_SESSION_KEY_LEN 32
#define INA_SESSION_KEY_LABEL "ina/session-key/v1"

/* A session's key, with its first BLAKE2b block (the key) already compressed:
 * every tag then costs the datagram's blocks only. */
struct ina_mac_key {
    struct ina_blake2b s;
};

/* K of (S, job, session, token) into out (32 bytes). */
void ina__session_key(uint8_t out[INA_SESSION_KEY_LEN], const struct ina_hmac_key *secret,
                     uint16_t job, uint32_t session, uint32_t token);
void ina__mac_key_init(struct ina_mac_key *k, const uint8_t key[INA_SESSION_KEY_LEN]);
/* K of (S, job, session, token), ready to tag with. */
void ina__mac_key_derive(struct ina_mac_key *k, const struct ina_hmac_key *secret, uint16_t job,
                        uint32_t session, uint32_t token);

/* The tag of len >= 1 bytes. */
void ina__mac(const struct ina_mac_key *k, const void *data, size_t len, uint8_t tag[INA_MAC_LEN]);

/* Write the tag of buf's len bytes after them. @return len + INA_MAC_LEN. */
size_t ina__mac_append(const struct ina_mac_key *k, uint8_t *buf, size_t len);

/* A tagged datagram of len bytes: @return the length without its tag if the
 * tag is right (compared in constant time), else 0. */
size_t ina__mac_strip(const struct ina_mac_key *k, const uint8_t *buf, size_t len);

#endif
