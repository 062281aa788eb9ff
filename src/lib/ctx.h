/* ctx.h: libina's context: the state of one lane's stream (or of a multi-lane parent), its limits and defaults, and what every file uses with it (errors, the clock, the configuration, a session's header). */
#ifndef INA_LIB_CTX_H
#define INA_LIB_CTX_H

#include <netinet/in.h>
#include <stdint.h>

#include "common/fault.h"
#include "common/mac.h"
#include "common/sha256.h"
#include "common/wire.h"
#include "ina.h"
#include "lib/transport.h"

#define INA_DEFAULT_ELEMS_LOOPBACK 2048
#define INA_DEFAULT_ELEMS_NET 256
#define INA_DEFAULT_WINDOW 128
#define INA_MAX_WINDOW 4096
#define INA_DEFAULT_TIMEOUT_MS 30000
#define INA_DEFAULT_JOIN_TIMEOUT_MS 60000
#define INA_DEFAULT_RTO_MS 100
#define INA_MAX_RTO_MS 1000
#define INA_MAX_REQS 1024
#define INA_REFUSED_FAIL_MS 1000 /* ICMP "port unreachable" this long: switch is gone */
#define INA_ERRMSG_LEN 384 /* ina_last_error()'s message */
#define INA_AUTO_LANES_MAX 4 /* lanes=0 (auto): at most this many lanes per rank (auto.c) */

/* Block-sparse all-reduce (sparse.c, PROTOCOL.md §17). */
#define INA_SPARSE_DEFAULT_BLOCK 256
#define INA_SPARSE_MIN_BLOCK 32
#define INA_SPARSE_MAX_BLOCK_CFG 256
#define INA_SPARSE_MAX_COLBLOCKS 32 /* blocks per column, at most */
/* Auto mode: below this many bytes an operation stays dense without asking;
 * above, it goes sparse while the ranks' summed block density is below the
 * crossover. 0.4: where sparse stops being faster than dense on loopback
 * (CPU-bound: density 0.1 at N = 4), the lower of the two settings of
 * bench/sparse.sh on the 2-core VM; on the emulated 1 Gbit/s cluster sparse
 * was faster at every density (docs/SPARSE.md). */
#define INA_SPARSE_DEFAULT_MIN_BYTES (1 << 20)
#define INA_SPARSE_DEFAULT_CROSSOVER 0.4
#define INA_SPARSE_PROBE_ONE (1 << 20) /* the probe's fixed point: density 1 */

#define INA_CTX_LIVE 0x494E4143u   /* "INAC" */
#define INA_CTX_CLOSED 0x434C4F53u /* "CLOS": finalized; every call returns INA_ERR_CLOSED */

/*
 * Lifetime: ina_init() allocates; ina_finalize() releases everything but this
 * struct's shell, which it marks CLOSED and keeps on a process-wide list, so
 * a call with a finalized handle gets INA_ERR_CLOSED instead of touching freed
 * memory, and no later context can ever reuse the address. The shell costs a
 * few hundred bytes per ina_init() for the life of the process.
 */
