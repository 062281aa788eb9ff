/* internal.h: libina's private structures: context, requests, the streaming window. */
#ifndef INA_INTERNAL_H
#define INA_INTERNAL_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/fault.h"
#include "common/kv_wire.h"
#include "common/mac.h"
#include "common/rx_burst.h"
#include "common/sha256.h"
#include "common/shm_ring.h"
#include "common/udp_gso.h"
#include "common/wire.h"
#include "ina.h"

#define INA_DEFAULT_ELEMS_LOOPBACK 2048
#define INA_DEFAULT_ELEMS_NET 256
#define INA_DEFAULT_WINDOW 128
#define INA_MAX_WINDOW 4096
#define INA_DEFAULT_TIMEOUT_MS 30000
#define INA_DEFAULT_JOIN_TIMEOUT_MS 60000
#define INA_DEFAULT_RTO_MS 100
#define INA_MAX_RTO_MS 1000
#define INA_MAX_REQS 1024
#define INA_BURST 64   /* datagrams built per send burst */
#define INA_RX_MSGS 16 /* messages per recvmmsg; each may be a GRO train of many datagrams */
#define INA_FAST_RTX_GAP 3 /* results this far past a missing one mean it was lost */
#define INA_FAST_RTX_MIN_MS 2 /* timer of a packet resent after a proven loss */
#define INA_FAST_RTX_NOSAMPLE_MS 10 /* the same before any RTT sample */
#define INA_MIN_RTT_WINDOW 256 /* RTT samples per window of the min-RTT filter */
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

/* One place of a sparse packet: a column's block in this round. */
struct ina_sp_place {
    uint32_t col;    /* the column (blocks [col*M, min((col+1)*M, nblocks))) */
    uint32_t pos;    /* the block this round carries */
    uint32_t mynext; /* this rank's next non-zero block of the column after pos
                        (FIRST: from pos on), or INA_SPARSE_END */
    uint32_t rnext;  /* from the RESULT: the minimum over the ranks */
    int16_t e;       /* the agreed exponent of block pos (quantized floats) */
    int16_t myexp;   /* this rank's exponent of its block mynext */
    int16_t rexp;    /* from the RESULT: the agreed exponent of block rnext */
    uint8_t first;   /* the column's first round: no block, next >= pos */
    uint8_t has;     /* this rank sends its block pos */
};

/* The state of one block-sparse operation (a request with sparse = 1). */
struct ina_sparse_op {
    uint32_t block;      /* B: elements per block */
    uint32_t places;     /* C: places per packet */
    uint32_t colblocks;  /* M: blocks per column */
    uint32_t phase;      /* a part's offset into its first block (block 0 is B - phase long) */
    uint64_t nblocks;    /* ceil((phase + count) / B) */
    uint64_t ncols;      /* K = ceil(nblocks / M) */
    uint64_t next_col;   /* U: the next column not started */
    int64_t last_nonempty; /* op-local index of the last packet with places, -1: none */
    int ended;           /* the packet that ends the op was found: npackets is final */
    uint64_t nnz;        /* this rank's non-zero blocks */
    uint64_t map[];      /* bit b: this rank's block b is not zero (sparse_scan.h) */
};

/*
 * One all-reduce. The ops of a context form one FIFO stream of packets:
 * op A's packets all go out before op B's, so every rank, running the same
 * ops in the same order, uses each slot round for the same data.
 *
 * Packet p of an op (0 <= p < npackets = nblocks + lag) carries:
 *   - the data of block p - lag, if p >= lag;
 *   - for a float dtype, the exponent of block p, if p < nblocks.
 * For INT32 lag = 0 (no exponents); for the float dtypes lag =
 * min(window, nblocks): exponents travel one round ahead, as in SwitchML.
 */
