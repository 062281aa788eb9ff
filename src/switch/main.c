/* main.c: ina-switch, the software aggregation switch: command line, socket, receive/send loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/errqueue.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/busy_poll.h"
#include "common/daemon.h"
#include "common/fault.h"
#include "common/host.h"
#include "common/size.h"
#include "common/udp_gso.h"
#include "common/log.h"
#include "common/port_guard.h"
#include "common/rx_burst.h"
#include "common/clock.h"
#include "switch/ebpf/ebpf_dp.h"
#include "switch/metrics.h"
#include "engine/engine.h"
#include "switch/trace.h"

#define NAME "ina-switch"

/* The signals (daemon.h) tell every dataplane thread: a stop (SIGINT, a
 * second SIGTERM, or every thread drained), a drain (the first SIGTERM, with
 * --drain-timeout > 0: drain.c), a SIGHUP (each thread reads --secret-file
 * again). shards_drained: threads that hold no job any more while draining. */
static _Atomic unsigned shards_drained;

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-switch [options]\n"
            "\n"
            "The ina software switch: aggregates (sums) the packets of the workers of\n"
            "each job in a fixed pool of slots and sends each finished sum back to every\n"
            "worker of the job (one copy per worker; --multicast: one per job).\n"
            "Runs until stopped, then prints its counters to stderr. SIGTERM drains:\n"
            "new jobs are refused, running operations finish, then each job ends\n"
            "with INA_ERR_SHUTDOWN (at --drain-timeout at the latest); a second\n"
            "SIGTERM, or SIGINT, stops at once. SIGHUP reads --secret-file again.\n"
            "\n"
            "Options:\n"
            "  --listen ADDR[:PORT]  address to listen on (default 127.0.0.1:%d);\n"
            "                        use 0.0.0.0 to accept workers on other hosts;\n"
            "                        port 0 picks a free port (see --port-file)\n"
            "  --slots N             slots in the pool, shared by all jobs (default 1024,\n"
            "                        or 256 per dataplane thread if that is more)\n"
            "  --max-elems K         int32 values per slot, the largest packet a job\n"
            "                        may use (default 2048, at most %d)\n"
            "  --max-job-slots N     most slots one job (one lane) may hold (default: a\n"
            "                        quarter of each thread's pool); see --min-job-slots\n"
            "  --min-job-slots N     when the pool is busy, a job gets fewer slots than\n"
            "                        it proposed, halving down to N (default 8); below\n"
            "                        that it waits (if its workers asked to, up to their\n"
            "                        INA_ADMISSION_WAIT_MS) or is refused with NOSPACE,\n"
            "                        and its workers fall back to a host aggregator\n"
            "  --threads T|auto      dataplane threads (at most %d). Each has its own UDP\n"
            "                        socket (listen port + i, or a free port with port 0)\n"
            "                        and 1/T of the slot pool; jobs and the lanes of a job\n"
            "                        (INA_LANES) are spread over them. auto (the default):\n"
            "                        half the cores this process may use, 1..%d\n"
            "                        (INA_AUTO_CORES=N: count N cores instead)\n"
            "  --join-timeout S      drop a job whose ranks did not all join in S seconds\n"
            "                        (default 120; 0 = never)\n"
            "  --idle-timeout S      abort an active job silent for S seconds, freeing its\n"
            "                        slots (default 3600; 0 = never)\n"
            "  --drain-timeout MS    after SIGTERM, end jobs still running after MS\n"
            "                        milliseconds (default 10000; 0 = SIGTERM stops at once)\n"
            "  --port-file PATH      write the bound port number to PATH once listening\n"
            "  --fault-rx SPEC       inject faults into received datagrams, for testing:\n"
            "                        SPEC is drop=P,dup=P,reorder=P,corrupt=P,seed=N (P in\n"
            "                        0..1; corrupt flips a bit of a DATA's or RESULT's\n"
            "                        payload, as an attacker on the path would: see\n"
            "                        --integrity)\n"
            "  --fault-tx SPEC       the same for sent datagrams\n"
            "  --multicast[=BASE]    send each finished sum once, to a multicast group per\n"
            "                        job (BASE + job id, default 239.255.73.0 + id, on the\n"
            "                        listen port + threads) instead of once per worker;\n"
            "                        the workers join the group and take from it only\n"
            "                        results sent from this switch's address and port,\n"
            "                        which it holds on every address so that no other\n"
            "                        user may send from it. Needs --listen on one\n"
            "                        address (not 0.0.0.0) and a multicast-capable path\n"
            "                        (lo, a bridge); results are visible to any host\n"
            "                        process that joins the group (each carries the job's\n"
            "                        token): with --secret-file they carry a tag that\n"
            "                        only holders of the secret can make. Shards of one\n"
            "                        job on one port: a BASE each (docs/SCALE.md)\n"
            "  --no-gso              send and receive one datagram per system call (no UDP\n"
            "                        GSO/GRO batching; for comparison and old kernels)\n"
            "  --shm, --no-shm       offer shared-memory rings to workers on this host\n"
            "                        (same user): DATA and results skip the kernel\n"
            "                        (INA_SHM=0 on a worker keeps it on UDP). On by\n"
            "                        default, except with --multicast, --fault-rx/-tx\n"
            "                        (faults apply to UDP datagrams only), --dataplane\n"
            "                        ebpf or --record. Rings are a memfd whose size the\n"
            "                        worker sealed; a POSIX shm object (libina before the\n"
            "                        seals) is refused, and that worker stays on UDP\n"
            "  --shm-unsealed        map such POSIX shm objects too: a worker can then\n"
            "                        shrink one under the switch, which survives and\n"
            "                        aborts that job (counter shm_faults)\n"
            "  --dataplane D         who applies the slot rules to DATA: userspace (this\n"
            "                        process; the default) or ebpf (a TC program on the\n"
            "                        --iface interface, in the kernel: no wake-up of this\n"
            "                        process per packet; needs root and a BPF-enabled kernel;\n"
            "                        integer ops and op 3 only, no float adds, --shm,\n"
            "                        --threads or --fault-*; k at most 2048 and what fits\n"
            "                        IF's MTU; --multicast on a NIC or veth,\n"
            "                        not lo; docs/EBPF.md)\n"
            "  --iface IF            --dataplane ebpf: the interface the workers reach the\n"
            "                        switch by (lo for workers on this host)\n"
            "  --record FILE         write every datagram, tick and operator request the\n"
            "                        switch takes to FILE (a trace, docs/EBPF.md), to replay\n"
            "                        it exactly; sessions and tokens then come from a seed\n"
            "                        kept in the file (predictable: for tests and debugging)\n"
            "  --parent HOST:PORT[,HOST:PORT...]\n"
            "                        be a child in a tree of switches (docs/SCALE.md): add\n"
            "                        the packets of the workers that join here, and take\n"
            "                        part in each job at a parent as one member, sending\n"
            "                        it one partial sum per round and passing its results\n"
            "                        down. With several parents (a sharded parent tier)\n"
            "                        each job (name, lane) goes to one of them, the same\n"
            "                        for every child. The listen address must reach the\n"
            "                        parents (e.g. --listen 0.0.0.0, or the node's address)\n"
            "  --int-ops-only        offer only the integer ops (add, max, min, fixed-point\n"
            "                        add), as a switch without shifters or floating point\n"
            "                        would (hardware, eBPF): workers then send floats\n"
            "                        quantized in two rounds, or in fixed point\n"
            "  --busy-poll US|auto   after each input, keep polling the socket (and rings)\n"
            "                        for US microseconds before sleeping (0: sleep at\n"
            "                        once). Saves a wake-up per small all-reduce, but\n"
            "                        takes a core while it spins (it yields it to a worker\n"
            "                        queued there, docs/GLM.md). auto (the default): 50\n"
            "                        while the threads have a core each, else 50 x cores /\n"
            "                        threads, 0 below 5. US also sets SO_BUSY_POLL (NAPI NICs)\n"
            "  --hot-keys N          most keys of one job's hot table (default 65536; 0 = no\n"
            "                        hot table): keys a key-value job aggregates here,\n"
            "                        the rest going to ina-ps (docs/PS.md)\n"
            "  --hot-memory SIZE     bytes of all jobs' hot tables together (default 64M, at\n"
            "                        least 4K; K, M, G suffixes), and of the ranks' samples\n"
            "                        a new table is chosen from. An install past it is\n"
            "                        answered with the keys that still fit, and the job\n"
            "                        installs that many (counter hot_refusals); a sample\n"
            "                        counts the keys that fit (counter hot_sample_drops)\n"
            "  --metrics ADDR:PORT   serve the operator view over HTTP on a separate thread:\n"
            "                        GET /metrics (Prometheus text), GET /jobs and\n"
            "                        GET /counters (JSON), POST /jobs/ID/abort and\n"
            "                        POST /jobs/ID/evict (see ina-ctl). A bare PORT\n"
            "                        means 127.0.0.1:PORT; port 0 picks a free port (see\n"
            "                        --metrics-port-file). Off by default. Without\n"
            "                        --secret-file anyone who reaches it may read and\n"
            "                        act: keep it local; with one, /jobs, the per-job\n"
            "                        series, abort and evict need proof of the secret\n"
            "                        (ina-ctl --secret-file); the totals stay open. At\n"
            "                        most 64 clients at once, 2 s each\n"
            "  --metrics-port-file PATH  write the bound metrics port to PATH\n"
            "  --secret-file PATH    shared secret: a JOIN must carry an HMAC-SHA256 of it\n"
            "                        (workers: INA_SECRET_FILE) or is refused with\n"
            "                        INA_ERR_REJECTED and counted as drop AUTH; the\n"
            "                        JOIN_ACK proves the switch knows it too. A JOIN also\n"
            "                        echoes a cookie the switch handed out less than 4 s\n"
            "                        before: a captured JOIN cannot be replayed later. It\n"
            "                        guards the operator view (--metrics) as well. The\n"
            "                        file's content less trailing newlines, 1..4096 bytes.\n"
            "                        With --multicast, results, ABORTs and MIGRATEs carry\n"
            "                        a tag of a per-session key derived from it\n"
            "  --integrity           every DATA and result carries a 16-byte tag of a\n"
            "                        per-session key derived from --secret-file (needed),\n"
            "                        so no one without the secret, not even root on a host\n"
            "                        on the path, can change a sum unseen: a bad tag is\n"
            "                        dropped (drop MAC) and resent. Workers must ask for it\n"
            "                        (INA_INTEGRITY=1), else their JOIN is refused with\n"
            "                        INA_ERR_NOTSUP. Costs a keyed BLAKE2b per packet\n"
            "                        (docs/BENCHMARKS.md); k at most 16364. Not with\n"
            "                        --dataplane ebpf, --parent or --record\n"
            "  --log-level L         error, warn, info (default) or debug; one line per\n"
            "                        event on stderr: time, level, event, key=value fields\n"
            "  --log-format F        text (default) or json (one object per line)\n"
            "  --quiet               --log-level error (the counters are still printed on exit)\n"
            "  --verbose             --log-level debug\n"
            "  --version             print the version and exit\n"
            "  --help                this text\n"
            "\n"
            "Memory: slots x 2 x max-elems x 4 bytes (default 16 MiB), plus the hot tables\n"
            "(at most --hot-memory, 64 MiB by default).\n"
            "Example: ina-switch --listen 0.0.0.0:48864 --slots 4096\n",
            INA_DEFAULT_PORT, INA_MAX_ELEMS, INA_SW_MAX_SHARDS, INA_AUTO_SWITCH_THREADS_MAX);
}

