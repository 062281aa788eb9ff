/* trace.h: a switch's input as a file: every datagram, tick and operator request, to replay it exactly. */
#ifndef INA_SW_TRACE_H
#define INA_SW_TRACE_H

/*
 * Written by `ina-switch --record FILE`, read by tests/ebpf/test_ebpf_diff.c
 * (which replays a trace through both dataplanes and compares them) and
 * usable by any other replayer. Big-endian, docs/EBPF.md §"Trace files":
 *
 *   header, 72 bytes (version 2; version 1 had the first 64, and no multicast)
 *     0  8  magic "INATRACE"
 *     8  4  version 2 (a reader also takes 1)
 *    12  4  header length (72; a reader skips what it does not know)
 *    16  8  seed: the recording switch's session/token generator (params.seed)
 *    24  4  the switch's IPv4 address (network order)
 *    28  2  its UDP port
 *    30  2  flags: bit 0 int_ops_only, bit 1 bpf_ops_only
 *    32  4  nslots      36  4  max_elems
 *    40  4  max_job_slots  44  4  min_job_slots
 *    48  8  join_timeout_ns   56  8  idle_timeout_ns
 *    64  4  multicast group base (IPv4 as a number; 0 = no --multicast)
 *    68  2  the groups' UDP port   70  2  0
 *   records, each a 20-byte head then len bytes
 *     0  8  time in ns since the trace began
 *     8  4  source IPv4 address (network order)   12  2  source UDP port
 *    14  2  len   16  1  type (enum ina_trace_type)   17  3  0
 *
 * The seed makes a replay give the same sessions and tokens as the run
 * that was recorded, so its DATA passes the token checks again. A
 * recording switch's tokens are therefore predictable from the file: it is
 * a test and debugging tool (PROTOCOL.md §5.3).
 */

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"

#define INA_TRACE_HDR_LEN 72
#define INA_TRACE_HDR_LEN_V1 64 /* version 1, before the multicast fields: still read */
#define INA_TRACE_VERSION 2
#define INA_TRACE_REC_LEN 20

enum ina_trace_type {
    INA_TRACE_DATAGRAM = 0, /* data: the datagram, from src */
    INA_TRACE_TICK = 1,     /* ina__switch_tick() */
    INA_TRACE_ABORT = 2,    /* operator abort; data: the job id (2 bytes) */
    INA_TRACE_EVICT = 3,    /* operator eviction; data: the job id (2 bytes) */
};

struct ina_trace_header {
    uint64_t seed;
    struct sockaddr_in sw; /* the switch's address */
    struct ina_switch_params p; /* the parameters a replay needs (the rest: 0) */
};

struct ina_trace_rec {
    uint64_t t_ns;
    enum ina_trace_type type;
    struct sockaddr_in src;
    uint16_t len;
    const uint8_t *data;
};

/* @return 0, or -errno. */
int ina__trace_write_header(FILE *f, const struct ina_trace_header *h);
int ina__trace_write(FILE *f, const struct ina_trace_rec *r);
/* @return 0, or -EINVAL (not a trace, or a version this reader does not know). */
int ina__trace_read_header(FILE *f, struct ina_trace_header *h);
/* The next record, its data in buf (cap bytes). @return 1, 0 at the end,
 * or -EINVAL (truncated, or a record longer than cap). */
int ina__trace_read(FILE *f, struct ina_trace_rec *r, uint8_t *buf, size_t cap);

#endif