struct ina_req {
    struct ina_ctx *ctx;
    struct ina_req *next;             /* stream FIFO (incomplete requests) */
    struct ina_req *live_prev, *live_next; /* every request not yet waited */
    const uint8_t *src;
    uint8_t *dst;
    size_t count;
    ina_dtype dtype;
    ina_op op;
    size_t esize;     /* bytes per element of dtype (dtype.h) */
    uint8_t wire_op;  /* INA_OP_* in every DATA packet of the op */
    int quantized;
    int one_round;    /* float op in one round per block (INA_OP_ADD_BFP; ctx.c decides) */
    /* How a float dtype's elements travel (ctx.c decides): as the dtype's own
     * encoding (block floating point, or INT32 unchanged), or, not quantized,
     * in one round and without exponents, as binary32 for the switch to add
     * (INA_OP_ADD_F32), as order keys for its int32 max/min (§8.9), as
     * fixed point with the context's agreed scale (INA_OP_ADD_FIX, §13), or,
     * for a key-value push, as HOT_DATA (below). */
    enum {
        INA_PAYLOAD_DTYPE,
        INA_PAYLOAD_F32,
        INA_PAYLOAD_ORDER,
        INA_PAYLOAD_FIXED,
        INA_PAYLOAD_HOT
    } payload;
    int range_err; /* fixed point: a result element came back invalid (INA_ERR_RANGE) */
    /* INA_PAYLOAD_HOT (kv_hot.c, PROTOCOL.md §14.3): the float32 hot vector of a
     * key-value push goes as HOT_DATA of this hot-table epoch; a sparse block
     * goes as (key, value) pairs, hot_keys[i] being the key of position i. */
    uint32_t hot_epoch;
    const uint64_t *hot_keys;
    uint64_t nblocks, lag, npackets;
    uint64_t ndone; /* packets whose result arrived */
    uint64_t tag_seed; /* hash of (op number, count, dtype, op): seeds the packet tags (wire.h) */
    int done, status;
    /* Lanes (lanes.c): an operation of a multi-lane context is a parent whose
     * parts are requests of the lane contexts; a part points to its parent. */
    struct ina_req *parent;
    int remaining; /* parent: parts not finished yet (under the lanes mutex) */
    uint64_t g_first; /* stream position of packet 0, once sent (g_sent set) */
    int g_sent;
    /* Block-sparse (sparse.c). sparse: the op streams sparse (npackets is
     * UINT64_MAX until its end is found); undecided: INA_SPARSE_AUTO, until
     * its probe (a one-packet INT32 request ahead of it in the stream, which
     * this request owns) brings the ranks' summed density; probe_for: this
     * request is such a probe, of that op. */
    int sparse, undecided;
    int sparse_mode; /* a lanes parent: the mode (INA_SPARSE_*) its parts ask for */
    struct ina_sparse_op *sp;
    struct ina_req *probe, *probe_for;
    int32_t probe_val, probe_sum;
};

/* Worker-side state of one slot of the window. */
struct ina_wslot {
    uint32_t round;    /* round (seq) of the next use of this slot */
    uint32_t seq;      /* round of the in-flight packet */
    uint8_t inflight;  /* a packet is out, waiting for its result */
    uint8_t short_timer; /* on the short timer: tail probe, or resent by fast retransmit */
    uint16_t tries;
    uint32_t rto_ms;     /* this packet's current timeout (doubles per retry) */
    uint64_t sent_ns;    /* first transmission, for RTT samples (Karn: only if tries == 0) */
    int16_t exp_used;    /* exponent the in-flight packet's data was scaled with */
    int16_t exp_agreed;  /* max exponent returned by the last completed packet */
    uint64_t g;          /* stream index of the in-flight / last completed packet */
    uint64_t done_g;     /* stream index of the last completed packet, +1 (0 = none) */
    uint64_t p;          /* op-local packet index of the in-flight packet */
    struct ina_req *req; /* op of the in-flight packet */
    uint64_t deadline_ns;
    /* Block-sparse packets (sparse.c): the places of this slot's packet in
     * flight or last sent (cur) and of the one before it (prev), whose
     * RESULT says which columns continue. sp_rebuild: cur was taken back by
     * an eviction (migrate.c) and is built again from prev. u_before and
     * lastne_before: the op's next column and last non-empty packet before
     * cur was built, to rewind to. */
    struct ina_sp_place *sp_cur, *sp_prev;
    uint16_t sp_ncur, sp_nprev;
    uint8_t sp_rebuild;
    uint64_t sp_u_before;
    int64_t sp_lastne_before;
};