/*
 * Transmit path. The dataplane queues (datagram, destination) pairs; a flush
 * applies --fault-tx, sorts the pairs by destination (counting sort, stable,
 * so each worker still gets its results in order), and packs each worker's
 * run of equal-sized results into UDP GSO messages: one kernel crossing per
 * train instead of per datagram. Scratch memory is sized once.
 */
struct tx_state {
    int fd;
    struct ina_gso_batch gso;
    unsigned *order, *sorted, *dest_of;
    unsigned cap; /* entries: 2 * txq.maxmsg (fault duplication may double) */
    /* destination -> dense id, reset per flush by epoch */
    struct {
        uint64_t key;
        uint32_t epoch;
        unsigned id;
    } table[4096];
    uint32_t epoch;
    unsigned count[4096 + 1];
};

/*
 * One dataplane thread: a switch instance (its own jobs and slots), its
 * socket and its I/O state. Shards share nothing, so the hot path takes no
 * lock: a lane is served by exactly one shard (REDIRECT at join, wire.h).
 */
struct shard {
    struct ina_switch sw;
    struct tx_state tx;
    /* Fault injection on each direction (--fault-rx / --fault-tx); off by default. */
    struct ina_fault fault_rx, fault_tx;
    uint64_t rx_trunc;
    struct ina_sw_pub *pub; /* --metrics: where this shard publishes; NULL = off */
    uint64_t busy_poll_ns;  /* --busy-poll: spin this long after the last input, 0 = never */
    struct ina_ebpf *ebpf;  /* --dataplane ebpf: the program that keeps the slots; NULL = off */
    FILE *record;           /* --record: every input goes here too (trace.h); NULL = off */
    uint64_t record_t0;
    uint64_t drain_timeout_ns;   /* --drain-timeout */
    const char *secret_file;     /* --secret-file, read again on SIGHUP; NULL = none */
    unsigned hup_seen;           /* ina__daemon_hups() when it last did */
    pthread_t thread;
    int rc;
    /* --multicast (port_guard.h): this shard's port held on every address,
     * and (shard 0) the groups' port held for the workers; -1 = none. */
    int guard_fd, group_fd;
};

static int tx_init(struct tx_state *tx, const struct ina_txq *q, int gso)
{
    tx->cap = 2 * q->maxmsg;
    tx->order = calloc(tx->cap + q->maxmsg, sizeof(unsigned));
    tx->sorted = calloc(tx->cap, sizeof(unsigned));
    tx->dest_of = calloc(tx->cap, sizeof(unsigned));
    if (!tx->order || !tx->sorted || !tx->dest_of ||
        ina__gso_batch_init(&tx->gso, tx->cap, tx->cap))
        return -1;
    tx->gso.gso_off = !gso;
    return 0;
}

static void tx_free(struct tx_state *tx)
{
    free(tx->order);
    free(tx->sorted);
    free(tx->dest_of);
    ina__gso_batch_free(&tx->gso);
}

/* Dense id of a destination within this flush (at most 4096 distinct). */
static unsigned dest_id(struct tx_state *tx, const struct sockaddr_in *a, unsigned *ndest)
{
    uint64_t key = (uint64_t)a->sin_addr.s_addr << 16 | a->sin_port;
    unsigned h = (unsigned)((key * 0x9E3779B97F4A7C15ull) >> 52) & 4095;
    for (;; h = (h + 1) & 4095) {
        if (tx->table[h].epoch != tx->epoch) {
            tx->table[h].epoch = tx->epoch;
            tx->table[h].key = key;
            tx->table[h].id = (*ndest)++;
            return tx->table[h].id;
        }
        if (tx->table[h].key == key)
            return tx->table[h].id;
    }
}

static void flush_tx(struct shard *sh)
{
    struct ina_switch *sw = &sh->sw;
    struct tx_state *tx = &sh->tx;
    int fd = tx->fd;
    struct ina_txq *q = &sw->txq;
    ina__switch_tx_account(sw);
    if (q->nmsg == 0) {
        /* Nothing for the socket, but buffers may still be taken: a RESULT
         * that went down shared-memory rings (dataplane.c: send_to_rank) is
         * built in a queue buffer too. Release them, or a job whose ranks
         * all use rings (and never sleep, so no DOORBELL is queued) would
         * claim buffers past the end of the queue. */
        ina__switch_tx_reset(sw);
        return;
    }
    unsigned n = q->nmsg, ndest = 0;
    if (ina__fault_active(&sh->fault_tx)) {
        for (unsigned i = 0; i < q->nmsg; i++) /* (a buffer several entries share: each may flip) */
            ina__fault_corrupt(&sh->fault_tx, q->iovs[i].iov_base, q->iovs[i].iov_len);
        n = ina__fault_plan(&sh->fault_tx, q->nmsg, tx->order);
    } else {
        for (unsigned i = 0; i < n; i++)
            tx->order[i] = i;
    }
    if (++tx->epoch == 0)
        ++tx->epoch;
    /* More destinations than the table holds cannot happen (64 jobs x 256
     * ranks would be 16384, but a flush holds at most txq.maxmsg entries of
     * a few jobs); past 4000, sending unsorted is still correct. */
    memset(tx->count, 0, sizeof(tx->count));
    int sorted = 1;
    for (unsigned i = 0; i < n; i++) {
        unsigned d = ndest < 4000 ? dest_id(tx, &q->addrs[tx->order[i]], &ndest) : 4000;
        sorted &= d < 4000;
        tx->dest_of[i] = d;
        tx->count[d + 1]++;
    }
    for (unsigned d = 1; d <= ndest; d++)
        tx->count[d] += tx->count[d - 1];
    for (unsigned i = 0; i < n; i++)
        tx->sorted[sorted ? tx->count[tx->dest_of[i]]++ : i] = tx->order[i];
    for (unsigned i = 0; i < n; i++) {
        unsigned e = tx->sorted[i];
        if (!ina__gso_batch_room(&tx->gso))
            sw->c.tx_packets += ina__gso_batch_send(&tx->gso, fd, &sw->c.tx_errors);
        ina__gso_batch_add(&tx->gso, q->iovs[e].iov_base, q->iovs[e].iov_len, &q->addrs[e]);
        sw->c.tx_bytes += q->iovs[e].iov_len;
    }
    sw->c.tx_packets += ina__gso_batch_send(&tx->gso, fd, &sw->c.tx_errors);
    ina__switch_tx_reset(sw);
}

