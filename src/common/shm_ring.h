/* shm_ring.h: the shared-memory transport between a worker and a switch on the same host (PROTOCOL.md §5.9). */
#ifndef INA_SHM_RING_H
#define INA_SHM_RING_H


/*
 * Why: on one host, every datagram through the kernel costs two copies and
 * the UDP stack's per-datagram work on a CPU the worker and the switch share.
 * A worker and a switch on one host can instead exchange the same datagrams
 * (same bytes, same rules) through two rings in a shared-memory object the
 * worker creates: "up" (worker -> switch: DATA) and "down" (switch ->
 * worker: RESULT). Control packets stay on UDP.
 *
 * The object is a memfd sealed against any change of size (F_SEAL_SHRINK,
 * F_SEAL_GROW, F_SEAL_SEAL) before the switch sees it: a page of a shared
 * mapping that its file no longer covers kills whoever touches it (SIGBUS),
 * and the worker is not trusted that far. The switch opens the worker's very
 * descriptor (/proc/<pid>/fd/<fd>) and refuses an object without the seals.
 * A POSIX shm object (the first version of §5.9, which any process of the
 * user can truncate) is mapped only when the switch is told to
 * (--shm-unsealed), and then under the fault guard below.
 *
 * Each ring is single-producer, single-consumer: the producer owns tail, the
 * consumer owns head, each published with release and read with acquire. A
 * slot is a 4-byte length and the datagram. Each side keeps its own index
 * privately and only reads the other's from shared memory, checking it:
 * the peer is another process and may be buggy or hostile, so a ring whose
 * indices make no sense is "corrupt" and no longer used (the caller then
 * falls back or fails, never reads out of bounds). Geometry (slot count and
 * size) is read once at attach and kept privately.
 *
 * The fault guard (the switch's, ina__ring_guard_install): every object a
 * switch maps is registered; a SIGBUS whose address lies in one replaces
 * that mapping with private zero pages and marks the ring faulted, which the
 * ring functions then take as corrupt. Any other SIGBUS kills as before.
 *
 * Wake-ups: a consumer about to sleep (in poll, on its UDP socket) sets the
 * ring's `sleeping` word, then looks at the ring once more; a producer that
 * published and finds `sleeping` set clears it and sends the consumer a
 * DOORBELL datagram (wire.h) over UDP. With a full fence on both sides one
 * of them sees the other's write, so no wake-up is lost.
 */

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define INA_SHM_MAGIC 0x494E415348524E47ull /* "INASHRNG" */
#define INA_SHM_VERSION 1
#define INA_SHM_NAME_MAX 64 /* bytes, NUL included: "ina.<uid>.<16 hex>" (a memfd's name) */
#define INA_SHM_GUARD_MAX 16384 /* objects one switch maps at once: 64 jobs x 256 ranks */

/* One direction. Each index on its own cache line. */
struct ina_shm_ring_ctl {
    _Atomic uint64_t head; /* consumer: next slot to read */
    uint8_t pad0[56];
    _Atomic uint64_t tail; /* producer: next slot to write */
    uint8_t pad1[56];
    _Atomic uint32_t sleeping; /* consumer is (about to be) asleep in poll */
    uint8_t pad2[60];
};

/* The object's first bytes; the slots of up, then of down, follow at INA_SHM_HDR_LEN. */
struct ina_shm_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;    /* per ring, a power of 2 */
    uint32_t slot_size; /* bytes per slot: 4 (length) + the largest datagram, multiple of 64 */
    uint8_t pad[44];
    struct ina_shm_ring_ctl up, down;
};
#define INA_SHM_HDR_LEN 448 /* sizeof(struct ina_shm_hdr), rounded to 64 */

/* A mapped object and one side's private view of it. */
struct ina_shm {
    struct ina_shm_hdr *hdr;
    uint8_t *up_slots, *down_slots;
    size_t map_len;
    uint32_t nslots, slot_size;
    uint64_t up_idx, down_idx; /* private: the index this side owns in each ring */
    int corrupt;               /* a peer index made no sense, or the object faulted: stop using it */
    int faulted;               /* the fault guard replaced the mapping (a SIGBUS; implies corrupt) */
    int guard;                 /* 1 + its entry in the fault guard's table, 0: not registered */
    char name[INA_SHM_NAME_MAX]; /* the object's name, as attached (empty after create) */
};

/* Bytes of an object with nslots slots of slot_size per ring. */
static inline size_t ina__ring_size(uint32_t nslots, uint32_t slot_size)
{
    return INA_SHM_HDR_LEN + 2 * (size_t)nslots * slot_size;
}

/* Slot size for datagrams of up to max_datagram bytes. */
static inline uint32_t ina__ring_slot_size(size_t max_datagram)
{
    return (uint32_t)((4 + max_datagram + 63) & ~(size_t)63);
}