/* Burst I/O descriptors, on the heap so a finalized context shell stays small. */
struct ina_io {
    struct iovec txiov[INA_BURST];      /* built datagrams, in order */
    struct ina_gso_batch gso;           /* packs them into UDP GSO messages */
    struct ina_rx rx;                        /* the receive bursts of both sockets, over rxmem */
    struct ina_rx_pkt rxpkts[INA_RX_MAX_PKTS]; /* a burst's datagrams */
};

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
    int float_add;          /* INA_FLOAT_ADD_*: as configured (ctx.c decides per op) */
    /* Block-sparse all-reduce, as configured (ina_config.sparse*): the
     * default mode, block length, zero threshold, and the auto mode's
     * crossover and size floor. sp_places: every slot's place arrays
     * (2 * window * places), allocated by the first sparse op. */
    int sparse_mode, sparse_block;
    double sparse_threshold, sparse_crossover;
    size_t sparse_min_bytes;
    struct ina_sp_place *sp_places;
    uint64_t busy_poll_ns;  /* spin this long before sleeping (INA_BUSY_POLL_US), 0 = never */
    int fixed_bits;         /* fixed-point fractional bits as configured, 0 = off (fixed.h) */
    int wake_fd;            /* eventfd that interrupts the stream's poll (lane threads), -1 */
    struct ina_lanes *lanes; /* a multi-lane context's lanes and threads (lanes.c); else NULL */
    int admission_wait_ms, fallback_mode; /* from ina_config */
    struct ina_fallback *fallback; /* rank 0: the host aggregator it offers (fallback.c) */
    struct sockaddr_in fallback_target; /* from a NOSPACE: where the job runs instead */
    struct ina_shm *shm; /* rings to a switch on this host (shm.c), NULL = UDP only */
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
};

extern const char ina__default_switch_addr[]; /* config.c */

uint64_t ina__now_ns(void);

/* stream.c: one turn of a bounded spin (busy polling): relax the CPU, read the clock into
 * *now, and give the CPU away every INA_BUSY_POLL_YIELD_NS (*yielded: when it last did;
 * busy_poll.h says why). Start with *now = *yielded = ina__now_ns().
 * @return 1 while *now < until, 0 when the spin is over. */
int ina__spin_turn(uint64_t *now, uint64_t *yielded, uint64_t until);

/* launcher.c: rank, world size and (when job is not NULL) a job name from the innermost
 * launcher's environment: OpenMPI (OMPI_COMM_WORLD_*), PMI (PMI_RANK/PMI_SIZE), Slurm's
 * srun (SLURM_PROCID/SLURM_NTASKS, job "slurm-JOBID.STEPID", inside a step only). Rank and
 * size come from one launcher together; a launcher without a job id leaves *job alone.
 * @return 1 (found: fields set), 0 (none: nothing set), or INA_ERR_CONFIG (a malformed
 * variable, or a rank outside 0..size-1; ina_last_error(NULL) names it). */
int ina__launcher_env(int *rank, int *world_size, const char **job);

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
/* lanes.c: the first failed lane's message, copied into the parent's errmsg. */
void ina__lanes_last_error(struct ina_ctx *parent);

/* A header of this rank's session: magic, version, kind, job, rank, session, token. */
static inline void ina__hdr_session(struct ina_hdr *h, const struct ina_ctx *ctx, uint8_t kind)
{
    ina_hdr_init(h, kind);
    h->job = ctx->job_id;
    h->rank = (uint16_t)ctx->rank;
    h->session = ctx->session;
    h->token = ctx->token;
}

/* net.c */
int ina__net_open(struct ina_ctx *ctx, const struct sockaddr_in *addr);
int ina__net_send(struct ina_ctx *ctx, const uint8_t *buf, size_t len);

/* net.c: "a.b.c.d:port" of the switch (or aggregator) the context talks to. */
void ina__switch_str(const struct ina_ctx *ctx, char *buf, size_t len);
/* net.c: join the job's multicast group (ctx->mcast_group) on a second socket. */
int ina__net_open_mcast(struct ina_ctx *ctx);
/* net.c: talk to another port of the switch from now on (REDIRECT at join). */
int ina__net_reconnect(struct ina_ctx *ctx, uint16_t port);

/* session.c */
int ina__session_join(struct ina_ctx *ctx, int elems, int window);
/* Leave the job; with abort set, ask the switch to end the session for every rank. */
void ina__session_leave(struct ina_ctx *ctx, int abort);

/* auto.c: the lanes this rank proposes for lanes=0, from its cores per worker of
 * this host (*cores, *local: what the rule saw; may be NULL). */
int ina__lanes_auto(const ina_config *cfg, int *cores, int *local);

/* 1 if float sums go to the switch as floats (asked for, and it offers INA_OP_ADD_F32). */
int ina__float_add_in_use(const struct ina_ctx *ctx);
/* Fractional bits of float sums in fixed point (asked for, and the switch
 * offers INA_OP_ADD_FIX), else 0. */