/*
 * Receive path: a burst of up to INA_RX_MAX_MSGS messages, each possibly a
 * GRO train of many datagrams from one sender, split into datagrams
 * (rx_burst.h), then --fault-rx per datagram, then the dataplane.
 */
/* --busy-poll with rings: the socket is read at least this often while the switch spins
 * (run(): rings are read every turn, without a system call). */
#define INA_SW_SPIN_SOCKET_NS 2000u

struct rx_batch {
    struct ina_rx rx;
    struct ina_rx_pkt pkts[INA_RX_MAX_PKTS];
    unsigned order[3 * INA_RX_MAX_PKTS]; /* --fault-rx may duplicate */
};

/* --record: one input of the state machine, as trace.h lays it out. */
static void record(struct shard *sh, enum ina_trace_type type, const struct sockaddr_in *src,
                   const uint8_t *data, size_t len, uint64_t now)
{
    if (!sh->record)
        return;
    struct ina_trace_rec r = {.t_ns = now - sh->record_t0, .type = type, .len = (uint16_t)len,
                              .data = data};
    if (src)
        r.src = *src;
    if (ina__trace_write(sh->record, &r) != 0) {
        ina__log(INA_LOG_ERROR, "record_failed", INA_KV_S("reason", strerror(errno)));
        fclose(sh->record);
        sh->record = NULL;
    }
}

/*
 * The socket's error queue (IP_RECVERR): an ICMP port unreachable for a
 * datagram we sent says that no socket is bound at its destination any more.
 * The engine notes it for the members at that address; its tick ends a job
 * that waits on one of them (PROTOCOL.md §5.4, dead rank). Drained whole:
 * an unread entry would keep poll() awake. Only when an error was signalled.
 */
static void drain_errors(struct shard *sh, uint64_t now)
{
    for (int i = 0; i < 256; i++) {
        struct sockaddr_in dst;
        uint8_t data[64], ctrl[256];
        struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
        struct msghdr mh = {.msg_name = &dst, .msg_namelen = sizeof(dst), .msg_iov = &iov,
                            .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof(ctrl)};
        if (recvmsg(sh->tx.fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            return;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR)
                continue;
            struct sock_extended_err ee;
            memcpy(&ee, CMSG_DATA(c), sizeof(ee));
            if (ee.ee_origin == SO_EE_ORIGIN_ICMP && ee.ee_errno == ECONNREFUSED &&
                mh.msg_namelen == sizeof(dst) && dst.sin_family == AF_INET)
                ina__switch_unreachable(&sh->sw, &dst, now);
        }
    }
}

/*
 * One receive burst (rx_burst.h: each message may be a GRO train, split into
 * datagrams; oversized and non-IPv4 messages dropped, counted in rx_trunc),
 * --fault-rx, the dataplane, then the flush of what it queued.
 * @return the messages read (0: none), or -errno.
 */
static int rx_burst(struct shard *sh, struct rx_batch *rx, uint64_t now)
{
    struct ina_switch *sw = &sh->sw;
    int n = ina__rx_burst(&rx->rx, sh->tx.fd, rx->pkts, INA_RX_MAX_PKTS);
    sh->rx_trunc = rx->rx.truncated;
    if (rx->rx.got > 0) {
        unsigned npkts = n > 0 ? (unsigned)n : 0, norder = npkts;
        if (ina__fault_active(&sh->fault_rx)) {
            for (unsigned i = 0; i < npkts; i++) /* in the receive buffer, ours to change */
                ina__fault_corrupt(&sh->fault_rx, (uint8_t *)rx->pkts[i].data, rx->pkts[i].len);
            norder = ina__fault_plan(&sh->fault_rx, npkts, rx->order);
        } else
            for (unsigned i = 0; i < npkts; i++)
                rx->order[i] = i;
        for (unsigned o = 0; o < norder; o++) {
            const struct ina_rx_pkt *pk = &rx->pkts[rx->order[o]];
            if (ina__switch_tx_full(sw))
                flush_tx(sh);
            record(sh, INA_TRACE_DATAGRAM, pk->src, pk->data, pk->len, now);
            ina__switch_input(sw, pk->data, pk->len, pk->src, now);
        }
        flush_tx(sh);
    } else if (n == -ECONNREFUSED) {
        drain_errors(sh, now); /* an ICMP port unreachable: whose? */
    } else if (n < 0 && n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR) {
        ina__log(INA_LOG_ERROR, "recv_failed", INA_KV_I("shard", sw->p.shard),
                INA_KV_S("reason", strerror(-n)));
    }
    return n < 0 ? n : (int)rx->rx.got;
}

/* Datagrams taken from one rank's up ring per call (fairness between ranks and the socket). */
#define INA_SW_SHM_BURST 64

/*
 * The attached rings (PROTOCOL.md §5.9): each datagram is copied out first
 * (the worker may still write to its ring), then processed as if it came
 * from the rank's registered address: every check of the UDP path applies.
 * A corrupt ring (indices that make no sense) aborts that rank's job; so
 * does one whose object lost pages under the mapping (the fault guard
 * replaced them: a copy made meanwhile is not a datagram).
 * @return datagrams taken.
 */
static unsigned shm_burst(struct shard *sh, uint8_t *buf, uint64_t now)
{
    struct ina_switch *sw = &sh->sw;
    unsigned total = 0;
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        for (int r = 0; job->state == INA_JOB_ACTIVE && r < job->world; r++) {
            for (unsigned k = 0; k < INA_SW_SHM_BURST; k++) {
                struct ina_shm *shm = job->members[r].shm; /* input may end the job */
                if (!shm || job->state != INA_JOB_ACTIVE)
                    break;
                size_t len;
                const uint8_t *p = ina__ring_peek(shm, 1, &len);
                if (!p) {
                    if (shm->corrupt) {
                        sw->c.drops[INA_DROP_SHM]++;
                        if (ina__switch_tx_full(sw))
                            flush_tx(sh);
                        ina__job_abort_why(sw, job, INA_ERR_PROTO,
                                           shm->faulted ? "ring_fault" : "ring_corrupt");
                    }
                    break;
                }
                memcpy(buf, p, len);
                ina__ring_pop(shm, 1);
                if (ina__ring_faulted(shm))
                    continue; /* the next peek finds it corrupt */
                if (ina__switch_tx_full(sw))
                    flush_tx(sh);
                ina__switch_input_ring(sw, job, r, buf, len, now);
                total++;
            }
        }
    }
    flush_tx(sh);
    return total;
}

/* About to sleep: mark every attached up ring. @return 0 if one has data (do not sleep). */
static int shm_may_sleep(struct ina_switch *sw)
{
    int ok = 1;
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        for (int r = 0; job->state == INA_JOB_ACTIVE && r < job->world; r++)
            if (job->members[r].shm && !ina__ring_sleep_prepare(job->members[r].shm, 1))
                ok = 0;
    }
    return ok;
}

/* Awake again: no more doorbells needed until the next sleep. */
static void shm_awake(struct ina_switch *sw)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        for (int r = 0; job->state == INA_JOB_ACTIVE && r < job->world; r++)
            if (job->members[r].shm)
                ina__ring_awake(job->members[r].shm, 1);
    }
}

/* SIGHUP: read --secret-file again. A JOIN from now on must prove the new
 * secret; running jobs keep going (their tokens are what their DATA proves).
 * A file that cannot be read leaves the old secret in place. Thread 0 logs
 * and counts; the others do the same quietly. */
static void reload_secret(struct shard *sh)
{
    struct ina_switch *sw = &sh->sw;
    const int first = sw->p.shard == 0;
    sh->hup_seen = ina__daemon_hups();
    if (!sh->secret_file) {
        if (first)
            ina__log(INA_LOG_WARN, "secret_reload_skipped", INA_KV_S("reason", "no_secret_file"));
        return;
    }
    struct ina_hmac_key key;
    int rc = ina__hmac_key_from_file(&key, sh->secret_file);
    if (rc != 0) {
        if (first)
            ina__log(INA_LOG_ERROR, "secret_reload_failed", INA_KV_S("path", sh->secret_file),
                    INA_KV_S("reason", strerror(-rc)), INA_KV_S("kept", "the previous secret"));
        return;
    }
    sw->p.secret = key;
    if (first) {
        sw->c.secret_reloads++;
        ina__log(INA_LOG_INFO, "secret_reloaded", INA_KV_S("path", sh->secret_file));
    }
}

