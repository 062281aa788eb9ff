/* test_mac.c: BLAKE2b against RFC 7693 and the BLAKE2 reference's keyed vectors, keyed 16-byte tags and session keys against Python's hashlib and hmac (PROTOCOL.md §4.6), and tag checking. */
#include <string.h>

#include "check.h"
#include "common/mac.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static int is_hex(const uint8_t *d, size_t n, const char *want, const char *what)
{
    char h[2 * INA_BLAKE2B_MAX_OUT + 1];
    hex(d, n, h);
    if (strcmp(h, want) != 0)
        fprintf(stderr, "%s: got %s want %s\n", what, h, want);
    return strcmp(h, want) == 0;
}

/* The message of the keyed vectors below: byte i is 7 i + 3 (mod 256). */
static void message(uint8_t *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        m[i] = (uint8_t)(i * 7 + 3);
}

int main(void)
{
    uint8_t out[64];
    /* RFC 7693, Appendix A: BLAKE2b-512("abc"); and the empty message. */
    ina__blake2b(out, 64, NULL, 0, "abc", 3);
    CHECK(is_hex(out, 64,
                 "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
                 "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923",
                 "rfc7693 abc"));
    ina__blake2b(out, 64, NULL, 0, "", 0);
    CHECK(is_hex(out, 64,
                 "786a02f742015903c6c6fd852552d272912f4740e15847618a86e217f71f5419"
                 "d25e1031afee585313896444934eb04b903a685b1448b755d56f701afe9be2ce",
                 "empty"));

    /* The reference implementation's keyed vectors (blake2b-kat.txt): key
     * 00 01 .. 3f, messages 00 01 .. of length 0 and 255. */
    uint8_t k64[64], m255[255];
    for (int i = 0; i < 64; i++)
        k64[i] = (uint8_t)i;
    for (int i = 0; i < 255; i++)
        m255[i] = (uint8_t)i;
    ina__blake2b(out, 64, k64, 64, "", 0);
    CHECK(is_hex(out, 64,
                 "10ebb67700b1868efb4417987acf4690ae9d972fb7a590c2f02871799aaa4786"
                 "b5e996e8f0f4eb981fc214b005f42d2ff4233499391653df7aefcbc13fc51568",
                 "kat 0"));
    ina__blake2b(out, 64, k64, 64, m255, 255);
    CHECK(is_hex(out, 64,
                 "142709d62e28fcccd0af97fad0f8465b971e82201dc51070faa0372aa43e9248"
                 "4be1c1e73ba10906d5d1853db6a4106e0a7bf9800d373d6dee2d46d62ef2a461",
                 "kat 255"));

    /* Tags: key 00 01 .. 1f, digest 16, across block boundaries and at the
     * sizes of 256- and 2048-element DATA (1056 and 8224 bytes), from
     * hashlib.blake2b(m, key=bytes(range(32)), digest_size=16). Each through
     * the session key's precomputed first block and through plain BLAKE2b,
     * whole and fed in pieces. */
    static const struct {
        size_t n;
        const char *tag;
    } v[] = {{1, "682b64a2070da39e4aaadc6ab1fbae02"},    {32, "3083905336523358001c2aefbe602105"},
             {127, "acd16ac52209cf491f859dd8f7995ada"},  {128, "7071ce5c0cfb5ef3bdc893e8607b660d"},
             {129, "9bce8b2cd4dea0b9619e31c5dc438e5f"},  {255, "12d3480bfd682b8d2af3fcaf328797d1"},
             {256, "4b0f032e23f9a39fda85f9a636576afd"},  {257, "41958f8086d166321ed6a0c4ec79a10c"},
             {1056, "1466eb2efa3cbff169485bc267ee44c0"}, {8224, "d38ac97c1fa2875dce409c6d7be9a68f"}};
    uint8_t key[32], m[8224 + INA_MAC_LEN];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)i;
    struct ina_mac_key mk;
    ina__mac_key_init(&mk, key);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        message(m, v[i].n);
        uint8_t tag[INA_MAC_LEN];
        ina__mac(&mk, m, v[i].n, tag);
        CHECK(is_hex(tag, INA_MAC_LEN, v[i].tag, "ina__mac"));
        ina__blake2b(tag, INA_MAC_LEN, key, 32, m, v[i].n);
        CHECK(is_hex(tag, INA_MAC_LEN, v[i].tag, "ina__blake2b keyed"));
        struct ina_blake2b s;
        ina__blake2b_init(&s, INA_MAC_LEN, key, 32);
        for (size_t off = 0; off < v[i].n; off += 61)
            ina__blake2b_update(&s, m + off, v[i].n - off < 61 ? v[i].n - off : 61);
        ina__blake2b_final(&s, tag);
        CHECK(is_hex(tag, INA_MAC_LEN, v[i].tag, "pieces"));
    }

    /* The session key (hmac.new(S, b"ina/session-key/v1" + ids, sha256)) and
     * a tagged datagram under it (hashlib), as PROTOCOL.md §4.6 writes them. */
    struct ina_hmac_key secret;
    const char *S = "correct horse battery staple";
    ina__hmac_key_init(&secret, S, strlen(S));
    uint8_t K[INA_SESSION_KEY_LEN];
    ina__session_key(K, &secret, 0x0005, 0x12345678u, 0x9abcdef0u);
    CHECK(is_hex(K, sizeof(K), "47a075ac531aabd34a3e277fcdd08e2ff6a7b76d6d43e6742b123a867cfe4fce",
                 "session key"));
    uint8_t dg[96 + INA_MAC_LEN];
    memcpy(dg, "\x49\x4e\x01\x02", 4);
    for (int i = 0; i < 28; i++)
        dg[4 + i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        dg[32 + i] = (uint8_t)(i * 13);
    ina__mac_key_derive(&mk, &secret, 0x0005, 0x12345678u, 0x9abcdef0u);
    CHECK_EQ_INT(ina__mac_append(&mk, dg, 96), 96 + INA_MAC_LEN);
    CHECK(is_hex(dg + 96, INA_MAC_LEN, "2dfb125e9edd47083f2e35b7b86216fb", "datagram tag"));

    /* Checking: the right tag gives the length without it; any flipped bit,
     * a missing tag, another session's key: 0. */
    CHECK_EQ_INT(ina__mac_strip(&mk, dg, sizeof(dg)), 96);
    int caught = 0;
    for (size_t bit = 0; bit < 8 * sizeof(dg); bit++) {
        dg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        caught += ina__mac_strip(&mk, dg, sizeof(dg)) == 0;
        dg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    CHECK_EQ_INT(caught, 8 * sizeof(dg));
    CHECK_EQ_INT(ina__mac_strip(&mk, dg, 96), 0);
    CHECK_EQ_INT(ina__mac_strip(&mk, dg, INA_MAC_LEN), 0);
    struct ina_mac_key other;
    ina__mac_key_derive(&other, &secret, 0x0005, 0x12345679u, 0x9abcdef0u);
    CHECK_EQ_INT(ina__mac_strip(&other, dg, sizeof(dg)), 0);
    return check_report("test_mac");
}
