/* ina.h: the one public header of libina, in-network aggregation for distributed training. */
#ifndef INA_H
#define INA_H

/*
 * Introduction
 * ------------
 * libina sums a tensor across the N workers of a job (an all-reduce) by
 * streaming it through an aggregator, ina-switch, instead of around a ring.
 * Each worker sends its tensor once and receives the sum once, so the time
 * does not grow with N. Floats are carried as 32-bit integers using a block
 * exponent that all workers agree on through the switch (see docs/PROTOCOL.md
 * for the wire format and the error bound).
 *
 * API levels
 * ----------
 *  - simple:   ina_init_env() + ina_allreduce() + ina_finalize().
 *  - explicit: fill an ina_config (ina_config_init(), then set fields), then
 *              ina_init(); asynchronous ina_allreduce_start()/ina_test()/ina_wait().
 *
 * Threading rule
 * --------------
 * One ina_ctx per thread: calls on the same context must not run concurrently.
 * Distinct contexts are independent. libina starts threads of its own only
 * where a feature needs them: one per lane of a context with lanes > 1, and,
 * on rank 0, one for the host aggregator when the job falls back to it
 * (INA_FALLBACK_HOST). A context of one lane runs in the caller's thread
 * only, over one switch or several (shards: one poll over their sockets).
 *
 * Progress rule (as in MPI)
 * -------------------------
 * Operations advance only inside libina calls on their context: ina_test(),
 * ina_wait(), ina_allreduce() and ina_allreduce_start(). An operation that
 * was started and is never tested or waited on does not complete. The one
 * exception is a context with lanes > 1: its lane threads also advance its
 * operations between calls (that is what they are for).
 *
 * Collective rule
 * ---------------
 * Every rank of a job must start the same operations, in the same order, with
 * the same count, dtype and op. Each packet carries an 8-bit tag of (operation
 * number, count, dtype, op, packet index) and the switch aborts the job when
 * the ranks' tags, counts or wire ops differ in a round: the ranks get
 * INA_ERR_MISMATCH.
 * Each round of a misaligned stream is an independent 1-in-256 check, so an
 * operation of r packets completes undetected with chance at most 256^-r;
 * an operation whose rounds all passed may complete before a later round
 * detects the disagreement. Otherwise a stalled operation fails at its
 * deadline.
 *
 * Errors
 * ------
 * Every status-returning call returns 0 (INA_OK) or a count on success and a
 * negative code on failure: either -errno, passed through unchanged from the
 * operating system (for example -EINVAL, -ENOMEM, -ECONNREFUSED), or one of
 * the INA_ERR_* codes below, which live in the reserved range -1000..-1099.
 * ina_strerror() and ina_err_name() turn any of them into text.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define INA_EXTERN
#elif defined(__GNUC__)
#define INA_EXTERN __attribute__((visibility("default")))
#else
#define INA_EXTERN
#endif

/* ---- Version ----------------------------------------------------------- */

/*
 * The one place the version is written: CMake reads these three lines for
 * project(VERSION), so the shared library's name, ina.pc and the CMake
 * package follow; tests/docs/check_version.py fails when a man page, the
 * Python package or a document says another one. Bump MINOR with every
 * change of a public struct's layout (see "ABI" below and docs/API.md#abi).
 */
#define INA_VERSION_MAJOR 0
#define INA_VERSION_MINOR 6
#define INA_VERSION_PATCH 0
#define INA_VERSION_NUMBER \
    (INA_VERSION_MAJOR * 10000 + INA_VERSION_MINOR * 100 + INA_VERSION_PATCH)

/** @return INA_VERSION_NUMBER of the library actually linked. Since v0.1. */
INA_EXTERN unsigned ina_version_number(void);
/** @return "MAJOR.MINOR.PATCH" of the library actually linked. Since v0.1. */
INA_EXTERN const char *ina_version_string(void);

/*
 * ABI
 * ---
 * The caller allocates ina_config, ina_stats, ina_info, ina_kv_config and
 * ina_kv_stats and the library fills them, so both must agree on their
 * layout. While the major version is 0 the shared library's SONAME is
 * libina.so.0.MINOR, and every change of a struct's layout bumps MINOR: a
 * program built against another minor version is refused by the dynamic
 * loader instead of being handed a struct of another size. A program that
 * loads libina by other means (dlopen, ctypes, another language) must compare
 * its sizes with the functions below before it passes a struct (the Python
 * package does, and names the library it refuses). docs/API.md#abi says
 * what is promised.
 *
 * Adding a field to one of these structs:
 *  1. Append it after the last field, just before `reserved`. Never insert
 *     between fields, reorder them or change a field's type.
 *  2. Its zero value must mean what the library did before the field existed
 *     (a cleared struct keeps the old behaviour); ina_config_init() and
 *     ina_kv_config_init() write its default.
 *  3. If it fits in `reserved` at that member's alignment, shrink `reserved`
 *     by as much and the size stays; otherwise the size grows.
 *  4. Mark it "Since vMAJOR.MINOR" with the version of the coming release,
 *     and bump INA_VERSION_MINOR above if that release does not have it yet.
 *  5. Mirror it in python/ina/_lib.py: tests/python/test_abi.py compares the
 *     mirrors' sizes and offsets with this header.
 */

/** @return sizeof(ina_config) in the library actually linked. Since v0.6. */
INA_EXTERN size_t ina_config_size(void);
/** @return sizeof(ina_stats) in the library actually linked. Since v0.6. */
INA_EXTERN size_t ina_stats_size(void);
/** @return sizeof(ina_info) in the library actually linked. Since v0.6. */
INA_EXTERN size_t ina_info_size(void);
/** @return sizeof(ina_kv_config) in the library actually linked. Since v0.6. */
INA_EXTERN size_t ina_kv_config_size(void);
/** @return sizeof(ina_kv_stats) in the library actually linked. Since v0.6. */
INA_EXTERN size_t ina_kv_stats_size(void);

/* ---- Errors ------------------------------------------------------------ */

/*
 * X-macro table: name, value, message. Values are pinned: they never change
 * once released, and new codes are only ever appended.
 */
#define INA_ERRNO_MAP(X)                                                        \
    X(INA_ERR_TIMEOUT, -1001, "deadline passed while waiting for the network")   \
    X(INA_ERR_ABORTED, -1002, "job aborted: a peer failed or left, or the session ended") \
    X(INA_ERR_REJECTED, -1003, "the switch rejected the request")                \
    X(INA_ERR_NOSPACE, -1004, "the switch has no free aggregation slots")        \
    X(INA_ERR_MISMATCH, -1005, "ranks disagree on job parameters or op size")    \
    X(INA_ERR_CLOSED, -1006, "context is finalized or broken by an earlier error") \
    X(INA_ERR_NOTSUP, -1007, "not supported (not implemented yet in this version)") \
    X(INA_ERR_PROTO, -1008, "protocol version mismatch with the switch")         \
    X(INA_ERR_CONFIG, -1009, "invalid configuration (ina_last_error() names the setting)") \
    X(INA_ERR_BUSY, -1010, "too many operations in flight on this context")                \
    X(INA_ERR_PS_FULL, -1016, "the parameter server's memory limit is reached (ina-ps --max-memory)") \
    X(INA_ERR_STALE, -1018, "update refused: it lags the model by more than the job's bound D (pull and recompute)") \
    X(INA_ERR_RANGE, -1021, "fixed-point value or sum out of range, or not finite: " \
      "those elements are NaN (the operation completed)") \
    X(INA_ERR_SHUTDOWN, -1022, "the switch is shutting down: it refused a new job, or ended " \
      "this one (between operations, or at its drain deadline)")

typedef enum {
    INA_OK = 0,
#define INA__ERR_ENUM(name, value, msg) name = value,
    INA_ERRNO_MAP(INA__ERR_ENUM)
#undef INA__ERR_ENUM
} ina_error;

/**
 * @return a static, human-readable message for any code returned by libina
 * (INA_OK, an INA_ERR_* code, or a negative errno). Never NULL. Since v0.1.
 */
INA_EXTERN const char *ina_strerror(int err);
/** @return the symbolic name ("INA_ERR_TIMEOUT", "EINVAL", ...). Never NULL. */
INA_EXTERN const char *ina_err_name(int err);

typedef struct ina_ctx ina_ctx;

