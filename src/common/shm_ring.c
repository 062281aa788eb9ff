/* shm_ring.c: create, attach and use the worker <-> switch rings; see shm_ring.h. */
#include "common/shm_ring.h"

#include "common/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
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

static int map_object(struct ina_shm *s, int fd, uint32_t nslots, uint32_t slot_size)
{
    size_t len = ina_shm_size(nslots, slot_size);
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
    return 0;
}

static int geometry_ok(uint32_t nslots, uint32_t slot_size)
{
    /* At most 4096 slots of one 64 KiB datagram: 512 MiB per object, the
     * most a switch will map for one rank. */
    return nslots >= 2 && nslots <= 4096 && (nslots & (nslots - 1)) == 0 && slot_size >= 64 &&
           slot_size <= ina_shm_slot_size(INA_MAX_DATAGRAM) && slot_size % 64 == 0;
}

int ina_shm_name_valid(const char *name)
{
    unsigned uid;
    char hex[17];
    int end = 0;
    if (strnlen(name, INA_SHM_NAME_MAX) >= INA_SHM_NAME_MAX)
        return 0;
    if (sscanf(name, "/ina.%u.%16[0-9a-f]%n", &uid, hex, &end) != 2 || name[end] != '\0')
        return 0;
    return strlen(hex) == 16;
}

int ina_shm_create(struct ina_shm *s, char *name, uint32_t nslots, uint32_t slot_size)
{
    if (!geometry_ok(nslots, slot_size))
        return -EINVAL;
    uint64_t r;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return -EIO;
    snprintf(name, INA_SHM_NAME_MAX, "/ina.%u.%016llx", (unsigned)geteuid(),
             (unsigned long long)r);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    /* Reserve the pages now: a tmpfs that fills up later would kill
     * whoever first touches a page past its end (SIGBUS), not fail a call. */
    int rc = posix_fallocate(fd, 0, (off_t)ina_shm_size(nslots, slot_size));
    rc = -rc;
    if (rc == 0)
        rc = map_object(s, fd, nslots, slot_size);
    close(fd);
    if (rc != 0) {
        shm_unlink(name);
        return rc;
    }
    /* posix_fallocate gave zeros: indices 0, nobody asleep. */
    s->hdr->nslots = nslots;
    s->hdr->slot_size = slot_size;
    s->hdr->version = INA_SHM_VERSION;
    atomic_thread_fence(memory_order_release);
    s->hdr->magic = INA_SHM_MAGIC;
    return 0;
}

int ina_shm_attach(struct ina_shm *s, const char *name, uint32_t nslots, uint32_t slot_size)
{
    if (!ina_shm_name_valid(name) || !geometry_ok(nslots, slot_size))
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
    else if ((uint64_t)st.st_size != ina_shm_size(nslots, slot_size))
        rc = -EPROTO;
    if (rc == 0)
        rc = map_object(s, fd, nslots, slot_size);
    close(fd);
    if (rc != 0)
        return rc;
    atomic_thread_fence(memory_order_acquire);
    if (s->hdr->magic != INA_SHM_MAGIC || s->hdr->version != INA_SHM_VERSION ||
        s->hdr->nslots != nslots || s->hdr->slot_size != slot_size) {
        ina_shm_unmap(s);
        return -EPROTO;
    }
    /* Start from the indices as they are (0 unless the worker sent already). */
    s->up_idx = atomic_load_explicit(&s->hdr->up.head, memory_order_acquire);
    s->down_idx = atomic_load_explicit(&s->hdr->down.tail, memory_order_acquire);
    snprintf(s->name, sizeof(s->name), "%s", name); /* name_valid(): it fits */
    return 0;
}

void ina_shm_unmap(struct ina_shm *s)
{
    if (s->hdr)
        munmap(s->hdr, s->map_len);
    memset(s, 0, sizeof(*s));
}

void ina_shm_unlink(const char *name) { shm_unlink(name); }

/* ---- Producer ----------------------------------------------------------------------- */

uint8_t *ina_shm_slot(struct ina_shm *s, int up)
{
    if (!s->hdr || s->corrupt)
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

void ina_shm_push(struct ina_shm *s, int up, size_t len)
{
    uint64_t *tail = up ? &s->up_idx : &s->down_idx;
    uint8_t *slot = slots(s, up) + (size_t)(*tail & (s->nslots - 1)) * s->slot_size;
    uint32_t l = (uint32_t)len;
    memcpy(slot, &l, 4);
    ++*tail;
    atomic_store_explicit(&ctl(s, up)->tail, *tail, memory_order_release);
}

int ina_shm_wake_needed(struct ina_shm *s, int up)
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
    if (!s->hdr || s->corrupt)
        return 0;
    uint64_t head = up ? s->up_idx : s->down_idx;
    uint64_t tail = atomic_load_explicit(&ctl(s, up)->tail, memory_order_acquire);
    if (tail - head > s->nslots) {
        s->corrupt = 1; /* the producer's index is behind ours or far ahead */
        return 0;
    }
    return tail - head;
}

int ina_shm_readable(struct ina_shm *s, int up) { return readable(s, up) != 0; }

const uint8_t *ina_shm_peek(struct ina_shm *s, int up, size_t *len)
{
    if (!readable(s, up))
        return NULL;
    uint64_t head = up ? s->up_idx : s->down_idx;
    const uint8_t *slot = slots(s, up) + (size_t)(head & (s->nslots - 1)) * s->slot_size;
    uint32_t l;
    memcpy(&l, slot, 4); /* read once */
    *len = l <= s->slot_size - 4 ? l : 0; /* a length past the slot: an empty datagram */
    return slot + 4;
}

void ina_shm_pop(struct ina_shm *s, int up)
{
    uint64_t *head = up ? &s->up_idx : &s->down_idx;
    ++*head;
    atomic_store_explicit(&ctl(s, up)->head, *head, memory_order_release);
}

void ina_shm_awake(struct ina_shm *s, int up)
{
    if (s->hdr)
        atomic_store_explicit(&ctl(s, up)->sleeping, 0, memory_order_relaxed);
}

int ina_shm_sleep_prepare(struct ina_shm *s, int up)
{
    if (!s->hdr || s->corrupt)
        return 1;
    struct ina_shm_ring_ctl *c = ctl(s, up);
    atomic_store_explicit(&c->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* our flag before their tail */
    if (readable(s, up)) {
        atomic_store_explicit(&c->sleeping, 0, memory_order_relaxed);
        return 0;
    }
    return 1;
}