int ina__fixed_in_use(const struct ina_ctx *ctx);

/* shm.c: shared-memory rings to a switch on this host (PROTOCOL.md §5.9). */
int ina__shm_attach(struct ina_ctx *ctx); /* @return 1 attached, 0 stays on UDP */
void ina__shm_detach(struct ina_ctx *ctx);
/* Datagrams iov[order[0..n-1]] into the up ring. @return how many fit. */
unsigned ina__shm_send(struct ina_ctx *ctx, const struct iovec *iov, const unsigned *order,
                       unsigned n);
/* Process what the down ring holds. @return datagrams taken. */
int ina__shm_recv(struct ina_ctx *ctx, uint64_t now);
/* About to poll: @return 0 if the down ring has data (do not sleep). */
int ina__shm_may_sleep(struct ina_ctx *ctx);
void ina__shm_awake(struct ina_ctx *ctx); /* after poll */
/* A retransmission on rings: ring the switch over UDP too, so that a dead
 * switch is found by its host's "port unreachable" (-ECONNREFUSED). */
void ina__shm_probe(struct ina_ctx *ctx);

/* reqpool.c: requests from a per-context free list of slabs (no allocation
 * per operation, no lock: a context is used by one thread at a time).
 * init preallocates the first slab; alloc returns a zeroed request, or NULL
 * without memory; release puts one back, freeing what it owns (sparse state, probe); pool_free frees every slab. */
#define INA_REQ_SLAB 128
int ina__req_pool_init(struct ina_ctx *ctx);
struct ina_req *ina__req_alloc(struct ina_ctx *ctx);
void ina__req_release(struct ina_ctx *ctx, struct ina_req *req);
void ina__req_pool_free(struct ina_ctx *ctx);

/* ctx.c: allocate a request for checked arguments, link it, and queue it on
 * the stream (count 0: done at once). The request is elements [offset,
 * offset + count) of an operation of total elements: a part (lanes.c), or
 * the whole operation (0, count). @return NULL if out of memory. */
struct ina_req *ina__req_create(struct ina_ctx *ctx, const void *sendbuf, void *recvbuf,
                                size_t count, ina_dtype dtype, ina_op op, int sparse_mode,
                                size_t offset, size_t total);
/* ctx.c: plan req as a dense operation (wire op, payload, rounds, npackets). */
void ina__req_plan_dense(struct ina_ctx *ctx, struct ina_req *req);

/* sparse.c: block-sparse operations (PROTOCOL.md §17). */
/* 1 if an op (or part) of count elements of dtype and op, starting phase
 * elements into a block of sparse_block, can stream sparse on ctx. */
int ina__sparse_possible(const struct ina_ctx *ctx, size_t count, size_t phase, ina_dtype dtype,
                         ina_op op);
/* Prepare req to stream sparse (mode ON), or to probe first (AUTO): scan
 * its input for non-zero blocks (block 0 short by phase elements: its
 * blocks lie on the grid of the whole operation). @return 0 or -ENOMEM. */
int ina__sparse_prepare(struct ina_ctx *ctx, struct ina_req *req, size_t phase, int autodecide);
/* The probe of an AUTO op completed with the ranks' summed density. */
void ina__sparse_decide(struct ina_ctx *ctx, struct ina_req *req, int32_t sum);
/* Plan packet p (op-local) of sparse req in slot ws, whose previous packet
 * has its result. @return 1 planned, 0 the op ends before p (npackets = p). */
int ina__sparse_plan(struct ina_ctx *ctx, struct ina_req *req, struct ina_wslot *ws, uint64_t p);
/* The payload of the packet planned in ws into out. @return its words. */
size_t ina__sparse_build(struct ina_ctx *ctx, const struct ina_wslot *ws, uint8_t *out);
/* A RESULT's payload for the packet in flight in ws: check it, write the
 * sums and the zeros it proves. @return 0, or INA_ERR_MISMATCH (nothing written). */
int ina__sparse_on_result(struct ina_ctx *ctx, struct ina_wslot *ws, const uint8_t *payload,
                          size_t count);
/* An eviction takes back every packet from op-local index p of req on (migrate.c). */
void ina__sparse_rewind(struct ina_ctx *ctx, struct ina_req *req, uint64_t p);

/* ctx.c: a float32 SUM of the hot vector (count floats) of a key-value push,
 * sent as HOT_DATA of epoch through the switch's hot table. */