/**
 * Why the last call failed, in one sentence that names the value and the
 * rule or the cause, e.g. "rank 4 is not below world_size 4", "cannot
 * resolve the switch address 'sw1:48864': Name or service not known", or
 * "no answer from the switch at 127.0.0.1:48864 within 60000 ms: port
 * unreachable (is ina-switch running there?)". The code the call returned
 * says what kind of failure it was; this says which.
 *   ctx != NULL: the last failure of a call on that context (an all-reduce,
 *                ina_wait, ...). A finalized context says so.
 *   ctx == NULL: the calling thread's last failure of a call that leaves no
 *                context: ina_init(), ina_init_env(), ina_config_from_env().
 * @return the message, or "" if there is none (the call did not fail, or
 * said nothing more than its code). Valid until the next libina call in the
 * same thread (NULL) or on the same context. Never NULL. Since v0.4.
 */
INA_EXTERN const char *ina_last_error(const ina_ctx *ctx);

/* ---- Types and operations ---------------------------------------------- */

/*
 * Element types. Buffers hold count elements of the C type named below and
 * must be aligned to its size. On the wire every type travels as 32-bit
 * integers (one per element); the float types as block floating point: each
 * block of elems_per_packet elements is scaled by a power of two agreed by
 * all ranks one round ahead, so the sum is NOT exact: ina_error_bound()
 * gives the bound per element. Summary (N ranks, L = ceil(log2 N),
 * 2^(E-1) <= the block's largest |input| over all ranks < 2^E):
 *
 *   dtype     C type     |result - exact sum| <=
 *   INT32     int32_t    0: exact modulo 2^32 (wraps, two's complement)
 *   FLOAT32   float      N 2^(E+L-31) + 2^-24 |exact| + 2^-149
 *   FLOAT16   uint16_t   N 2^(E+L-31) + 2^-11 |exact| + 2^-25
 *   BFLOAT16  uint16_t   N 2^(E+L-31) + 2^-8  |exact| + 2^-134
 *   FLOAT64   double     N 2^(E'+L-31), E' = max(E, -960)
 *
 * The first term is the quantization: each rank's value is rounded to a
 * grid of step 2^(E+L-31), 31 - L bits below the block's exponent; the
 * others are the one rounding of the exact quantized sum to the type
 * (round to nearest even). FLOAT64 is NOT double precision: like FLOAT32 it keeps
 * 31 - L bits per element relative to its block's largest value (an error
 * of up to 2^(L-30) of that value per rank), though its inputs are never
 * rounded to float and its decode to double is exact. A result within
 * the bound of the type's overflow threshold may come back as +-Inf.
 * NaN/Inf propagate per element; a finite element sharing its block with a
 * NaN/Inf on any rank comes back NaN (docs/PROTOCOL.md §8), for every float
 * type.
 */
typedef enum {
    INA_INT32 = 0,    /**< int32_t; exact; sums wrap modulo 2^32 (two's complement) */
    INA_FLOAT32 = 1,  /**< float; block floating point (bound above) */
    INA_FLOAT16 = 2,  /**< IEEE binary16 in uint16_t storage: widened to float exactly,
                           quantized as FLOAT32, the sum rounded once to binary16 (RNE,
                           overflow to +-Inf, subnormals kept) */
    INA_BFLOAT16 = 3, /**< bfloat16 (the top half of a float) in uint16_t storage: as FLOAT16 */
    INA_FLOAT64 = 4,  /**< double, quantized straight from the double to 31-L bits per
                           block: NOT double precision (bound above) */
    /* 5..15 reserved: INA_ERR_NOTSUP */
} ina_dtype;

/*
 * Operations. MAX and MIN are exact for INT32, FLOAT32, FLOAT16 and
 * BFLOAT16: the result is one of the inputs, bit for bit. Floats travel as
 * order-preserving int32 keys on the switch's integer max and min (no
 * quantization; docs/PROTOCOL.md §8.9): -0 counts as below +0, and a NaN on
 * any rank gives NaN (as torch.max does). FLOAT64 returns INA_ERR_NOTSUP
 * (its keys would need 64-bit lanes).
 */
typedef enum {
    INA_SUM = 0, /**< every dtype */
    INA_MAX = 1, /**< exact maximum; every dtype but FLOAT64 */
    INA_MIN = 2, /**< exact minimum; every dtype but FLOAT64 */
    INA_AVG = 3, /**< every dtype: the SUM, then divided by world size N on each worker,
                      after the result arrives (what torch.distributed's ReduceOp.AVG
                      computes; NCCL pre-multiplies floats by 1/N instead, which rounds
                      differently).
                      Float types: the exact quantized sum is divided by N in double and
                      rounded once to the dtype, so the bound is
                      ina_error_bound(dtype, N, amax, exact_sum) / N
                      + 2^-52 |exact_sum / N| + the dtype's subnormal term (2^-149,
                      2^-25, 2^-134, 0); a FLOAT16 average whose sum exceeds 65504
                      still comes back finite. INT32: the wrapped int32 sum divided by
                      N with C's '/', i.e. truncated toward zero (-7/2 = -3), as NCCL's
                      ncclAvg for integer types; it is exact only while the sum does
                      not wrap. */
    /* 4..15 reserved: INA_ERR_NOTSUP */
} ina_op;

/* ---- Configuration ----------------------------------------------------- */

#define INA_DEFAULT_PORT 48864 /* 0xBEE0, as the original SwitchML */
#define INA_MAX_WORKERS 256    /* workers per job */
#define INA_JOB_NAME_MAX 31    /* bytes, not counting the terminating NUL */
#define INA_BUSY_POLL_AUTO (-1) /* ina_config.busy_poll_us: chosen from the host (v0.6) */

/**
 * Everything ina_init() needs. Fill with ina_config_init() (defaults) or
 * ina_config_from_env(), then override fields. Strings are copied by
 * ina_init(); the struct may be freed afterwards.
 */
