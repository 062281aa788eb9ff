/* test_shm_ring.c: the shared-memory rings (src/common/shm_ring.c): both sides in one process, wraparound, full, lengths, hostile indices, sleep/wake, the seal check, what attach refuses, the fault guard. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/shm_ring.h"

#define NSLOTS 8
#define SLOT 128

/* A worker side (w) and a switch side (s) of one object; the worker's
 * descriptor is closed once the switch has its mapping, as libina does. */
static void open_pair(struct ina_shm *w, struct ina_shm *s, char *name)
{
    int fd;
    CHECK_EQ_INT(ina__ring_create(w, name, &fd, NSLOTS, SLOT), 0);
    CHECK(ina__ring_name_valid(name));
    CHECK_EQ_INT(ina__ring_attach(s, name, (uint32_t)getpid(), (uint32_t)fd, NSLOTS, SLOT), 0);
    close(fd);
}

static void test_roundtrip(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    open_pair(&w, &s, name);
    int bad = 0;
    /* 5 laps of the ring, in bursts of 1..NSLOTS, both directions. */
    uint32_t seq_out = 0, seq_in = 0;
    for (int burst = 0; burst < 40; burst++) {
        int n = 1 + burst % NSLOTS;
        for (int i = 0; i < n; i++) {
            uint8_t *slot = ina__ring_slot(&w, 1);
            CHECK(slot != NULL);
            if (!slot)
                return;
            size_t len = 1 + (seq_out * 7) % (SLOT - 4);
            memset(slot, (int)(seq_out & 0xFF), len);
            memcpy(slot, &seq_out, 4 < len ? 4 : len);
            ina__ring_push(&w, 1, len);
            seq_out++;
        }
        CHECK(ina__ring_readable(&s, 1));
        size_t len;
        const uint8_t *p;
        while ((p = ina__ring_peek(&s, 1, &len)) != NULL) {
            size_t want = 1 + (seq_in * 7) % (SLOT - 4);
            bad += len != want || p[len - 1] != (uint8_t)(len > 4 ? seq_in & 0xFF : p[len - 1]);
            ina__ring_pop(&s, 1);
            seq_in++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(seq_in, seq_out);
    /* Full: NSLOTS entries fit, the next does not, until one is read. */
    for (int i = 0; i < NSLOTS; i++) {
        uint8_t *slot = ina__ring_slot(&s, 0);
        CHECK(slot != NULL);
        if (slot)
            ina__ring_push(&s, 0, 10);
    }
    CHECK(ina__ring_slot(&s, 0) == NULL);
    size_t len;
    CHECK(ina__ring_peek(&w, 0, &len) != NULL && len == 10);
    ina__ring_pop(&w, 0);
    CHECK(ina__ring_slot(&s, 0) != NULL);
    CHECK(!w.corrupt && !s.corrupt);
    ina__ring_unmap(&w);
    ina__ring_unmap(&s);
}

/* The peer writes nonsense: a length past the slot reads as empty; indices
 * that make no sense mark the ring corrupt and nothing is read or written. */
static void test_hostile(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    open_pair(&w, &s, name);
    uint8_t *slot = ina__ring_slot(&w, 1);
    CHECK(slot != NULL);
    ina__ring_push(&w, 1, 16);
    uint32_t huge = 0xFFFFFFF0u; /* overwrite the length after publishing */
    memcpy(s.up_slots, &huge, 4);
    size_t len = 99;
    CHECK(ina__ring_peek(&s, 1, &len) != NULL && len == 0);
    ina__ring_pop(&s, 1);
    /* tail far ahead of head: corrupt */
    atomic_store(&w.hdr->up.tail, (uint64_t)1 << 40);
    CHECK(ina__ring_peek(&s, 1, &len) == NULL);
    CHECK(s.corrupt);
    CHECK(!ina__ring_readable(&s, 1));
    /* a consumer index ahead of the producer's: corrupt for the producer */
    atomic_store(&s.hdr->down.head, 5);
    CHECK(ina__ring_slot(&s, 0) == NULL); /* s is corrupt already */
    CHECK(ina__ring_slot(&w, 1) != NULL || w.corrupt);
    struct ina_shm w2, s2;
    char name2[INA_SHM_NAME_MAX];
    open_pair(&w2, &s2, name2);
    atomic_store(&w2.hdr->down.head, 3); /* worker claims to have read 3 of 0 */
    CHECK(ina__ring_slot(&s2, 0) == NULL);
    CHECK(s2.corrupt);
    ina__ring_unmap(&w);
    ina__ring_unmap(&s);
    ina__ring_unmap(&w2);
    ina__ring_unmap(&s2);
}

/* No lost wake-up: a consumer that prepared to sleep is either told data is
 * there, or the producer is told to ring. */
static void test_sleep_wake(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    open_pair(&w, &s, name);
    CHECK_EQ_INT(ina__ring_wake_needed(&w, 1), 0);    /* nobody asleep */
    CHECK_EQ_INT(ina__ring_sleep_prepare(&s, 1), 1);  /* empty: sleep */
    ina__ring_push(&w, 1, (ina__ring_slot(&w, 1), 8));
    CHECK_EQ_INT(ina__ring_wake_needed(&w, 1), 1);    /* ring it */
    CHECK_EQ_INT(ina__ring_wake_needed(&w, 1), 0);    /* once */
    CHECK_EQ_INT(ina__ring_sleep_prepare(&s, 1), 0);  /* data there: do not sleep */
    CHECK_EQ_INT(ina__ring_wake_needed(&w, 1), 0);    /* and the flag was cleared */
    ina__ring_unmap(&w);
    ina__ring_unmap(&s);
}

/* A memfd of `size` bytes that a ring header of this geometry starts, with
 * these seals (flags: memfd_create's). @return its descriptor, or -1. */
static int memfd_with(const char *name, unsigned flags, int seals, uint32_t nslots, uint32_t slot)
{
    int fd = memfd_create(name, flags | MFD_CLOEXEC);
    size_t size = ina__ring_size(nslots, slot);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
        return -1;
    struct ina_shm_hdr h;
    memset(&h, 0, sizeof(h));
    h.magic = INA_SHM_MAGIC;
    h.version = INA_SHM_VERSION;
    h.nslots = nslots;
    h.slot_size = slot;
    if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
        (seals && fcntl(fd, F_ADD_SEALS, seals) != 0)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The seal check: only a size sealed for good passes (shrink, grow, and no
 * more seals), and attach refuses anything less with EPERM. */
static void test_seals(void)
{
    const int all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    static const struct {
        unsigned flags;
        int seals, want;
        const char *what;
    } cases[] = {
        {0, 0, -EPERM, "a memfd made without MFD_ALLOW_SEALING"},
        {MFD_ALLOW_SEALING, 0, -EPERM, "no seals"},
        {MFD_ALLOW_SEALING, F_SEAL_SHRINK | F_SEAL_GROW, -EPERM, "no F_SEAL_SEAL: more to come"},
        {MFD_ALLOW_SEALING, F_SEAL_SHRINK | F_SEAL_SEAL, -EPERM, "it may grow"},
        {MFD_ALLOW_SEALING, F_SEAL_GROW | F_SEAL_SEAL, -EPERM, "it may shrink"},
        {MFD_ALLOW_SEALING, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, 0, "sealed"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[INA_SHM_NAME_MAX];
        snprintf(name, sizeof(name), "ina.%u.00000000000000%02x", (unsigned)geteuid(), (unsigned)i);
        int fd = memfd_with(name, cases[i].flags, cases[i].seals, NSLOTS, SLOT);
        CHECK(fd >= 0);
        if (fd < 0)
            continue;
        int rc = ina__ring_sealed(fd);
        struct ina_shm s;
        int arc = ina__ring_attach(&s, name, (uint32_t)getpid(), (uint32_t)fd, NSLOTS, SLOT);
        if (rc != cases[i].want || arc != cases[i].want)
            fprintf(stderr, "seals: %s: check %d, attach %d, want %d\n", cases[i].what, rc, arc,
                    cases[i].want);
        CHECK_EQ_INT(rc, cases[i].want);
        CHECK_EQ_INT(arc, cases[i].want);
        if (arc == 0)
            ina__ring_unmap(&s);
        close(fd);
    }
    /* A file that cannot be sealed at all. */
    char tmp[] = "/tmp/ina-test-seals.XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_EQ_INT(ina__ring_sealed(fd), -EPERM);
        close(fd);
        unlink(tmp);
    }
    /* What ina__ring_create makes is sealed for good: not even its creator can
     * shrink, grow or unseal it. */
    struct ina_shm w;
    char name[INA_SHM_NAME_MAX];
    CHECK_EQ_INT(ina__ring_create(&w, name, &fd, NSLOTS, SLOT), 0);
    CHECK_EQ_INT(ina__ring_sealed(fd), 0);
    CHECK_EQ_INT(fcntl(fd, F_GET_SEALS) & all, all);
    CHECK(ftruncate(fd, 0) != 0 && errno == EPERM);
    CHECK(ftruncate(fd, (off_t)w.map_len * 2) != 0 && errno == EPERM);
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0 && errno == EPERM);
    close(fd);
    ina__ring_unmap(&w);
}

/* Attach refuses what is not this process's sealed ring of the stated geometry. */
static void test_attach_refusals(void)
{
    struct ina_shm w, s;
    char name[INA_SHM_NAME_MAX];
    int fd;
    CHECK_EQ_INT(ina__ring_create(&w, name, &fd, NSLOTS, SLOT), 0);
    uint32_t pid = (uint32_t)getpid(), ufd = (uint32_t)fd;
    CHECK_EQ_INT(ina__ring_attach(&s, name, pid, ufd, NSLOTS * 2, SLOT), -EPROTO); /* other geometry */
    CHECK_EQ_INT(ina__ring_attach(&s, name, pid, ufd, NSLOTS, SLOT + 64), -EPROTO);
    CHECK_EQ_INT(ina__ring_attach(&s, "etc/passwd", pid, ufd, NSLOTS, SLOT), -EINVAL); /* pattern */
    CHECK_EQ_INT(ina__ring_attach(&s, "ina.0.0123456789abcdeg", pid, ufd, NSLOTS, SLOT), -EINVAL);
    CHECK_EQ_INT(ina__ring_attach(&s, "ina.0.0123456789abcdef/x", pid, ufd, NSLOTS, SLOT), -EINVAL);
    CHECK_EQ_INT(ina__ring_attach(&s, "/ina.0.0123456789abcdef", pid, ufd, NSLOTS, SLOT), -EINVAL);
    CHECK_EQ_INT(ina__ring_attach(&s, "ina.0.0123456789abcdef", pid, ufd, 3, SLOT), -EINVAL);
    CHECK_EQ_INT(ina__ring_attach(&s, name, 0, ufd, NSLOTS, SLOT), -EINVAL); /* no process 0 */
    /* Not that object: another name, another descriptor, no such descriptor
     * or process (a worker in another pid namespace names one of these). */
    CHECK_EQ_INT(ina__ring_attach(&s, "ina.0.00000000deadbeef", pid, ufd, NSLOTS, SLOT), -ENOENT);
    CHECK_EQ_INT(ina__ring_attach(&s, name, pid, 0, NSLOTS, SLOT), -ENOENT); /* stdin */
    CHECK_EQ_INT(ina__ring_attach(&s, name, pid, 100000, NSLOTS, SLOT), -ENOENT);
    CHECK_EQ_INT(ina__ring_attach(&s, name, 0x7FFFFFF0u, ufd, NSLOTS, SLOT), -ENOENT);
    if (geteuid() == 0) {
        CHECK_EQ_INT(fchown(fd, 65534, 65534), 0); /* another user's */
        CHECK_EQ_INT(ina__ring_attach(&s, name, pid, ufd, NSLOTS, SLOT), -EPERM);
        CHECK_EQ_INT(fchown(fd, 0, 0), 0);
    }
    w.hdr->magic = 0; /* not a ring */
    CHECK_EQ_INT(ina__ring_attach(&s, name, pid, ufd, NSLOTS, SLOT), -EPROTO);
    w.hdr->magic = INA_SHM_MAGIC;
    CHECK_EQ_INT(ina__ring_attach(&s, name, pid, ufd, NSLOTS, SLOT), 0);
    ina__ring_unmap(&s);
    close(fd);
    ina__ring_unmap(&w);
    char n2[INA_SHM_NAME_MAX];
    CHECK_EQ_INT(ina__ring_create(&w, n2, &fd, 3, SLOT), -EINVAL); /* not a power of 2 */
    CHECK_EQ_INT(ina__ring_create(&w, n2, &fd, NSLOTS, 100), -EINVAL); /* not a multiple of 64 */
    CHECK_EQ_INT(ina__ring_create(&w, n2, &fd, 8192, SLOT), -EINVAL);  /* more than a switch maps */
    CHECK_EQ_INT(ina__ring_create(&w, n2, &fd, NSLOTS, 65536 + 64), -EINVAL); /* past a datagram */
    CHECK_EQ_INT(ina__ring_attach(&s, "ina.0.0123456789abcdef", pid, 3, 8192, SLOT), -EINVAL);
}

/* A POSIX shm object of §5.9's first version, as its workers made it: the
 * fd is left open (its owner can still truncate it). @return fd or -1. */
static int named_object(char *name, struct ina_shm_hdr **hdr)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return -1;
    snprintf(name, INA_SHM_NAME_MAX, "/ina.%u.%016llx", (unsigned)geteuid(), (unsigned long long)r);
    size_t size = ina__ring_size(NSLOTS, SLOT);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return -1;
    void *p = ftruncate(fd, (off_t)size) == 0
                  ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        close(fd);
        shm_unlink(name);
        return -1;
    }
    *hdr = p;
    (*hdr)->version = INA_SHM_VERSION;
    (*hdr)->nslots = NSLOTS;
    (*hdr)->slot_size = SLOT;
    (*hdr)->magic = INA_SHM_MAGIC;
    return fd;
}

