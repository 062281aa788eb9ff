/* test_sha256.c: SHA-256 against FIPS 180-2 vectors, HMAC-SHA256 against RFC 4231, secret files. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/sha256.h"

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < INA_SHA256_LEN; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static int sha_is(const void *data, size_t len, const char *want)
{
    uint8_t d[INA_SHA256_LEN];
    char h[65];
    ina__sha256(data, len, d);
    hex(d, h);
    if (strcmp(h, want) != 0)
        fprintf(stderr, "sha256: got %s want %s\n", h, want);
    return strcmp(h, want) == 0;
}

static int hmac_is(const void *key, size_t klen, const void *data, size_t len, const char *want)
{
    struct ina_hmac_key k;
    uint8_t d[INA_SHA256_LEN];
    char h[65];
    ina__hmac_key_init(&k, key, klen);
    ina__hmac_sha256(&k, data, len, d);
    hex(d, h);
    if (strcmp(h, want) != 0)
        fprintf(stderr, "hmac: got %s want %s\n", h, want);
    return strcmp(h, want) == 0;
}

int main(void)
{
    /* FIPS 180-2 appendix B, and the empty message. */
    CHECK(sha_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CHECK(sha_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(sha_is(two, strlen(two),
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    /* One million 'a', fed in uneven pieces through the streaming API. */
    static uint8_t a[1000000];
    memset(a, 'a', sizeof(a));
    CHECK(sha_is(a, sizeof(a), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    struct ina_sha256 s;
    uint8_t d1[INA_SHA256_LEN], d2[INA_SHA256_LEN];
    ina__sha256_init(&s);
    for (size_t off = 0, step = 1; off < sizeof(a); off += step, step = step * 3 % 1000 + 1)
        ina__sha256_update(&s, a + off, off + step > sizeof(a) ? sizeof(a) - off : step);
    ina__sha256_final(&s, d1);
    ina__sha256(a, sizeof(a), d2);
    CHECK(memcmp(d1, d2, sizeof(d1)) == 0);
    /* Padding boundaries: 55, 56, 63, 64 bytes. */
    CHECK(sha_is(a, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"));
    CHECK(sha_is(a, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"));
    CHECK(sha_is(a, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"));

    /* RFC 4231 test cases 1, 2, 3, 4, 6, 7. */
    uint8_t k20[20], k131[131], d50[50], k25[25];
    memset(k20, 0x0b, sizeof(k20));
    CHECK(hmac_is(k20, 20, "Hi There", 8,
                  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
    CHECK(hmac_is("Jefe", 4, "what do ya want for nothing?", 28,
                  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
    memset(k20, 0xaa, sizeof(k20));
    memset(d50, 0xdd, sizeof(d50));
    CHECK(hmac_is(k20, 20, d50, 50,
                  "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"));
    for (int i = 0; i < 25; i++)
        k25[i] = (uint8_t)(i + 1);
    memset(d50, 0xcd, sizeof(d50));
    CHECK(hmac_is(k25, 25, d50, 50,
                  "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"));
    memset(k131, 0xaa, sizeof(k131));
    const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    CHECK(hmac_is(k131, 131, t6, strlen(t6),
                  "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
    const char *t7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the "
                     "HMAC algorithm.";
    CHECK(hmac_is(k131, 131, t7, strlen(t7),
                  "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"));

    CHECK(ina__mem_equal_ct("abcd", "abcd", 4));
    CHECK(!ina__mem_equal_ct("abcd", "abce", 4));

    /* Secret files: a trailing newline does not count; empty and missing files are errors. */
    char path[64];
    snprintf(path, sizeof(path), "/tmp/ina-test-secret.%d", (int)getpid());
    struct ina_hmac_key kf, kw;
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("Jefe\r\n", f);
        fclose(f);
    }
    CHECK_EQ_INT(ina__hmac_key_from_file(&kf, path), 0);
    ina__hmac_key_init(&kw, "Jefe", 4);
    CHECK(memcmp(kf.k, kw.k, sizeof(kf.k)) == 0);
    f = fopen(path, "w");
    if (f)
        fclose(f);
    CHECK_EQ_INT(ina__hmac_key_from_file(&kf, path), -EINVAL);
    unlink(path);
    CHECK_EQ_INT(ina__hmac_key_from_file(&kf, path), -ENOENT);
    return check_report("test_sha256");
}