typedef struct ina_config {
    const char *switch_addr; /**< "host:port" or "host" (port 48864). Default "127.0.0.1".
                                  A comma-separated list spreads every operation over
                                  those switches (shards; see "Several switches" below):
                                  every rank must give the same switches, in any order
                                  (each rank orders them by address and port; since v0.5,
                                  before: in the same order). Since v0.4. */
    const char *job;         /**< job name, 1..31 bytes. Default "default". */
    int rank;                /**< 0..world_size-1. Default 0. */
    int world_size;          /**< 1..INA_MAX_WORKERS. Default 1. */
    int elems_per_packet;    /**< 0 = default: 2048 on loopback, 256 elsewhere (fits MTU 1500);
                                  else 1..16368 (a 65535-byte datagram). Above: ina_init
                                  refuses it (-EINVAL). The switch may grant fewer (its
                                  --max-elems, default 2048): ina_info.elems_per_packet. */
    int window;              /**< outstanding packets (slots) per part, a power of 2 up to
                                  4096; 0 = default 128. Else ina_init refuses it (-EINVAL).
                                  The switch may grant fewer (its pool and --max-job-slots):
                                  ina_info.window. */
    int timeout_ms;          /**< deadline for an operation without progress; 0 = 30000. */
    int join_timeout_ms;     /**< deadline for all ranks to join; 0 = 60000. */
    int rto_ms;              /**< retransmission timeout floor; 0 = 100. The timeout adapts to the
                                  measured RTT (srtt + 4 rttvar, RFC 6298) above this floor and
                                  doubles per retry up to 1000 ms (values above 1000
                                  act as 1000). */
    int lanes;               /**< 0 = auto (the default since v0.4): chosen from the host,
                                  see ina_auto_lanes(); each rank proposes its count at
                                  join and the job runs the smallest (or the count of a
                                  rank that fixed it), so ranks on different hosts agree.
                                  1 = one lane, no threads. N > 1: split every operation
                                  into N contiguous parts, each streamed by its own thread
                                  with its own socket and its own window of slots (a job of
                                  its own at the switch, which may serve it on another
                                  dataplane thread: ina-switch --threads). Ranks that fix
                                  the value must use the same one (else INA_ERR_MISMATCH
                                  at join). At most 16, and shards x lanes at most 64.
                                  With several switches, each has L lanes: lane j of
                                  every switch is driven by the same thread (with 0, the
                                  agreement runs at part 0's switch and the parts follow
                                  it). ina_info.lanes says what runs.
                                  Since v0.2; 0 = auto since v0.4 (before: one lane). */
    int admission_wait_ms;   /**< if the switch's pool is full, wait up to this long for
                                  slots before falling back (0 = do not wait). Since v0.2. */
    int fallback;            /**< INA_FALLBACK_HOST (default) or INA_FALLBACK_NONE. Since v0.2. */
    const char *secret_file; /**< NULL (default) or a file holding the switch's shared secret
                                  (ina-switch --secret-file): JOIN then carries an HMAC-SHA256
                                  of it, and the switch's JOIN_ACK must carry one too (else
                                  INA_ERR_REJECTED). Env: INA_SECRET_FILE. Unreadable or
                                  empty file: INA_ERR_CONFIG. Since v0.2. */
    int float_add;           /**< how float sums are added: INA_FLOAT_ADD_QUANTIZED (default)
                                  or INA_FLOAT_ADD_SWITCH (see below). Env: INA_FLOAT_ADD
                                  ("quantized" or "switch"). All ranks must use the same
                                  value (else INA_ERR_MISMATCH). Since v0.3. */
    int busy_poll_us;        /**< while an operation waits for results, spin on the socket
                                  (or the shared-memory ring) up to this many microseconds
                                  before sleeping in poll(); 0 = never spin (a cleared
                                  struct), at most 1000000; INA_BUSY_POLL_AUTO (-1,
                                  ina_config_init()'s default since v0.6, "auto" in the
                                  environment): ina_auto_busy_poll() microseconds, except
                                  while an operation has more than a window of packets
                                  to come, and a context that keeps waiting longer than
                                  that stops
                                  spinning until a wait is short again (a spin every
                                  8th wait tries; see "Defaults
                                  chosen from the host"; ina_info.busy_poll_us says what
                                  runs). It saves the wake-up of a sleeping
                                  process (several microseconds on a VM), most where every
                                  spinning process has a core of its own; the spin yields
                                  its CPU every microsecond, so that the switch or another
                                  rank queued on the same CPU still runs at once
                                  (docs/GLM.md). With lanes, an idle lane thread spins on
                                  its queue of work, a busy one on its sockets and rings,
                                  and the caller on the operation's completion, so within
                                  the spin neither hand-off sleeps (since v0.5). Also sets
                                  SO_BUSY_POLL on the socket (best effort; it acts only on
                                  NAPI devices).
                                  Env: INA_BUSY_POLL_US ("auto" or 0..1000000). Since v0.4;
                                  auto by default since v0.6. */
    int fixed_point_bits;    /**< 0 = off (default). 1..30: SUM and AVG of the float dtypes
                                  travel as 32-bit fixed point with this many fractional
                                  bits (P4SGD's Q8.23 is 23), scaled the same way on every
                                  rank, in one round per packet and without exponents
                                  (wire op 5, docs/PROTOCOL.md §13): each element is
                                  rounded to a multiple of 2^-bits, and sums are exact.
                                  Values, and sums, must lie within +-(2^31-1) 2^-bits:
                                  an element that does not (or a NaN or Inf) comes back
                                  NaN on every rank and the operation returns
                                  INA_ERR_RANGE (see there). Needs a switch that offers
                                  op 5 (ina_info.fixed_point_bits says; else floats go
                                  as without it). All ranks must use the same value (else
                                  INA_ERR_MISMATCH). Env: INA_FIXED_POINT. Since v0.4. */
    int sparse;              /**< the default block-sparse mode of this context's
                                  all-reduces: INA_SPARSE_OFF (default), INA_SPARSE_ON or
                                  INA_SPARSE_AUTO (see "Block-sparse all-reduce" below).
                                  Env: INA_SPARSE ("off", "on" or "auto"). Since v0.5. */
    int sparse_block;        /**< elements per block of a sparse all-reduce, 32..256;
                                  0 = 256. Env: INA_SPARSE_BLOCK. Since v0.5. */
    double sparse_threshold; /**< a block is zero, and not sent, when every |x| <= this;
                                  0 (default) = exact: only blocks of +-0. INT32 ignores
                                  it (always exact). Env: INA_SPARSE_THRESHOLD. Since v0.5. */
    double sparse_crossover; /**< INA_SPARSE_AUTO goes sparse while the ranks' summed block
                                  density is below this; 0 = the measured default 0.4.
                                  Env: INA_SPARSE_CROSSOVER. Since v0.5. */
    int sparse_min_bytes;    /**< INA_SPARSE_AUTO keeps operations smaller than this dense
                                  without measuring; 0 = 1 MiB. Env: INA_SPARSE_MIN_BYTES.
                                  Since v0.5. */
    int integrity;           /**< 1: every DATA and result of this context carries a tag of
                                  a key only holders of secret_file can derive, so a wrong sum
                                  cannot be made by changing packets on the way (even by root
                                  on a host the packets pass): a changed or forged packet is
                                  dropped (ina_stats.mac_rejected) and resent. 0 (default):
                                  off. Needs secret_file (else INA_ERR_CONFIG) and a switch
                                  started with --integrity (both sides must agree, else
                                  ina_init fails with INA_ERR_NOTSUP); costs one keyed
                                  BLAKE2b per packet on each side (docs/BENCHMARKS.md).
                                  Env: INA_INTEGRITY=1. Since v0.6. */
    int wire_bits;           /**< bits per element of float sums on the wire (SUM and AVG;
                                  docs/PROTOCOL.md §8.10). 0 = default: FLOAT16 and BFLOAT16
                                  travel as 16 bits where the switch offers it (ina-switch
                                  does, but not with --int-ops-only, the eBPF dataplane or a
                                  parent that does not), everything else as 32 bits. 16:
                                  FLOAT32 too, rounded to the 16-bit format wire_half (as
                                  DDP's bf16 compression hook and Horovod's fp16
                                  compression do): half the bytes, at the format's
                                  precision, see ina_wire16_error_bound(). 32: every dtype
                                  on the 32-bit wire, as before v0.6 (sums reproducible bit
                                  for bit in two rounds). Fixed point (fixed_point_bits)
                                  takes precedence. All ranks must use the same value (else
                                  INA_ERR_MISMATCH). Env: INA_WIRE_BITS ("16" or "32").
                                  Since v0.6. */
    int wire_half;           /**< the 16-bit format of FLOAT32 with wire_bits 16:
                                  INA_WIRE_HALF_BF16 (default: bfloat16, binary32's range,
                                  8 significant bits) or INA_WIRE_HALF_FP16 (IEEE binary16,
                                  11 bits, scaled per packet by a power of 2). Env:
                                  INA_WIRE_HALF ("bf16" or "fp16"). Since v0.6. */
    unsigned reserved[1];    /**< zero; room for new fields: append them just before this
                                  one, as "ABI" at the top says (v0.2 took slots of it, which
                                  changed the layout on LP64). */
} ina_config;

/**
 * What a job does when the switch has no room for it (its pool is shared by
 * every job; see ina-switch --max-job-slots):
 *   INA_FALLBACK_HOST  rank 0 runs the job's aggregation itself, in a thread
 *                      of its process, with the same protocol: the results
 *                      are the same, only slower (rank 0's host carries N
 *                      streams). ina_get_info() reports INA_PATH_HOST.
 *   INA_FALLBACK_NONE  ina_init() fails with INA_ERR_NOSPACE.
 */
enum { INA_FALLBACK_HOST = 0, INA_FALLBACK_NONE = 1 };

/**
 * How FLOAT32, FLOAT16 and BFLOAT16 sums (and averages) are added:
 *   INA_FLOAT_ADD_QUANTIZED  block floating point (SwitchML): each block is
 *                            scaled to int32 with an exponent the ranks agree
 *                            on, and the switch adds integers. Results are
 *                            reproducible bit for bit from run to run, at
 *                            any size and N (small ops take one round at
 *                            N <= 2 only, where the switch's alignment does
 *                            not depend on arrival order), within the bound
 *                            of ina_error_bound(); any switch can do it.
 *   INA_FLOAT_ADD_SWITCH     the switch adds IEEE-754 binary32 values as
 *                            floats, in the order packets arrive (round to
 *                            nearest even): no quantization on the workers,
 *                            one round per packet, per-element precision
 *                            (|error| <= (N-1) * 2^-24 * sum_i |x_i| for
 *                            FLOAT32, then one rounding to a 16-bit type),
 *                            NaN and Inf per element as in IEEE arithmetic.
 *                            All ranks get the same bits; at N <= 2 a rerun
 *                            too (a + b = b + a), but at N >= 3 a rerun may
 *                            differ in the last bits (arrival order). Only a
 *                            switch that offers it (ina-switch does unless
 *                            --int-ops-only; a hardware or eBPF dataplane
 *                            does not): elsewhere floats go quantized, and
 *                            ina_info.float_add says which is in use.
 * FLOAT64 is always quantized (binary32 adds would lose its precision).
 */
enum { INA_FLOAT_ADD_QUANTIZED = 0, INA_FLOAT_ADD_SWITCH = 1 };

/** ina_config.wire_half: the 16-bit format FLOAT32 travels in with wire_bits 16. */
enum { INA_WIRE_HALF_BF16 = 0, INA_WIRE_HALF_FP16 = 1 };

/** Where a context's all-reduces run (ina_info.path). */
enum { INA_PATH_SWITCH = 0, INA_PATH_HOST = 1 };