/* The first SIGTERM: refuse new jobs, let running operations finish. */
static void drain_begin(struct shard *sh, uint64_t now)
{
    struct ina_switch *sw = &sh->sw;
    if (sw->p.shard == 0)
        ina__log(INA_LOG_INFO, "draining",
                INA_KV_I("deadline_ms", (long long)(sh->drain_timeout_ns / 1000000u)),
                INA_KV_S("then", "ABORT SHUTDOWN to jobs still running"));
    ina__switch_drain_start(sw, now, sh->drain_timeout_ns);
}

static int run(struct shard *sh)
{
    struct ina_switch *sw = &sh->sw;
    int fd = sh->tx.fd;
    struct rx_batch *rx = calloc(1, sizeof(*rx));
    uint8_t *shm_buf = malloc(INA_MAX_DATAGRAM); /* one ring datagram */
    if (!rx || !shm_buf || ina__rx_init(&rx->rx, INA_RX_MAX_MSGS, INA_GRO_BUF) != 0) {
        free(rx);
        free(shm_buf);
        return -ENOMEM;
    }
    uint64_t next_tick = ina__clock_ns() + 1000000000ull, next_publish = 0, last_input = 0,
             last_yield = 0, next_move = 0; /* --busy-poll: yields, moves off a shared CPU */
    uint64_t last_socket = 0; /* --busy-poll with rings: when the socket was last read */
    unsigned shared_yields = 0, yield_every = INA_BUSY_POLL_YIELD_NS;
    int event_fd = ina__ebpf_event_fd(sh->ebpf);
    uint64_t next_drain = 0;
    int drained = 0;
    while (!ina__daemon_stopping()) {
        uint64_t now = ina__clock_ns();
        if (ina__daemon_hups() != sh->hup_seen)
            reload_secret(sh);
        if (ina__daemon_draining() && !drained && now >= next_drain) {
            if (!sw->draining)
                drain_begin(sh, now);
            if (ina__switch_drain_step(sw, now) == 0) {
                drained = 1;
                if (++shards_drained == sw->p.nshards)
                    ina__daemon_stop(); /* the last thread to drain stops them all */
            }
            flush_tx(sh);
            next_drain = now + 10000000ull; /* 10 ms */
        }
        /* Spinning with rings offered, the socket is read at most every
         * INA_SW_SPIN_SOCKET_NS: a ring holds its input in memory, but an
         * empty socket costs a system call a turn, which would keep a ring's
         * DATA waiting that long (PROTOCOL.md §5.9, "Polling"). */
        int n = 0;
        if (!sw->p.shm || now - last_input >= sh->busy_poll_ns ||
            now - last_socket >= INA_SW_SPIN_SOCKET_NS) {
            n = rx_burst(sh, rx, now);
            last_socket = now;
        }
        /* The program's events (a MISMATCH: abort the job) before the next
         * burst: each handled one queues an ABORT to every rank. */
        while (sh->ebpf && ina__ebpf_poll(sh->ebpf) > 0) {
            flush_tx(sh);
            n = 1;
        }
        if (sw->dp && (now >= next_tick || (sh->pub && now >= next_publish)))
            sw->dp->sync(sw->dp_ctx, sw); /* its counters and idle timers, for both */
        if (sw->p.shm && shm_burst(sh, shm_buf, now) > 0)
            n = 1;
        if (n > 0)
            last_input = last_yield = now; /* a spin yields after INA_BUSY_POLL_YIELD_NS */
        if (now >= next_tick) {
            record(sh, INA_TRACE_TICK, NULL, NULL, 0, now);
            ina__switch_tick(sw, now);
            flush_tx(sh);
            next_tick = now + 100000000ull; /* 100 ms: timeouts, WAITING jobs */
        }
        if (sh->pub && now >= next_publish) {
            /* Operator requests first, so the published view shows their effect. */
            uint16_t ids[INA_SW_MAILBOX];
            unsigned na = ina__sw_pub_take_aborts(sh->pub, ids);
            for (unsigned i = 0; i < na; i++) {
                if (ina__switch_tx_full(sw))
                    flush_tx(sh);
                uint8_t id[2];
                ina__put16(id, (uint16_t)(ids[i] & ~INA_SW_EVICT_FLAG));
                record(sh, ids[i] & INA_SW_EVICT_FLAG ? INA_TRACE_EVICT : INA_TRACE_ABORT, NULL,
                       id, sizeof(id), now);
                if (ids[i] & INA_SW_EVICT_FLAG)
                    ina__switch_evict_job(sw, (uint16_t)(ids[i] & ~INA_SW_EVICT_FLAG));
                else
                    ina__switch_abort_job(sw, ids[i]);
            }
            flush_tx(sh);
            ina__sw_pub_publish(sh->pub, sw);
            next_publish = now + INA_SW_PUBLISH_NS;
        }
        /* --busy-poll: keep looking for a while after the last input rather
         * than sleep, so the next datagram is not delayed by a wake-up
         * (busy_poll.h). Bounded: an idle switch sleeps again. */
        if (n <= 0 && now - last_input < sh->busy_poll_ns) {
            if (now - last_yield >= yield_every) {
                ina__busy_yield(); /* a worker may be queued on this CPU (busy_poll.h) */
                last_yield = ina__clock_ns();
                yield_every = ina__busy_yield_every(last_yield - now); /* crowded: every turn */
                /* Yields that keep giving the CPU away: a worker shares it
                 * with us, and nothing else will part us (busy_poll.h). */
                shared_yields = last_yield - now > INA_BUSY_POLL_SHARED_NS ? shared_yields + 1 : 0;
                if (shared_yields >= INA_BUSY_POLL_SHARED_YIELDS && last_yield >= next_move) {
                    ina__busy_move_off_cpu(); /* best effort */
                    shared_yields = 0;
                    next_move = last_yield + INA_BUSY_POLL_MOVE_EVERY_NS;
                }
            } else {
                ina__cpu_relax();
            }
            continue;
        }
        if (n <= 0 && (!sw->p.shm || shm_may_sleep(sw))) {
            struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = event_fd, .events = POLLIN}};
            if (poll(pfd, event_fd >= 0 ? 2 : 1, sh->pub ? 100 : 200) > 0 &&
                (pfd[0].revents & POLLERR))
                drain_errors(sh, ina__clock_ns());
            if (sw->p.shm)
                shm_awake(sw);
        }
    }
    /* Stopping: take what is already queued (a last LEAVE, say), so the
     * counters printed on exit count every datagram that reached the switch. */
    for (int i = 0; i < 64 && rx_burst(sh, rx, ina__clock_ns()) > 0; i++) {
    }
    ina__rx_free(&rx->rx);
    free(rx);
    free(shm_buf);
    return 0;
}

static void *shard_main(void *arg)
{
    struct shard *sh = arg;
    sh->rc = run(sh);
    return NULL;
}

static void log_listen_failed(const struct sockaddr_in *addr, const char *listen_s, int err)
{
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr->sin_addr, ip, sizeof(ip));
    ina__log(INA_LOG_ERROR, "listen_failed", INA_KV_S("listen", listen_s), INA_KV_S("addr", ip),
            INA_KV_I("port", ntohs(addr->sin_port)), INA_KV_S("reason", strerror(err)));
}

/* mcast: the port is shared with its guard (port_guard.h), yet no other
 * socket may hold exactly this address:port, as without --multicast.
 * @return the fd, -1 (logged), or -EAGAIN: an ephemeral port another socket
 * also holds (pick again). */
static int open_socket(struct sockaddr_in *addr, const char *listen_s, int gro, int quiet,
                       int mcast)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || (mcast && ina__mcast_listen_opts(fd) != 0) ||
        bind(fd, (struct sockaddr *)addr, sizeof(*addr)) != 0) {
        log_listen_failed(addr, listen_s, errno);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const int ephemeral = addr->sin_port == 0;
    socklen_t alen = sizeof(*addr);
    getsockname(fd, (struct sockaddr *)addr, &alen);
    if (mcast && ina__mcast_port_exclusive(fd, addr) != 0) {
        close(fd);
        if (ephemeral)
            return -EAGAIN;
        log_listen_failed(addr, listen_s, EADDRINUSE);
        return -1;
    }
    ina__sock_buffers(fd, 32 << 20);
    /* ICMP errors for what we send, with their destination: a dead rank's
     * closed port (drain_errors). Best effort: without it, ranks time out. */
    int on = 1;
    setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on));
    if (gro && ina__udp_enable_gro(fd) != 0 && !quiet)
        ina__log(INA_LOG_WARN, "gro_unavailable", INA_KV_S("reason", "receiving datagrams one by one"));
    return fd;
}

