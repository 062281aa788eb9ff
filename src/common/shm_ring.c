/* shm_ring.c: create, attach and use the worker <-> switch rings, and the switch's fault guard; see shm_ring.h. */
#include "common/shm_ring.h"

#include "common/wire.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

/* The layout of PROTOCOL.md §5.9. */
_Static_assert(sizeof(struct ina_shm_hdr) == INA_SHM_HDR_LEN, "ring header size");
_Static_assert(offsetof(struct ina_shm_hdr, nslots) == 12 &&
                   offsetof(struct ina_shm_hdr, slot_size) == 16 &&
                   offsetof(struct ina_shm_hdr, up) == 64 && offsetof(struct ina_shm_hdr, down) == 256,
               "ring header layout");
_Static_assert(offsetof(struct ina_shm_ring_ctl, tail) == 64 &&
                   offsetof(struct ina_shm_ring_ctl, sleeping) == 128,
               "ring control layout");

static struct ina_shm_ring_ctl *ctl(struct ina_shm *s, int up)
{
    return up ? &s->hdr->up : &s->hdr->down;
}

static uint8_t *slots(struct ina_shm *s, int up) { return up ? s->up_slots : s->down_slots; }

/* ---- The fault guard ------------------------------------------------------------------ */

/*
 * One entry per mapped object. The handler runs in the thread that touched
 * the object (a SIGBUS from a fault is synchronous), which is the thread that
 * owns it: that entry cannot change under the handler. Other threads may fill
 * or empty other entries meanwhile, so each field is a lock-free atomic
 * (async-signal-safe): an entry is published by its base, stored last, and
 * withdrawn by clearing the base before the object is unmapped.
 */
_Static_assert(ATOMIC_POINTER_LOCK_FREE == 2 && ATOMIC_LONG_LOCK_FREE == 2 &&
                   ATOMIC_INT_LOCK_FREE == 2,
               "the SIGBUS handler reads the guard's table: its atomics must be lock-free");
struct guard_entry {
    _Atomic uintptr_t base; /* 0: free */
    _Atomic size_t len;
    _Atomic int faulted;
};
static struct guard_entry guard_table[INA_SHM_GUARD_MAX];
static _Atomic unsigned long guard_fault_count;
static _Atomic int guard_claim[INA_SHM_GUARD_MAX]; /* taken by a registration (base may still be 0) */
static struct sigaction guard_prev;                /* what SIGBUS did before the guard */
static _Atomic int guard_installed;

static void guard_chain(int sig, siginfo_t *si, void *uc)
{
    if ((guard_prev.sa_flags & SA_SIGINFO) && guard_prev.sa_sigaction) {
        guard_prev.sa_sigaction(sig, si, uc); /* e.g. a sanitizer's report */
        return;
    }
    if (guard_prev.sa_handler != SIG_DFL && guard_prev.sa_handler != SIG_IGN) {
        guard_prev.sa_handler(sig);
        return;
    }
    /* The default action: crash as without the guard. A fault re-executes
     * the instruction and faults again; a SIGBUS sent by someone is raised. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    if (si->si_code <= 0)
        raise(sig);
}

static void guard_on_sigbus(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (size_t i = 0; si->si_code > 0 && i < INA_SHM_GUARD_MAX; i++) {
        struct guard_entry *e = &guard_table[i];
        uintptr_t base = atomic_load_explicit(&e->base, memory_order_acquire);
        size_t len = atomic_load_explicit(&e->len, memory_order_relaxed);
        if (!base || a - base >= len)
            continue;
        /* Private zero pages in place of the object: the access that faulted
         * is executed again on them, and the ring reads as corrupt from now on. */
        if (mmap((void *)base, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0) == MAP_FAILED)
            break;
        atomic_store_explicit(&e->faulted, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&guard_fault_count, 1, memory_order_relaxed);
        return;
    }
    guard_chain(sig, si, uc);
}

int ina__ring_guard_install(void)
{
    if (atomic_exchange(&guard_installed, 1))
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = guard_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &guard_prev) != 0) {
        atomic_store(&guard_installed, 0);
        return -errno;
    }
    return 0;
}

unsigned long ina__ring_guard_faults(void) { return atomic_load(&guard_fault_count); }