/** Fill cfg with the defaults documented above. Since v0.1. */
INA_EXTERN void ina_config_init(ina_config *cfg);

/**
 * Fill cfg from the environment, starting from the defaults:
 * INA_SWITCH (host:port, or a comma-separated list of them: shards), INA_RANK (else RANK), INA_WORLD_SIZE (else
 * WORLD_SIZE), INA_JOB, INA_ELEMS, INA_WINDOW, INA_TIMEOUT_MS,
 * INA_JOIN_TIMEOUT_MS, INA_RTO_MS, INA_LANES ("auto" = 0, or 1..16),
 * INA_ADMISSION_WAIT_MS, INA_FALLBACK
 * ("host" or "none"), INA_SECRET_FILE, INA_FLOAT_ADD ("quantized" or "switch"),
 * INA_SPARSE ("off", "on" or "auto"), INA_SPARSE_BLOCK, INA_SPARSE_THRESHOLD,
 * INA_SPARSE_CROSSOVER, INA_SPARSE_MIN_BYTES, INA_BUSY_POLL_US, INA_FIXED_POINT,
 * INA_INTEGRITY ("0" or "1"), INA_WIRE_BITS ("16" or "32"), INA_WIRE_HALF ("bf16"
 * or "fp16").
 * What INA_* and torchrun's RANK/WORLD_SIZE leave unset comes from the
 * innermost launcher (since v0.4), rank and size from one launcher together:
 * OpenMPI (OMPI_COMM_WORLD_RANK/_SIZE, job "ompi-" OMPI_MCA_ess_base_jobid),
 * then PMI (PMI_RANK/PMI_SIZE, job "pmi-" PMI_JOBID), then Slurm inside a job
 * step (SLURM_PROCID/SLURM_NTASKS, job "slurm-" SLURM_JOB_ID "." SLURM_STEP_ID;
 * not in the batch script, whose SLURM_STEP_ID is a pseudo-step). The job name
 * is taken only when INA_JOB is unset. See docs/CLUSTER.md.
 * Strings point into the environment (or, for a launcher's job name, into
 * storage kept for the life of the process). (libina also reads INA_QUIET, INA_SHM,
 * INA_ONE_ROUND, INA_NO_GSO, INA_NO_SIMD and INA_FAULT itself, when it needs them.)
 * Each value is checked against the range of its field (as ina_init would):
 * INA_RANK 0..255 (and below INA_WORLD_SIZE when both are given), INA_WORLD_SIZE
 * 1..256, INA_ELEMS 0..16368, INA_WINDOW 0 or a power of 2 up to 4096, the
 * times >= 0, INA_LANES auto or 0..16, INA_SPARSE_BLOCK 0 or 32..256,
 * INA_SPARSE_CROSSOVER 0..256, INA_SPARSE_THRESHOLD finite >= 0,
 * INA_BUSY_POLL_US auto or 0..1000000, INA_FIXED_POINT 0..30 (not with
 * INA_FLOAT_ADD=switch), INA_JOB at most 31 bytes, INA_SWITCH a list of
 * HOST[:PORT] without empty entries, at most 64 (names are resolved by
 * ina_init). A variable that is set but empty is an error, not unset (since
 * v0.5): it does not let RANK, WORLD_SIZE or a launcher's variable decide.
 * (torchrun's and launchers' empty variables count as unset.)
 * @return 0, or INA_ERR_CONFIG if a variable is set but empty, malformed or
 * out of its range, or a launcher's rank is outside 0..size-1
 * (ina_last_error(NULL) names the variable, its value and the rule).
 */
INA_EXTERN int ina_config_from_env(ina_config *cfg);

/* ---- Context ----------------------------------------------------------- */

/**
 * Create a context and join the job: register with the switch and wait
 * until all world_size ranks have registered (at most join_timeout_ms).
 * While it waits, it writes a line to stderr after 3 s and then every 10 s
 * saying what for (the ranks still missing, no switch at the address, ...),
 * and rank 0 warns once if two of its shards multicast results to one group
 * (docs/SCALE.md); INA_QUIET=1 in the environment silences them. On failure,
 * ina_last_error(NULL) says which value or which cause.
 * @return 0 and *out set, or:
 *   -EINVAL             NULL argument or a field out of range
 *   INA_ERR_CONFIG      a switch address does not resolve, the list of switches is
 *                       malformed (an empty entry) or shards x lanes exceeds 64, a
 *                       malformed INA_FAULT, an unreadable secret_file, integrity
 *                       without secret_file
 *   INA_ERR_TIMEOUT     not all ranks joined in time, or no switch answered
 *   INA_ERR_NOSPACE     the switch has no room for the job's window
 *   INA_ERR_MISMATCH    the ranks declared different world sizes (or lanes): every
 *                       rank that is joining gets it at once
 *   INA_ERR_REJECTED    the switch refused the parameters (world size, rank, name), or
 *                       the shared secret (secret_file) is missing, wrong, or the switch
 *                       did not prove it knows it
 *   INA_ERR_PROTO       the switch speaks another protocol version, or its
 *                       answer carried impossible parameters
 *   INA_ERR_SHUTDOWN    the switch is draining (SIGTERM) and takes no new jobs
 *   INA_ERR_NOTSUP      integrity is on at one side only: ina_config.integrity
 *                       without ina-switch --integrity, or the reverse (since v0.6)
 *   -ENOMEM, -errno     from the system
 * On failure *out is NULL and nothing is leaked.
 * Notes: 1. libina refuses elems_per_packet above 16368 and window above 4096
 * (-EINVAL, above); within those, proposals above the switch's own limits
 * are capped by the switch (never refused), and ina_get_info() tells what
 * was granted. 2. With
 * several switches or lanes, admission is all or nothing: if one switch has
 * no room, every rank leaves the others and the whole job runs on rank 0's
 * host (INA_FALLBACK_HOST) or ina_init() returns INA_ERR_NOSPACE on every rank
 * (INA_FALLBACK_NONE), never a mix. 3. A
 * second process joining with a rank that is already registered replaces
 * it (a restarted worker); if the job was running, its session is aborted
 * for every rank (they get INA_ERR_ABORTED) and a new one is collected.
 */
INA_EXTERN int ina_init(ina_ctx **out, const ina_config *cfg);

/** ina_config_from_env() followed by ina_init(). On failure, ina_last_error(NULL)
 * says why. */
INA_EXTERN int ina_init_env(ina_ctx **out);

/**
 * Leave the job and free the context. Operations still in flight (started
 * and not complete) fail with INA_ERR_CLOSED and their requests are freed;
 * leaving with operations in flight ends the session for the other ranks too
 * (they get INA_ERR_ABORTED), with shards and lanes on every switch. (Only
 * lanes > 1 may complete an operation between calls: progress rule.) Accepts
 * NULL.
 * Every later call with this handle, ina_finalize() included, returns
 * INA_ERR_CLOSED: libina keeps a small shell of each finalized context for
 * the life of the process, so a stale handle is caught, never dereferenced
 * as freed memory. (Requests are not kept: a request must not be used after
 * ina_wait() or ina_finalize() released it.)
 * @return 0, or INA_ERR_CLOSED if already finalized.
 */
INA_EXTERN int ina_finalize(ina_ctx *ctx);

/* ---- All-reduce -------------------------------------------------------- */

/**
 * Blocking all-reduce: recvbuf[i] = op over ranks of sendbuf[i], i < count
 * (the sum, its average, or for INT32 the max or min).
 * sendbuf == recvbuf is allowed (in place); other overlap is not.
 * count == 0 is allowed and returns at once.
 * @return 0, or
 *   -EINVAL            NULL ctx or buffer (with count > 0), dtype or op > 15,
 *                      a buffer not aligned to the element size
 *   -EOVERFLOW         count * sizeof(element) does not fit in size_t
 *   INA_ERR_NOTSUP     dtype 5..15 or op 4..15 (reserved), or MAX/MIN on
 *                      FLOAT64 (see ina_op)
 *   INA_ERR_CLOSED     the context is finalized, or was broken by an earlier failure
 *   INA_ERR_TIMEOUT    no progress for timeout_ms (a peer or the switch is gone)
 *   INA_ERR_ABORTED    the switch ended the session (another rank failed,
 *                      left with operations in flight, or was restarted;
 *                      ina_last_error() names the rank when the switch knows:
 *                      reason=rank_taken, another process joined as that rank,
 *                      or reason=rank_dead, its process is gone)
 *   INA_ERR_MISMATCH   the ranks passed different counts or operations
 *   INA_ERR_SHUTDOWN   the switch is shutting down (SIGTERM): it ended the job
 *                      between two operations, or at its drain deadline
 *   -ECONNREFUSED      the host answered "port unreachable" for 1 s with no
 *                      result: no switch is running at the address
 * On failure recvbuf holds unspecified values. A failed operation breaks the
 * context (every later call returns INA_ERR_CLOSED): finalize and re-init.
 * A session that ends between operations (an ABORT with no operation in
 * flight) breaks it too: the next call returns the reason (for example
 * INA_ERR_ABORTED) once, and later ones INA_ERR_CLOSED.
 */