/* --shm-unsealed's objects: the first version's checks. */
static void test_named(void)
{
    struct ina_shm s;
    struct ina_shm_hdr *hdr;
    char name[INA_SHM_NAME_MAX];
    int fd = named_object(name, &hdr);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(ina__ring_named_valid(name) && !ina__ring_name_valid(name));
    CHECK_EQ_INT(ina__ring_attach_named(&s, name, NSLOTS * 2, SLOT), -EPROTO);
    CHECK_EQ_INT(ina__ring_attach_named(&s, "/etc/passwd", NSLOTS, SLOT), -EINVAL);
    CHECK_EQ_INT(ina__ring_attach_named(&s, "ina.0.0123456789abcdef", NSLOTS, SLOT), -EINVAL);
    CHECK_EQ_INT(ina__ring_attach_named(&s, "/ina.0.00000000deadbeef", NSLOTS, SLOT), -ENOENT);
    CHECK_EQ_INT(fchmod(fd, 0644), 0); /* readable by others: not private */
    CHECK_EQ_INT(ina__ring_attach_named(&s, name, NSLOTS, SLOT), -EPERM);
    CHECK_EQ_INT(fchmod(fd, 0600), 0);
    hdr->magic = 0;
    CHECK_EQ_INT(ina__ring_attach_named(&s, name, NSLOTS, SLOT), -EPROTO);
    hdr->magic = INA_SHM_MAGIC;
    CHECK_EQ_INT(ina__ring_attach_named(&s, name, NSLOTS, SLOT), 0);
    CHECK(s.guard != 0); /* under the fault guard */
    ina__ring_unmap(&s);
    CHECK_EQ_INT(s.guard, 0);
    munmap(hdr, ina__ring_size(NSLOTS, SLOT));
    close(fd);
    shm_unlink(name);
}