/*
 * Worker: create, allocate, seal and map a new object: a memfd named
 * "ina.<euid>.<16 random hex digits>" (written to name, INA_SHM_NAME_MAX
 * bytes) whose size nobody can change any more. Its pages are allocated here
 * (-ENOSPC now rather than a SIGBUS later). *fd is its descriptor, which the
 * switch opens as /proc/<pid>/fd/<fd>: keep it open until the attach is
 * answered (or given up), then close it.
 * @return 0 or -errno.
 */
int ina__ring_create(struct ina_shm *s, char *name, int *fd, uint32_t nslots, uint32_t slot_size);

/*
 * Switch: map the object that process pid holds as descriptor fd: a memfd
 * called name (the pattern of ina__ring_create), owned by this user, sealed
 * (ina__ring_sealed), with exactly the geometry expected (nslots, slot_size as
 * the worker said in SHM_ATTACH, checked against the header).
 * @return 0 or -errno: -EINVAL a bad name, pid or geometry; -ENOENT no such
 * process or descriptor, or not that memfd; -EACCES the worker's descriptors
 * are not ours to open; -EPERM another owner, or not sealed; -EPROTO not a
 * ring of that geometry; -ENOSPC the fault guard's table is full.
 */
int ina__ring_attach(struct ina_shm *s, const char *name, uint32_t pid, uint32_t fd,
                   uint32_t nslots, uint32_t slot_size);

/*
 * Switch, --shm-unsealed only: map the POSIX shm object `name` of the first
 * version of §5.9 ("/ina.<uid>.<16 hex>", this user's, mode 0600, exact
 * size and header). Its size can change under the mapping: only under the
 * fault guard. @return 0 or -errno, as ina__ring_attach (-EPERM: owner or mode).
 */
int ina__ring_attach_named(struct ina_shm *s, const char *name, uint32_t nslots,
                         uint32_t slot_size);

/* 0 if fd's size is sealed for good (F_SEAL_SHRINK, F_SEAL_GROW and
 * F_SEAL_SEAL all set), else -EPERM (no seals at all: not a memfd made for sealing). */
int ina__ring_sealed(int fd);

/* Unmap (either side). Safe on a zeroed struct. */
void ina__ring_unmap(struct ina_shm *s);

/* Remove a POSIX shm name (ina__ring_attach_named's objects). */
void ina__ring_unlink(const char *name);

/* 1 if name has the form ina__ring_create gives (a memfd's name). */
int ina__ring_name_valid(const char *name);

/* 1 if name is a POSIX shm name of the first version: "/ina.<uid>.<16 hex>". */
int ina__ring_named_valid(const char *name);

/*
 * The fault guard (switch): install the SIGBUS handler, once per process.
 * Threads that touch rings must not block SIGBUS (the kernel would kill the
 * process instead of running the handler). @return 0 or -errno.
 */
int ina__ring_guard_install(void);

/* 1 if a SIGBUS hit this object and the guard replaced it (then it is also
 * corrupt). Cheap: one relaxed load. */
int ina__ring_faulted(struct ina_shm *s);

/* SIGBUSes the guard has absorbed in this process (for tests and reports). */
unsigned long ina__ring_guard_faults(void);

/*
 * Producer side of a ring: a slot to write the next datagram into (at most
 * slot_size - 4 bytes), or NULL if the ring is full or corrupt. Then
 * ina__ring_push(len) publishes it.
 */
uint8_t *ina__ring_slot(struct ina_shm *s, int up);
void ina__ring_push(struct ina_shm *s, int up, size_t len);

/*
 * Consumer side: the next datagram (*len bytes at the returned pointer, in
 * shared memory: the peer may still write to it, so read each byte once or
 * copy it), or NULL if empty or corrupt. Then ina__ring_pop() frees it.
 */
const uint8_t *ina__ring_peek(struct ina_shm *s, int up, size_t *len);
void ina__ring_pop(struct ina_shm *s, int up);

/* 1 if the ring has something to read (consumer side). */
int ina__ring_readable(struct ina_shm *s, int up);

/* Consumer about to sleep: set `sleeping`, fence. @return 1 if the ring is
 * still empty (sleep), 0 if something arrived (do not; `sleeping` cleared). */
int ina__ring_sleep_prepare(struct ina_shm *s, int up);

/* Consumer awake again (after poll): clear `sleeping`, so that producers
 * stop ringing a side that is reading anyway. */
void ina__ring_awake(struct ina_shm *s, int up);

/* Producer after publishing: @return 1 if the consumer was asleep (send it
 * a DOORBELL now; `sleeping` is cleared). */
int ina__ring_wake_needed(struct ina_shm *s, int up);

#endif