INA_EXTERN int ina_allreduce(ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                             size_t count, ina_dtype dtype, ina_op op);

typedef struct ina_req ina_req;

/**
 * Start an all-reduce and return at once with a request in *req. Several
 * may be in flight. Their packets go out in the order started, but each
 * completes as soon as its own results are in, so a later small request
 * may finish before an earlier large one. The buffers must stay valid and
 * untouched until the request completes.
 * @return 0, or
 *   -EINVAL, -EOVERFLOW, INA_ERR_NOTSUP   the argument errors of ina_allreduce()
 *   INA_ERR_CLOSED     the context is finalized, or broken by an earlier failure
 *                      (a session that ended between operations returns its
 *                      reason once instead, e.g. INA_ERR_ABORTED, as ina_allreduce)
 *   INA_ERR_BUSY       more than 1024 requests in flight
 * On error *req is NULL and no request exists.
 */
INA_EXTERN int ina_allreduce_start(ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                                   size_t count, ina_dtype dtype, ina_op op,
                                   ina_req **req);

/**
 * Make progress without blocking. Sets *done to 1 if the request finished.
 * @return the request's status if done (0 or a negative code), else 0.
 * The request stays valid: release it with ina_wait().
 */
INA_EXTERN int ina_test(ina_req *req, int *done);

/**
 * Block until the request finishes (bounded by the context's timeout),
 * then free it. Accepts NULL (returns 0).
 * @return the request's status: 0 or a negative code as ina_allreduce().
 */
INA_EXTERN int ina_wait(ina_req *req);

/* ---- Introspection ----------------------------------------------------- */

typedef struct ina_stats {
    uint64_t ops;              /**< operations completed successfully */
    uint64_t packets_sent;     /**< data packets, retransmissions included */
    uint64_t packets_received; /**< result packets accepted */
    uint64_t retransmits;      /**< data packets sent again (timeout, fast retransmit, tail probe) */
    uint64_t stale_results;    /**< duplicate or stale result packets ignored */
    uint64_t bytes_sent;       /**< UDP payload bytes sent */
    uint64_t nonfinite_blocks; /**< float blocks that carried NaN/Inf (quantized floats only) */
    /* retransmits by cause (they sum to retransmits): */
    uint64_t rtx_fast;    /**< a later result revealed the gap (fast retransmit) */
    uint64_t rtx_probe;   /**< tail probe or a resent packet's short timer expired */
    uint64_t rtx_timeout; /**< the RTT-based retransmission timeout expired */
    /* Since v0.4: */
    uint64_t fixed_invalid;    /**< fixed-point elements that came back NaN (INA_ERR_RANGE) */
    uint64_t busy_poll_hits;   /**< spins (busy_poll_us) that found input before sleeping */
    uint64_t busy_poll_sleeps; /**< spins that found nothing in time and slept */
    /* block-sparse all-reduce (since v0.5; with lanes, counted per lane part): */
    uint64_t sparse_ops;         /**< operations (parts) that streamed block-sparse */
    uint64_t sparse_auto_dense;  /**< INA_SPARSE_AUTO operations that measured and went dense */
    uint64_t sparse_blocks_sent; /**< blocks sent in sparse packets, retransmissions included */
    /* Forgeries dropped (since v0.6; docs/PROTOCOL.md §4.6, §7.5): */
    uint64_t group_rejected; /**< datagrams on the job's multicast group (ina-switch --multicast)
                                  that did not come from the switch's address and port, or
                                  were not results: another process's forgeries */
    uint64_t mac_rejected;   /**< results, ABORTs and MIGRATEs of a session with tags (a
                                  secret_file, and --multicast or integrity) whose tag was
                                  missing or wrong: forged or changed on the way; a lost
                                  result is resent as after any loss */
    /* Since v0.6: */
    uint64_t flushed_elems; /**< elements of this rank's float inputs that their block's shared
                                 scale lost (quantized floats, dense): nonzero values of at most
                                 half a unit of the block's scale 2^(E+L-31), that is about
                                 2^-(32-L) of the block's largest |x| on any rank, which add
                                 nothing to the sum (flushed to zero); and finite values in a
                                 block where some rank had a NaN or Inf, which come back NaN or
                                 +-Inf. libina warns once per context on stderr (not with
                                 INA_QUIET=1). docs/API.md#types-and-operations */
    uint64_t reserved[1]; /**< zero; append new counters just before this one ("ABI" at the
                               top; v0.4, v0.5 and v0.6 grew the struct) */
} ina_stats;

/** Copy the context's counters into *st. @return 0 or -EINVAL. */
INA_EXTERN int ina_get_stats(const ina_ctx *ctx, ina_stats *st);

typedef struct ina_info {
    int rank, world_size;
    int elems_per_packet; /**< as granted by the switch */
    int window;           /**< as granted by the switch */
    uint32_t job_id;
    uint32_t session_id;
    int lanes;            /**< lanes (threads) per operation; window is per lane */
    int path;             /**< INA_PATH_SWITCH, or INA_PATH_HOST if the switch had no room
                               (any lane) and rank 0 aggregates (INA_FALLBACK_HOST) */
    int float_add;        /**< INA_FLOAT_ADD_SWITCH if float sums are added as floats by the
                               switch (asked for, and offered), else INA_FLOAT_ADD_QUANTIZED.
                               Since v0.3. */
    int shm;              /**< 1 if DATA and results go through shared-memory rings with a
                               switch on this host (ina-switch --shm; every lane), else 0
                               (UDP). INA_SHM=0 keeps a context on UDP. Since v0.3. */
    int shards;           /**< switches each operation is spread over (the INA_SWITCH list;
                               1 after a fallback to rank 0's host). Since v0.4. */
    int levels;           /**< aggregation levels of the tree the sums pass through: 1 = the
                               switch adds every rank itself; 2 = it is a child that sends
                               partial sums to a parent (ina-switch --parent); 4 = 4 or
                               more. Part 0's switch's answer. Since v0.4. */
    int fixed_point_bits; /**< fractional bits of float sums in fixed point (wire op 5), or
                               0: not asked for, or the switch does not offer it. Since v0.4. */
    int sparse;           /**< 1 if the switch offers block-sparse all-reduce (else sparse
                               requests go dense). Since v0.5. */
    int lanes_proposed;   /**< lanes = 0 (auto): the count this rank proposed from its host
                               (ina_auto_lanes()); the job runs ina_info.lanes, the smallest
                               proposal. 0 when the lanes were set. Since v0.4. */
    int integrity;        /**< 1 if every DATA and result carries a tag (ina_config.integrity,
                               agreed by the switch). Since v0.6. */
    int wire_bits;        /**< 16 if FLOAT16 and BFLOAT16 sums travel as 16 bits (every
                               part's switch offers it and wire_bits is not 32), else 32.
                               Since v0.6. */
    int busy_poll_us;     /**< how long a wait for results spins before it sleeps, in
                               microseconds (0: never): ina_config.busy_poll_us, or with
                               INA_BUSY_POLL_AUTO what ina_auto_busy_poll() chose. Since v0.6. */
    unsigned reserved[1]; /**< zero; append new fields just before this one ("ABI" at the
                               top; v0.4, v0.5 and v0.6 grew the struct) */
} ina_info;

/** Session parameters agreed at join time. @return 0 or -EINVAL. */
INA_EXTERN int ina_get_info(const ina_ctx *ctx, ina_info *info);

/**
 * Absolute error bound for one element of a FLOAT32 all-reduce whose block
 * (the elems_per_packet elements sharing a packet) has largest magnitude
 * amax over all ranks and whose exact sum is exact_sum:
 *   |result - exact_sum| <= N * 2^(E + L - 31) + 2^-24 * |exact_sum| + 2^-149
 * with 2^(E-1) <= amax < 2^E and L = ceil(log2 N). See docs/PROTOCOL.md.
 * Notes: 1. A result within that error of float's overflow threshold may
 * come back as +-Inf (sign of the exact sum) although the exact sum is
 * finite. 2. amax == 0 drops the first term. 3. NaN/Inf arguments give +Inf.
 */
INA_EXTERN double ina_float_error_bound(int world_size, double amax, double exact_sum);

