/* test_shm_ring.c: the shared-memory rings (src/common/shm_ring.c): both sides in one process, wraparound, full, lengths, hostile indices, sleep/wake, what attach refuses. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/shm_ring.h"

#define NSLOTS 8
#define SLOT 128

/* A worker side (w) and a switch side (s) of one object. */
static void open_pair(struct ina_shm *w, struct ina_shm *s, char *name)
{
    CHECK_EQ_INT(ina_shm_create(w, name, NSLOTS, SLOT), 0);
    CHECK(ina_shm_name_valid(name));
    CHECK_EQ_INT(ina_shm_attach(s, name, NSLOTS, SLOT), 0);
}

static void test_roundtrip(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    open_pair(&w, &s, name);
    ina_shm_unlink(name); /* both mapped: the name is no longer needed */
    int bad = 0;
    /* 5 laps of the ring, in bursts of 1..NSLOTS, both directions. */
    uint32_t seq_out = 0, seq_in = 0;
    for (int burst = 0; burst < 40; burst++) {
        int n = 1 + burst % NSLOTS;
        for (int i = 0; i < n; i++) {
            uint8_t *slot = ina_shm_slot(&w, 1);
            CHECK(slot != NULL);
            if (!slot)
                return;
            size_t len = 1 + (seq_out * 7) % (SLOT - 4);
            memset(slot, (int)(seq_out & 0xFF), len);
            memcpy(slot, &seq_out, 4 < len ? 4 : len);
            ina_shm_push(&w, 1, len);
            seq_out++;
        }
        CHECK(ina_shm_readable(&s, 1));
        size_t len;
        const uint8_t *p;
        while ((p = ina_shm_peek(&s, 1, &len)) != NULL) {
            size_t want = 1 + (seq_in * 7) % (SLOT - 4);
            bad += len != want || p[len - 1] != (uint8_t)(len > 4 ? seq_in & 0xFF : p[len - 1]);
            ina_shm_pop(&s, 1);
            seq_in++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(seq_in, seq_out);
    /* Full: NSLOTS entries fit, the next does not, until one is read. */
    for (int i = 0; i < NSLOTS; i++) {
        uint8_t *slot = ina_shm_slot(&s, 0);
        CHECK(slot != NULL);
        if (slot)
            ina_shm_push(&s, 0, 10);
    }
    CHECK(ina_shm_slot(&s, 0) == NULL);
    size_t len;
    CHECK(ina_shm_peek(&w, 0, &len) != NULL && len == 10);
    ina_shm_pop(&w, 0);
    CHECK(ina_shm_slot(&s, 0) != NULL);
    CHECK(!w.corrupt && !s.corrupt);
    ina_shm_unmap(&w);
    ina_shm_unmap(&s);
}

/* The peer writes nonsense: a length past the slot reads as empty; indices
 * that make no sense mark the ring corrupt and nothing is read or written. */
static void test_hostile(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    open_pair(&w, &s, name);
    ina_shm_unlink(name);
    uint8_t *slot = ina_shm_slot(&w, 1);
    CHECK(slot != NULL);
    ina_shm_push(&w, 1, 16);
    uint32_t huge = 0xFFFFFFF0u; /* overwrite the length after publishing */
    memcpy(s.up_slots, &huge, 4);
    size_t len = 99;
    CHECK(ina_shm_peek(&s, 1, &len) != NULL && len == 0);
    ina_shm_pop(&s, 1);
    /* tail far ahead of head: corrupt */
    atomic_store(&w.hdr->up.tail, (uint64_t)1 << 40);
    CHECK(ina_shm_peek(&s, 1, &len) == NULL);
    CHECK(s.corrupt);
    CHECK(!ina_shm_readable(&s, 1));
    /* a consumer index ahead of the producer's: corrupt for the producer */
    atomic_store(&s.hdr->down.head, 5);
    CHECK(ina_shm_slot(&s, 0) == NULL); /* s is corrupt already */
    CHECK(ina_shm_slot(&w, 1) != NULL || w.corrupt);
    struct ina_shm w2, s2;
    char name2[INA_SHM_NAME_MAX];
    open_pair(&w2, &s2, name2);
    ina_shm_unlink(name2);
    atomic_store(&w2.hdr->down.head, 3); /* worker claims to have read 3 of 0 */
    CHECK(ina_shm_slot(&s2, 0) == NULL);
    CHECK(s2.corrupt);
    ina_shm_unmap(&w);
    ina_shm_unmap(&s);
    ina_shm_unmap(&w2);
    ina_shm_unmap(&s2);
}

/* No lost wake-up: a consumer that prepared to sleep is either told data is
 * there, or the producer is told to ring. */
static void test_sleep_wake(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    open_pair(&w, &s, name);
    ina_shm_unlink(name);
    CHECK_EQ_INT(ina_shm_wake_needed(&w, 1), 0);    /* nobody asleep */
    CHECK_EQ_INT(ina_shm_sleep_prepare(&s, 1), 1);  /* empty: sleep */
    ina_shm_push(&w, 1, (ina_shm_slot(&w, 1), 8));
    CHECK_EQ_INT(ina_shm_wake_needed(&w, 1), 1);    /* ring it */
    CHECK_EQ_INT(ina_shm_wake_needed(&w, 1), 0);    /* once */
    CHECK_EQ_INT(ina_shm_sleep_prepare(&s, 1), 0);  /* data there: do not sleep */
    CHECK_EQ_INT(ina_shm_wake_needed(&w, 1), 0);    /* and the flag was cleared */
    ina_shm_unmap(&w);
    ina_shm_unmap(&s);
}

/* Attach refuses what is not a private ring of the stated geometry. */
static void test_attach_refusals(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    CHECK_EQ_INT(ina_shm_create(&w, name, NSLOTS, SLOT), 0);
    CHECK_EQ_INT(ina_shm_attach(&s, name, NSLOTS * 2, SLOT), -EPROTO); /* other geometry */
    CHECK_EQ_INT(ina_shm_attach(&s, name, NSLOTS, SLOT + 64), -EPROTO);
    CHECK_EQ_INT(ina_shm_attach(&s, "/etc/passwd", NSLOTS, SLOT), -EINVAL); /* name pattern */
    CHECK_EQ_INT(ina_shm_attach(&s, "/ina.0.0123456789abcdeg", NSLOTS, SLOT), -EINVAL);
    CHECK_EQ_INT(ina_shm_attach(&s, "/ina.0.0123456789abcdef/x", NSLOTS, SLOT), -EINVAL);
    CHECK_EQ_INT(ina_shm_attach(&s, "/ina.0.0123456789abcdef", 3, SLOT), -EINVAL);
    CHECK_EQ_INT(ina_shm_attach(&s, "/ina.0.00000000deadbeef", NSLOTS, SLOT), -ENOENT);
    int fd = shm_open(name, O_RDWR, 0);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_EQ_INT(fchmod(fd, 0644), 0); /* readable by others: not private */
        CHECK_EQ_INT(ina_shm_attach(&s, name, NSLOTS, SLOT), -EPERM);
        CHECK_EQ_INT(fchmod(fd, 0600), 0);
        w.hdr->magic = 0; /* not a ring */
        CHECK_EQ_INT(ina_shm_attach(&s, name, NSLOTS, SLOT), -EPROTO);
        w.hdr->magic = INA_SHM_MAGIC;
        CHECK_EQ_INT(ina_shm_attach(&s, name, NSLOTS, SLOT), 0);
        ina_shm_unmap(&s);
        close(fd);
    }
    ina_shm_unlink(name);
    ina_shm_unmap(&w);
    char n2[INA_SHM_NAME_MAX];
    CHECK_EQ_INT(ina_shm_create(&w, n2, 3, SLOT), -EINVAL); /* not a power of 2 */
    CHECK_EQ_INT(ina_shm_create(&w, n2, NSLOTS, 100), -EINVAL); /* not a multiple of 64 */
    CHECK_EQ_INT(ina_shm_create(&w, n2, 8192, SLOT), -EINVAL);  /* more slots than a switch maps */
    CHECK_EQ_INT(ina_shm_create(&w, n2, NSLOTS, 65536 + 64), -EINVAL); /* past a datagram */
    CHECK_EQ_INT(ina_shm_attach(&s, "/ina.0.0123456789abcdef", 8192, SLOT), -EINVAL);
}

int main(void)
{
    struct ina_shm probe;
    char name[INA_SHM_NAME_MAX];
    int rc = ina_shm_create(&probe, name, NSLOTS, SLOT);
    if (rc != 0) {
        printf("test_shm_ring: SKIP: no POSIX shared memory here (%s)\n", strerror(-rc));
        return 77;
    }
    ina_shm_unlink(name);
    ina_shm_unmap(&probe);
    test_roundtrip();
    test_hostile();
    test_sleep_wake();
    test_attach_refusals();
    return check_report("test_shm_ring");
}