struct ina_ctx {
    uint32_t magic; /* INA_CTX_LIVE or INA_CTX_CLOSED */
    struct ina_ctx *next_closed;
    int fd;
    struct sockaddr_in switch_addr;
    char job[32];
    int rank, world;
    int timeout_ms, join_timeout_ms, rto_ms;
    uint16_t job_id;
    uint32_t session, token;
    uint64_t nonce;
    uint32_t elems, window; /* granted */
    int mcast_fd;           /* socket joined to the job's result group, -1 = unicast results */
    int guard_fd;           /* with a group: fd's port held on every address (net.c), -1 */
    uint32_t mcast_group;   /* host order, from JOIN_ACK; 0 = none */
    uint16_t mcast_port;
    int broken;             /* 0, or the error that broke the context */
    int broken_unreported;  /* that error, if no operation has returned it yet */
    int lane, nlanes;       /* this context's lane, and the lanes of its job (JOIN); a
                               multi-part parent: lanes per shard */
    int nshards;            /* a multi-part parent: switches each operation is spread over */
    int lanes_auto;         /* lane 0 of lanes=0: nlanes is a proposal until the JOIN_ACK */
    int lanes_proposed;     /* lanes=0: what this rank proposed (ina_info), else 0 */
    uint16_t switch_caps;   /* INA_FLAG_CAP_* of the JOIN_ACK */
    int one_round_off;      /* INA_ONE_ROUND=0: every float op takes two rounds */
    int float_add;          /* INA_FLOAT_ADD_*: as configured (plan.c decides per op) */
    /* Block-sparse all-reduce, as configured (ina_config.sparse*): the
     * default mode, block length, zero threshold, and the auto mode's
     * crossover and size floor. sp_places: every slot's place arrays
     * (2 * window * places), allocated by the first sparse op. */
    int sparse_mode, sparse_block;
    double sparse_threshold, sparse_crossover;
    size_t sparse_min_bytes;
    struct ina_sp_place *sp_places;
    uint64_t busy_poll_ns;  /* spin this long before sleeping (INA_BUSY_POLL_US), 0 = never */
    int busy_auto;          /* busy_poll_ns was chosen from the host: spins back off (stream.c) */
    unsigned spin_misses;   /* busy_auto: waits in a row that outlasted the spin */
    unsigned spin_skips;    /* busy_auto: waits since the last spin (a probe every few) */
    int fixed_bits;         /* fixed-point fractional bits as configured, 0 = off (fixed.h) */
    int wire_bits;          /* ina_config.wire_bits: 0 (16-bit types at 16 bits), 16 or 32 */
    int wire_half;          /* INA_WIRE_HALF_*: FLOAT32's 16-bit format with wire_bits 16 */
    int wake_fd;            /* eventfd that interrupts the stream's poll (lane threads), -1 */
    struct ina_lanes *lanes; /* a multi-lane context's lanes and threads (lanes.c); else NULL */
    int admission_wait_ms, fallback_mode; /* from ina_config */
    struct ina_fallback *fallback; /* rank 0: the host aggregator it offers (fallback.c) */
    struct sockaddr_in fallback_target; /* from a NOSPACE: where the job runs instead */
    struct ina_shm *shm; /* rings to a switch on this host (shm.c), NULL = UDP only */
    struct ina_transports xp; /* how the stream's datagrams travel (transport.h) */
    int path;               /* INA_PATH_SWITCH or INA_PATH_HOST */
    /* Sessions under one stream (migrate.c): the session began at stream
     * position wire_base (wire slot = (g - wire_base) mod W, rounds from 0);
     * an eviction notice stops the stream at migrate_g until it moves. */
    uint64_t wire_base;
    int migrate_pending;
    uint64_t migrate_g;