/**
 * The same bound for any dtype's SUM (the table at ina_dtype): the absolute
 * error bound for one element whose block has largest magnitude amax over
 * all ranks (as stored: a FLOAT16 value, a double, ...) and whose exact sum
 * is exact_sum. INT32: 0. FLOAT32: ina_float_error_bound(). For INA_AVG see
 * ina_op. Notes: 1. amax == 0 drops the first term. 2. NaN/Inf arguments
 * give +Inf; an unknown dtype gives NaN. 3. A result within the bound of
 * the type's overflow threshold (FLT_MAX, 65504, ...) may come back as
 * +-Inf.
 */
INA_EXTERN double ina_error_bound(ina_dtype dtype, int world_size, double amax, double exact_sum);

/**
 * The bound when the switch adds floats (ina_info.float_add ==
 * INA_FLOAT_ADD_SWITCH): for one element whose inputs over all ranks have
 * abs_sum = sum_i |x_i| and exact sum exact_sum,
 *   |result - exact_sum| <= (N-1) * 2^-24 * abs_sum * (1 + rel) + rel * |exact_sum| + sub
 * (N-1 binary32 additions in any order, then one rounding to the dtype:
 * rel, sub = 2^-24, 2^-149 for FLOAT32, 2^-11, 2^-25 for FLOAT16, 2^-8,
 * 2^-134 for BFLOAT16). AVG as in ina_op. Notes: NaN/Inf arguments give
 * +Inf; INT32 gives 0; FLOAT64 (never added as floats) and unknown dtypes
 * give NaN. A sum whose partial sums pass FLT_MAX comes back +-Inf, as any
 * binary32 sum would. Since v0.3.
 */
INA_EXTERN double ina_float_add_error_bound(ina_dtype dtype, int world_size, double abs_sum,
                                            double exact_sum);

/**
 * The bound on the 16-bit wire (ina_info.wire_bits == 16; FLOAT32 with
 * ina_config.wire_bits 16; docs/PROTOCOL.md §8.10.6), for one element of a
 * SUM (against exact_sum) or an AVG (against exact_sum / N) whose inputs
 * over all ranks have abs_sum = sum_i |x_i|; amax is the largest magnitude
 * over all ranks in the element's packet (2 * elems_per_packet elements; it
 * bounds the packet's scale, which matters only for FLOAT32 on binary16
 * and for FLOAT16 sums past 65504). wire_half: the format of FLOAT32
 * (INA_WIRE_HALF_*; FLOAT16 travels as binary16, BFLOAT16 as bfloat16
 * whatever it says). Roughly: FLOAT16 and BFLOAT16 (N-1) 2^-24 abs_sum plus
 * one rounding to the type; FLOAT32 one rounding of each input to the
 * 16-bit format (2^-9 abs_sum for bfloat16, 2^-12 for binary16) on top.
 * Notes: NaN/Inf arguments give +Inf; INT32, FLOAT64 and unknown dtypes
 * give NaN. A result past the dtype's range (FLOAT16 sums from 65520 on)
 * comes back +-Inf. Since v0.6.
 */
INA_EXTERN double ina_wire16_error_bound(ina_dtype dtype, int wire_half, ina_op op,
                                         int world_size, double abs_sum, double exact_sum,
                                         double amax);

/* ---- Key-value store: sparse push and pull (Since v0.5) -------------------
 *
 * For sparse models (embedding tables, CTR models) whose gradients are mostly
 * zero: a worker pushes (key, value) pairs and pulls fresh values, and a
 * sharded parameter server, ina-ps, holds the parameters and applies the
 * updates with a server-side optimizer. With an ina-switch, the hot keys (the
 * ones updated most often) are summed in the switch's hot table instead, and
 * only the cold rest goes to ina-ps (Libra's design). docs/PS.md tells how it
 * works; docs/PROTOCOL.md §14 is the wire format.
 *
 * Steps are synchronous: the i-th push of every rank forms step i. A step is
 * applied once, at every shard, when all world_size ranks have pushed it:
 * the values of its keys summed over the ranks (keys repeated in a push are
 * summed too), then one optimizer update per key. A push completes when its
 * step has been applied everywhere (hot keys included); a pull returns the
 * values after every step this rank pushed before it. Keys never pushed
 * have their initial value (INA_KV_INIT_*). The optimizers skip a key whose
 * summed gradient is exactly zero.
 *
 * Threading and progress as for ina_ctx: one ina_kv per thread; operations
 * progress inside ina_kv_* calls. Every call that waits has a deadline
 * (timeout_ms without an answer). When a shard or a rank dies, every rank's
 * operations fail: the rank that notices first (INA_ERR_TIMEOUT or
 * -ECONNREFUSED) tells the shards and the switch, which end the job for the
 * others (INA_ERR_ABORTED; ina_kv_last_error() names the rank or shard).
 * After a failure the handle only closes.
 */

typedef struct ina_kv ina_kv;
typedef struct ina_kv_req ina_kv_req;

enum { INA_KV_SGD = 0, INA_KV_ADAGRAD = 1 };          /* ina_kv_config.optimizer */
enum { INA_KV_INIT_ZERO = 0, INA_KV_INIT_UNIFORM = 1 }; /* ina_kv_config.init */

typedef struct ina_kv_config {
    const char *ps_addrs;    /**< the ina-ps shards in shard order, "HOST:PORT,HOST:PORT,...";
                                  key k lives on shard (splitmix64(k) >> 32) mod S (PROTOCOL.md
                                  §14.1). With weights, "HOST:PORT@W,..." (W 1..65535, every
                                  shard or none; since v0.6): shard s holds a share W_s / sum
                                  of the keys (by ranges of the hash), e.g. less for a shard
                                  whose host also runs the switch. Default "127.0.0.1:48870"
                                  (one shard). Env INA_PS. */
    const char *switch_addr; /**< NULL (default): every key goes to ina-ps (all-PS). Else the
                                  ina-switch whose hot table sums the hot keys ("HOST[:PORT]");
                                  needs hot_keys > 0. Env INA_KV_SWITCH. */
    const char *job;         /**< job name, 1..31 bytes (default "default"); names the job at
                                  every shard and at the switch */
    int rank, world_size;    /**< as ina_config (defaults 0 and 1) */
    int dim;                 /**< floats per key, 1..64 (default 1); a hot set needs 1 */
    int optimizer;           /**< INA_KV_SGD (default): w -= lr g; INA_KV_ADAGRAD:
                                  n += g^2, w -= lr g / (eps + sqrt(n)) */
    float lr;                /**< learning rate (default 0.1) */
    float eps;               /**< Adagrad's eps (default 1) */
    float init_acc;          /**< Adagrad's initial n (default 0) */
    int init;                /**< INA_KV_INIT_ZERO (default) or INA_KV_INIT_UNIFORM: uniform in
                                  [-init_scale, init_scale) from a hash of (init_seed, key, j) */
    float init_scale;
    uint64_t init_seed;
    int hot_keys;            /**< H: most hot keys (default 0 = none, all-PS). With a switch,
                                  the H keys pushed most in the profile window are summed by
                                  the switch: every rank samples its pushes (1 in R entries,
                                  env INA_KV_SAMPLE, default 2) and sends its H most sampled,
                                  the switch sums them and keeps the top H; it may cap H
                                  (ina-switch --hot-keys). */
    int profile_steps;       /**< P: steps profiled before the first hot set (default 8); the
                                  hot set starts at step P */
    int reprofile_steps;     /**< E: a new hot set from the last P steps every E steps
                                  (default 0 = never) */
    int datagram_bytes;      /**< largest datagram to a shard: 0 = 65000 on loopback, else
                                  1472 (no IP fragments at MTU 1500); 256..65000 */
    int timeout_ms;          /**< deadline without an answer; 0 = 30000 */
    int join_timeout_ms;     /**< deadline for every rank to join; 0 = 60000 */
    unsigned reserved[8];    /**< zero */
} ina_kv_config;

/** Fill cfg with the defaults above. Since v0.5. */
INA_EXTERN void ina_kv_config_init(ina_kv_config *cfg);

/**
 * Fill cfg from the environment, starting from the defaults: INA_PS,
 * INA_KV_SWITCH, INA_JOB, INA_RANK (else RANK), INA_WORLD_SIZE (else
 * WORLD_SIZE), INA_TIMEOUT_MS. Strings point into the environment.
 * @return 0, or INA_ERR_CONFIG (ina_last_error(NULL) names the variable).
 * Since v0.5.
 */
INA_EXTERN int ina_kv_config_from_env(ina_kv_config *cfg);