/* Out of the listen address's interface, to local members too, one hop. */
static int enable_multicast_tx(int fd, const struct sockaddr_in *addr)
{
    struct in_addr ifa = addr->sin_addr;
    unsigned char loop = 1, ttl = 1;
    if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof(ifa)) != 0 ||
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop)) != 0 ||
        setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl)) != 0) {
        ina__log(INA_LOG_ERROR, "multicast_setup_failed",
                INA_KV_S("call", "setsockopt IP_MULTICAST_IF/LOOP/TTL"),
                INA_KV_S("reason", strerror(errno)));
        return -1;
    }
    return 0;
}

static int write_port_file(const char *port_file, uint16_t port)
{
    int rc = ina__port_file_write(port_file, port);
    if (rc != 0)
        ina__log(INA_LOG_ERROR, "port_file_failed", INA_KV_S("path", port_file),
                INA_KV_S("reason", strerror(-rc)));
    return rc;
}

static void shards_free(struct shard *sh, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        ina__ebpf_close(sh[i].ebpf); /* detach first: the program must not outlive its maps' owner */
        if (sh[i].record)
            fclose(sh[i].record);
        if (sh[i].tx.fd >= 0)
            close(sh[i].tx.fd);
        if (sh[i].guard_fd >= 0)
            close(sh[i].guard_fd);
        if (sh[i].group_fd >= 0)
            close(sh[i].group_fd);
        tx_free(&sh[i].tx);
        ina__switch_free(&sh[i].sw);
    }
    free(sh);
}

/* Sum of every shard's counters, and of their fault injectors. */
static void print_totals(struct shard *sh, unsigned n)
{
    struct ina_sw_counters total;
    struct ina_fault frx, ftx;
    uint64_t trunc = 0;
    memset(&total, 0, sizeof(total));
    memset(&frx, 0, sizeof(frx));
    memset(&ftx, 0, sizeof(ftx));
    for (unsigned i = 0; i < n; i++) {
        if (sh[i].sw.dp)
            sh[i].sw.dp->sync(sh[i].sw.dp_ctx, &sh[i].sw);
        ina__sw_counters_add(&total, &sh[i].sw.c);
        trunc += sh[i].rx_trunc;
        frx.dropped += sh[i].fault_rx.dropped;
        frx.duplicated += sh[i].fault_rx.duplicated;
        frx.reordered += sh[i].fault_rx.reordered;
        frx.corrupted += sh[i].fault_rx.corrupted;
        ftx.dropped += sh[i].fault_tx.dropped;
        ftx.duplicated += sh[i].fault_tx.duplicated;
        ftx.reordered += sh[i].fault_tx.reordered;
        ftx.corrupted += sh[i].fault_tx.corrupted;
    }
    if (trunc)
        fprintf(stderr, "ina-switch: %llu oversized or non-IPv4 datagrams ignored\n",
                (unsigned long long)trunc);
    ina__sw_counters_print(&total, stderr);
    for (unsigned i = 0; i < n; i++)
        ina__ebpf_report(sh[i].ebpf, stderr);
    if (ina__fault_active(&sh[0].fault_rx) || ina__fault_active(&sh[0].fault_tx))
        ina__daemon_fault_report(stderr, &frx, &ftx);
}

/*
 * Open one socket and one switch instance per thread, run shard 0 on this
 * thread and the others on their own, until SIGINT/SIGTERM; then print the
 * summed counters. Shard i listens on the listen port + i (or a free port).
 */
struct serve_opts {
    unsigned nthreads;
    const char *threads_from; /* "option", or how auto counted the cores */
    int cores;                /* --threads auto: the cores it counted, else 0 */
    const char *shm_from;     /* why rings are offered or not: option, default, ... */
    struct sockaddr_in listen_addr;
    const char *listen_s, *port_file, *fault_rx_spec, *fault_tx_spec;
    int quiet, no_gso;
    int busy_poll_us;                /* --busy-poll, or what auto chose */
    const char *busy_poll_from;      /* "option" or "auto" */
    long drain_timeout_ms;           /* --drain-timeout */
    const char *secret_file;         /* --secret-file (read again on SIGHUP) */
    const char *ebpf_iface;          /* --dataplane ebpf --iface IF; NULL = userspace dataplane */
    const char *record_path;         /* --record FILE; NULL = off */
    int metrics;                     /* --metrics given */
    struct sockaddr_in metrics_addr;
    const char *metrics_port_file;
};

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/*
 * One attempt of open_sockets: every shard's socket on the listen port + i
 * (or a port of the kernel's choice); with --multicast, each one's guard and
 * the groups' port, shard 0's port + threads (port_guard.h). @return 0,
 * -1 (logged), or -EAGAIN: a port a --multicast switch needs is taken, and
 * the ports were the kernel's choice (choose again).
 */
static int open_sockets_once(struct shard *sh, struct ina_switch_params *p,
                             const struct serve_opts *o)
{
    const uint16_t base_port = ntohs(o->listen_addr.sin_port);
    const int mcast = p->mcast_base != 0;
    for (unsigned i = 0; i < o->nthreads; i++) {
        struct sockaddr_in a = o->listen_addr;
        a.sin_port = htons(base_port ? (uint16_t)(base_port + i) : 0);
        /* No UDP_GRO with the eBPF dataplane: the kernel would merge DATA
         * into trains before the program sees it (GRO runs before TC). */
        sh[i].tx.fd = open_socket(&a, o->listen_s, !o->no_gso && !o->ebpf_iface,
                                  o->quiet || i > 0, mcast);
        if (sh[i].tx.fd < 0) {
            int rc = sh[i].tx.fd == -EAGAIN ? -EAGAIN : -1;
            sh[i].tx.fd = -1;
            return rc;
        }
        if (mcast && enable_multicast_tx(sh[i].tx.fd, &a) != 0)
            return -1;
        p->shard_ports[i] = ntohs(a.sin_port);
        if (mcast && (sh[i].guard_fd = ina__mcast_guard_open(p->shard_ports[i])) < 0) {
            if (!base_port)
                return -EAGAIN;
            ina__log(INA_LOG_ERROR, "multicast_guard_failed", INA_KV_I("port", p->shard_ports[i]),
                    INA_KV_S("reason", strerror(-sh[i].guard_fd)),
                    INA_KV_S("means", "another user's socket holds this port on some address: "
                                      "it could send as this switch"));
            return -1;
        }
    }
    if (!mcast)
        return 0;
    uint32_t q = (uint32_t)p->shard_ports[0] + o->nthreads;
    if (q > 65535 || (sh[0].group_fd = ina__mcast_group_port_open((uint16_t)q)) < 0) {
        if (!base_port)
            return -EAGAIN;
        ina__log(INA_LOG_ERROR, "multicast_port_failed", INA_KV_I("port", (long long)q),
                INA_KV_S("reason", q > 65535 ? "past the last port" : strerror(-sh[0].group_fd)),
                INA_KV_S("means", "the groups' port (the listen port + threads) is taken"));
        return -1;
    }
    p->mcast_port = (uint16_t)q;
    return 0;
}

/* Every shard's socket, and with --multicast their guards and the groups' port
 * (open_sockets_once). @return 0 or -1 (logged). */
static int open_sockets(struct shard *sh, struct ina_switch_params *p, const struct serve_opts *o)
{
    for (int attempt = 0;; attempt++) {
        int rc = open_sockets_once(sh, p, o);
        if (rc == 0)
            return 0;
        for (unsigned i = 0; i < o->nthreads; i++) {
            close_fd(&sh[i].tx.fd);
            close_fd(&sh[i].guard_fd);
            close_fd(&sh[i].group_fd);
        }
        if (rc != -EAGAIN || attempt == 32) {
            if (rc == -EAGAIN)
                ina__log(INA_LOG_ERROR, "multicast_port_failed",
                        INA_KV_S("reason", "no free run of ports after 32 tries"));
            return -1;
        }
    }
}