struct ina_req *ina__req_create_hot(struct ina_ctx *ctx, const float *grad, float *sum, size_t count,
                                    uint32_t epoch, const uint64_t *keys);

/* fallback.c: rank 0's host aggregator. prepare opens its socket (before
 * the JOIN that offers it), start runs it, close stops it after the job. */
int ina__fallback_prepare(struct ina_ctx *ctx);
uint16_t ina__fallback_port(const struct ina_ctx *ctx);
int ina__fallback_start(struct ina_ctx *ctx, int elems, int nslots);
/* Close and free an aggregator that was prepared but never started (NULL: nothing). */
void ina__fallback_free(struct ina_fallback *fb);
/* The switch has no room for the job (a NOSPACE, or an eviction) and named
 * rank 0's aggregator in ctx->fallback_target: rank 0 starts it, and every
 * rank joins it there instead, with the same protocol and a fresh join
 * deadline; the path becomes INA_PATH_HOST. @return 0 or the join's error. */
int ina__fallback_join(struct ina_ctx *ctx, int elems, int window);
void ina__fallback_close(struct ina_ctx *ctx);

/* ctx.c: take a request off ctx's list of requests not yet waited. */
void ina__live_unlink(struct ina_ctx *ctx, struct ina_req *req);

/* A part of a multi-part context refused by its switch (NOSPACE): where the
 * refusal said the job may run instead (rank 0's host aggregator; port 0 =
 * nowhere), and on rank 0 the aggregator's socket it offered. */
struct ina_refusal {
    struct sockaddr_in target;
    struct ina_fallback *fallback;
};

/* ctx.c: open one lane's context (socket, join, stream) at addr, as lane
 * `lane` of nlanes; close it (leave, with the abort flag if abort or if it
 * has operations in flight; free everything, the struct too). With
 * refusal (one part of several), a NOSPACE is returned as is, with *refusal
 * filled, rather than answered by a move to the host aggregator. */
int ina__lane_open(struct ina_ctx **out, const ina_config *cfg, const struct sockaddr_in *addr,
                   int lane, int nlanes, struct ina_refusal *refusal);
void ina__lane_close(struct ina_ctx *ctx, int abort);
/* ctx.c: the default elems_per_packet for a switch at addr (2048 on loopback, else 256). */
int ina__default_elems(const struct sockaddr_in *addr);

/* lanes.c: a multi-part context. start takes the n part contexts (all
 * joined) and runs nthreads threads (part p on thread p mod nthreads), or,
 * for nthreads 1, none: the caller's thread drives every part inside
 * submit, test and wait. submit splits an operation over the parts. */
int ina__lanes_start(struct ina_ctx *parent, struct ina_ctx **lane_ctx, int n, int nthreads);
int ina__lanes_submit(struct ina_ctx *parent, struct ina_req *req);
int ina__lanes_test(struct ina_req *req, int *done);
int ina__lanes_wait(struct ina_req *req);
void ina__lanes_stats(const struct ina_ctx *parent, ina_stats *st);
/* Stop the threads, close every lane (with the abort flag if an operation
 * is in flight), free the lanes. */
void ina__lanes_close(struct ina_ctx *parent);
/* The context of part i, and how many parts there are (for ina_get_info). */
const struct ina_ctx *ina__lanes_ctx(const struct ina_ctx *parent, int i);
int ina__lanes_nparts(const struct ina_ctx *parent);

/* migrate.c: an eviction notice (MIGRATE) from the switch, and the move to
 * rank 0's host aggregator once every packet below the bound has its result. */
void ina__migrate_on_notice(struct ina_ctx *ctx, const uint8_t *body, size_t len);
void ina__migrate_step(struct ina_ctx *ctx);

/* stream.c */
int ina__stream_init(struct ina_ctx *ctx);
void ina__stream_free(struct ina_ctx *ctx);
void ina__stream_enqueue(struct ina_ctx *ctx, struct ina_req *req);
/* Advance the stream; wait at most timeout_ms for input (0 = poll only). */
void ina__stream_progress(struct ina_ctx *ctx, int timeout_ms);
void ina__stream_fail_all(struct ina_ctx *ctx, int err);
/* The reply handler: one datagram from the switch (RESULT, ABORT, or junk).
 * Never trusts its input: a fuzz target drives it directly. */
void ina__stream_on_datagram(struct ina_ctx *ctx, const uint8_t *buf, size_t len, uint64_t now);

#endif