/* Register s's mapping. @return 0, or -ENOSPC if the table is full. */
static int guard_add(struct ina_shm *s)
{
    for (int i = 0; i < INA_SHM_GUARD_MAX; i++) {
        if (atomic_exchange(&guard_claim[i], 1))
            continue;
        struct guard_entry *e = &guard_table[i];
        atomic_store_explicit(&e->faulted, 0, memory_order_relaxed);
        atomic_store_explicit(&e->len, s->map_len, memory_order_relaxed);
        atomic_store_explicit(&e->base, (uintptr_t)s->hdr, memory_order_release);
        s->guard = i + 1;
        return 0;
    }
    return -ENOSPC;
}

static void guard_remove(struct ina_shm *s)
{
    if (!s->guard)
        return;
    struct guard_entry *e = &guard_table[s->guard - 1];
    atomic_store_explicit(&e->base, 0, memory_order_release);
    atomic_store(&guard_claim[s->guard - 1], 0);
    s->guard = 0;
}

int ina__ring_faulted(struct ina_shm *s)
{
    if (!s->faulted && s->guard &&
        atomic_load_explicit(&guard_table[s->guard - 1].faulted, memory_order_relaxed))
        s->faulted = s->corrupt = 1;
    return s->faulted;
}

/* ---- Objects ------------------------------------------------------------------------ */

/* Map fd as a ring object of this geometry. A switch's mapping (guard set) is
 * registered with the fault guard before anything touches it. */
static int map_object(struct ina_shm *s, int fd, uint32_t nslots, uint32_t slot_size, int guard)
{
    size_t len = ina__ring_size(nslots, slot_size);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    memset(s, 0, sizeof(*s));
    s->hdr = p;
    s->map_len = len;
    s->nslots = nslots;
    s->slot_size = slot_size;
    s->up_slots = (uint8_t *)p + INA_SHM_HDR_LEN;
    s->down_slots = s->up_slots + (size_t)nslots * slot_size;
    if (guard && guard_add(s) != 0) {
        ina__ring_unmap(s);
        return -ENOSPC;
    }
    return 0;
}

static int geometry_ok(uint32_t nslots, uint32_t slot_size)
{
    /* At most 4096 slots of one 64 KiB datagram: 512 MiB per object, the
     * most a switch will map for one rank. */
    return nslots >= 2 && nslots <= 4096 && (nslots & (nslots - 1)) == 0 && slot_size >= 64 &&
           slot_size <= ina__ring_slot_size(INA_MAX_DATAGRAM) && slot_size % 64 == 0;
}

/* "<prefix><uid>.<16 lowercase hex digits>" and nothing else. */
static int name_matches(const char *name, const char *prefix)
{
    size_t plen = strlen(prefix);
    unsigned uid;
    char hex[17];
    int end = 0;
    if (strnlen(name, INA_SHM_NAME_MAX) >= INA_SHM_NAME_MAX || strncmp(name, prefix, plen) != 0 ||
        !isdigit((unsigned char)name[plen]))
        return 0;
    if (sscanf(name + plen, "%u.%16[0-9a-f]%n", &uid, hex, &end) != 2 || name[plen + end] != '\0')
        return 0;
    return strlen(hex) == 16;
}

int ina__ring_name_valid(const char *name) { return name_matches(name, "ina."); }

int ina__ring_named_valid(const char *name) { return name_matches(name, "/ina."); }

int ina__ring_sealed(int fd)
{
    const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return errno == EINVAL ? -EPERM : -errno; /* EINVAL: a file that cannot be sealed */
    return (seals & need) == need ? 0 : -EPERM;
}

/* Write the header of a new object, zero-filled: indices 0, nobody asleep. */
static void init_header(struct ina_shm *s, uint32_t nslots, uint32_t slot_size)
{
    s->hdr->nslots = nslots;
    s->hdr->slot_size = slot_size;
    s->hdr->version = INA_SHM_VERSION;
    atomic_thread_fence(memory_order_release);
    s->hdr->magic = INA_SHM_MAGIC;
}