/*
 * The attack: the worker truncates the object the switch has mapped. With the
 * guard, the switch's next touch of the ring (reading the worker's tail)
 * faults, gets zero pages instead, and the ring reads as corrupt and faulted;
 * the process lives. Every ring function then leaves it alone.
 */
static void test_guard(void)
{
    CHECK_EQ_INT(ina__ring_guard_install(), 0);
    CHECK_EQ_INT(ina__ring_guard_install(), 0); /* once is enough */
    struct ina_shm s, other;
    struct ina_shm_hdr *hdr;
    char name[INA_SHM_NAME_MAX], oname[INA_SHM_NAME_MAX];
    int fd = named_object(name, &hdr);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK_EQ_INT(ina__ring_attach_named(&s, name, NSLOTS, SLOT), 0);
    /* A bystander: a sealed pair, which must go on working. */
    struct ina_shm ow;
    open_pair(&ow, &other, oname);
    shm_unlink(name);
    /* The worker publishes a datagram, then takes every page away. */
    memset((uint8_t *)hdr + INA_SHM_HDR_LEN + 4, 0xAB, 40);
    uint32_t l = 40;
    memcpy((uint8_t *)hdr + INA_SHM_HDR_LEN, &l, 4);
    atomic_store(&hdr->up.tail, 1);
    unsigned long before = ina__ring_guard_faults();
    CHECK_EQ_INT(ftruncate(fd, 0), 0);
    size_t len;
    CHECK(ina__ring_peek(&s, 1, &len) == NULL); /* faulted: zero pages, corrupt */
    CHECK_EQ_INT(ina__ring_guard_faults() - before, 1);
    CHECK(s.corrupt && s.faulted);
    CHECK(ina__ring_faulted(&s));
    CHECK(ina__ring_slot(&s, 0) == NULL);
    CHECK(!ina__ring_readable(&s, 1));
    CHECK_EQ_INT(ina__ring_sleep_prepare(&s, 1), 1);
    CHECK_EQ_INT(s.hdr->magic, 0); /* readable: private zeros now */
    ina__ring_awake(&s, 1);
    CHECK_EQ_INT(ina__ring_guard_faults() - before, 1); /* no more faults on it */
    /* The other ring never noticed. */
    uint8_t *slot = ina__ring_slot(&ow, 1);
    CHECK(slot != NULL);
    if (slot)
        ina__ring_push(&ow, 1, 8);
    CHECK(ina__ring_peek(&other, 1, &len) != NULL && len == 8);
    CHECK(!other.corrupt && !ina__ring_faulted(&other));
    ina__ring_unmap(&s);
    ina__ring_unmap(&other);
    ina__ring_unmap(&ow);
    munmap(hdr, ina__ring_size(NSLOTS, SLOT));
    close(fd);
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* In a child with the guard: a SIGBUS outside every ring (a mapped file cut
 * short under us), or one sent by kill(), still kills as without the guard. */
static void test_guard_elsewhere(void)
{
    for (int sent = 0; sent <= 1; sent++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            if (null >= 0)
                dup2(null, 2); /* a sanitizer's report of the expected crash: not noise in the log */
            ina__ring_guard_install();
            if (sent)
                kill(getpid(), SIGBUS);
            char tmp[] = "/tmp/ina-test-guard.XXXXXX";
            int fd = mkstemp(tmp);
            unlink(tmp);
            volatile char *p = fd >= 0 && ftruncate(fd, 8192) == 0
                                   ? mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
            if (p == MAP_FAILED || ftruncate(fd, 0) != 0)
                _exit(3);
            (void)p[4096]; /* past the end: SIGBUS */
            _exit(0);      /* survived: wrong */
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
#ifdef UNDER_ASAN
        /* The sanitizer's handler was there first: the guard hands it the signal. */
        CHECK(!(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 3)));
#else
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS))
            fprintf(stderr, "guard elsewhere (%s): status 0x%x\n", sent ? "kill" : "fault", st);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
#endif
    }
}

int main(void)
{
    struct ina_shm probe;
    char name[INA_SHM_NAME_MAX];
    int fd;
    int rc = ina__ring_create(&probe, name, &fd, NSLOTS, SLOT);
    if (rc != 0) {
        printf("test_shm_ring: SKIP: no sealed memfd here (%s)\n", strerror(-rc));
        return 77;
    }
    close(fd);
    ina__ring_unmap(&probe);
    test_roundtrip();
    test_hostile();
    test_sleep_wake();
    test_seals();
    test_attach_refusals();
    test_named();
    test_guard_elsewhere();
    test_guard();
    return check_report("test_shm_ring");
}
