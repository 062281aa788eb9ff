/* drop_causes.h: why the switch drops a datagram: one X-macro table for ina-switch and its eBPF program. */
#ifndef INA_SW_DROP_CAUSES_H
#define INA_SW_DROP_CAUSES_H

/* No includes: the eBPF dataplane (src/switch/ebpf/) counts by the same
 * enum, compiled for the BPF target. Append new causes at the end only: the
 * exit report and docs/PROTOCOL.md §6.1 list them in this order. */

/* Why the switch dropped a datagram. Every drop increments exactly one. */
#define INA_DROP_MAP(X)                                                         \
    X(SHORT, "shorter than the 32-byte header")                                 \
    X(MAGIC, "wrong magic")                                                     \
    X(VERSION, "unsupported protocol version")                                  \
    X(LENGTH, "datagram length disagrees with count or body")                   \
    X(KIND, "unknown or misdirected packet kind")                               \
    X(NO_JOB, "job id unknown or not active")                                   \
    X(SESSION, "session id is not the job's current session (stale)")           \
    X(TOKEN, "wrong job token")                                                 \
    X(RANK, "rank outside the job")                                             \
    X(SOURCE, "source address is not the registered address of that rank")      \
    X(SLOT, "slot index outside the job's window")                              \
    X(COUNT, "element count larger than the job's packet size")                 \
    X(OP, "unsupported aggregation op")                                         \
    X(SET, "set bit disagrees with seq")                                        \
    X(STALE, "round older than the slot's current round")                       \
    X(FUTURE, "round too far ahead of the slot (protocol violation)")           \
    X(NOT_READY, "next round arrived before the previous one completed")        \
    X(MISMATCH, "ranks sent different counts or op tags for one round")        \
    X(DUP_PENDING, "duplicate of a contribution while its round is incomplete") \
    X(JOIN, "malformed or refused join/leave")                                  \
    X(EVICTED, "round at or past the bound of an evicted job (it moved away)")                                  \
    X(AUTH, "JOIN without a valid proof of the shared secret (--secret-file)")   \
    X(SHM, "shared-memory ring refused, full or corrupt (the datagram is lost)") \
    X(TXQ, "transmit queue full before a flush (a switch bug; the datagram is lost)")          \
    X(UPSTREAM, "from the parent (--parent), fitting no job or round that awaits it")         \
    X(SPARSE, "malformed block-sparse payload (layout, places, counts or positions)")       \
    X(DATAPLANE, "DATA that only the in-kernel dataplane aggregates reached the socket (a bug)") \
    X(HOT, "hot-table packet: epoch not installed, key outside the table or its block") \
    X(MAC, "DATA without the right tag of its session key (--integrity): forged or changed")

enum ina_drop {
#define INA__DROP_ENUM(name, text) INA_DROP_##name,
    INA_DROP_MAP(INA__DROP_ENUM)
#undef INA__DROP_ENUM
    INA_DROP__COUNT
};

#endif