int ina__ring_create(struct ina_shm *s, char *name, int *fd, uint32_t nslots, uint32_t slot_size)
{
    *fd = -1;
    if (!geometry_ok(nslots, slot_size))
        return -EINVAL;
    uint64_t r;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return -EIO;
    snprintf(name, INA_SHM_NAME_MAX, "ina.%u.%016llx", (unsigned)geteuid(), (unsigned long long)r);
    int f = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0)
        return -errno;
    /* Reserve the pages now (a memory limit that bites later would kill
     * whoever first touches a page, not fail a call), then fix the size for
     * good: neither side can be made to touch a page past the end. */
    int rc = -posix_fallocate(f, 0, (off_t)ina__ring_size(nslots, slot_size));
    if (rc == 0 && fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        rc = -errno;
    if (rc == 0)
        rc = map_object(s, f, nslots, slot_size, 0);
    if (rc != 0) {
        close(f);
        return rc;
    }
    init_header(s, nslots, slot_size);
    *fd = f;
    return 0;
}

/* The mapped object's header must be what SHM_ATTACH said; then start from
 * the indices as they are (0 unless the worker sent already). */
static int check_header(struct ina_shm *s, const char *name, uint32_t nslots, uint32_t slot_size)
{
    atomic_thread_fence(memory_order_acquire);
    if (s->hdr->magic != INA_SHM_MAGIC || s->hdr->version != INA_SHM_VERSION ||
        s->hdr->nslots != nslots || s->hdr->slot_size != slot_size || ina__ring_faulted(s)) {
        ina__ring_unmap(s);
        return -EPROTO;
    }
    s->up_idx = atomic_load_explicit(&s->hdr->up.head, memory_order_acquire);
    s->down_idx = atomic_load_explicit(&s->hdr->down.tail, memory_order_acquire);
    snprintf(s->name, sizeof(s->name), "%s", name); /* the name checks: it fits */
    return 0;
}

/* Open, with no side effect of opening, the file that process pid holds as
 * descriptor fd, if it is the memfd `name`; then open that very file for
 * reading and writing. @return the descriptor or -errno. */
static int open_memfd(uint32_t pid, uint32_t fd, const char *name)
{
    char path[64], link[128], want[INA_SHM_NAME_MAX + 32];
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    int p = open(path, O_PATH | O_CLOEXEC);
    if (p < 0)
        return -errno; /* ENOENT: no such process or descriptor; EACCES: not ours to open */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", p);
    snprintf(want, sizeof(want), "/memfd:%s (deleted)", name);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    int rc = n >= 0 && (size_t)n == strlen(want) && memcmp(link, want, (size_t)n) == 0 ? 0 : -ENOENT;
    if (rc == 0 && (rc = open(path, O_RDWR | O_CLOEXEC)) < 0)
        rc = -errno;
    close(p);
    return rc;
}

int ina__ring_attach(struct ina_shm *s, const char *name, uint32_t pid, uint32_t fd,
                   uint32_t nslots, uint32_t slot_size)
{
    if (!ina__ring_name_valid(name) || pid == 0 || pid > INT_MAX || fd > INT_MAX ||
        !geometry_ok(nslots, slot_size))
        return -EINVAL;
    int f = open_memfd(pid, fd, name);
    if (f < 0)
        return f;
    /* Seals first: from then on the size read below is the size for good. */
    struct stat st;
    struct statfs sf;
    int rc = ina__ring_sealed(f);
    if (rc == 0 && (fstat(f, &st) != 0 || fstatfs(f, &sf) != 0))
        rc = -errno;
    else if (rc == 0 && (st.st_uid != geteuid() || !S_ISREG(st.st_mode) ||
                         sf.f_type != TMPFS_MAGIC))
        rc = -EPERM; /* not this user's, or not a plain memfd (hugetlbfs pages can be taken back) */
    else if (rc == 0 && (uint64_t)st.st_size != ina__ring_size(nslots, slot_size))
        rc = -EPROTO;
    if (rc == 0)
        rc = map_object(s, f, nslots, slot_size, 1);
    close(f);
    return rc ? rc : check_header(s, name, nslots, slot_size);
}

int ina__ring_attach_named(struct ina_shm *s, const char *name, uint32_t nslots,
                         uint32_t slot_size)
{
    if (!ina__ring_named_valid(name) || !geometry_ok(nslots, slot_size))
        return -EINVAL;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = -errno;
    else if (st.st_uid != geteuid() || (st.st_mode & 0777) != 0600 || !S_ISREG(st.st_mode))
        rc = -EPERM; /* not this user's private object */
    else if ((uint64_t)st.st_size != ina__ring_size(nslots, slot_size))
        rc = -EPROTO;
    /* The size may change from now on: the guard is what keeps us alive. */
    if (rc == 0)
        rc = map_object(s, fd, nslots, slot_size, 1);
    close(fd);
    return rc ? rc : check_header(s, name, nslots, slot_size);
}