static int serve(const struct ina_switch_params *params, const struct serve_opts *o)
{
    unsigned nthreads = o->nthreads;
    const struct sockaddr_in *listen_addr = &o->listen_addr;
    const char *port_file = o->port_file;
    const char *fault_rx_spec = o->fault_rx_spec, *fault_tx_spec = o->fault_tx_spec;
    int no_gso = o->no_gso;
    struct shard *sh = calloc(nthreads, sizeof(*sh));
    struct ina_sw_pub *pubs = o->metrics ? calloc(nthreads, sizeof(*pubs)) : NULL;
    struct ina_metrics *metrics = NULL;
    unsigned npubs = 0;
    if (!sh || (o->metrics && !pubs)) {
        ina__log(INA_LOG_ERROR, "out_of_memory", INA_KV_S("reason", "shard state"));
        free(sh);
        free(pubs);
        return 1;
    }
    for (unsigned i = 0; i < nthreads; i++)
        sh[i].tx.fd = sh[i].guard_fd = sh[i].group_fd = -1;
    struct ina_switch_params p = *params;
    p.nshards = nthreads;
    p.nslots = params->nslots / nthreads;
    if (p.max_job_slots == 0)
        p.max_job_slots = p.nslots / 4 ? p.nslots / 4 : 1;
    struct sockaddr_in addr0 = *listen_addr;
    if (open_sockets(sh, &p, o) != 0)
        goto fail;
    addr0.sin_port = htons(p.shard_ports[0]);
    for (unsigned i = 0; i < nthreads; i++) {
        sh[i].busy_poll_ns = (uint64_t)o->busy_poll_us * 1000u;
        sh[i].drain_timeout_ns = (uint64_t)o->drain_timeout_ms * 1000000u;
        sh[i].secret_file = o->secret_file;
        if (o->busy_poll_us && strcmp(o->busy_poll_from, "option") == 0)
            ina__sock_busy_poll(sh[i].tx.fd, o->busy_poll_us); /* best effort: NAPI devices only */
    }
    /* --hot-memory: one budget for the hot tables of every thread (PROTOCOL.md §14.3). */
    static struct ina_hot_budget hot_budget;
    hot_budget.limit = p.hot_memory ? p.hot_memory : INA_SW_DEFAULT_HOT_MEMORY;
    p.hot_budget = &hot_budget;
    for (unsigned i = 0; i < nthreads; i++) {
        p.shard = i;
        int rc = ina__switch_init(&sh[i].sw, &p);
        if (rc == 0 && i == 0) {
            /* One cookie key for every thread: a worker that thread 0
             * REDIRECTs keeps its cookie (PROTOCOL.md §4.4). */
            p.cookie_key = sh[0].sw.cookie_key;
            p.cookie_key_set = 1;
        }
        if (rc == 0 && tx_init(&sh[i].tx, &sh[i].sw.txq, !no_gso) != 0)
            rc = -ENOMEM;
        if (rc != 0) {
            ina__log(INA_LOG_ERROR, "pool_alloc_failed", INA_KV_I("slots", p.nslots),
                    INA_KV_I("max_elems", p.max_elems), INA_KV_S("reason", strerror(-rc)));
            goto fail;
        }
        /* Each direction of each shard draws its own fault sequence. */
        if (fault_rx_spec)
            ina__fault_parse(&sh[i].fault_rx, fault_rx_spec);
        if (fault_tx_spec)
            ina__fault_parse(&sh[i].fault_tx, fault_tx_spec);
        sh[i].fault_rx.rng += i * 0x9E3779B97F4A7C15ull;
        sh[i].fault_tx.rng += i * 0x9E3779B97F4A7C15ull;
    }
    if (o->record_path) {
        struct ina_trace_header th = {.seed = p.seed, .sw = *listen_addr, .p = p};
        th.sw.sin_port = htons(p.shard_ports[0]);
        sh[0].record = fopen(o->record_path, "wb");
        if (!sh[0].record || ina__trace_write_header(sh[0].record, &th) != 0) {
            ina__log(INA_LOG_ERROR, "record_failed", INA_KV_S("path", o->record_path),
                    INA_KV_S("reason", strerror(errno)));
            goto fail;
        }
        sh[0].record_t0 = ina__clock_ns();
    }
    if (o->ebpf_iface) {
        char err[1024];
        struct sockaddr_in a = *listen_addr;
        a.sin_port = htons(p.shard_ports[0]);
        struct ina_ebpf_opts eo = {.iface = o->ebpf_iface, .addr = a, .sock_fd = sh[0].tx.fd,
                                   .nslots = p.nslots, .lo_gso_off = 1,
                                   .multicast = p.mcast_base != 0};
        int rc = ina__ebpf_open(&sh[0].ebpf, &eo, err, sizeof(err));
        if (rc != 0) {
            fprintf(stderr, "ina-switch: --dataplane ebpf: %s\n", err);
            goto fail;
        }
        uint32_t fit = ina__ebpf_mtu_elems(sh[0].ebpf);
        if (fit && fit < sh[0].sw.p.max_elems) {
            /* The program sees only whole datagrams and sends results at the link
             * layer: a packet larger than the MTU would not get through it. No job
             * exists yet, and the pool was sized for the larger k. */
            fprintf(stderr, "ina-switch: --dataplane ebpf: --max-elems %u capped to %u (a DATA "
                            "must fit %s's MTU, %d bytes)\n",
                    sh[0].sw.p.max_elems, fit, o->ebpf_iface, 20 + 8 + INA_HDR_LEN + 4 * (int)fit);
            sh[0].sw.p.max_elems = fit;
            p.max_elems = fit;
        }
        ina__ebpf_bind(sh[0].ebpf, &sh[0].sw);
        ina__log(INA_LOG_INFO, "dataplane", INA_KV_S("kind", "ebpf"), INA_KV_S("iface", o->ebpf_iface),
                INA_KV_I("max_elems", p.max_elems));
    }

    /* --drain-timeout 0: SIGTERM stops at once. */
    ina__daemon_signals((o->drain_timeout_ms > 0 ? INA_DAEMON_DRAIN : 0) | INA_DAEMON_HUP |
                        INA_DAEMON_NOPIPE);
    /* A worker's ring object that loses pages under our mapping must cost
     * its job, not this process (shm_ring.h: the fault guard). SIGBUS can
     * always be caught: this cannot fail. */
    if (p.shm)
        (void)ina__ring_guard_install();

    char ip[INET_ADDRSTRLEN], mib[32];
    inet_ntop(AF_INET, &addr0.sin_addr, ip, sizeof(ip));
    snprintf(mib, sizeof(mib), "%.1f", (double)p.nslots * nthreads * 2 * ina__switch_set_words(&p) * 4 / (1 << 20));
    ina__log(INA_LOG_INFO, "listening", INA_KV_S("version", ina_version_string()),
            INA_KV_S("addr", ip), INA_KV_I("port", p.shard_ports[0]),
            INA_KV_I("last_port", p.shard_ports[nthreads - 1]), INA_KV_I("threads", nthreads),
            INA_KV_S("threads_from", o->threads_from), INA_KV_I("cores", o->cores),
            INA_KV_I("slots", p.nslots * nthreads), INA_KV_I("max_elems", p.max_elems),
            INA_KV_S("pool_mib", mib), INA_KV_S("secret", p.has_secret ? "on" : "off"),
            INA_KV_S("integrity", p.integrity ? "on" : "off"),
            INA_KV_S("shm", p.shm ? "on" : "off"), INA_KV_S("shm_from", o->shm_from),
            INA_KV_I("busy_poll_us", o->busy_poll_us), INA_KV_S("busy_poll_from", o->busy_poll_from),
            INA_KV_I("parents", p.nparents));
    if (o->metrics) {
        for (; npubs < nthreads; npubs++) {
            if (ina__sw_pub_init(&pubs[npubs]) != 0)
                goto fail;
            sh[npubs].pub = &pubs[npubs];
            ina__sw_pub_publish(&pubs[npubs], &sh[npubs].sw); /* a view before the first period */
        }
        metrics = ina__metrics_start(&o->metrics_addr, o->metrics_port_file, pubs, npubs);
        if (!metrics)
            goto fail;
    }
    if (port_file && write_port_file(port_file, p.shard_ports[0]) != 0) {
        goto fail;
    }
    /* Signals go to this thread: the others block them and notice the stop
     * flag within one poll timeout. */
    sigset_t all, old;
    sigfillset(&all);
    /* Except a fault's signal: the kernel kills a thread that faults with it
     * blocked, handler or not, and the rings' guard handles SIGBUS. */
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    unsigned started = 1;
    int start_failed = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&sh[started].thread, NULL, shard_main, &sh[started]) != 0) {
            ina__log(INA_LOG_ERROR, "thread_start_failed", INA_KV_I("shard", started));
            ina__daemon_stop();
            start_failed = 1;
            break;
        }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* A SIGTERM while the threads start (its delivery waits for the mask) is a
     * clean stop like any other, not a failure. */
    int rc = start_failed ? 1 : run(&sh[0]);
    ina__daemon_stop();
    /* Stopping: later signals (a launcher's second SIGTERM to the process
     * group, say) have nothing left to do; keep them pending until exit
     * discards them, rather than run a handler during teardown. */
    sigset_t stopping;
    sigemptyset(&stopping);
    sigaddset(&stopping, SIGTERM);
    sigaddset(&stopping, SIGINT);
    sigaddset(&stopping, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stopping, NULL);
    for (unsigned i = 1; i < started; i++) {
        pthread_join(sh[i].thread, NULL);
        rc |= sh[i].rc;
    }
    ina__metrics_stop(metrics);
    print_totals(sh, nthreads);
    shards_free(sh, nthreads);
    for (unsigned i = 0; i < npubs; i++)
        ina__sw_pub_destroy(&pubs[i]);
    free(pubs);
    return rc == 0 ? 0 : 1;