/**
 * Join the job at every shard (and at the switch, with switch_addr), each
 * waiting until all world_size ranks joined (join_timeout_ms).
 * @return 0 and *out, or:
 *   -EINVAL            NULL argument or a field out of range (ina_last_error(NULL) says which)
 *   INA_ERR_CONFIG     an address does not resolve, more than 64 shards
 *   INA_ERR_NOTSUP     a hot set with dim > 1, or a switch without a hot table
 *   INA_ERR_TIMEOUT    not every rank joined in time, or a shard or the switch did not answer
 *   INA_ERR_MISMATCH   the ranks declared different parameters (world size, dim, optimizer,
 *                      lr, ...; shards), or the shard is not the one ps_addrs says
 *   INA_ERR_REJECTED, INA_ERR_NOSPACE, INA_ERR_PS_FULL, INA_ERR_PROTO: a shard or the switch
 *                      refused the job; -errno from the system
 * On failure *out is NULL and nothing is leaked. Since v0.5.
 */
INA_EXTERN int ina_kv_open(ina_kv **out, const ina_kv_config *cfg);

/**
 * Leave and free. Operations in flight fail with INA_ERR_CLOSED and end the
 * job for the other ranks (INA_ERR_ABORTED). Accepts NULL. @return 0.
 * Since v0.5.
 */
INA_EXTERN int ina_kv_close(ina_kv *kv);

/**
 * Push this rank's update of the next step: n keys and n * dim values
 * (key i's values at vals[i * dim]). Keys may repeat: their values are
 * summed. n == 0 is allowed (the rank updates nothing this step, but the
 * step needs its push). Blocks until the step is applied at every shard.
 * Every reprofile_steps steps (and at step profile_steps) a hot set is
 * (re)installed at the start of the push, which then also waits for that.
 * @return 0, or
 *   -EINVAL            NULL kv, NULL keys/vals with n > 0, a value NaN or +-Inf (nothing is sent)
 *   -EOVERFLOW         n > 2^31
 *   INA_ERR_CLOSED     the handle failed earlier or is closed
 *   INA_ERR_TIMEOUT, -ECONNREFUSED   a shard, the switch or a rank did not answer
 *   INA_ERR_ABORTED    another rank failed, or a shard ended the job
 *   INA_ERR_PS_FULL    a shard reached its memory limit (the job ends for all ranks)
 *   INA_ERR_MISMATCH   the ranks disagree on the hot set
 * Since v0.5.
 */
INA_EXTERN int ina_kv_push(ina_kv *kv, const uint64_t *keys, const float *vals, size_t n);

/**
 * Pull the values of n keys (repeats allowed) into vals (n * dim floats):
 * the values after every step this rank pushed before the call.
 * @return 0 or the errors of ina_kv_push(). Since v0.5.
 */
INA_EXTERN int ina_kv_pull(ina_kv *kv, const uint64_t *keys, float *vals, size_t n);

/**
 * Asynchronous push and pull: start, then ina_kv_test() / ina_kv_wait().
 * Many may be in flight: pushes apply in the order started (at most two
 * steps are open at once; a later push waits its turn), and a pull waits
 * for the pushes started before it. Arrays must stay valid and untouched
 * until the request completes. @return 0 and *req, or the argument errors
 * of ina_kv_push(), or INA_ERR_BUSY (1024 requests in flight). Since v0.5.
 */
INA_EXTERN int ina_kv_push_start(ina_kv *kv, const uint64_t *keys, const float *vals, size_t n,
                                 ina_kv_req **req);
INA_EXTERN int ina_kv_pull_start(ina_kv *kv, const uint64_t *keys, float *vals, size_t n,
                                 ina_kv_req **req);
/** Progress without blocking; *done = 1 when finished. @return its status if done, else 0. */
INA_EXTERN int ina_kv_test(ina_kv_req *req, int *done);
/** Block until done (bounded by timeout_ms), free the request. Accepts NULL. @return its status. */
INA_EXTERN int ina_kv_wait(ina_kv_req *req);

typedef struct ina_kv_stats {
    uint64_t steps;              /**< pushes completed */
    uint64_t push_entries;       /**< entries pushed */
    uint64_t hot_entries;        /**< ... of which went to the switch's hot table */
    uint64_t pull_keys;          /**< keys pulled */
    uint64_t hot_pull_keys;      /**< ... of which from the local hot replica */
    uint64_t ps_bytes_sent;      /**< UDP payload bytes to the shards (retransmissions included) */
    uint64_t ps_bytes_received;  /**< ... and from them */
    uint64_t ps_datagrams_sent, ps_datagrams_received;
    uint64_t ps_retransmits;     /**< datagrams to shards sent again */
    uint64_t switch_bytes_sent;  /**< UDP payload bytes of the hot vector to the switch */
    uint64_t hot_installs;       /**< hot sets installed (epochs) */
    uint64_t hot_keys;           /**< keys in the current hot set */
    uint64_t hot_keys_out;       /**< keys that left a hot set: written back to their shard */
    uint64_t hot_keys_in;        /**< keys that entered one: read from their shard */
    uint64_t reserved[6];
} ina_kv_stats;

/** Copy the handle's counters. @return 0 or -EINVAL. Since v0.5. */
INA_EXTERN int ina_kv_get_stats(const ina_kv *kv, ina_kv_stats *st);

/** Why the handle's last call failed, or "". Never NULL. Since v0.5. */
INA_EXTERN const char *ina_kv_last_error(const ina_kv *kv);

/* ---- Several switches: shards and trees (docs/SCALE.md) ----------------- */

/*
 * A software switch has one NIC, so it carries N times the bytes of each
 * worker. Two ways past it, which combine (Since v0.4):
 *
 * Shards. ina_config.switch_addr (INA_SWITCH) may list several switches,
 * "h1:p1,h2:p2,...": every operation is cut into shards x lanes contiguous
 * parts at packet boundaries, and part (shard i, lane j) is streamed through
 * switch i with its own socket, window and retransmission (a lane of its
 * own there). Nothing else changes: the same results, the same bounds. Every
 * rank must list the same switches, in any order: shard i is the i-th by IPv4
 * address and port, on every rank (PROTOCOL.md §12.1). Admission is all or
 * nothing (ina_init note 2). A failure on any part fails the operation on
 * every part and every rank: a rank whose part fails by its own deadline
 * tells every switch, which ends the job for every other rank
 * (INA_ERR_ABORTED); a switch that dies fails the operation on every rank
 * within timeout_ms (INA_ERR_TIMEOUT, INA_ERR_ABORTED, or -ECONNREFUSED).
 * ina_info.shards says how many switches a context uses. Shards add sockets
 * and windows (the window is per part), not threads: lanes add threads. With
 * one lane, the caller's thread drives every switch's part inside libina
 * calls (the progress rule holds as for one switch).
 *
 * Trees. A switch started with `ina-switch --parent HOST:PORT` (a child,
 * e.g. one per node) adds the packets of the workers that join it and sends
 * one partial sum per round to its parent, so one stream per node crosses
 * the node's NIC. Workers need nothing but the child's address (and their
 * global rank and world size). Loss recovery, duplicate detection and the
 * float error bound are those of one switch (docs/PROTOCOL.md §12.7). A tree
 * offers neither one-round small float sums (they take two rounds), nor
 * multicast, nor the host fallback (a job the tree has no room for gets
 * INA_ERR_NOSPACE on every rank). ina_info.levels is 2 under a child.
 */

/* ---- Latency path: fixed point, busy polling, many small operations ---- */

/*
 * Small all-reduces (a few packets: P4SGD's 8 partial dot products of a
 * micro-batch are 32 bytes) cost one round trip and little else:
 *  - one round per packet: fixed point (below), or, for float sums of at
 *    most one window of blocks, block floating point in one round (§8.7 of
 *    docs/PROTOCOL.md), or float adds at the switch (float_add);
 *  - requests come from a per-context pool: starting and completing an
 *    operation allocates nothing and takes no lock once the pool holds as
 *    many requests as were ever in flight (a single-lane context; lanes take
 *    their mutex per operation);
 *  - busy polling (ina_config.busy_poll_us, ina-switch --busy-poll) saves
 *    the wake-up of a sleeping process, but only pays where each spinning
 *    process has a core to itself.
 * docs/GLM.md measures them; ina-glm (apps/glm) is the workload.
 *
 * Fixed point (ina_config.fixed_point_bits = f, 1..30). SUM and AVG of the
 * float dtypes: each rank sends round(x 2^f) (ties to even) as an int32, the
 * switch adds them exactly, and the result is sum 2^-f, rounded once to the
 * dtype (AVG: divided by N first, in double). Every rank must use the same f:
 * it is part of every packet's tag (ranks that differ get INA_ERR_MISMATCH).
 * An element is valid while |round(x 2^f)| <= 2^31 - 1 on every rank and
 * every partial sum at the switch stays within that range too (guaranteed
 * when every |x| <= (2^31 - 1) 2^-f / N). Otherwise, and for NaN or Inf, the
 * element comes back NaN on every rank, ina_stats.fixed_invalid counts it,
 * and the operation returns INA_ERR_RANGE: it did complete, the context
 * stays usable (the one code that reports a completed operation), and
 * recvbuf holds every other element's result.
 * MAX and MIN keep their exact order keys; INT32 is never scaled.
 */