void ina__ring_unmap(struct ina_shm *s)
{
    guard_remove(s);
    if (s->hdr)
        munmap(s->hdr, s->map_len);
    memset(s, 0, sizeof(*s));
}

void ina__ring_unlink(const char *name) { shm_unlink(name); }

/* Mapped, and neither corrupt nor faulted. */
static int usable(struct ina_shm *s) { return s->hdr && !s->corrupt && !ina__ring_faulted(s); }

/* ---- Producer ----------------------------------------------------------------------- */

uint8_t *ina__ring_slot(struct ina_shm *s, int up)
{
    if (!usable(s))
        return NULL;
    uint64_t tail = up ? s->up_idx : s->down_idx;
    uint64_t head = atomic_load_explicit(&ctl(s, up)->head, memory_order_acquire);
    if (tail - head > s->nslots) {
        s->corrupt = 1; /* the consumer's index is ahead of ours or far behind */
        return NULL;
    }
    if (tail - head == s->nslots)
        return NULL; /* full */
    return slots(s, up) + (size_t)(tail & (s->nslots - 1)) * s->slot_size + 4;
}

void ina__ring_push(struct ina_shm *s, int up, size_t len)
{
    uint64_t *tail = up ? &s->up_idx : &s->down_idx;
    uint8_t *slot = slots(s, up) + (size_t)(*tail & (s->nslots - 1)) * s->slot_size;
    uint32_t l = (uint32_t)len;
    memcpy(slot, &l, 4);
    ++*tail;
    atomic_store_explicit(&ctl(s, up)->tail, *tail, memory_order_release);
}

int ina__ring_wake_needed(struct ina_shm *s, int up)
{
    if (!s->hdr)
        return 0;
    atomic_thread_fence(memory_order_seq_cst); /* our tail before their flag */
    struct ina_shm_ring_ctl *c = ctl(s, up);
    if (!atomic_load_explicit(&c->sleeping, memory_order_relaxed))
        return 0;
    return atomic_exchange_explicit(&c->sleeping, 0, memory_order_relaxed) != 0;
}

/* ---- Consumer ----------------------------------------------------------------------- */

/* Entries readable now; 0 on a corrupt ring (marked). */
static uint64_t readable(struct ina_shm *s, int up)
{
    if (!usable(s))
        return 0;
    uint64_t head = up ? s->up_idx : s->down_idx;
    uint64_t tail = atomic_load_explicit(&ctl(s, up)->tail, memory_order_acquire);
    if (tail - head > s->nslots) {
        s->corrupt = 1; /* the producer's index is behind ours or far ahead */
        return 0;
    }
    return tail - head;
}

int ina__ring_readable(struct ina_shm *s, int up) { return readable(s, up) != 0; }

const uint8_t *ina__ring_peek(struct ina_shm *s, int up, size_t *len)
{
    if (!readable(s, up)) {
        ina__ring_faulted(s); /* reading the tail may have faulted: then corrupt from here */
        return NULL;
    }
    uint64_t head = up ? s->up_idx : s->down_idx;
    const uint8_t *slot = slots(s, up) + (size_t)(head & (s->nslots - 1)) * s->slot_size;
    uint32_t l;
    memcpy(&l, slot, 4); /* read once */
    *len = l <= s->slot_size - 4 ? l : 0; /* a length past the slot: an empty datagram */
    return slot + 4;
}

void ina__ring_pop(struct ina_shm *s, int up)
{
    uint64_t *head = up ? &s->up_idx : &s->down_idx;
    ++*head;
    atomic_store_explicit(&ctl(s, up)->head, *head, memory_order_release);
}

void ina__ring_awake(struct ina_shm *s, int up)
{
    if (s->hdr)
        atomic_store_explicit(&ctl(s, up)->sleeping, 0, memory_order_relaxed);
}

int ina__ring_sleep_prepare(struct ina_shm *s, int up)
{
    if (!usable(s))
        return 1;
    struct ina_shm_ring_ctl *c = ctl(s, up);
    atomic_store_explicit(&c->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* our flag before their tail */
    if (readable(s, up)) {
        atomic_store_explicit(&c->sleeping, 0, memory_order_relaxed);
        return 0;
    }
    return !ina__ring_faulted(s); /* faulted just now: look again (corrupt) rather than sleep */
}