fail:
    ina__metrics_stop(metrics);
    shards_free(sh, nthreads);
    for (unsigned i = 0; i < npubs; i++)
        ina__sw_pub_destroy(&pubs[i]);
    free(pubs);
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'},   {"slots", required_argument, 0, 's'},
        {"max-elems", required_argument, 0, 'k'}, {"port-file", required_argument, 0, 'p'},
        {"join-timeout", required_argument, 0, 'j'},
        {"idle-timeout", required_argument, 0, 'i'},
        {"drain-timeout", required_argument, 0, 'd' + 256},
        {"fault-rx", required_argument, 0, 'R'}, {"fault-tx", required_argument, 0, 'T'},
        {"no-gso", no_argument, 0, 'G'},        {"threads", required_argument, 0, 't'},
        {"max-job-slots", required_argument, 0, 'X'},
        {"min-job-slots", required_argument, 0, 'N'},
        {"multicast", optional_argument, 0, 'M'},
        {"quiet", no_argument, 0, 'q'},           {"verbose", no_argument, 0, 'v'},
        {"log-level", required_argument, 0, 'L'}, {"log-format", required_argument, 0, 'F'},
        {"metrics", required_argument, 0, 'm'},
        {"metrics-port-file", required_argument, 0, 'P'},
        {"secret-file", required_argument, 0, 'S'},
        {"int-ops-only", no_argument, 0, 'I'},
        {"integrity", no_argument, 0, 'i' + 256},
        {"shm", no_argument, 0, 'H'},            {"no-shm", no_argument, 0, 'h' + 256},
        {"shm-unsealed", no_argument, 0, 'H' + 256},
        {"busy-poll", required_argument, 0, 'B'},
        {"dataplane", required_argument, 0, 'D'}, {"iface", required_argument, 0, 'f'},
        {"record", required_argument, 0, 'r'},
        {"hot-keys", required_argument, 0, 'K'},
        {"hot-memory", required_argument, 0, 'K' + 256},
        {"parent", required_argument, 0, 'U'},
        {"version", no_argument, 0, 'V'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *listen_s = "127.0.0.1", *port_file = NULL;
    struct ina_switch_params p = {.nslots = 0, /* 0: the default, from the threads */
                                  .max_elems = 2048,
                                  .join_timeout_ns = 120ull * 1000000000ull,
                                  .idle_timeout_ns = 3600ull * 1000000000ull,
                                  .min_job_slots = 8,
                                  .hot_max = 65536};
    int quiet = 0, no_gso = 0, busy_poll_us = INA_BUSY_POLL_AUTO, c;
    long drain_timeout_ms = 10000;
    unsigned nthreads = 0; /* 0: auto */
    int shm_opt = -1;      /* --shm 1, --no-shm 0, neither -1 */
    int slots_opt = 0;     /* --slots given */
    const char *fault_rx_spec = NULL, *fault_tx_spec = NULL;
    const char *metrics_s = NULL, *metrics_port_file = NULL, *secret_file = NULL;
    const char *iface = NULL, *record_path = NULL;
    int ebpf = 0;
    const char *parent_s = NULL;
    enum ina_log_level level = INA_LOG_INFO;
    enum ina_log_format format = INA_LOG_TEXT;
    char *end;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long v = 0;
        if (c == 't' && strcmp(optarg, "auto") == 0) {
            nthreads = 0;
            continue;
        }
        if (c == 's' || c == 'k' || c == 'j' || c == 'i' || c == 't' || c == 'X' || c == 'N' ||
            c == 'K') {
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > (1L << 24) ||
                (c == 't' && (v < 1 || v > INA_SW_MAX_SHARDS))) {
                fprintf(stderr, "ina-switch: bad number for --%s: '%s'%s\n",
                        c == 's' ? "slots" : c == 'k' ? "max-elems" : c == 'j' ? "join-timeout"
                                                    : c == 'i' ? "idle-timeout"
                                                    : c == 't' ? "threads"
                                                    : c == 'X' ? "max-job-slots"
                                                    : c == 'K' ? "hot-keys" : "min-job-slots",
                        optarg, c == 't' ? " (want 1..64 or auto)" : "");
                return 2;
            }
        }
        switch (c) {
        case 'l': listen_s = optarg; break;
        case 's': p.nslots = (uint32_t)v; slots_opt = 1; break;
        case 'k': p.max_elems = (uint32_t)v; break;
        case 'j': p.join_timeout_ns = (uint64_t)v * 1000000000ull; break;
        case 'i': p.idle_timeout_ns = (uint64_t)v * 1000000000ull; break;
        case 'd' + 256:
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > 3600000) {
                fprintf(stderr, "ina-switch: bad --drain-timeout '%s' (want milliseconds, "
                                "0..3600000; 0: SIGTERM stops at once)\n", optarg);
                return 2;
            }
            drain_timeout_ms = v;
            break;
        case 'p': port_file = optarg; break;
        case 't': nthreads = (unsigned)v; break;
        case 'X': p.max_job_slots = (uint32_t)v; break;
        case 'N': p.min_job_slots = (uint32_t)v; break;
        case 'R':
        case 'T':
            *(c == 'R' ? &fault_rx_spec : &fault_tx_spec) = optarg;
            if (ina__daemon_fault_spec(NAME, c == 'R' ? "rx" : "tx", optarg) != 0)
                return 2;
            break;
        case 'q': quiet = 1; level = INA_LOG_ERROR; break;
        case 'v': level = INA_LOG_DEBUG; break;
        case 'L':
            if (ina__daemon_log_level(NAME, optarg, &level) != 0)
                return 2;
            quiet = level < INA_LOG_INFO;
            break;
        case 'F':
            if (ina__log_format_parse(optarg, &format) != 0) {
                fprintf(stderr, "ina-switch: bad --log-format '%s' (want text|json)\n", optarg);
                return 2;
            }
            break;
        case 'm': metrics_s = optarg; break;
        case 'P': metrics_port_file = optarg; break;
        case 'S': secret_file = optarg; break;
        case 'G': no_gso = 1; break;
        case 'I': p.int_ops_only = 1; break;
        case 'i' + 256: p.integrity = 1; break;
        case 'H': shm_opt = 1; break;
        case 'h' + 256: shm_opt = 0; break;
        case 'H' + 256: p.shm_unsealed = 1; break;
        case 'B':
            if (strcmp(optarg, "auto") == 0) {
                busy_poll_us = INA_BUSY_POLL_AUTO;
                break;
            }
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 0 || v > INA_BUSY_POLL_MAX_US) {
                fprintf(stderr, "ina-switch: bad --busy-poll '%s' (want auto or microseconds, 0..%d)\n",
                        optarg, INA_BUSY_POLL_MAX_US);
                return 2;
            }
            busy_poll_us = (int)v;
            break;
        case 'D':
            if (strcmp(optarg, "ebpf") == 0) {
                ebpf = 1;
            } else if (strcmp(optarg, "userspace") != 0) {
                fprintf(stderr, "ina-switch: bad --dataplane '%s' (want userspace or ebpf)\n", optarg);
                return 2;
            }
            break;
        case 'f': iface = optarg; break;
        case 'r': record_path = optarg; break;
        case 'K': p.hot_max = (uint32_t)v; break;
        case 'K' + 256:
            if (ina__parse_size(optarg, 4096, &p.hot_memory) != 0) {
                fprintf(stderr, "ina-switch: bad --hot-memory '%s' (e.g. 64M, 1G; at least 4K)\n",
                        optarg);
                return 2;
            }
            break;
        case 'U': parent_s = optarg; break;
        case 'M': {
            struct in_addr g;
            if (inet_pton(AF_INET, optarg ? optarg : "239.255.73.0", &g) != 1 ||
                (ntohl(g.s_addr) >> 28) != 14 || (ntohl(g.s_addr) & 0xFF) != 0) {
                fprintf(stderr, "ina-switch: --multicast wants a group base A.B.C.0 in 224.0.0.0/4, "
                                "got '%s'\n", optarg);
                return 2;
            }
            p.mcast_base = ntohl(g.s_addr);
            break;
        }
        case 'V': ina__daemon_version(NAME); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (ina__daemon_no_operands(NAME, argc, argv, optind) != 0)
        return 2;
    /* Defaults from the host (README, docs/PYTHON.md "Defaults from the host"). */
    int cores = 0;
    const char *threads_from = "option";
    if (nthreads == 0 && (ebpf || record_path)) {
        nthreads = 1; /* the kernel spreads the eBPF dataplane's packets; a trace takes one */
        threads_from = ebpf ? "one_with_ebpf" : "one_with_record";
    } else if (nthreads == 0) {
        cores = ina__host_cores(&threads_from);
        nthreads = (unsigned)ina__auto_switch_threads(cores);
        if (p.mcast_base && nthreads * INA_SW_MAX_JOBS > 254)
            nthreads = 254 / INA_SW_MAX_JOBS; /* a group per job id in BASE/24 */
    }
    /* --busy-poll auto: the threads are the spinners this switch knows of (busy_poll.h). */
    const char *busy_poll_from = "option";
    if (busy_poll_us == INA_BUSY_POLL_AUTO) {
        busy_poll_us = ina__busy_poll_auto_us(cores ? cores : ina__host_cores(NULL), (int)nthreads);
        busy_poll_from = "auto";
    }
    if (!slots_opt)
        p.nslots = nthreads * 256 > 1024 ? nthreads * 256 : 1024; /* a window of 64 per thread */
    /* Rings pay wherever a worker shares the host (and the user); they are
     * not a network, so runs that inject network faults, and multicast,
     * whose results go to a group, keep them off unless asked; so do the
     * eBPF dataplane (its program sees packets only) and --record (a trace
     * holds datagrams). */
    const char *shm_from = shm_opt >= 0 ? "option"
                           : p.mcast_base ? "off_with_multicast"
                           : (fault_rx_spec || fault_tx_spec) ? "off_with_faults"
                           : ebpf ? "off_with_ebpf"
                           : record_path ? "off_with_record" : "default";
    p.shm = shm_opt >= 0 ? shm_opt
                         : !p.mcast_base && !fault_rx_spec && !fault_tx_spec && !ebpf && !record_path;
    if (p.nslots == 0 || p.max_elems == 0 || p.max_elems > INA_MAX_ELEMS) {
        fprintf(stderr, "ina-switch: --slots must be >= 1 and --max-elems 1..%d\n", INA_MAX_ELEMS);
        return 2;
    }
    struct sockaddr_in addr;
    if (ina__daemon_listen_addr(NAME, listen_s, INA_DEFAULT_PORT, &addr) != 0)
        return 2;

    if (p.mcast_base && addr.sin_addr.s_addr == htonl(INADDR_ANY)) {
        fprintf(stderr, "ina-switch: --multicast needs --listen on one address, not %s: workers "
                        "take a group's results only from the address and port they joined, "
                        "and a wildcard leaves the multicast source to the routing table\n",
                listen_s);
        return 2;
    }
    if (p.mcast_base && nthreads * INA_SW_MAX_JOBS > 254) {
        fprintf(stderr, "ina-switch: --multicast supports at most %d --threads (one group per "
                        "job id in BASE/24)\n", 254 / INA_SW_MAX_JOBS);
        return 2;
    }
    if (parent_s) {
        char why[300];
        int n = ina__parse_hostport_list(parent_s, 0, p.parents, INA_SW_MAX_PARENTS, why,
                                        sizeof(why));
        if (n < 1) {
            fprintf(stderr, "ina-switch: --parent: %s (at most %d addresses)\n", why,
                    INA_SW_MAX_PARENTS);
            return 2;
        }
        p.nparents = (unsigned)n;
        for (int i = 0; i < n; i++) {
            int lo_parent = (ntohl(p.parents[i].sin_addr.s_addr) >> 24) == 127;
            int lo_listen = (ntohl(addr.sin_addr.s_addr) >> 24) == 127;
            if (lo_listen && !lo_parent) {
                fprintf(stderr, "ina-switch: --listen %s cannot reach the parent %s: a child "
                                "talks to its parent from its listen address (use --listen "
                                "0.0.0.0 or this host's address)\n", listen_s, parent_s);
                return 2;
            }
            if (addr.sin_port && addr.sin_port == p.parents[i].sin_port &&
                (addr.sin_addr.s_addr == p.parents[i].sin_addr.s_addr)) {
                fprintf(stderr, "ina-switch: --parent %s is this switch's own address\n",
                        parent_s);
                return 2;
            }
        }
        if (p.mcast_base) {
            fprintf(stderr, "ina-switch: --parent and --multicast cannot be combined (a child "
                            "passes each result on by unicast)\n");
            return 2;
        }
    }
    if (p.shm && p.mcast_base) {
        fprintf(stderr, "ina-switch: --shm and --multicast cannot be combined (results go either "
                        "into each worker's ring or to the group)\n");
        return 2;
    }
    /* Tags (PROTOCOL.md §4.6) come from the secret, are computed in this
     * process, and end every tagged datagram. */
    const char *no_tags = !p.integrity                ? NULL
                          : !secret_file              ? "it needs --secret-file (the tags' key comes "
                                                        "from the shared secret)"
                          : ebpf                      ? "--dataplane ebpf: the program in the kernel "
                                                        "cannot compute the tags (a keyed BLAKE2b)"
                          : parent_s                  ? "--parent: a tree carries no tags between "
                                                        "its levels"
                          : record_path               ? "--record: a trace holds no secret, so a "
                                                        "replay could not check the tags"
                                                      : NULL;
    if (no_tags) {
        fprintf(stderr, "ina-switch: --integrity: %s\n", no_tags);
        return 2;
    }
    if (ebpf && secret_file && p.mcast_base) {
        fprintf(stderr, "ina-switch: --dataplane ebpf: --secret-file with --multicast tags every "
                        "result with the session's key, which the program in the kernel cannot "
                        "compute (use the userspace dataplane, or no --multicast)\n");
        return 2;
    }
    if (p.max_elems > INA_MAX_ELEMS_TAGGED && secret_file && (p.mcast_base || p.integrity)) {
        fprintf(stderr, "ina-switch: --max-elems %u capped to %d (a tagged datagram ends with "
                        "its 16-byte tag)\n", p.max_elems, INA_MAX_ELEMS_TAGGED);
        p.max_elems = INA_MAX_ELEMS_TAGGED;
    }
    if (ebpf) {
        const char *bad = !iface ? "it needs --iface IF (the interface the workers reach the switch by)"
                          : nthreads > 1 ? "--threads: the kernel spreads packets over the cores itself"
                          : p.shm ? "--shm: the program takes DATA from the interface, not from rings"
                          : p.nparents ? "--parent: the program sends no partial sums upstream "
                            "(a child switch is a userspace one)"
                          : (fault_rx_spec || fault_tx_spec) ? "--fault-rx/--fault-tx act on the "
                            "socket, which DATA no longer reaches (drop packets with nftables)"
                          : NULL;
        if (bad) {
            fprintf(stderr, "ina-switch: --dataplane ebpf: %s\n", bad);
            return 2;
        }
        char why[256];
        if (!ina__ebpf_built(why, sizeof(why))) {
            fprintf(stderr, "ina-switch: --dataplane ebpf: %s\n", why);
            return 1;
        }
        if (p.max_elems > INA_EBPF_MAX_ELEMS) {
            fprintf(stderr, "ina-switch: --dataplane ebpf: --max-elems %u capped to %d (the "
                            "program's slot size)\n", p.max_elems, INA_EBPF_MAX_ELEMS);
            p.max_elems = INA_EBPF_MAX_ELEMS;
        }
        p.bpf_ops_only = 1; /* no floating point in BPF: op 3's shifts, not op 4 */
    } else if (iface) {
        fprintf(stderr, "ina-switch: --iface is for --dataplane ebpf\n");
        return 2;
    }
    if (record_path) {
        if (ebpf || p.shm || nthreads > 1) {
            fprintf(stderr, "ina-switch: --record takes the input of one userspace dataplane "
                            "thread: not with --dataplane ebpf, --shm or --threads\n");
            return 2;
        }
        while (!p.seed && getrandom(&p.seed, sizeof(p.seed), 0) != (ssize_t)sizeof(p.seed)) {
        }
    }
    if (p.nslots < nthreads) {
        fprintf(stderr, "ina-switch: --slots %u is fewer than --threads %u\n", p.nslots, nthreads);
        return 2;
    }
    struct serve_opts o = {.nthreads = nthreads, .threads_from = threads_from, .cores = cores,
                           .shm_from = shm_from, .listen_addr = addr, .listen_s = listen_s,
                           .port_file = port_file, .fault_rx_spec = fault_rx_spec,
                           .fault_tx_spec = fault_tx_spec, .quiet = quiet, .no_gso = no_gso,
                           .busy_poll_us = busy_poll_us, .busy_poll_from = busy_poll_from,
                           .drain_timeout_ms = drain_timeout_ms, .secret_file = secret_file,
                           .ebpf_iface = ebpf ? iface : NULL, .record_path = record_path,
                           .metrics_port_file = metrics_port_file};
    if (ina__daemon_metrics_addr(NAME, metrics_s, metrics_port_file, &o.metrics_addr,
                                 &o.metrics) != 0)
        return 2;
    if (secret_file) {
        int rc = ina__hmac_key_from_file(&p.secret, secret_file);
        if (rc != 0) {
            fprintf(stderr, "ina-switch: cannot use --secret-file %s: %s\n", secret_file,
                    rc == -EINVAL ? "empty or longer than 4096 bytes" : strerror(-rc));
            return 2;
        }
        p.has_secret = 1;
    }
    ina__log_setup(level, format);
    return serve(&p, &o);
}