/**
 * Error bound of one element of a fixed-point SUM (ina_info.fixed_point_bits
 * = bits): N roundings of at most 2^-(bits+1) each, an exact sum, then one
 * rounding to the dtype:
 *   |result - exact_sum| <= N 2^-(bits+1) (1 + rel) + rel |exact_sum| + sub
 * with rel, sub = 2^-24, 2^-149 (FLOAT32), 2^-11, 2^-25 (FLOAT16), 2^-8,
 * 2^-134 (BFLOAT16), 0, 0 (FLOAT64). For AVG: this / N + 2^-52 |exact / N| +
 * sub. Only for valid elements (see above).
 * @return the bound; 0 for INT32; NaN for an unknown dtype or bits outside
 * 1..30; +Inf for a NaN or Inf exact_sum. Since v0.4.
 */
INA_EXTERN double ina_fixed_error_bound(ina_dtype dtype, int world_size, int bits,
                                        double exact_sum);

/* ---- Block-sparse all-reduce (since v0.5) ------------------------------ */

/*
 * Many gradients are mostly zero (embeddings, pruned or top-k sparsified
 * models). A block-sparse all-reduce, as OmniReduce (SIGCOMM'21) does, sends
 * only the blocks (sparse_block elements) that are not zero on a rank, and
 * gets back only the blocks that some rank had; libina writes zeros in the
 * rest. It needs no new buffer: the result is the same tensor a dense
 * all-reduce gives. The wire protocol is docs/PROTOCOL.md §17; how to use it
 * and what it gains, docs/SPARSE.md.
 *
 * Modes, per context (ina_config.sparse) or per operation
 * (ina_allreduce_sparse_start):
 *   INA_SPARSE_OFF      dense, as ina_allreduce() always was
 *   INA_SPARSE_ON       sparse (where it can run, below)
 *   INA_SPARSE_AUTO     operations of at least sparse_min_bytes first sum the
 *                       ranks' densities of non-zero blocks (one round trip,
 *                       the same answer on every rank); below sparse_crossover
 *                       they go sparse, else dense. Smaller ones go dense.
 *   INA_SPARSE_DEFAULT  (per operation) the context's mode
 * Results: INT32 exact, as dense. The float types use dense's block floating
 * point on blocks of sparse_block elements (instead of elems_per_packet),
 * each block's exponent agreed by the ranks in the round before its values
 * go (the exponents ride with the next positions): ina_error_bound() holds
 * with amax over the sparse block, and sums are reproducible bit for bit.
 * With INA_FLOAT_ADD_SWITCH the switch adds the blocks as binary32
 * (ina_float_add_error_bound()). A threshold t > 0 drops blocks whose every
 * |x| <= t: at most N*t more error per element; a block no rank sends is 0.
 * Where sparse cannot run, the operation goes dense, with the same result:
 * MAX and MIN, count 0, a switch that does not offer it (ina_info.sparse; an
 * ina-switch --int-ops-only, a hardware or eBPF dataplane), or packets too
 * small for one block (elems_per_packet < sparse_block + 4). Small float
 * sums never use the one-round mode (their exponents ride on the positions).
 * Lanes and shards: every part (shard i, lane j) of an operation is its own
 * sparse operation at its switch (AUTO measures per part, every part of an
 * operation of at least sparse_min_bytes: the floor is the whole operation's
 * size; a part whose switch does not offer sparse goes dense; ina_info.sparse
 * is 1 only if every part's switch offers it). Blocks are those of the whole
 * operation (elements b*B .. b*B + B-1), for the bound too, also where B
 * does not divide the packets at which parts are cut. An AUTO operation is
 * within the bound of the mode it ran: dense's where it measured dense
 * (ina_stats.sparse_auto_dense). Trees: a child switch (ina-switch --parent)
 * does not offer sparse, so every operation under it goes dense
 * (ina_info.sparse 0). Every rank must use the same mode, block, threshold
 * semantics, crossover and floor (else INA_ERR_MISMATCH, or a timeout).
 * ina_stats counts sparse_ops, sparse_auto_dense and sparse_blocks_sent.
 */
enum { INA_SPARSE_DEFAULT = -1, INA_SPARSE_OFF = 0, INA_SPARSE_ON = 1, INA_SPARSE_AUTO = 2 };

/**
 * ina_allreduce_start() with a block-sparse mode for this operation:
 * INA_SPARSE_OFF, _ON, _AUTO or _DEFAULT (the context's ina_config.sparse).
 * @return 0, or the errors of ina_allreduce_start(), or -EINVAL for another
 * mode. Notes: 1. The buffers are read and written as by a dense all-reduce
 * (in place allowed); sendbuf is scanned for non-zero blocks when the
 * operation starts. 2. An operation the mode cannot serve goes dense (see
 * above): not an error. Since v0.5.
 */
INA_EXTERN int ina_allreduce_sparse_start(ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                                          size_t count, ina_dtype dtype, ina_op op, int mode,
                                          ina_req **req);

/** Blocking form of ina_allreduce_sparse_start(). @return as ina_allreduce(). Since v0.5. */
INA_EXTERN int ina_allreduce_sparse(ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                                    size_t count, ina_dtype dtype, ina_op op, int mode);

/* ---- Defaults chosen from the host (Since v0.4) ----------------------- */

/*
 * Out of the box, ina uses the host it runs on (docs/PYTHON.md, "Defaults
 * from the host", has the measurements behind each choice):
 *  - lanes = 0 (INA_LANES=auto): each rank proposes ina_auto_lanes() lanes
 *    at join and the job runs the smallest proposal (PROTOCOL.md §5.6).
 *  - ina-switch --threads auto: half the cores the switch may use, 1..8.
 *  - busy_poll_us = INA_BUSY_POLL_AUTO (INA_BUSY_POLL_US=auto): a wait for
 *    results spins ina_auto_busy_poll() microseconds before it sleeps, and
 *    ina-switch --busy-poll auto spins after its last input likewise (50 us
 *    with a core per spinner, less on a host with fewer cores than spinners,
 *    none when badly oversubscribed; docs/GLM.md, "Busy polling", has the
 *    rule and its CPU cost). INA_BUSY_POLL_US=0 and --busy-poll 0 turn it off.
 *  - ina-switch offers shared-memory rings (--shm) unless told --no-shm, and a
 *    worker on the switch's host (same user, same pid namespace) uses them
 *    unless INA_SHM=0.
 * "Cores" are those of the process's affinity mask, capped by a cgroup v2
 * CPU quota; INA_AUTO_CORES=N in the environment replaces that count (to see
 * what another host would get, or for tests).
 */

/**
 * The lanes a rank of cfg's job would propose with lanes = 0 (auto): one per
 * whole core it has to itself, at least 1 and at most 4: cores / (workers of
 * the job on this host), where the workers on this host are all world_size
 * ranks when cfg->switch_addr is a loopback address (no other host can reach
 * it), else LOCAL_WORLD_SIZE (torchrun), OMPI_COMM_WORLD_LOCAL_SIZE,
 * MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE, else 1. A world of 1 gets 1.
 * cores and local_workers (either may be NULL) receive what the rule saw.
 * cfg->lanes is not read. Nothing is sent.
 * @return 1..4, or -EINVAL (cfg or cfg->switch_addr NULL, world_size out of
 * range). Since v0.4.
 */
INA_EXTERN int ina_auto_lanes(const ina_config *cfg, int *cores, int *local_workers);

/**
 * The spin a rank of cfg's job gets with busy_poll_us = INA_BUSY_POLL_AUTO,
 * in microseconds: 50 while the processes that would spin on this host (the
 * job's workers here, counted as ina_auto_lanes() counts them, plus one if
 * a switch of cfg->switch_addr is on this host) are at most the cores; else
 * 50 x cores / spinners, and 0 (never spin) below 5. cores and spinners
 * (either may be NULL) receive what the rule saw. cfg->busy_poll_us is not
 * read. Nothing is sent.
 * @return 0..50, or -EINVAL (as ina_auto_lanes()). Since v0.6.
 */
INA_EXTERN int ina_auto_busy_poll(const ina_config *cfg, int *cores, int *spinners);

#ifdef __cplusplus
}
#endif
#endif /* INA_H */