    /* stream */
    struct ina_wslot *slots; /* window entries */
    struct ina_req *head, *tail; /* FIFO of incomplete requests */
    struct ina_req *send_req;    /* request being sent (NULL: none pending) */
    uint64_t send_p;             /* next op-local packet of send_req */
    uint64_t next_g;             /* stream index of the next packet to send */
    struct ina_req *live;        /* every request not yet waited (freed at finalize) */
    int nreqs;
    /* Request pool (reqpool.c): released requests, and the slabs they live in. */
    struct ina_req *req_free;
    struct ina_req_slab *req_slabs;
    uint64_t req_slab_allocs;    /* slabs allocated so far (tests: none per operation) */
    uint64_t nops_started;       /* non-empty operations started: numbers the op tags */
    uint64_t last_progress_ns;
    uint64_t next_rto_ns;        /* earliest retransmission deadline, 0 = none */
    int64_t srtt_ns, rttvar_ns;  /* smoothed RTT and its variation (RFC 6298), 0 = no sample */
    int64_t min_rtt_ns[2];       /* windowed minimum RTT: this window, previous window (0 = none) */
    unsigned min_rtt_samples;    /* samples in the current window */
    uint64_t max_done_g;         /* 1 + highest stream index whose result arrived */
    uint64_t fast_scan_g;        /* stream indices below this were checked for gaps */
    int window_blocked;          /* the last send_ready() stopped at a busy slot */
    uint64_t refused_since_ns;   /* first ECONNREFUSED since the last valid datagram, 0 = none */
    struct ina_fault fault;      /* send-side fault injection (INA_FAULT), off by default */
    int has_secret;              /* config secret_file: JOIN and JOIN_ACK carry HMACs */
    struct ina_hmac_key secret;
    /* Tags of the session key (PROTOCOL.md §4.6). integrity: asked for
     * (ina_config.integrity); integrity_on: the switch agreed at join. tag_rx:
     * the switch tags its RESULTs, ABORTs and MIGRATEs (a secret, and a
     * multicast group or integrity); tag_tx: this rank tags its DATA. */
    int integrity, integrity_on;
    int tag_rx, tag_tx;
    struct ina_mac_key mac_key;

    /* I/O buffers, sized at join */
    uint8_t *txmem, *rxmem;
    uint8_t *ringmem; /* one datagram copied out of the down ring (§5.9), after rxmem's */
    unsigned ntx;
    struct ina_io *io;

    ina_stats stats;
    char errmsg[INA_ERRMSG_LEN]; /* why the last call failed (ina_last_error), "" if none */
    int addr_is_default; /* switch_addr was the default: INA_SWITCH/switch_addr were not set */
    int quiet;           /* INA_QUIET=1: no progress lines on stderr while joining */
    int lost_warned;     /* the warning about elements lost to a block's scale is out */
};

extern const char ina__default_switch_addr[]; /* config.c */

uint64_t ina__now_ns(void);

/* launcher.c: rank, world size and (when job is not NULL) a job name from the innermost
 * launcher's environment: OpenMPI (OMPI_COMM_WORLD_*), PMI (PMI_RANK/PMI_SIZE), Slurm's
 * srun (SLURM_PROCID/SLURM_NTASKS, job "slurm-JOBID.STEPID", inside a step only). Rank and
 * size come from one launcher together; a launcher without a job id leaves *job alone.
 * @return 1 (found: fields set), 0 (none: nothing set), or INA_ERR_CONFIG (a malformed
 * variable, or a rank outside 0..size-1; ina_last_error(NULL) names it). */
int ina__launcher_env(int *rank, int *world_size, const char **job);

/* auto.c: the lanes this rank proposes for lanes=0, from its cores per worker of
 * this host (*cores, *local: what the rule saw; may be NULL). */
int ina__lanes_auto(const ina_config *cfg, int *cores, int *local);
/* INA_BUSY_POLL_AUTO: the spin in microseconds for cfg's rank on this host (auto.c). */
int ina__busy_poll_auto(const ina_config *cfg, int *cores, int *spinners);

/* error.c: say why a call fails, for ina_last_error(): into ctx's message,
 * or the calling thread's if ctx is NULL (calls that leave no context).
 * @return code, so that a failure reads: return ina__fail(ctx, -EINVAL, ...).
 * _once keeps a message already there (the first, most specific reason). */
int ina__fail(struct ina_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ina__fail_once(struct ina_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ina__fail_clear(struct ina_ctx *ctx);
/* A context that failed to start is freed: keep its message for the thread. */
void ina__fail_to_thread(const struct ina_ctx *ctx);

/* A header of this rank's session: magic, version, kind, job, rank, session, token. */
static inline void ina__hdr_session(struct ina_hdr *h, const struct ina_ctx *ctx, uint8_t kind)
{
    ina__hdr_init(h, kind);
    h->job = ctx->job_id;
    h->rank = (uint16_t)ctx->rank;
    h->session = ctx->session;
    h->token = ctx->token;
}

#endif
