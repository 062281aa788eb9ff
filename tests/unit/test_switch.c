/* test_switch.c: ina-switch as a state machine: joins, slot rounds, hostile input, leave, timeouts. No sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "dtypes.h"
#include "common/h16.h"
#include "common/half_bits.h"
#include "common/sparse_wire.h"
#include "lib/quant.h"

#include "common/be32.h"
#include "common/log.h"
#include "engine/internal.h"

#define T_NSLOTS 16
#define T_MAX_ELEMS 8
#define T_JOIN_TIMEOUT 1000
#define T_IDLE_TIMEOUT 5000
#define T_MAX_WORLD 8

static struct ina_switch *sw;
static uint64_t now_ns;
static int open_int_ops_only; /* sw_open: the next switch has --int-ops-only */
static int open_shm;          /* sw_open: the next switch has --shm */
static int open_shm_unsealed; /* ... and --shm-unsealed */

/* ---- Setup ------------------------------------------------------------------ */

static void sw_open(uint64_t idle_timeout)
{
    struct ina_switch_params p;
    memset(&p, 0, sizeof(p));
    p.nslots = T_NSLOTS;
    p.max_elems = T_MAX_ELEMS;
    p.join_timeout_ns = T_JOIN_TIMEOUT;
    p.idle_timeout_ns = idle_timeout;
    p.int_ops_only = open_int_ops_only;
    p.shm = open_shm;
    p.shm_unsealed = open_shm_unsealed;
    sw = malloc(sizeof(*sw));
    CHECK(sw != NULL);
    if (!sw)
        exit(1);
    int rc = ina__switch_init(sw, &p);
    CHECK_EQ_INT(rc, 0);
    if (rc != 0)
        exit(1);
    now_ns = 1000000;
}

static void sw_close(void)
{
    ina__switch_free(sw);
    free(sw);
    sw = NULL;
}

static struct sockaddr_in addr_port(int port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    return a;
}

static void input(const uint8_t *b, size_t len, const struct sockaddr_in *src)
{
    ina__switch_input(sw, b, len, src, now_ns);
}

/* ---- Counter snapshots ---------------------------------------------------- */

/* Every drop counter equals the snapshot's, except `which` (if >= 0): +delta. */
static int drops_ok(const struct ina_sw_counters *snap, int which, uint64_t delta, int line)
{
    int ok = 1;
    for (int d = 0; d < INA_DROP__COUNT; d++) {
        uint64_t want = snap->drops[d] + (d == which ? delta : 0);
        if (sw->c.drops[d] != want) {
            fprintf(stderr, "line %d: drop_%s is %llu, want %llu\n", line,
                    ina__drop_name((enum ina_drop)d), (unsigned long long)sw->c.drops[d],
                    (unsigned long long)want);
            ok = 0;
        }
    }
    return ok;
}
#define EXPECT_DROP(snap, which) CHECK(drops_ok(&(snap), INA_DROP_##which, 1, __LINE__))
#define EXPECT_DROPS(snap, which, n) CHECK(drops_ok(&(snap), INA_DROP_##which, (n), __LINE__))
#define EXPECT_NO_DROP(snap) CHECK(drops_ok(&(snap), -1, 0, __LINE__))

/* ---- Reading what the switch queued ----------------------------------------- */

static int tx_n(void) { return (int)sw->txq.nmsg; }

static const uint8_t *tx_buf(int i, size_t *len)
{
    *len = sw->txq.iovs[i].iov_len;
    return sw->txq.iovs[i].iov_base;
}

/* Decode datagram i; returns the parse result. */
static int tx_hdr(int i, struct ina_hdr *h)
{
    size_t len;
    const uint8_t *b = tx_buf(i, &len);
    memset(h, 0, sizeof(*h));
    return ina__hdr_decode(b, len, h);
}

static int tx_to(int i, const struct sockaddr_in *a) { return ina__addr_eq(&sw->txq.addrs[i], a); }

static void tx_reset(void) { ina__txq_reset(&sw->txq); }

/* Datagram i is a control packet of kind with a body of bodylen bytes, from
 * the switch to dst. @return its body, or NULL if there is no datagram i. */
static const uint8_t *check_ctl(int i, uint8_t kind, size_t bodylen, const struct sockaddr_in *dst)
{
    struct ina_hdr h;
    size_t len;
    CHECK(i < tx_n());
    if (i >= tx_n())
        return NULL;
    const uint8_t *b = tx_buf(i, &len);
    CHECK_EQ_INT(tx_hdr(i, &h), INA_PARSE_OK);
    CHECK_EQ_INT(h.kind, kind);
    CHECK_EQ_INT(h.rank, INA_RANK_SWITCH);
    CHECK_EQ_INT(len, INA_HDR_LEN + bodylen);
    CHECK(tx_to(i, dst));
    return len == INA_HDR_LEN + bodylen ? b : NULL;
}

/* Datagram i is a JOIN_NAK (or ABORT) to dst, echoing nonce, with reason. */
static void check_nak_at(int line, int i, uint8_t kind, const struct sockaddr_in *dst,
                         uint64_t nonce, int reason)
{
    int before = check_failures;
    /* A JOIN_NAK REJECTED carries its cause in 4 more bytes (PROTOCOL.md §4.2). */
    size_t blen = kind == INA_K_JOIN_NAK && reason == INA_ERR_REJECTED ? INA_NAK_REJECTED_LEN
                                                                      : INA_NAK_BODY_LEN;
    const uint8_t *b = check_ctl(i, kind, blen, dst);
    if (!b)
        return;
    size_t len = INA_HDR_LEN + blen;
    uint64_t n = 1;
    int32_t r = 1;
    CHECK_EQ_INT(ina__nak_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &n, &r), INA_PARSE_OK);
    CHECK(n == nonce);
    CHECK_EQ_INT(r, reason);
    if (check_failures != before)
        fprintf(stderr, "  (check_nak called from line %d, datagram %d)\n", line, i);
}
#define CHECK_NAK(i, dst, nonce, reason) check_nak_at(__LINE__, i, INA_K_JOIN_NAK, dst, nonce, reason)
#define CHECK_ABORT(i, dst, reason) check_nak_at(__LINE__, i, INA_K_ABORT, dst, 0, reason)

/* Datagram i is an ABORT ABORTED to dst that says its cause (PROTOCOL.md §4.2): a
 * 28-byte body naming the rank and the address:port `at`. */
static void check_abort_cause_at(int line, int i, const struct sockaddr_in *dst, unsigned cause,
                                 unsigned rank, const struct sockaddr_in *at)
{
    int before = check_failures;
    const uint8_t *b = check_ctl(i, INA_K_ABORT, INA_ABORT_CAUSE_LEN, dst);
    if (b) {
        const uint8_t *body = b + INA_HDR_LEN;
        CHECK_EQ_INT((int32_t)ina__get32(body + 8), INA_ERR_ABORTED);
        CHECK_EQ_INT(body[INA_ABORT_CAUSE], cause);
        CHECK_EQ_INT(ina__get16(body + INA_ABORT_RANK), rank);
        CHECK(memcmp(body + INA_ABORT_ADDR, &at->sin_addr.s_addr, 4) == 0);
        CHECK_EQ_INT(ina__get16(body + INA_ABORT_PORT), ntohs(at->sin_port));
    }
    if (check_failures != before)
        fprintf(stderr, "  (check_abort_cause called from line %d, datagram %d)\n", line, i);
}
#define CHECK_ABORT_CAUSE(i, dst, cause, rank, at) \
    check_abort_cause_at(__LINE__, i, dst, cause, rank, at)

/* ---- Building packets ----------------------------------------------------- */

static size_t make_join(uint8_t *b, const char *name, int rank, int world, int elems,
                        uint32_t window, uint64_t nonce)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_JOIN);
    h.rank = (uint16_t)rank;
    ina__hdr_encode(b, &h);
    struct ina_join j;
    memset(&j, 0, sizeof(j));
    j.nonce = nonce;
    j.world_size = (uint16_t)world;
    j.elems = (uint16_t)elems;
    j.window = window;
    j.sw_version = INA_VERSION_NUMBER;
    snprintf(j.name, sizeof(j.name), "%s", name);
    ina__join_encode(b + INA_HDR_LEN, &j);
    return INA_HDR_LEN + INA_JOIN_BODY_LEN;
}

/* Remove the JOIN_WAIT answers from the queue (the tests of JOIN_WAIT look
 * at them; the others count only what they are about). @return how many. */
static int drop_join_waits(void)
{
    int kept = 0, dropped = 0;
    for (int i = 0; i < tx_n(); i++) {
        struct ina_hdr h;
        if (tx_hdr(i, &h) == INA_PARSE_OK && h.kind == INA_K_JOIN_WAIT) {
            dropped++;
            continue;
        }
        sw->txq.iovs[kept] = sw->txq.iovs[i];
        sw->txq.addrs[kept] = sw->txq.addrs[i];
        kept++;
    }
    sw->txq.nmsg = (unsigned)kept;
    return dropped;
}

static void send_join(const char *name, int rank, int world, int elems, uint32_t window,
                      uint64_t nonce, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, name, rank, world, elems, window, nonce);
    input(b, len, src);
    drop_join_waits();
}

/* What the workers of one job learned from their JOIN_ACKs. */
struct job_info {
    uint16_t job;
    uint32_t session, token;
    uint16_t elems;
    uint32_t window;
    int world;
    struct sockaddr_in addr[T_MAX_WORLD];
    uint64_t nonce[T_MAX_WORLD];
};

/*
 * Datagrams 0..world-1 of the queue are the JOIN_ACKs of job ji, in rank
 * order; fill ji's job/session/token from them and check the body.
 */
static void read_acks(int line, struct job_info *ji, const char *name, int elems, uint32_t window)
{
    int before = check_failures;
    CHECK_EQ_INT(tx_n(), ji->world);
    for (int r = 0; r < ji->world && r < tx_n(); r++) {
        struct ina_hdr h;
        size_t len;
        const uint8_t *b = tx_buf(r, &len);
        CHECK_EQ_INT(tx_hdr(r, &h), INA_PARSE_OK);
        CHECK_EQ_INT(h.kind, INA_K_JOIN_ACK);
        CHECK_EQ_INT(h.rank, INA_RANK_SWITCH);
        CHECK_EQ_INT(len, INA_HDR_LEN + INA_JOIN_BODY_LEN);
        CHECK(tx_to(r, &ji->addr[r]));
        CHECK(h.job >= 1 && h.job <= INA_SW_MAX_JOBS);
        CHECK(h.session != 0);
        if (r == 0) {
            ji->job = h.job;
            ji->session = h.session;
            ji->token = h.token;
        }
        CHECK_EQ_INT(h.job, ji->job);
        CHECK_EQ_INT(h.session, ji->session);
        CHECK_EQ_INT(h.token, ji->token);
        struct ina_join j = {0}; /* read below even if the decode failed */
        CHECK_EQ_INT(ina__join_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &j), INA_PARSE_OK);
        CHECK(j.nonce == ji->nonce[r]);
        CHECK_EQ_INT(j.world_size, ji->world);
        CHECK_EQ_INT(j.elems, elems);
        CHECK_EQ_INT(j.window, window);
        CHECK_EQ_INT(j.sw_version, INA_VERSION_NUMBER);
        CHECK(strcmp(j.name, name) == 0);
    }
    ji->elems = (uint16_t)elems;
    ji->window = window;
    if (check_failures != before)
        fprintf(stderr, "  (read_acks called from line %d)\n", line);
}

/* All ranks of a job join with the same proposal; ranks at ports port0 + rank. */
static struct job_info start_job_at(int line, const char *name, int world, int elems,
                                    uint32_t window, int port0, uint64_t nonce0)
{
    struct job_info ji;
    memset(&ji, 0, sizeof(ji));
    ji.world = world;
    tx_reset();
    for (int r = 0; r < world; r++) {
        ji.addr[r] = addr_port(port0 + r);
        ji.nonce[r] = nonce0 + (uint64_t)r;
        send_join(name, r, world, elems, window, ji.nonce[r], &ji.addr[r]);
    }
    read_acks(line, &ji, name, elems, window);
    tx_reset();
    return ji;
}
#define START_JOB(name, world, elems, window, port0, nonce0) \
    start_job_at(__LINE__, name, world, elems, window, port0, nonce0)

/* A DATA header of rank `rank` of job ji. */
static struct ina_hdr data_hdr(const struct job_info *ji, int rank, uint32_t idx, unsigned set,
                               uint32_t seq, unsigned count, int16_t exp)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_DATA);
    h.job = ji->job;
    h.rank = (uint16_t)rank;
    h.session = ji->session;
    h.token = ji->token;
    h.slot = idx | (set ? INA_SLOT_SET_BIT : 0);
    h.seq = seq;
    h.count = (uint16_t)count;
    h.exp = exp;
    h.op = INA_OP_ADD_I32;
    return h;
}

/* Header h followed by h->count big-endian values (vals may be NULL: zeros). */
static size_t build(uint8_t *b, const struct ina_hdr *h, const int32_t *vals)
{
    ina__hdr_encode(b, h);
    for (unsigned i = 0; i < h->count; i++)
        ina__put32(b + INA_HDR_LEN + 4 * i, vals ? (uint32_t)vals[i] : 0);
    return INA_HDR_LEN + 4 * (size_t)h->count;
}

#define PKT_MAX (INA_HDR_LEN + 4 * 64)

/* Rank `rank` of ji sends one DATA from its registered address. */
static void send_data(const struct job_info *ji, int rank, uint32_t idx, unsigned set, uint32_t seq,
                      unsigned count, int16_t exp, const int32_t *vals)
{
    uint8_t b[PKT_MAX];
    struct ina_hdr h = data_hdr(ji, rank, idx, set, seq, count, exp);
    size_t len = build(b, &h, vals);
    input(b, len, &ji->addr[rank]);
}

/* Send a prepared header (possibly tampered) with values from src. */
static void send_hdr(const struct ina_hdr *h, const int32_t *vals, const struct sockaddr_in *src)
{
    uint8_t b[PKT_MAX];
    size_t len = build(b, h, vals);
    input(b, len, src);
}

static int32_t wadd(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }

/* The op byte every RESULT checked by CHECK_RESULT must carry (test_slot_ops changes it). */
static uint8_t result_op = INA_OP_ADD_I32;

/* As send_data, with wire op `op`. */
static void send_data_op(const struct job_info *ji, int rank, uint32_t idx, unsigned set,
                         uint32_t seq, unsigned count, uint8_t op, const int32_t *vals)
{
    uint8_t b[PKT_MAX];
    struct ina_hdr h = data_hdr(ji, rank, idx, set, seq, count, 0);
    h.op = op;
    input(b, build(b, &h, vals), &ji->addr[rank]);
}

/* Datagram i is the RESULT of (idx, set, seq) of job ji, to dst, with these values. */
static void check_result_at(int line, int i, const struct job_info *ji, const struct sockaddr_in *dst,
                            uint32_t idx, unsigned set, uint32_t seq, unsigned count, int16_t exp,
                            const int32_t *want)
{
    int before = check_failures;
    CHECK(i < tx_n());
    if (i < tx_n()) {
        struct ina_hdr h;
        size_t len;
        const uint8_t *b = tx_buf(i, &len);
        CHECK_EQ_INT(tx_hdr(i, &h), INA_PARSE_OK);
        CHECK_EQ_INT(h.kind, INA_K_RESULT);
        CHECK_EQ_INT(h.job, ji->job);
        CHECK_EQ_INT(h.rank, INA_RANK_SWITCH);
        CHECK_EQ_INT(h.session, ji->session);
        CHECK_EQ_INT(h.token, ji->token);
        CHECK_EQ_INT(h.slot, idx | (set ? INA_SLOT_SET_BIT : 0));
        CHECK_EQ_INT(h.seq, seq);
        CHECK_EQ_INT(h.count, count);
        CHECK_EQ_INT(h.exp, exp);
        CHECK_EQ_INT(h.flags, 0);
        CHECK_EQ_INT(h.op, result_op);
        CHECK_EQ_INT(len, INA_HDR_LEN + 4 * (size_t)count);
        CHECK(tx_to(i, dst));
        for (unsigned k = 0; k < count && INA_HDR_LEN + 4 * k + 4 <= len; k++)
            CHECK_EQ_INT((int32_t)ina__get32(b + INA_HDR_LEN + 4 * k), want[k]);
    }
    if (check_failures != before)
        fprintf(stderr, "  (check_result called from line %d, datagram %d)\n", line, i);
}
#define CHECK_RESULT(i, ji, dst, idx, set, seq, count, exp, want) \
    check_result_at(__LINE__, i, ji, dst, idx, set, seq, count, exp, want)

/* The whole queue is one RESULT multicast to every member of ji. */
#define CHECK_MULTICAST(ji, idx, set, seq, count, exp, want)                          \
    do {                                                                              \
        CHECK_EQ_INT(tx_n(), (ji)->world);                                            \
        for (int r_ = 0; r_ < (ji)->world; r_++)                                      \
            CHECK_RESULT(r_, ji, &(ji)->addr[r_], idx, set, seq, count, exp, want);   \
    } while (0)

static struct ina_job *job_named(const char *name)
{
    for (int i = 0; i < INA_SW_MAX_JOBS; i++)
        if (sw->jobs[i].state != INA_JOB_FREE && strcmp(sw->jobs[i].name, name) == 0)
            return &sw->jobs[i];
    return NULL;
}

static int owned_slots(uint16_t job)
{
    int n = 0;
    for (uint32_t i = 0; i < T_NSLOTS; i++)
        n += sw->slot_owner[i] == job;
    return n;
}

/* ---- Join --------------------------------------------------------------------- */

static void test_join_basic(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct ina_sw_counters snap = sw->c;

    /* Three ranks propose different elems and windows: the job takes the minimum of each. */
    const int elems[3] = {8, 5, 7};
    const uint32_t windows[3] = {4, 8, 2};
    struct job_info ji;
    memset(&ji, 0, sizeof(ji));
    ji.world = 3;
    for (int r = 0; r < 3; r++) {
        ji.addr[r] = addr_port(10000 + r);
        ji.nonce[r] = 0x1111000000000000ull + (uint64_t)r;
    }
    /* Out of rank order on purpose. */
    send_join("job-a", 2, 3, elems[2], windows[2], ji.nonce[2], &ji.addr[2]);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK(job_named("job-a") != NULL && job_named("job-a")->state == INA_JOB_JOINING);
    send_join("job-a", 0, 3, elems[0], windows[0], ji.nonce[0], &ji.addr[0]);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.jobs_started, 0);
    /* The same rank again while joining (lost JOIN, retransmitted): still waiting. */
    send_join("job-a", 0, 3, elems[0], windows[0], ji.nonce[0], &ji.addr[0]);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(job_named("job-a")->njoined, 2);
    send_join("job-a", 1, 3, elems[1], windows[1], ji.nonce[1], &ji.addr[1]);
    CHECK_EQ_INT(sw->c.jobs_started, 1);
    read_acks(__LINE__, &ji, "job-a", 5, 2);
    EXPECT_NO_DROP(snap);
    struct ina_job *job = job_named("job-a");
    CHECK(job != NULL && job->state == INA_JOB_ACTIVE);
    if (job) {
        CHECK_EQ_INT(job->id, ji.job);
        CHECK_EQ_INT(owned_slots(ji.job), 2);
    }
    tx_reset();

    /* The job works: a round completes with the agreed size. */
    const int32_t v[5] = {1, 2, 3, 4, 5};
    const int32_t s3[5] = {3, 6, 9, 12, 15};
    for (int r = 0; r < 3; r++)
        send_data(&ji, r, 1, 0, 0, 5, 0, v);
    CHECK_MULTICAST(&ji, 1, 0, 0, 5, 0, s3);
    tx_reset();

    /* Lost ACK: the same rank, same nonce, same address -> ACK again, same session. */
    snap = sw->c;
    send_join("job-a", 1, 3, elems[1], windows[1], ji.nonce[1], &ji.addr[1]);
    CHECK_EQ_INT(tx_n(), 1);
    {
        struct ina_hdr h;
        size_t len;
        const uint8_t *b = tx_buf(0, &len);
        CHECK_EQ_INT(tx_hdr(0, &h), INA_PARSE_OK);
        CHECK_EQ_INT(h.kind, INA_K_JOIN_ACK);
        CHECK_EQ_INT(h.job, ji.job);
        CHECK_EQ_INT(h.session, ji.session);
        CHECK_EQ_INT(h.token, ji.token);
        CHECK(tx_to(0, &ji.addr[1]));
        struct ina_join j;
        CHECK_EQ_INT(ina__join_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &j), 0);
        CHECK(j.nonce == ji.nonce[1]);
        CHECK_EQ_INT(j.elems, 5);
        CHECK_EQ_INT(j.window, 2);
    }
    CHECK_EQ_INT(sw->c.jobs_started, 1);
    CHECK_EQ_INT(sw->c.jobs_aborted, 0);
    EXPECT_NO_DROP(snap);
    tx_reset();
    /* ...and the slot state survived: a duplicate is answered from the finished round. */
    send_data(&ji, 0, 1, 0, 0, 5, 0, v);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_RESULT(0, &ji, &ji.addr[0], 1, 0, 0, 5, 0, s3);
    tx_reset();

    /* A second job alongside gets another id, session and slots. */
    struct job_info jb = START_JOB("job-b", 2, 8, 4, 20000, 0x2222000000000000ull);
    CHECK(jb.job != ji.job);
    CHECK(jb.session != ji.session);
    CHECK_EQ_INT(owned_slots(jb.job), 4);
    CHECK_EQ_INT(sw->c.jobs_started, 2);

    /* A world of one starts at once. */
    struct job_info j1 = START_JOB("solo", 1, 3, 1, 30000, 77);
    CHECK(j1.job != 0);
    const int32_t one[3] = {-1, 0, 1};
    send_data(&j1, 0, 0, 0, 0, 3, -4, one);
    CHECK_MULTICAST(&j1, 0, 0, 0, 3, -4, one);
    tx_reset();
    sw_close();
}

static void test_join_refused(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct sockaddr_in a = addr_port(10000);
    struct ina_sw_counters snap;

    /* Bad parameters: each is NAKed REJECTED, echoing the nonce, and counted. */
    const struct {
        const char *name;
        int rank, world, elems;
        uint32_t window;
    } bad[] = {
        {"x", 0, 0, 4, 2},                     /* world 0 */
        {"x", 3, 3, 4, 2},                     /* rank == world */
        {"x", 9, 3, 4, 2},                     /* rank > world */
        {"x", 0, INA_MAX_WORKERS + 1, 4, 2},   /* world too large */
        {"x", 0, 3, 4, 3},                     /* window not a power of 2 */
        {"x", 0, 3, 4, 6},                     /* window not a power of 2 */
        {"x", 0, 3, 4, 0},                     /* window 0 */
        {"x", 0, 3, INA_MAX_ELEMS + 1, 2},     /* elems beyond any datagram */
        {"x", 0, 3, 0, 2},                     /* elems 0 */
        {"", 0, 3, 4, 2},                      /* empty name */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snap = sw->c;
        uint64_t nonce = 0xABCD000000000000ull + i;
        send_join(bad[i].name, bad[i].rank, bad[i].world, bad[i].elems, bad[i].window, nonce, &a);
        CHECK_EQ_INT(tx_n(), 1);
        CHECK_NAK(0, &a, nonce, INA_ERR_REJECTED);
        EXPECT_DROP(snap, JOIN);
        CHECK(job_named("x") == NULL);
        if (tx_n() != 1 || sw->c.drops[INA_DROP_JOIN] != snap.drops[INA_DROP_JOIN] + 1)
            fprintf(stderr, "  (bad join case %zu)\n", i);
        tx_reset();
    }
    /* Boundary values that are fine: window == pool, elems == max, world == 1. */
    snap = sw->c;
    send_join("edge", 0, 1, T_MAX_ELEMS, T_NSLOTS, 5, &a);
    CHECK_EQ_INT(tx_n(), 1);
    {
        struct ina_hdr h;
        CHECK_EQ_INT(tx_hdr(0, &h), INA_PARSE_OK);
        CHECK_EQ_INT(h.kind, INA_K_JOIN_ACK);
    }
    EXPECT_NO_DROP(snap);
    CHECK_EQ_INT(owned_slots(job_named("edge") ? job_named("edge")->id : 0), T_NSLOTS);
    tx_reset();

    /* Proposals above the switch's limits are capped, not refused: a window
     * larger than the pool gets the largest power of two that fits (the whole
     * free pool here, after "edge" leaves), elems > max_elems gets max_elems. */
    {
        struct ina_job *edge = job_named("edge");
        CHECK(edge != NULL);
        if (edge) {
            struct ina_hdr lh;
            ina__hdr_init(&lh, INA_K_LEAVE);
            lh.job = edge->id;
            lh.session = edge->session;
            lh.token = edge->token;
            lh.rank = 0;
            uint8_t lb[INA_HDR_LEN];
            ina__hdr_encode(lb, &lh);
            input(lb, sizeof(lb), &a);
            CHECK(job_named("edge") == NULL);
        }
        snap = sw->c;
        send_join("capped", 0, 1, T_MAX_ELEMS + 1, 0x80000000u, 6, &a);
        CHECK_EQ_INT(tx_n(), 1);
        struct ina_hdr h;
        struct ina_join j;
        CHECK_EQ_INT(tx_hdr(0, &h), INA_PARSE_OK);
        CHECK_EQ_INT(h.kind, INA_K_JOIN_ACK);
        CHECK_EQ_INT(ina__join_decode((const uint8_t *)sw->txq.iovs[0].iov_base + INA_HDR_LEN,
                                     sw->txq.iovs[0].iov_len - INA_HDR_LEN, &j),
                     INA_PARSE_OK);
        CHECK_EQ_INT(j.window, T_NSLOTS);
        CHECK_EQ_INT(j.elems, T_MAX_ELEMS);
        EXPECT_NO_DROP(snap);
        tx_reset();
    }

    /* Malformed JOIN bodies: dropped without an answer. */
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, "y", 0, 2, 4, 2, 9);
    for (size_t l = INA_HDR_LEN; l < len; l += 7) {
        snap = sw->c;
        input(b, l, &a);
        CHECK_EQ_INT(tx_n(), 0);
        EXPECT_DROP(snap, JOIN);
    }
    memset(b + INA_HDR_LEN + 32, 'n', 32); /* name without NUL */
    snap = sw->c;
    input(b, len, &a);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, JOIN);
    CHECK(job_named("y") == NULL);

    /* A JOIN from another protocol version gets a PROTO NAK (counted once, as VERSION). */
    len = make_join(b, "y", 0, 2, 4, 2, 0x5151);
    b[2] = INA_WIRE_VERSION + 1;
    snap = sw->c;
    input(b, len, &a);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &a, 0x5151, INA_ERR_PROTO);
    EXPECT_DROP(snap, VERSION);
    CHECK(job_named("y") == NULL);
    tx_reset();
    /* Same, but its body is short: it still holds the nonce (8 bytes), so it is
     * answered; still one drop, not two (counters.h: "Every drop increments exactly one."). */
    snap = sw->c;
    input(b, INA_HDR_LEN + 10, &a);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &a, 0x5151, INA_ERR_PROTO);
    EXPECT_DROP(snap, VERSION);
    tx_reset();
    /* Too short even for the nonce: no answer possible, one drop. */
    snap = sw->c;
    input(b, INA_HDR_LEN + 4, &a);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, VERSION);
    tx_reset();

    /* Other kinds the switch never receives: KIND. */
    const uint8_t kinds[] = {INA_K_RESULT, INA_K_JOIN_ACK, INA_K_JOIN_NAK, INA_K_ABORT, 0, 3, 99, 255};
    for (size_t i = 0; i < sizeof(kinds); i++) {
        struct ina_hdr h;
        ina__hdr_init(&h, kinds[i]);
        uint8_t kb[INA_HDR_LEN + 16];
        memset(kb, 0, sizeof(kb));
        ina__hdr_encode(kb, &h);
        snap = sw->c;
        input(kb, sizeof(kb) - (kinds[i] == INA_K_RESULT ? 16 : 0), &a);
        CHECK_EQ_INT(tx_n(), 0);
        EXPECT_DROP(snap, KIND);
    }
    sw_close();
}

static void test_join_mismatch_and_rejoin(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct ina_sw_counters snap;
    struct sockaddr_in stranger = addr_port(40000);

    /* World mismatch against a JOINING job: the job cannot run, so the
     * newcomer and every registered rank are told MISMATCH, each with the
     * other side's world size, and the job is freed. */
    struct sockaddr_in w0 = addr_port(11000);
    send_join("pending", 0, 2, 4, 2, 1, &w0);
    snap = sw->c;
    send_join("pending", 1, 3, 4, 2, 0x77, &stranger);
    CHECK_EQ_INT(tx_n(), 2);
    CHECK_NAK(0, &stranger, 0x77, INA_ERR_MISMATCH);
    CHECK_NAK(1, &w0, 1, INA_ERR_MISMATCH);
    size_t nl;
    CHECK_EQ_INT(ina__get16(tx_buf(0, &nl) + INA_HDR_LEN + INA_NAK_MISMATCH_WORLD), 2);
    CHECK_EQ_INT(ina__get16(tx_buf(1, &nl) + INA_HDR_LEN + INA_NAK_MISMATCH_WORLD), 3);
    EXPECT_DROP(snap, JOIN);
    CHECK(job_named("pending") == NULL);
    tx_reset();
    /* A rank that joins the name shortly after is told at once, too. */
    struct sockaddr_in w2 = addr_port(11002);
    send_join("pending", 2, 3, 4, 2, 0x78, &w2);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &w2, 0x78, INA_ERR_MISMATCH);
    CHECK(job_named("pending") == NULL);
    tx_reset();
    /* ... but not once the memory has passed: a corrected job starts. */
    now_ns += INA_SW_MISMATCH_NS;
    send_join("pending", 0, 1, 4, 2, 0x79, &w0);
    CHECK_EQ_INT(tx_n(), 1);
    struct ina_hdr ph;
    CHECK_EQ_INT(tx_hdr(0, &ph), INA_PARSE_OK);
    CHECK_EQ_INT(ph.kind, INA_K_JOIN_ACK);
    tx_reset();

    /* World mismatch against an ACTIVE job: NAK, the job is untouched. */
    struct job_info ji = START_JOB("job", 3, 4, 4, 10000, 0x100);
    snap = sw->c;
    send_join("job", 0, 4, 4, 4, 0x999, &stranger);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &stranger, 0x999, INA_ERR_MISMATCH);
    EXPECT_DROP(snap, JOIN);
    CHECK_EQ_INT(sw->c.jobs_aborted, 0);
    CHECK(job_named("job") != NULL && job_named("job")->session == ji.session);
    tx_reset();

    /* Round 0 of slot 0 half done before the re-join. */
    const int32_t v[4] = {10, 20, 30, 40};
    send_data(&ji, 0, 0, 0, 0, 4, 0, v);
    CHECK_EQ_INT(tx_n(), 0);

    /* Rank 1 restarts (new nonce): the session is aborted, ABORT to every member. */
    snap = sw->c;
    uint64_t started = sw->c.jobs_started;
    send_join("job", 1, 3, 4, 4, 0xBEEF, &ji.addr[1]);
    CHECK_EQ_INT(sw->c.jobs_aborted, 1);
    CHECK_EQ_INT(tx_n(), 3);
    for (int r = 0; r < 3 && r < tx_n(); r++) {
        /* ...saying who took which rank, from where (cause rank_taken, §4.2) */
        CHECK_ABORT_CAUSE(r, &ji.addr[r], INA_ABORT_RANK_TAKEN, 1, &ji.addr[1]);
        struct ina_hdr h;
        CHECK_EQ_INT(tx_hdr(r, &h), INA_PARSE_OK);
        CHECK_EQ_INT(h.job, ji.job);
        CHECK_EQ_INT(h.session, ji.session); /* the session that ended */
        CHECK_EQ_INT(h.token, ji.token);
    }
    EXPECT_NO_DROP(snap);
    CHECK_EQ_INT(sw->c.jobs_started, started);
    struct ina_job *job = job_named("job");
    CHECK(job != NULL && job->state == INA_JOB_JOINING && job->njoined == 1);
    CHECK_EQ_INT(owned_slots(ji.job), 0);
    tx_reset();

    /* Old-session DATA: the job is not active -> NO_JOB. */
    snap = sw->c;
    send_data(&ji, 2, 0, 0, 0, 4, 0, v);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, NO_JOB);

    /* The other ranks re-join (new nonces too): a new session starts. */
    struct job_info jn = ji;
    jn.nonce[0] = 0xBEEE;
    jn.nonce[1] = 0xBEEF;
    jn.nonce[2] = 0xBEF0;
    send_join("job", 0, 3, 4, 4, jn.nonce[0], &jn.addr[0]);
    CHECK_EQ_INT(tx_n(), 0);
    send_join("job", 2, 3, 4, 4, jn.nonce[2], &jn.addr[2]);
    read_acks(__LINE__, &jn, "job", 4, 4);
    CHECK(jn.session != ji.session);
    CHECK_EQ_INT(sw->c.jobs_started, started + 1);
    tx_reset();

    /* Old-session DATA now: SESSION, and it does not touch the new round. */
    snap = sw->c;
    send_data(&ji, 2, 0, 0, 0, 4, 0, v);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, SESSION);
    const int32_t w[4] = {1, 1, 1, 1};
    const int32_t w3[4] = {3, 3, 3, 3};
    snap = sw->c;
    for (int r = 0; r < 3; r++) {
        CHECK_EQ_INT(tx_n(), 0);
        send_data(&jn, r, 0, 0, 0, 4, 0, w);
    }
    CHECK_MULTICAST(&jn, 0, 0, 0, 4, 0, w3);
    EXPECT_NO_DROP(snap);
    tx_reset();

    /* Same nonce from another address is a new incarnation too. */
    struct sockaddr_in moved = addr_port(10099);
    send_join("job", 0, 3, 4, 4, jn.nonce[0], &moved);
    CHECK_EQ_INT(sw->c.jobs_aborted, 2);
    CHECK_EQ_INT(tx_n(), 3);
    for (int r = 0; r < 3 && r < tx_n(); r++)
        CHECK_ABORT_CAUSE(r, &jn.addr[r], INA_ABORT_RANK_TAKEN, 0, &moved);
    tx_reset();

    /* A stranger on another host cannot end a running job by naming it. */
    struct job_info jm = START_JOB("guarded", 2, 4, 2, 10200, 0x300);
    struct sockaddr_in far = addr_port(10201);
    far.sin_addr.s_addr = htonl(0x7F000002); /* 127.0.0.2: another host */
    snap = sw->c;
    uint64_t aborted = sw->c.jobs_aborted;
    send_join("guarded", 1, 2, 4, 2, 0xDEAD, &far);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &far, 0xDEAD, INA_ERR_REJECTED);
    EXPECT_DROP(snap, JOIN);
    CHECK_EQ_INT(sw->c.jobs_aborted, aborted);
    CHECK(job_named("guarded") != NULL && job_named("guarded")->session == jm.session);
    tx_reset();
    sw_close();
}

static void test_join_nospace(void)
{
    sw_open(T_IDLE_TIMEOUT);

    /* Two jobs of 8 fill the pool of 16. */
    struct job_info ja = START_JOB("a", 2, 4, 8, 10000, 0xA0);
    struct job_info jb = START_JOB("b", 2, 4, 8, 11000, 0xB0);
    CHECK_EQ_INT(owned_slots(ja.job), 8);
    CHECK_EQ_INT(owned_slots(jb.job), 8);

    /* A third needs one slot: every member is NAKed NOSPACE with its own nonce. */
    struct sockaddr_in c0 = addr_port(12000), c1 = addr_port(12001);
    send_join("c", 0, 2, 4, 1, 0xC0, &c0);
    CHECK_EQ_INT(tx_n(), 0);
    send_join("c", 1, 2, 4, 1, 0xC1, &c1);
    CHECK_EQ_INT(tx_n(), 2);
    /* Members are NAKed in rank order. */
    CHECK_NAK(0, &c0, 0xC0, INA_ERR_NOSPACE);
    CHECK_NAK(1, &c1, 0xC1, INA_ERR_NOSPACE);
    CHECK(job_named("c") == NULL);
    CHECK_EQ_INT(sw->c.jobs_started, 2);
    CHECK_EQ_INT(owned_slots(ja.job), 8);
    CHECK_EQ_INT(owned_slots(jb.job), 8);
    CHECK_EQ_INT(owned_slots(0), 0);
    tx_reset();

    /* Rank 0's NAK was lost: its retried JOIN (same nonce) gets the NAK again,
     * and no new job is started that could never fill. */
    send_join("c", 0, 2, 4, 1, 0xC0, &c0);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &c0, 0xC0, INA_ERR_NOSPACE);
    CHECK(job_named("c") == NULL);
    CHECK_EQ_INT(sw->c.jobs_refused, 1);
    tx_reset();
    /* A new incarnation (another nonce) is a new job, as ever. After the
     * memory's 5 s the old nonce is refused for good (§5.2 step 3‴): the
     * refused job's JOINs, replayed, start nothing. */
    send_join("c", 0, 2, 4, 1, 0xC2, &c0);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK(job_named("c") != NULL);
    now_ns += INA_SW_REFUSED_NS;
    send_join("c", 0, 2, 4, 1, 0xC2, &c0); /* rank 0 re-sends its JOIN, as a waiting rank does */
    CHECK_EQ_INT(tx_n(), 0);
    send_join("c", 1, 2, 4, 1, 0xC1, &c1); /* the refused job's nonce: not registered */
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &c1, 0xC1, INA_ERR_REJECTED);
    CHECK_EQ_INT(sw->c.joins_replayed, 1);
    CHECK_EQ_INT(job_named("c")->njoined, 1);
    tx_reset();
    send_join("c", 1, 2, 4, 1, 0xC3, &c1); /* completes the new job: refused again */
    CHECK_EQ_INT(tx_n(), 2);
    CHECK_EQ_INT(sw->c.jobs_refused, 2);
    tx_reset();
    now_ns += INA_SW_REFUSED_NS + 1;
    send_join("c", 1, 2, 4, 1, 0xC4, &c1); /* long after: a new JOINING job */
    CHECK_EQ_INT(tx_n(), 0);
    CHECK(job_named("c") != NULL);
    tx_reset();

    /* Job a still works after the refusal. */
    const int32_t v[4] = {5, 6, 7, 8};
    const int32_t s[4] = {10, 12, 14, 16};
    send_data(&ja, 0, 7, 0, 0, 4, 1, v);
    send_data(&ja, 1, 7, 0, 0, 4, 2, v);
    CHECK_MULTICAST(&ja, 7, 0, 0, 4, 2, s);
    tx_reset();

    /* Job a leaves; now 8 are free: a window of 16 still does not fit, 8 does. */
    for (int r = 0; r < 2; r++) {
        struct ina_hdr h;
        ina__hdr_init(&h, INA_K_LEAVE);
        h.job = ja.job;
        h.rank = (uint16_t)r;
        h.session = ja.session;
        h.token = ja.token;
        uint8_t b[INA_HDR_LEN];
        ina__hdr_encode(b, &h);
        input(b, sizeof(b), &ja.addr[r]);
    }
    CHECK_EQ_INT(sw->c.jobs_ended, 1);
    CHECK_EQ_INT(owned_slots(0), 8);
    send_join("d", 0, 1, 4, 16, 0xD0, &c0);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &c0, 0xD0, INA_ERR_NOSPACE);
    tx_reset();
    struct job_info je = START_JOB("e", 1, 4, 8, 13000, 0xE0);
    CHECK_EQ_INT(owned_slots(je.job), 8);
    CHECK_EQ_INT(owned_slots(0), 0);
    sw_close();
}

/* ---- Admission policy ------------------------------------------------------------ */

static void send_leave(const struct job_info *ji, int rank, const struct sockaddr_in *src,
                       uint32_t token_xor, uint32_t session_xor);

/* A one-rank job proposing `proposed` slots; it must be admitted with `granted`. */
static struct job_info join_granted(int line, const char *name, uint32_t proposed,
                                    uint32_t granted, int port, uint64_t nonce)
{
    struct job_info ji;
    memset(&ji, 0, sizeof(ji));
    ji.world = 1;
    ji.addr[0] = addr_port(port);
    ji.nonce[0] = nonce;
    tx_reset();
    send_join(name, 0, 1, 4, proposed, nonce, &ji.addr[0]);
    read_acks(line, &ji, name, 4, granted);
    tx_reset();
    return ji;
}

/* A one-rank JOIN that allows a wait of wait_100ms x 100 ms for slots. */
static void send_join_wait(const char *name, uint32_t window, uint16_t wait_100ms,
                           uint64_t nonce, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, name, 0, 1, 4, window, nonce);
    ina__put16(b + INA_HDR_LEN + 30, wait_100ms);
    input(b, len, src);
    drop_join_waits();
}

/*
 * The policy of PROTOCOL.md §5.3 on a pool of 16: a proposal is capped at
 * max_job_slots, halved while no contiguous run is free down to
 * min_job_slots, else refused with NOSPACE; a job that allows a wait is held
 * (no reply) and started when slots are freed, or refused at its deadline.
 */
static void test_admission(void)
{
    sw_open(0); /* no idle timeout: the ticks below are for the waiting jobs */
    sw->p.max_job_slots = 8;
    sw->p.min_job_slots = 2;
    struct job_info a = join_granted(__LINE__, "cap", 16, 8, 14000, 0xA1); /* capped */
    CHECK_EQ_INT(sw->c.jobs_shrunk, 0);
    struct job_info b = join_granted(__LINE__, "fit", 4, 4, 14001, 0xB1);
    join_granted(__LINE__, "shrunk", 8, 4, 14002, 0xC1); /* only 4 free in a row */
    CHECK_EQ_INT(sw->c.jobs_shrunk, 1);
    CHECK_EQ_INT(owned_slots(0), 0);

    /* Full: refused at once... */
    struct sockaddr_in d0 = addr_port(14003), e0 = addr_port(14004), f0 = addr_port(14005);
    send_join("full", 0, 1, 4, 2, 0xD1, &d0);
    CHECK_NAK(0, &d0, 0xD1, INA_ERR_NOSPACE);
    CHECK_EQ_INT(sw->c.jobs_refused, 1);
    tx_reset();
    /* ...or held, when the JOIN allows a wait: no reply meanwhile. */
    send_join_wait("waits", 4, 10, 0xE1, &e0); /* 1 s */
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.jobs_waited, 1);
    CHECK_EQ_INT(job_named("waits")->state, INA_JOB_WAITING);
    send_join_wait("late", 4, 1, 0xF1, &f0); /* 100 ms */
    CHECK_EQ_INT(tx_n(), 0);

    /* 150 ms on, "late" has waited long enough: NOSPACE at the next tick. */
    now_ns += 150000000ull;
    ina__switch_tick(sw, now_ns);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_NAK(0, &f0, 0xF1, INA_ERR_NOSPACE);
    CHECK(job_named("late") == NULL);
    tx_reset();

    /* "fit" leaves: its 4 slots go to the waiting job, which gets its ACK now. */
    send_leave(&b, 0, &b.addr[0], 0, 0);
    CHECK_EQ_INT(tx_n(), 1);
    struct ina_hdr h;
    CHECK_EQ_INT(tx_hdr(0, &h), INA_PARSE_OK);
    CHECK_EQ_INT(h.kind, INA_K_JOIN_ACK);
    CHECK(tx_to(0, &e0));
    CHECK_EQ_INT(job_named("waits")->state, INA_JOB_ACTIVE);
    CHECK_EQ_INT(job_named("waits")->window, 4);
    CHECK_EQ_INT(owned_slots(a.job), 8);
    sw_close();
}

/* ---- Slots ----------------------------------------------------------------------- */

static void test_slot_rounds(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct ina_sw_counters snap;
    /* elems: 8 proposed by two ranks, 6 by one -> 6 agreed (below max_elems 8). */
    struct job_info ji;
    memset(&ji, 0, sizeof(ji));
    ji.world = 3;
    const int prop[3] = {8, 6, 8};
    for (int r = 0; r < 3; r++) {
        ji.addr[r] = addr_port(10000 + r);
        ji.nonce[r] = 100 + (uint64_t)r;
        send_join("rounds", r, 3, prop[r], 4, ji.nonce[r], &ji.addr[r]);
    }
    read_acks(__LINE__, &ji, "rounds", 6, 4);
    tx_reset();

    /* ---- Round 0, slot 0, set 0: wrapping sums, exp = max (negatives). */
    const int32_t a0[6] = {INT32_MAX, INT32_MIN, -1, 0, 1, 0x40000000};
    const int32_t a1[6] = {1, -1, -1, 7, 2, 0x40000000};
    const int32_t a2[6] = {1, INT32_MIN, INT32_MIN, -7, -3, 0x40000000};
    int32_t sum0[6];
    for (int k = 0; k < 6; k++)
        sum0[k] = wadd(wadd(a0[k], a1[k]), a2[k]);
    CHECK_EQ_INT(sum0[0], INT32_MIN + 1); /* MAX + 1 + 1 wraps */
    CHECK_EQ_INT(sum0[1], -1);            /* MIN - 1 wraps to MAX, + MIN = -1 */
    CHECK_EQ_INT(sum0[5], (int32_t)0xC0000000u);

    snap = sw->c;
    send_data(&ji, 0, 0, 0, 0, 6, -9, a0);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.contributions, 1);
    send_data(&ji, 1, 0, 0, 0, 6, -3, a1);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.contributions, 2);
    EXPECT_NO_DROP(snap);

    /* Duplicate of rank 0 before completion: dropped, not added. */
    snap = sw->c;
    send_data(&ji, 0, 0, 0, 0, 6, 100, a0);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, DUP_PENDING);
    CHECK_EQ_INT(sw->c.contributions, 2);

    /* Rank 2 completes: one RESULT to each member. */
    snap = sw->c;
    send_data(&ji, 2, 0, 0, 0, 6, -20, a2);
    CHECK_MULTICAST(&ji, 0, 0, 0, 6, -3, sum0);
    CHECK_EQ_INT(sw->c.completions, 1);
    CHECK_EQ_INT(sw->c.contributions, 3);
    EXPECT_NO_DROP(snap);
    /* One buffer shared by the three destinations. */
    CHECK_EQ_INT(sw->txq.nbuf, 1);
    CHECK(sw->txq.iovs[0].iov_base == sw->txq.iovs[2].iov_base);
    tx_reset();

    /* Duplicate after completion: unicast to that rank only. */
    snap = sw->c;
    send_data(&ji, 1, 0, 0, 0, 6, -3, a1);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_RESULT(0, &ji, &ji.addr[1], 0, 0, 0, 6, -3, sum0);
    CHECK_EQ_INT(sw->c.results_resent, 1);
    CHECK_EQ_INT(sw->c.completions, 1);
    CHECK_EQ_INT(sw->c.contributions, 3);
    EXPECT_NO_DROP(snap);
    tx_reset();

    /* ---- Round 1 of slot 0 goes to set 1, with fewer elements and a zero-block exp. */
    const int32_t b0[3] = {1, 2, 3}, b1[3] = {10, 20, 30}, b2[3] = {100, 200, 300};
    const int32_t sum1[3] = {111, 222, 333};
    snap = sw->c;
    send_data(&ji, 2, 0, 1, 1, 3, INA_EXP_ZERO, b2);
    send_data(&ji, 0, 0, 1, 1, 3, 4, b0);
    CHECK_EQ_INT(tx_n(), 0);
    send_data(&ji, 1, 0, 1, 1, 3, INA_EXP_ZERO, b1);
    CHECK_MULTICAST(&ji, 0, 1, 1, 3, 4, sum1);
    EXPECT_NO_DROP(snap);
    tx_reset();
    /* Round 0's result is still there in set 0 (the shadow copy). */
    send_data(&ji, 2, 0, 0, 0, 6, -20, a2);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_RESULT(0, &ji, &ji.addr[2], 0, 0, 0, 6, -3, sum0);
    tx_reset();

    /* ---- Round 2 back in set 0: overwrites round 0 (no leftovers in the sum). */
    const int32_t c0[6] = {1, 1, 1, 1, 1, 1}, c1[6] = {2, 2, 2, 2, 2, 2};
    const int32_t c2[6] = {-4, 0, 4, 0, 0, INT32_MIN};
    int32_t sum2[6];
    for (int k = 0; k < 6; k++)
        sum2[k] = wadd(wadd(c0[k], c1[k]), c2[k]);
    snap = sw->c;
    send_data(&ji, 1, 0, 0, 2, 6, INA_EXP_NONFINITE, c1);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_NO_DROP(snap);

    /* Now round 0 is history: its retransmissions are STALE (no resend). */
    snap = sw->c;
    send_data(&ji, 0, 0, 0, 0, 6, -9, a0);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, STALE);
    CHECK_EQ_INT(sw->c.results_resent, 2);
    /* A round far ahead: FUTURE (set 0 is at seq 2; seq 4 is d = 2 but set 0 is not
     * complete -> NOT_READY; seq 6 is d = 4 -> FUTURE). */
    snap = sw->c;
    send_data(&ji, 0, 0, 0, 6, 6, 0, a0);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, FUTURE);
    snap = sw->c;
    send_data(&ji, 0, 0, 0, 4, 6, 0, a0);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, NOT_READY);
    snap = sw->c;
    send_data(&ji, 0, 0, 0, 0x80000000u, 6, 0, a0); /* d = 2^31 - 2 > 0 */
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, FUTURE);
    /* Set bit inconsistent with seq parity: SET, both ways. */
    snap = sw->c;
    send_data(&ji, 0, 0, 1, 2, 6, 0, a0);
    EXPECT_DROP(snap, SET);
    snap = sw->c;
    send_data(&ji, 0, 0, 0, 3, 6, 0, a0);
    EXPECT_DROP(snap, SET);
    CHECK_EQ_INT(tx_n(), 0);

    /* Finish round 2: exactly c0 + c1 + c2; exp NONFINITE wins. */
    snap = sw->c;
    send_data(&ji, 2, 0, 0, 2, 6, 5, c2);
    send_data(&ji, 0, 0, 0, 2, 6, 7, c0);
    CHECK_MULTICAST(&ji, 0, 0, 2, 6, INA_EXP_NONFINITE, sum2);
    EXPECT_NO_DROP(snap);
    tx_reset();
    /* Round 0 is still stale after round 2 completed. */
    snap = sw->c;
    send_data(&ji, 0, 0, 0, 0, 6, 0, a0);
    EXPECT_DROP(snap, STALE);
    CHECK_EQ_INT(tx_n(), 0);

    /* ---- NOT_READY: slot 1 round 0 incomplete, then round 2 in the same set. */
    const int32_t d0[2] = {3, 4}, d1[2] = {30, 40}, d2[2] = {300, 400}, dsum[2] = {333, 444};
    send_data(&ji, 0, 1, 0, 0, 2, 0, d0);
    snap = sw->c;
    send_data(&ji, 1, 1, 0, 2, 2, 0, d1);
    EXPECT_DROP(snap, NOT_READY);
    CHECK_EQ_INT(tx_n(), 0);
    /* Round 1 of slot 1 (set 1) may still run ahead (its own set is free). */
    send_data(&ji, 1, 1, 1, 1, 2, 0, d1);
    CHECK_EQ_INT(tx_n(), 0);
    snap = sw->c;
    send_data(&ji, 1, 1, 0, 0, 2, 0, d1);
    send_data(&ji, 2, 1, 0, 0, 2, 0, d2);
    CHECK_MULTICAST(&ji, 1, 0, 0, 2, 0, dsum);
    EXPECT_NO_DROP(snap);
    tx_reset();

    /* ---- COUNT, SLOT, OP: dropped before any state changes. */
    const int32_t big[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    snap = sw->c;
    send_data(&ji, 0, 2, 0, 0, 7, 0, big); /* 7 > agreed 6 (though <= max_elems 8) */
    EXPECT_DROP(snap, COUNT);
    snap = sw->c;
    send_data(&ji, 0, 2, 0, 0, 8, 0, big);
    EXPECT_DROP(snap, COUNT);
    snap = sw->c;
    send_data(&ji, 0, 4, 0, 0, 2, 0, big); /* window is 4 */
    EXPECT_DROP(snap, SLOT);
    snap = sw->c;
    send_data(&ji, 0, INA_SLOT_INDEX_MASK, 1, 1, 2, 0, big);
    EXPECT_DROP(snap, SLOT);
    for (unsigned op = INA_OP_LAST + 1; op < 256; op += 126) { /* past the last op, and far past */
        uint8_t pk[PKT_MAX];
        struct ina_hdr h = data_hdr(&ji, 0, 2, 0, 0, 2, 0);
        h.op = (uint8_t)op;
        size_t len = build(pk, &h, big);
        snap = sw->c;
        input(pk, len, &ji.addr[0]);
        EXPECT_DROP(snap, OP);
    }
    CHECK_EQ_INT(tx_n(), 0);
    /* Slot 2 is untouched by all of that. */
    const int32_t e[2] = {-1, 1}, esum[2] = {-3, 3};
    snap = sw->c;
    for (int r = 0; r < 3; r++)
        send_data(&ji, r, 2, 0, 0, 2, 0, e);
    CHECK_MULTICAST(&ji, 2, 0, 0, 2, 0, esum);
    EXPECT_NO_DROP(snap);
    tx_reset();
    /* The last slot of the window works (index 3, set 1, round 1 first). */
    snap = sw->c;
    for (int r = 0; r < 3; r++)
        send_data(&ji, r, 3, 1, 1, 2, 0, e);
    CHECK_MULTICAST(&ji, 3, 1, 1, 2, 0, esum);
    EXPECT_NO_DROP(snap);
    tx_reset();

    /* ---- MISMATCH: ranks disagree on count in one round -> drop and abort. */
    send_data(&ji, 0, 3, 0, 0, 4, 0, big);
    CHECK_EQ_INT(tx_n(), 0);
    snap = sw->c;
    send_data(&ji, 1, 3, 0, 0, 5, 0, big);
    EXPECT_DROP(snap, MISMATCH);
    CHECK_EQ_INT(sw->c.jobs_aborted, 1);
    CHECK_EQ_INT(tx_n(), 3);
    for (int r = 0; r < 3 && r < tx_n(); r++)
        CHECK_ABORT(r, &ji.addr[r], INA_ERR_MISMATCH);
    CHECK(job_named("rounds") == NULL);
    CHECK_EQ_INT(owned_slots(ji.job), 0);
    tx_reset();
    snap = sw->c;
    send_data(&ji, 2, 3, 0, 0, 4, 0, big);
    EXPECT_DROP(snap, NO_JOB);
    CHECK_EQ_INT(tx_n(), 0);
    sw_close();
}

/* Same count but a different operation tag (ranks on different ops): MISMATCH, abort. */
static void test_tag_mismatch(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct job_info ji = START_JOB("tags", 2, 4, 2, 10000, 0x7A);
    int32_t v[4] = {1, 2, 3, 4};
    uint8_t b[PKT_MAX];
    struct ina_hdr h = data_hdr(&ji, 0, 0, 0, 0, 4, 0);
    h.tag = 0x11;
    input(b, build(b, &h, v), &ji.addr[0]);
    CHECK_EQ_INT(tx_n(), 0);
    struct ina_sw_counters snap = sw->c;
    h = data_hdr(&ji, 1, 0, 0, 0, 4, 0);
    h.tag = 0x12;
    input(b, build(b, &h, v), &ji.addr[1]);
    EXPECT_DROP(snap, MISMATCH);
    CHECK_EQ_INT(tx_n(), 2);
    for (int r = 0; r < 2 && r < tx_n(); r++)
        CHECK_ABORT(r, &ji.addr[r], INA_ERR_MISMATCH);
    CHECK(job_named("tags") == NULL);
    tx_reset();
    /* Equal tags complete, and the RESULT echoes the tag. */
    struct job_info j2 = START_JOB("tags2", 2, 4, 2, 10100, 0x7B);
    for (int r = 0; r < 2; r++) {
        h = data_hdr(&j2, r, 1, 1, 1, 4, 0);
        h.tag = 0xC3;
        input(b, build(b, &h, v), &j2.addr[r]);
    }
    CHECK_EQ_INT(tx_n(), 2);
    struct ina_hdr rh;
    CHECK_EQ_INT(tx_hdr(0, &rh), INA_PARSE_OK);
    CHECK_EQ_INT(rh.kind, INA_K_RESULT);
    CHECK_EQ_INT(rh.tag, 0xC3);
    tx_reset();
    sw_close();
}

/*
 * MAX and MIN rounds: the first contribution overwrites whatever the set
 * held (no identity value), later ones combine signed; duplicates are never
 * combined twice, pending or complete; the RESULT carries the round's op; a
 * contribution with another op than the round's is a MISMATCH.
 */
static void test_slot_ops(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct job_info ji = START_JOB("ops", 3, 4, 2, 10000, 0x0B5);
    struct ina_sw_counters snap = sw->c;
    const int32_t a[3][4] = {{5, -1, INT32_MIN, 0},
                             {-9, -2, INT32_MAX, 0},
                             {7, -3, 0, -1}};
    const int32_t sum[4] = {3, -6, -1, -1}, mx[4] = {7, -1, INT32_MAX, 0},
                  mn[4] = {-9, -3, INT32_MIN, -1};
    const int32_t huge[4] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
    const int32_t tiny[4] = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};

    /* Round 0 of slot 0 (set 0): a sum, leaving values behind in the set. */
    for (int r = 0; r < 3; r++)
        send_data_op(&ji, r, 0, 0, 0, 4, INA_OP_ADD_I32, a[r]);
    CHECK_MULTICAST(&ji, 0, 0, 0, 4, 0, sum);
    tx_reset();

    /* Round 2 (set 0 again) is a MAX: rank 1's first contribution overwrites
     * the old sum. A duplicate of rank 1 with larger values is not taken. */
    send_data_op(&ji, 1, 0, 0, 2, 4, INA_OP_MAX_I32, a[1]);
    send_data_op(&ji, 1, 0, 0, 2, 4, INA_OP_MAX_I32, huge);
    EXPECT_DROP(snap, DUP_PENDING);
    send_data_op(&ji, 2, 0, 0, 2, 4, INA_OP_MAX_I32, a[2]);
    CHECK_EQ_INT(tx_n(), 0);
    send_data_op(&ji, 0, 0, 0, 2, 4, INA_OP_MAX_I32, a[0]);
    result_op = INA_OP_MAX_I32;
    CHECK_MULTICAST(&ji, 0, 0, 2, 4, 0, mx);
    tx_reset();
    /* A duplicate after completion gets the stored max, not a new one. */
    send_data_op(&ji, 2, 0, 0, 2, 4, INA_OP_MAX_I32, huge);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_RESULT(0, &ji, &ji.addr[2], 0, 0, 2, 4, 0, mx);
    tx_reset();

    /* Round 1 of slot 0 (set 1, the shadow) is a MIN, duplicates included. */
    snap = sw->c;
    send_data_op(&ji, 0, 0, 1, 1, 4, INA_OP_MIN_I32, a[0]);
    send_data_op(&ji, 0, 0, 1, 1, 4, INA_OP_MIN_I32, tiny);
    EXPECT_DROP(snap, DUP_PENDING);
    send_data_op(&ji, 1, 0, 1, 1, 4, INA_OP_MIN_I32, a[1]);
    send_data_op(&ji, 2, 0, 1, 1, 4, INA_OP_MIN_I32, a[2]);
    result_op = INA_OP_MIN_I32;
    CHECK_MULTICAST(&ji, 0, 1, 1, 4, 0, mn);
    tx_reset();
    /* Both sets keep their own round and op. */
    send_data_op(&ji, 1, 0, 0, 2, 4, INA_OP_MAX_I32, a[1]);
    result_op = INA_OP_MAX_I32;
    CHECK_RESULT(0, &ji, &ji.addr[1], 0, 0, 2, 4, 0, mx);
    tx_reset();
    CHECK_EQ_INT(sw->c.contributions, 9);

    /* Another op in the same round (same tag and count): MISMATCH, the job aborts. */
    send_data_op(&ji, 0, 1, 0, 0, 4, INA_OP_MAX_I32, a[0]);
    snap = sw->c;
    send_data_op(&ji, 1, 1, 0, 0, 4, INA_OP_MIN_I32, a[1]);
    EXPECT_DROP(snap, MISMATCH);
    CHECK_EQ_INT(tx_n(), 3);
    for (int r = 0; r < 3 && r < tx_n(); r++)
        CHECK_ABORT(r, &ji.addr[r], INA_ERR_MISMATCH);
    CHECK(job_named("ops") == NULL);
    tx_reset();
    result_op = INA_OP_ADD_I32;
    sw_close();
}

/* Many rounds through one slot: seq runs, both sets alternate, sums stay exact. */
static void test_slot_many_rounds(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct job_info ji = START_JOB("many", 4, 8, 2, 10000, 1);
    struct ina_sw_counters snap = sw->c;
    int32_t v[4][8], want[8];
    /* 50 rounds over the window of 2, interleaved: each slot runs rounds 0..24. */
    for (uint32_t i = 0; i < 50; i++) {
        uint32_t idx = i & 1, seq = i >> 1;
        unsigned set = seq & 1;
        unsigned count = 1 + i % 8;
        int16_t exp = (int16_t)((int)(i % 7) - 3);
        for (int k = 0; k < 8; k++) {
            want[k] = 0;
            for (int r = 0; r < 4; r++) {
                v[r][k] = (int32_t)(0x9E3779B9u * (i * 37 + (uint32_t)r * 11 + (uint32_t)k));
                want[k] = wadd(want[k], v[r][k]);
            }
        }
        for (int r = 3; r >= 0; r--) {
            CHECK_EQ_INT(tx_n(), 0);
            send_data(&ji, r, idx, set, seq, count, r == 1 ? exp : INA_EXP_ZERO, v[r]);
        }
        CHECK_MULTICAST(&ji, idx, set, seq, count, exp, want);
        tx_reset();
    }
    EXPECT_NO_DROP(snap);
    CHECK_EQ_INT(sw->c.completions, 50);
    CHECK_EQ_INT(sw->c.contributions, 200);
    sw_close();
}

/* ---- Hostile input ---------------------------------------------------------------- */

static void test_hostile(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct job_info ji = START_JOB("target", 3, 4, 2, 10000, 0x70);
    struct job_info other = START_JOB("other", 2, 4, 2, 20000, 0x80);
    struct ina_sw_counters snap;
    struct sockaddr_in evil = addr_port(6666);
    const int32_t h0[4] = {1, -2, 3, INT32_MAX}, h1[4] = {10, -20, 30, 1}, h2[4] = {100, -200, 300, 1};
    const int32_t poison[4] = {1000000, 1000000, 1000000, 1000000};
    int32_t honest[4];
    for (int k = 0; k < 4; k++)
        honest[k] = wadd(wadd(h0[k], h1[k]), h2[k]);

    send_data(&ji, 0, 0, 0, 0, 4, 1, h0);
    send_data(&ji, 1, 0, 0, 0, 4, 2, h1);
    CHECK_EQ_INT(tx_n(), 0);
    uint64_t contrib = sw->c.contributions;

    struct ina_hdr h;
#define HOSTILE(src, which)                         \
    do {                                            \
        snap = sw->c;                               \
        send_hdr(&h, poison, src);                  \
        CHECK_EQ_INT(tx_n(), 0);                    \
        EXPECT_DROP(snap, which);                   \
    } while (0)

    /* Rank 2's identity, tampered one field at a time, poison values, exp 99. */
    h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
    h.token ^= 1;
    HOSTILE(&ji.addr[2], TOKEN);
    h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
    h.token = other.token;
    HOSTILE(&ji.addr[2], TOKEN);
    h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
    HOSTILE(&ji.addr[0], SOURCE); /* right token, rank 0's address */
    HOSTILE(&evil, SOURCE);
    {
        struct sockaddr_in other_ip = ji.addr[2];
        other_ip.sin_addr.s_addr = htonl(0x7F000002);
        HOSTILE(&other_ip, SOURCE);
    }
    h = data_hdr(&ji, 3, 0, 0, 0, 4, 99);
    HOSTILE(&evil, RANK);
    h = data_hdr(&ji, INA_RANK_SWITCH, 0, 0, 0, 4, 99);
    HOSTILE(&evil, RANK);
    h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
    h.session ^= 0x10000;
    HOSTILE(&ji.addr[2], SESSION);
    h.session = 0;
    HOSTILE(&ji.addr[2], SESSION);
    h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
    h.session = other.session; /* another job's credentials on this job */
    h.token = other.token;
    HOSTILE(&ji.addr[2], SESSION);
    const uint16_t bad_jobs[] = {0, INA_SW_MAX_JOBS + 1, 1000, 0xFFFF};
    for (size_t i = 0; i < sizeof(bad_jobs) / sizeof(bad_jobs[0]); i++) {
        h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
        h.job = bad_jobs[i];
        HOSTILE(&ji.addr[2], NO_JOB);
    }
    /* A free job id: neither of the two jobs. */
    {
        uint16_t free_id = 1;
        while (free_id == ji.job || free_id == other.job)
            free_id++;
        CHECK_EQ_INT(sw->jobs[free_id - 1].state, INA_JOB_FREE);
        h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
        h.job = free_id;
        HOSTILE(&ji.addr[2], NO_JOB);
        h.job = INA_SW_MAX_JOBS;
        HOSTILE(&ji.addr[2], NO_JOB);
    }
    /* The other job's id with this job's credentials. */
    h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
    h.job = other.job;
    HOSTILE(&ji.addr[2], SESSION);

    /* Parse-level garbage. */
    uint8_t b[PKT_MAX];
    memset(b, 0, sizeof(b));
    h = data_hdr(&ji, 2, 0, 0, 0, 4, 99);
    size_t len = build(b, &h, poison);
    for (size_t l = 0; l < INA_HDR_LEN; l++) {
        snap = sw->c;
        input(b, l, &ji.addr[2]);
        EXPECT_DROP(snap, SHORT);
    }
    const size_t bad_lens[] = {INA_HDR_LEN, INA_HDR_LEN + 4, len - 4, len - 1, len + 1, len + 4};
    for (size_t i = 0; i < sizeof(bad_lens) / sizeof(bad_lens[0]); i++) {
        snap = sw->c;
        input(b, bad_lens[i], &ji.addr[2]);
        EXPECT_DROP(snap, LENGTH);
    }
    {
        uint8_t m[PKT_MAX];
        memcpy(m, b, len);
        m[0] = 0x4E;
        m[1] = 0x49;
        snap = sw->c;
        input(m, len, &ji.addr[2]);
        EXPECT_DROP(snap, MAGIC);
        memcpy(m, b, len);
        m[2] = INA_WIRE_VERSION + 1;
        snap = sw->c;
        input(m, len, &ji.addr[2]);
        EXPECT_DROP(snap, VERSION);
        memcpy(m, b, len);
        m[2] = 0;
        snap = sw->c;
        input(m, len, &ji.addr[2]);
        EXPECT_DROP(snap, VERSION);
        /* A RESULT sent to the switch (e.g. reflected): KIND. */
        memcpy(m, b, len);
        m[3] = INA_K_RESULT;
        snap = sw->c;
        input(m, len, &ji.addr[2]);
        EXPECT_DROP(snap, KIND);
    }
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.contributions, contrib);
#undef HOSTILE

    /* The honest rank 2 completes the round: exactly the honest sum and exp. */
    snap = sw->c;
    send_data(&ji, 2, 0, 0, 0, 4, 0, h2);
    CHECK_MULTICAST(&ji, 0, 0, 0, 4, 2, honest);
    EXPECT_NO_DROP(snap);
    tx_reset();

    /* After completion, a forged duplicate gets no resend. */
    h = data_hdr(&ji, 1, 0, 0, 0, 4, 0);
    h.token ^= 0x80000000u;
    snap = sw->c;
    send_hdr(&h, poison, &ji.addr[1]);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, TOKEN);
    h = data_hdr(&ji, 1, 0, 0, 0, 4, 0);
    snap = sw->c;
    send_hdr(&h, poison, &evil);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_DROP(snap, SOURCE);
    CHECK_EQ_INT(sw->c.results_resent, 0);

    /* The other job was never disturbed. */
    const int32_t o[4] = {4, 3, 2, 1}, o2[4] = {8, 6, 4, 2};
    snap = sw->c;
    send_data(&other, 0, 1, 1, 1, 4, 0, o);
    send_data(&other, 1, 1, 1, 1, 4, 0, o);
    CHECK_MULTICAST(&other, 1, 1, 1, 4, 0, o2);
    EXPECT_NO_DROP(snap);
    tx_reset();
    sw_close();
}

/* ---- Leave --------------------------------------------------------------------- */

static void send_leave(const struct job_info *ji, int rank, const struct sockaddr_in *src,
                       uint32_t token_xor, uint32_t session_xor)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_LEAVE);
    h.job = ji->job;
    h.rank = (uint16_t)rank;
    h.session = ji->session ^ session_xor;
    h.token = ji->token ^ token_xor;
    uint8_t b[INA_HDR_LEN];
    ina__hdr_encode(b, &h);
    input(b, sizeof(b), src);
}

static void test_leave(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct ina_sw_counters snap;
    /* The whole pool. */
    struct job_info ji = START_JOB("leaver", 3, 4, T_NSLOTS, 10000, 0x300);
    CHECK_EQ_INT(owned_slots(ji.job), T_NSLOTS);
    const int32_t v[2] = {1, 2}, s[2] = {3, 6};
    for (int r = 0; r < 3; r++)
        send_data(&ji, r, 15, 0, 0, 2, 0, v);
    CHECK_MULTICAST(&ji, 15, 0, 0, 2, 0, s);
    tx_reset();

    /* Forged LEAVEs are dropped (JOIN counter) and change nothing. */
    snap = sw->c;
    send_leave(&ji, 0, &ji.addr[0], 1, 0); /* wrong token */
    EXPECT_DROP(snap, JOIN);
    snap = sw->c;
    send_leave(&ji, 0, &ji.addr[0], 0, 1); /* wrong session */
    EXPECT_DROP(snap, JOIN);
    snap = sw->c;
    send_leave(&ji, 0, &ji.addr[1], 0, 0); /* another rank's address */
    EXPECT_DROP(snap, JOIN);
    snap = sw->c;
    send_leave(&ji, 3, &ji.addr[0], 0, 0); /* rank outside */
    EXPECT_DROP(snap, JOIN);
    {
        struct job_info bad = ji;
        bad.job = 0;
        snap = sw->c;
        send_leave(&bad, 0, &ji.addr[0], 0, 0);
        EXPECT_DROP(snap, NO_JOB);
        bad.job = INA_SW_MAX_JOBS + 1;
        snap = sw->c;
        send_leave(&bad, 0, &ji.addr[0], 0, 0);
        EXPECT_DROP(snap, NO_JOB);
        bad.job = (uint16_t)(ji.job == 1 ? 2 : 1); /* a free job: counted like DATA for it */
        snap = sw->c;
        send_leave(&bad, 0, &ji.addr[0], 0, 0);
        EXPECT_DROP(snap, NO_JOB);
    }
    CHECK_EQ_INT(tx_n(), 0);
    CHECK(job_named("leaver") != NULL && job_named("leaver")->nleft == 0);

    /* Rank 0 leaves twice, rank 1 once: still two of three, job alive. */
    snap = sw->c;
    send_leave(&ji, 0, &ji.addr[0], 0, 0);
    send_leave(&ji, 0, &ji.addr[0], 0, 0);
    send_leave(&ji, 1, &ji.addr[1], 0, 0);
    EXPECT_NO_DROP(snap);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.jobs_ended, 0);
    CHECK(job_named("leaver") != NULL && job_named("leaver")->state == INA_JOB_ACTIVE);
    /* Rank 2, still running, lost its result: it is answered. */
    send_data(&ji, 2, 15, 0, 0, 2, 0, v);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_RESULT(0, &ji, &ji.addr[2], 15, 0, 0, 2, 0, s);
    tx_reset();

    /* The last one leaves: the job ends, its slots go back. */
    snap = sw->c;
    send_leave(&ji, 2, &ji.addr[2], 0, 0);
    EXPECT_NO_DROP(snap);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.jobs_ended, 1);
    CHECK_EQ_INT(sw->c.jobs_aborted, 0);
    CHECK(job_named("leaver") == NULL);
    CHECK_EQ_INT(owned_slots(0), T_NSLOTS);
    CHECK_EQ_INT(sw->jobs[ji.job - 1].state, INA_JOB_FREE);

    /* Late traffic of the ended job. */
    snap = sw->c;
    send_data(&ji, 2, 15, 0, 0, 2, 0, v);
    EXPECT_DROP(snap, NO_JOB);
    snap = sw->c;
    send_leave(&ji, 2, &ji.addr[2], 0, 0);
    EXPECT_DROP(snap, NO_JOB); /* a late duplicate LEAVE */
    CHECK_EQ_INT(tx_n(), 0);

    /* A new job of the full pool size fits, and its slot 15 starts fresh. */
    struct job_info jn = START_JOB("next", 2, 4, T_NSLOTS, 20000, 0x400);
    CHECK_EQ_INT(owned_slots(jn.job), T_NSLOTS);
    CHECK(jn.session != ji.session);
    const int32_t w[2] = {7, 7}, ws[2] = {14, 14};
    snap = sw->c;
    send_data(&jn, 0, 15, 0, 0, 2, 0, w);
    CHECK_EQ_INT(tx_n(), 0); /* not answered from the old job's round */
    send_data(&jn, 1, 15, 0, 0, 2, 0, w);
    CHECK_MULTICAST(&jn, 15, 0, 0, 2, 0, ws);
    EXPECT_NO_DROP(snap);
    tx_reset();
    sw_close();
}

/* ---- Tick -------------------------------------------------------------------------- */

static void test_tick(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct ina_sw_counters snap = sw->c;
    uint64_t t0 = now_ns;

    /* A JOINING job past join_timeout is dropped (silently). */
    struct sockaddr_in a0 = addr_port(10000), a1 = addr_port(10001);
    send_join("slow", 0, 2, 4, 2, 1, &a0);
    ina__switch_tick(sw, t0 + T_JOIN_TIMEOUT);
    CHECK(job_named("slow") != NULL);
    ina__switch_tick(sw, t0 + T_JOIN_TIMEOUT + 1);
    CHECK(job_named("slow") == NULL);
    CHECK_EQ_INT(tx_n(), 0);
    EXPECT_NO_DROP(snap);
    /* The late rank starts a new, incomplete job: nothing is sent. */
    now_ns = t0 + 2 * T_JOIN_TIMEOUT;
    send_join("slow", 1, 2, 4, 2, 2, &a1);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.jobs_started, 0);
    CHECK(job_named("slow") != NULL && job_named("slow")->njoined == 1);
    /* Ticks inside the new deadline keep it. */
    ina__switch_tick(sw, now_ns + T_JOIN_TIMEOUT / 2);
    CHECK(job_named("slow") != NULL);

    /* An ACTIVE job is never subject to the join timeout, only to idleness. */
    now_ns = t0 + 10000;
    uint64_t t1 = now_ns;
    struct job_info ji = START_JOB("idle", 2, 4, 4, 20000, 0x500);
    ina__switch_tick(sw, t1 + T_IDLE_TIMEOUT);
    CHECK(job_named("idle") != NULL && job_named("idle")->state == INA_JOB_ACTIVE);
    CHECK_EQ_INT(tx_n(), 0);
    /* Traffic moves the idle deadline. */
    now_ns = t1 + 3000;
    const int32_t v[1] = {1};
    send_data(&ji, 0, 0, 0, 0, 1, 0, v);
    ina__switch_tick(sw, now_ns + T_IDLE_TIMEOUT);
    CHECK(job_named("idle") != NULL);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.jobs_aborted, 0);
    /* Past it: aborted, ABORT(TIMEOUT) to both members, slots freed. */
    ina__switch_tick(sw, now_ns + T_IDLE_TIMEOUT + 1);
    CHECK(job_named("idle") == NULL);
    CHECK_EQ_INT(sw->c.jobs_aborted, 1);
    CHECK_EQ_INT(tx_n(), 2);
    for (int r = 0; r < 2 && r < tx_n(); r++)
        CHECK_ABORT(r, &ji.addr[r], INA_ERR_TIMEOUT);
    CHECK_EQ_INT(owned_slots(ji.job), 0);
    tx_reset();
    /* The second "slow" job has long expired by then too. */
    CHECK(job_named("slow") == NULL);
    sw_close();

    /* idle_timeout 0: never reclaimed. */
    sw_open(0);
    struct job_info jz = START_JOB("forever", 1, 4, 1, 30000, 9);
    ina__switch_tick(sw, now_ns + 1000000000000ull);
    CHECK(job_named("forever") != NULL);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK_EQ_INT(sw->c.jobs_aborted, 0);
    (void)jz;
    sw_close();
}

/* ---- Misc ------------------------------------------------------------------------ */

static void test_init_and_names(void)
{
    struct ina_switch_params p;
    memset(&p, 0, sizeof(p));
    struct ina_switch *s = malloc(sizeof(*s));
    CHECK(s != NULL);
    if (!s)
        return;
    p.nslots = 0;
    p.max_elems = 8;
    CHECK_EQ_INT(ina__switch_init(s, &p), -EINVAL);
    p.nslots = 4;
    p.max_elems = 0;
    CHECK_EQ_INT(ina__switch_init(s, &p), -EINVAL);
    p.max_elems = INA_MAX_ELEMS + 1;
    CHECK_EQ_INT(ina__switch_init(s, &p), -EINVAL);
    p.max_elems = 2;
    CHECK_EQ_INT(ina__switch_init(s, &p), 0);
    ina__switch_free(s);
    free(s);

    CHECK(strcmp(ina__drop_name(INA_DROP_SHORT), "SHORT") == 0);
    CHECK(strcmp(ina__drop_name(INA_DROP_JOIN), "JOIN") == 0);
    CHECK(strcmp(ina__drop_name((enum ina_drop)INA_DROP__COUNT), "?") == 0);
    for (int d = 0; d < INA_DROP__COUNT; d++)
        CHECK(ina__drop_text((enum ina_drop)d)[0] != '\0');
}

/* A JOIN of lane `lane` of `nlanes`. */
static void send_lane_join(const char *name, int rank, int world, int lane, int nlanes,
                           uint64_t nonce, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, name, rank, world, 4, 2, nonce);
    b[INA_HDR_LEN + 26] = (uint8_t)lane;
    b[INA_HDR_LEN + 27] = (uint8_t)nlanes;
    input(b, len, src);
    drop_join_waits();
}

/*
 * Sharding: this instance is shard 1 of 3. A (name, lane) of another shard
 * gets a REDIRECT to that shard's port; its own lanes get jobs with ids in
 * its id range; lanes of one name are separate jobs; nlanes must agree;
 * an invalid lane is refused; a DATA packet naming another shard's job id
 * is dropped.
 */
static void test_shards_and_lanes(void)
{
    struct ina_switch_params p;
    memset(&p, 0, sizeof(p));
    p.nslots = T_NSLOTS;
    p.max_elems = T_MAX_ELEMS;
    p.shard = 1;
    p.nshards = 3;
    p.shard_ports[0] = 5000;
    p.shard_ports[1] = 5001;
    p.shard_ports[2] = 5002;
    sw = malloc(sizeof(*sw));
    if (!sw || ina__switch_init(sw, &p) != 0) {
        CHECK(0);
        exit(1);
    }
    now_ns = 1000000;
    struct sockaddr_in a0 = addr_port(7000), a1 = addr_port(7001);
    const char *name = "sharded";
    int own_lane = -1, other_lane = -1;
    for (int l = 0; l < 3; l++) {
        if (ina__lane_shard(name, (unsigned)l, 3) == 1 && own_lane < 0)
            own_lane = l;
        if (ina__lane_shard(name, (unsigned)l, 3) != 1 && other_lane < 0)
            other_lane = l;
    }
    CHECK(own_lane >= 0 && other_lane >= 0); /* 3 lanes cover all 3 shards */

    /* Another shard's lane: REDIRECT with that shard's port and our nonce. */
    send_lane_join(name, 0, 2, other_lane, 3, 0x1111, &a0);
    CHECK_EQ_INT(tx_n(), 1);
    struct ina_hdr h;
    size_t len;
    const uint8_t *b = tx_buf(0, &len);
    CHECK_EQ_INT(tx_hdr(0, &h), INA_PARSE_OK);
    CHECK_EQ_INT(h.kind, INA_K_REDIRECT);
    uint64_t nonce = 0;
    int32_t reason = 1;
    CHECK_EQ_INT(ina__nak_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &nonce, &reason), 0);
    CHECK(nonce == 0x1111);
    CHECK_EQ_INT(reason, 0);
    CHECK_EQ_INT(ina__get16(b + INA_HDR_LEN + 12), 5000 + ina__lane_shard(name, (unsigned)other_lane, 3));
    CHECK_EQ_INT(sw->c.join_redirects, 1);
    CHECK_EQ_INT(job_named(name) != NULL, 0);
    tx_reset();

    /* Our lane: a job whose id is in shard 1's range; both ranks ACKed with the lane echoed. */
    send_lane_join(name, 0, 2, own_lane, 3, 0x2222, &a0);
    send_lane_join(name, 1, 2, own_lane, 3, 0x3333, &a1);
    CHECK_EQ_INT(tx_n(), 2);
    for (int i = 0; i < tx_n(); i++) {
        b = tx_buf(i, &len);
        CHECK_EQ_INT(tx_hdr(i, &h), INA_PARSE_OK);
        CHECK_EQ_INT(h.kind, INA_K_JOIN_ACK);
        CHECK(h.job > INA_SW_MAX_JOBS && h.job <= 2 * INA_SW_MAX_JOBS);
        struct ina_join j;
        CHECK_EQ_INT(ina__join_decode(b + INA_HDR_LEN, len - INA_HDR_LEN, &j), 0);
        CHECK_EQ_INT(j.lane, own_lane);
        CHECK_EQ_INT(j.nlanes, 3);
    }
    uint16_t job_id = h.job;
    CHECK(ina__job_by_id(sw, job_id) != NULL);
    CHECK(ina__job_by_id(sw, (uint16_t)(job_id - INA_SW_MAX_JOBS)) == NULL); /* shard 0's id */
    tx_reset();

    /* Same name and lane with another lane count: MISMATCH (a new rank 0 incarnation
     * would otherwise restart the job: use a JOINING job of another lane). */
    int lane2 = -1;
    for (int l = 0; l < 16 && lane2 < 0; l++)
        if (l != own_lane && ina__lane_shard(name, (unsigned)l, 3) == 1)
            lane2 = l;
    CHECK(lane2 >= 0);
    send_lane_join(name, 0, 2, lane2, 16, 0x4444, &a0);
    CHECK_EQ_INT(tx_n(), 0); /* JOINING, silent */
    send_lane_join(name, 1, 2, lane2, 15, 0x5555, &a1);
    CHECK_NAK(0, &a1, 0x5555, INA_ERR_MISMATCH);
    tx_reset();

    /* lane >= nlanes, nlanes > 64 (INA_MAX_PARTS: shards x lanes): REJECTED. */
    send_lane_join(name, 0, 2, 3, 3, 0x6666, &a0);
    CHECK_NAK(0, &a0, 0x6666, INA_ERR_REJECTED);
    tx_reset();
    send_lane_join(name, 0, 2, 0, INA_MAX_PARTS + 1, 0x7777, &a0);
    CHECK_NAK(0, &a0, 0x7777, INA_ERR_REJECTED);
    tx_reset();

    /* DATA naming a job id of shard 0 is not this shard's: NO_JOB. */
    struct ina_sw_counters snap = sw->c;
    struct ina_hdr d;
    ina__hdr_init(&d, INA_K_DATA);
    d.job = 1;
    uint8_t pkt[INA_HDR_LEN];
    ina__hdr_encode(pkt, &d);
    input(pkt, sizeof(pkt), &a0);
    CHECK_EQ_INT(sw->c.drops[INA_DROP_NO_JOB] - snap.drops[INA_DROP_NO_JOB], 1);
    sw_close();
}

/* A JOIN of lane 0 whose nlanes is a proposal (INA_FLAG_LANES_AUTO) when `proposal`
 * is set, else a fixed count. */
static void send_auto_join(const char *name, int rank, int world, int lane, int nlanes,
                           int proposal, uint64_t nonce, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, name, rank, world, 4, 2, nonce);
    if (proposal)
        ina__put16(b + 28, INA_FLAG_LANES_AUTO);
    b[INA_HDR_LEN + 26] = (uint8_t)lane;
    b[INA_HDR_LEN + 27] = (uint8_t)nlanes;
    input(b, len, src);
    drop_join_waits();
}

/* Datagram i is a JOIN_ACK to dst granting nlanes, with the lanes flag iff `flag`. */
static void check_lanes_ack_at(int line, int i, const struct sockaddr_in *dst, int nlanes, int flag)
{
    int before = check_failures;
    const uint8_t *b = check_ctl(i, INA_K_JOIN_ACK, INA_JOIN_BODY_LEN, dst);
    struct ina_hdr h;
    struct ina_join j;
    if (b && tx_hdr(i, &h) == INA_PARSE_OK &&
        ina__join_decode(b + INA_HDR_LEN, INA_JOIN_BODY_LEN, &j) == INA_PARSE_OK) {
        CHECK_EQ_INT(j.nlanes, nlanes);
        CHECK_EQ_INT((h.flags & INA_FLAG_LANES_AUTO) != 0, flag);
    }
    if (check_failures != before)
        fprintf(stderr, "  (check_lanes_ack called from line %d, datagram %d)\n", line, i);
}
#define CHECK_LANES_ACK(i, dst, nlanes, flag) check_lanes_ack_at(__LINE__, i, dst, nlanes, flag)

/*
 * Lanes proposed at join (PROTOCOL.md §5.6): the job's lane 0 runs the
 * smallest proposal, or the count of a rank that fixed it; fixed counts must
 * agree, proposals never disagree; the ACK's flag goes only to ranks that
 * proposed; a proposal on another lane than 0 is refused; a running job
 * refuses a fixed count it does not run, and a forgotten registration no
 * longer counts.
 */
static void test_lanes_auto(void)
{
    sw_open(T_IDLE_TIMEOUT);
    struct sockaddr_in a[4];
    for (int r = 0; r < 4; r++)
        a[r] = addr_port(9600 + r);

    /* Proposals 3, 2, 4: every rank is granted 2, with the flag. */
    tx_reset();
    send_auto_join("auto", 0, 3, 0, 3, 1, 0xA0, &a[0]);
    send_auto_join("auto", 1, 3, 0, 2, 1, 0xA1, &a[1]);
    CHECK_EQ_INT(job_named("auto")->nlanes, 2);
    send_auto_join("auto", 2, 3, 0, 4, 1, 0xA2, &a[2]);
    CHECK_EQ_INT(tx_n(), 3);
    for (int r = 0; r < 3; r++)
        CHECK_LANES_ACK(r, &a[r], 2, 1);
    CHECK_EQ_INT(job_named("auto")->nlanes, 2);
    /* A fixed count that the running job does not run is refused without ending it. */
    tx_reset();
    send_auto_join("auto", 1, 3, 0, 3, 0, 0xB1, &a[1]);
    CHECK_NAK(0, &a[1], 0xB1, INA_ERR_MISMATCH);
    CHECK_EQ_INT(job_named("auto")->state, INA_JOB_ACTIVE);
    tx_reset();

    /* A fixed count decides: rank 0 fixes 3, the others propose 1 and 4. Only the
     * ranks that proposed get the flag; all run 3. */
    send_auto_join("mixed", 1, 3, 0, 1, 1, 0xC1, &a[1]);
    send_auto_join("mixed", 0, 3, 0, 3, 0, 0xC0, &a[0]);
    CHECK_EQ_INT(job_named("mixed")->nlanes, 3);
    send_auto_join("mixed", 2, 3, 0, 4, 1, 0xC2, &a[2]);
    CHECK_EQ_INT(tx_n(), 3);
    for (int r = 0; r < 3; r++)
        CHECK_LANES_ACK(r, &a[r], 3, r != 0);
    tx_reset();

    /* Two fixed counts that differ: MISMATCH for every registered rank, proposals too. */
    send_auto_join("fixed", 0, 3, 0, 2, 0, 0xD0, &a[0]);
    send_auto_join("fixed", 1, 3, 0, 4, 1, 0xD1, &a[1]);
    CHECK_EQ_INT(tx_n(), 0);
    send_auto_join("fixed", 2, 3, 0, 3, 0, 0xD2, &a[2]);
    CHECK_NAK(0, &a[2], 0xD2, INA_ERR_MISMATCH);
    CHECK_EQ_INT(job_named("fixed") == NULL, 1);
    tx_reset();

    /* A proposal on lane 1: REJECTED (lanes other than 0 join with the agreed count). */
    struct ina_sw_counters snap = sw->c;
    send_auto_join("lane1", 0, 2, 1, 2, 1, 0xE0, &a[0]);
    CHECK_NAK(0, &a[0], 0xE0, INA_ERR_REJECTED);
    EXPECT_DROP(snap, JOIN);
    tx_reset();

    /* A withdrawn registration's proposal no longer counts: rank 0 proposes 1 and
     * withdraws, rank 1 proposes 4, rank 0 comes back with 4, rank 2 proposes 2: 2. */
    send_auto_join("gone", 0, 3, 0, 1, 1, 0xF0, &a[0]);
    send_auto_join("gone", 1, 3, 0, 4, 1, 0xF1, &a[1]);
    CHECK_EQ_INT(job_named("gone")->nlanes, 1);
    uint8_t w[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t wl = make_join(w, "gone", 0, 3, 4, 2, 0xF0);
    w[3] = INA_K_WITHDRAW;
    w[INA_HDR_LEN + 27] = 1;
    input(w, wl, &a[0]);
    CHECK_EQ_INT(job_named("gone")->njoined, 1);
    CHECK_EQ_INT(job_named("gone")->nlanes, 4);
    send_auto_join("gone", 0, 3, 0, 4, 1, 0xF3, &a[0]);
    send_auto_join("gone", 2, 3, 0, 2, 1, 0xF2, &a[2]);
    CHECK_EQ_INT(tx_n(), 3);
    for (int r = 0; r < 3; r++)
        CHECK_LANES_ACK(r, &a[r], 2, 1);
    tx_reset();
    sw_close();
}

/* ---- One-round float sums (INA_OP_ADD_BFP) ------------------------------------ */

static uint64_t bfp_rng = 0x2545F4914F6CDD1Dull;
static uint64_t bfp_next(void)
{
    bfp_rng ^= bfp_rng << 13;
    bfp_rng ^= bfp_rng >> 7;
    bfp_rng ^= bfp_rng << 17;
    return bfp_rng;
}

/* Decode the sum held in v (k values at exponent e) and check every element
 * against the exact sum: within the float32 bound, or IEEE classes when a
 * block was non-finite. @return the number of bad elements. */
static int bfp_check(int n, size_t k, float x[][64], const int32_t *v, int16_t e)
{
    uint8_t res[4 * 64];
    float out[64];
    ina__be32_store(res, v, k);
    ina__quant_decode(res, k, e, n, out);
    int bad = 0;
    for (size_t i = 0; i < k; i++) {
        double exact = 0, amax = 0;
        int nan = 0, pinf = 0, ninf = 0;
        for (int r = 0; r < n; r++) {
            exact += x[r][i];
            nan |= isnan(x[r][i]);
            pinf |= isinf(x[r][i]) && x[r][i] > 0;
            ninf |= isinf(x[r][i]) && x[r][i] < 0;
            for (size_t j = 0; j < k; j++)
                if (isfinite(x[r][j]))
                    amax = fmax(amax, fabs(x[r][j]));
        }
        if (e == INA_EXP_NONFINITE) {
            /* IEEE for the non-finite elements; finite ones in such a block: NaN */
            if (pinf && !ninf && !nan)
                bad += !(isinf(out[i]) && out[i] > 0);
            else if (ninf && !pinf && !nan)
                bad += !(isinf(out[i]) && out[i] < 0);
            else
                bad += !isnan(out[i]);
        } else if (!(fabs(out[i] - exact) <= ina_float_error_bound(n, amax, exact))) {
            if (bad < 3)
                fprintf(stderr, "bfp: N=%d k=%zu i=%zu: %.9g vs exact %.9g (bound %.3g)\n", n, k,
                        i, out[i], exact, ina_float_error_bound(n, amax, exact));
            bad++;
        }
    }
    return bad;
}

/*
 * Ranks quantize their blocks with their own exponents; the switch's rule
 * (combine_bfp) meets them in a random arrival order; the decoded sum must
 * be within the float32 error bound of the exact sum, with the largest
 * exponent as E, for every order. Blocks of zeros, blocks orders of
 * magnitude apart (shifts past 32 bits), and non-finite blocks included.
 */
static void test_bfp_one_round(void)
{
    enum { MAXN = 16, MAXK = 64 };
    static const int worlds[] = {1, 2, 3, 4, 7, 16};
    int fails = 0, held_at_max = 0, trials = 0;
    for (size_t wi = 0; wi < sizeof(worlds) / sizeof(worlds[0]); wi++) {
        int n = worlds[wi];
        for (int trial = 0; trial < 400; trial++, trials++) {
            size_t k = 1 + bfp_next() % MAXK;
            float x[MAXN][MAXK];
            uint8_t wire[MAXN][4 * MAXK];
            int16_t e[MAXN], emax = INA_EXP_ZERO;
            int nonfinite = trial % 50 == 7;
            for (int r = 0; r < n; r++) {
                int kind = (int)(bfp_next() % 8);
                int sh = (int)(bfp_next() % 81) - 40; /* ranks up to 2^80 apart */
                for (size_t i = 0; i < k; i++) {
                    double u = (double)(bfp_next() >> 11) / 9007199254740992.0 - 0.5;
                    x[r][i] = kind == 0 ? 0.0f : (float)ldexp(u, sh);
                }
                if (nonfinite && r == n - 1)
                    x[r][bfp_next() % k] = (bfp_next() & 1) ? INFINITY : NAN;
                e[r] = ina__quant_block_exp(x[r], k);
                emax = e[r] > emax ? e[r] : emax;
                ina__quant_encode(x[r], k, e[r], n, wire[r]);
            }
            int order[MAXN];
            for (int r = 0; r < n; r++)
                order[r] = r;
            for (int r = n - 1; r > 0; r--) {
                int j = (int)(bfp_next() % (uint64_t)(r + 1)), t = order[r];
                order[r] = order[j];
                order[j] = t;
            }
            struct ina_slot_set ss;
            memset(&ss, 0, sizeof(ss));
            ss.op = INA_OP_ADD_BFP;
            int32_t v[MAXK];
            ina__be32_load(v, wire[order[0]], k);
            ss.exp = e[order[0]];
            for (int o = 1; o < n; o++)
                ina__combine(&ss, v, wire[order[o]], k, e[order[o]]);
            held_at_max += ss.exp == emax; /* the sum is held at the largest exponent */
            fails += bfp_check(n, k, x, v, ss.exp);
        }
    }
    CHECK_EQ_INT(fails, 0);
    CHECK_EQ_INT(held_at_max, trials);

    /* Through the slot rules: the RESULT carries the largest exponent and the op. */
    sw_open(T_IDLE_TIMEOUT);
    struct job_info ji = START_JOB("bfp", 3, 4, 2, 9100, 0x9100);
    float xs[3][64] = {{1.0f, -2.0f, 0.5f, 0.0f}, {1000.0f, 0.0f, 0.0f, 3.0f}, {0}};
    int16_t es[3];
    for (int r = 0; r < 3; r++) {
        uint8_t b[INA_HDR_LEN + 16];
        es[r] = ina__quant_block_exp(xs[r], 4);
        struct ina_hdr h = data_hdr(&ji, r, 0, 0, 0, 4, es[r]);
        h.op = INA_OP_ADD_BFP;
        ina__hdr_encode(b, &h);
        ina__quant_encode(xs[r], 4, es[r], 3, b + INA_HDR_LEN);
        input(b, sizeof(b), &ji.addr[r]);
    }
    CHECK_EQ_INT(es[2], INA_EXP_ZERO);
    CHECK_EQ_INT(tx_n(), 3);
    struct ina_hdr rh;
    CHECK_EQ_INT(tx_hdr(0, &rh), INA_PARSE_OK);
    CHECK_EQ_INT(rh.exp, es[1]);
    CHECK_EQ_INT(rh.op, INA_OP_ADD_BFP);
    size_t len;
    int32_t v[4];
    ina__be32_load(v, tx_buf(0, &len) + INA_HDR_LEN, 4);
    CHECK_EQ_INT(bfp_check(3, 4, xs, v, rh.exp), 0);
    sw_close();
}

/* ---- Floats added as floats (INA_OP_ADD_F32) ----------------------------------- */

static int32_t f2i(float f) { return (int32_t)float_bits(f); }
static float i2f(int32_t i) { return bits_float((uint32_t)i); }

/* JOIN_ACK flags of a fresh one-rank job. */
static uint16_t ack_flags(const char *name, int port)
{
    struct sockaddr_in a = addr_port(port);
    tx_reset();
    send_join(name, 0, 1, 4, 2, 77, &a);
    struct ina_hdr h;
    uint16_t flags = 0xFFFF;
    if (tx_n() == 1 && tx_hdr(0, &h) == INA_PARSE_OK && h.kind == INA_K_JOIN_ACK)
        flags = h.flags;
    tx_reset();
    return flags;
}

static void test_float_add(void)
{
    sw_open(T_IDLE_TIMEOUT);
    CHECK_EQ_INT(ack_flags("caps", 9300), INA_FLAG_CAP_BFP | INA_FLAG_CAP_F32 |
                                              INA_FLAG_CAP_SPARSE | INA_FLAG_CAP_FIX |
                                              INA_FLAG_CAP_H16);
    struct job_info ji = START_JOB("f32", 3, 8, 2, 9310, 0x9310);
    /* Arrival order 0, 1, 2: the result is ((x0 + x1) + x2) in binary32,
     * round to nearest even: cancellation, IEEE non-finite rules per
     * element, overflow to Inf, subnormals, signed zeros. */
    const float x[3][8] = {
        {1e8f, 1.5f, INFINITY, NAN, -0.0f, 3e38f, 1e-45f, 0.1f},
        {1.0f, 2.25f, -INFINITY, 1.0f, -0.0f, 3e38f, 1e-45f, 0.2f},
        {-1e8f, -3.0f, 1.0f, 2.0f, -0.0f, -3e38f, -1e-45f, 0.3f},
    };
    int32_t vals[3][8], want[8];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 8; i++)
            vals[r][i] = f2i(x[r][i]);
    for (int i = 0; i < 8; i++) {
        volatile float acc = x[0][i];
        acc = acc + x[1][i];
        acc = acc + x[2][i];
        want[i] = f2i(acc);
    }
    CHECK(i2f(want[0]) == 0.0f);       /* 1e8 + 1 rounds to 1e8: then cancels */
    CHECK(isnan(i2f(want[2])));        /* Inf + -Inf */
    CHECK(isinf(i2f(want[5])));        /* overflow before the cancellation */
    CHECK(signbit(i2f(want[4])));      /* -0 + -0 + -0 = -0 */
    CHECK(i2f(want[6]) == 1e-45f);     /* subnormals add exactly */
    for (int r = 0; r < 3; r++)
        send_data_op(&ji, r, 0, 0, 0, 8, INA_OP_ADD_F32, vals[r]);
    result_op = INA_OP_ADD_F32;
    CHECK_MULTICAST(&ji, 0, 0, 0, 8, 0, want);
    tx_reset();
    /* Another arrival order in the next round of the same set: its own order. */
    for (int i = 0; i < 8; i++) {
        volatile float acc = x[2][i];
        acc = acc + x[1][i];
        acc = acc + x[0][i];
        want[i] = f2i(acc);
    }
    for (int r = 2; r >= 0; r--)
        send_data_op(&ji, r, 0, 0, 2, 8, INA_OP_ADD_F32, vals[r]);
    CHECK_MULTICAST(&ji, 0, 0, 2, 8, 0, want);
    tx_reset();
    /* Mixed with the integer add in one round: MISMATCH, the job aborts. */
    struct ina_sw_counters snap = sw->c;
    send_data_op(&ji, 0, 1, 1, 1, 8, INA_OP_ADD_F32, vals[0]);
    send_data_op(&ji, 1, 1, 1, 1, 8, INA_OP_ADD_I32, vals[1]);
    EXPECT_DROP(snap, MISMATCH);
    CHECK(job_named("f32") == NULL);
    tx_reset();
    result_op = INA_OP_ADD_I32;
    sw_close();

    /* --int-ops-only: only the integer ops (and the fixed-point add), ops 3 and 4 dropped. */
    open_int_ops_only = 1;
    sw_open(T_IDLE_TIMEOUT);
    CHECK_EQ_INT(ack_flags("caps", 9300), INA_FLAG_CAP_FIX);
    ji = START_JOB("intonly", 2, 8, 2, 9320, 0x9320);
    snap = sw->c;
    send_data_op(&ji, 0, 0, 0, 0, 8, INA_OP_ADD_F32, vals[0]);
    EXPECT_DROP(snap, OP);
    snap = sw->c;
    send_data_op(&ji, 0, 0, 0, 0, 8, INA_OP_ADD_BFP, vals[0]);
    EXPECT_DROP(snap, OP);
    send_data_op(&ji, 0, 0, 0, 0, 8, INA_OP_ADD_I32, vals[0]);
    send_data_op(&ji, 1, 0, 0, 0, 8, INA_OP_ADD_I32, vals[1]);
    CHECK_EQ_INT(tx_n(), 2); /* the integer add still works */
    tx_reset();
    sw_close();
    open_int_ops_only = 0;
}

/* ---- The 16-bit wire (ops 10 and 11, PROTOCOL.md §8.10) ---------------------- */

/* Two 16-bit elements as the int32 word that carries them (element 2j at the high half). */
static int32_t h16_word(uint16_t a, uint16_t b) { return (int32_t)((uint32_t)a << 16 | b); }

/* The binary32 lane of element w with exp e: fl32(val(w) * 2^e) (§8.10.4). */
static float h16_lane(uint16_t w, int fmt, int e)
{
    float v = bits_float(fmt == INA_H16_F16 ? ina__f16_to_f32_bits(w) : (uint32_t)w << 16);
    return v * ldexpf(1.0f, ina__h16_clamp_exp(e));
}

static uint16_t h16_round(float x, int fmt)
{
    uint16_t w = fmt == INA_H16_F16 ? ina__f32_bits_to_f16(float_bits(x))
                                    : ina__f32_bits_to_bf16(float_bits(x));
    if (x != x)
        w = fmt == INA_H16_F16 ? INA_H16_F16_QNAN : INA_H16_BF16_QNAN;
    return w;
}

static void send_h16(const struct job_info *ji, int rank, uint32_t idx, uint32_t seq,
                     unsigned words, uint8_t op, int16_t exp, const int32_t *vals)
{
    uint8_t b[PKT_MAX];
    struct ina_hdr h = data_hdr(ji, rank, idx, seq & 1, seq, words, exp);
    h.op = op;
    input(b, build(b, &h, vals), &ji->addr[rank]);
}

/*
 * Three ranks, 4 words = 8 elements (twice the job's k of 4... the set holds
 * 2k lanes): each element added in binary32 in arrival order, scaled by its
 * packet's exp, sent back rounded once at the RESULT's scale s; NaN as the
 * canonical quiet NaN, signed zeros and infinities per element. Then
 * binary16's scale for sums past 65504, duplicates, mismatch, and a switch
 * without binary32 adds.
 */
static void test_h16_rounds(void)
{
    sw_open(T_IDLE_TIMEOUT);
    const unsigned K = 4; /* words per packet = the job's k: 8 elements */
    struct job_info ji = START_JOB("h16", 3, K, 2, 9330, 0x9330);
    for (int fmt = 0; fmt < 2; fmt++) {
        const uint8_t op = fmt == INA_H16_F16 ? INA_OP_ADD_F16 : INA_OP_ADD_BF16;
        const float x[3][8] = {
            {1.5f, -2.0f, INFINITY, NAN, -0.0f, 1000.0f, 0.25f, 3.0f},
            {0.5f, 2.0f, -INFINITY, 1.0f, -0.0f, 24.0f, -0.125f, 7.0f},
            {1.0f, 0.0f, 1.0f, 2.0f, -0.0f, -1.0f, 0.0078125f, 11.0f},
        };
        const int16_t ex[3] = {0, 2, -1}; /* each packet's own scale */
        int32_t vals[3][4], want[4];
        uint16_t w[3][8], out[8];
        for (int r = 0; r < 3; r++) {
            for (int i = 0; i < 8; i++) /* exact in both formats */
                w[r][i] = h16_round(x[r][i] / ldexpf(1.0f, ex[r]), fmt);
            for (unsigned j = 0; j < K; j++)
                vals[r][j] = h16_word(w[r][2 * j], w[r][2 * j + 1]);
        }
        for (int i = 0; i < 8; i++) { /* arrival order 0, 1, 2; s = the largest exp, 2 */
            volatile float acc = h16_lane(w[0][i], fmt, ex[0]);
            acc = acc + h16_lane(w[1][i], fmt, ex[1]);
            acc = acc + h16_lane(w[2][i], fmt, ex[2]);
            out[i] = h16_round(acc / 4.0f, fmt);
        }
        for (unsigned j = 0; j < K; j++)
            want[j] = h16_word(out[2 * j], out[2 * j + 1]);
        CHECK_EQ_INT(out[3], fmt == INA_H16_F16 ? 0x7E00 : 0x7FC0); /* NaN + 1 + 2 */
        CHECK_EQ_INT(out[2], fmt == INA_H16_F16 ? 0x7E00 : 0x7FC0); /* Inf - Inf */
        CHECK_EQ_INT(out[4], 0x8000);                               /* -0 + -0 + -0 */
        const uint32_t seq = (uint32_t)(2 * fmt);
        for (int r = 0; r < 3; r++)
            send_h16(&ji, r, 0, seq, K, op, ex[r], vals[r]);
        result_op = op;
        CHECK_MULTICAST(&ji, 0, 0, seq, K, 2, want);
        tx_reset();
        /* A duplicate of the complete round: the same bytes to that rank alone. */
        send_h16(&ji, 1, 0, seq, K, op, ex[1], vals[1]);
        CHECK_EQ_INT(tx_n(), 1);
        CHECK_RESULT(0, &ji, &ji.addr[1], 0, 0, seq, K, 2, want);
        tx_reset();
    }
    /* binary16 sums past 65504 keep their range: s grows until they fit (§8.10.4). */
    int32_t big[4] = {h16_word(0x7753 /* 30000 */, 0x3C00 /* 1 */), 0, 0, 0};
    for (int r = 0; r < 3; r++)
        send_h16(&ji, r, 1, 1, 1, INA_OP_ADD_F16, 0, big);
    result_op = INA_OP_ADD_F16;
    int32_t want_big[1] = {h16_word(ina__f32_bits_to_f16(float_bits(45000.0f)),
                                    ina__f32_bits_to_f16(float_bits(1.5f)))};
    CHECK_MULTICAST(&ji, 1, 1, 1, 1, 1, want_big); /* 90000 = 45000 * 2^1, 3 = 1.5 * 2^1 */
    tx_reset();
    /* Ops 10 and 11 in one round: MISMATCH, the job aborts. */
    struct ina_sw_counters snap = sw->c;
    send_h16(&ji, 0, 1, 3, 1, INA_OP_ADD_F16, 0, big);
    send_h16(&ji, 1, 1, 3, 1, INA_OP_ADD_BF16, 0, big);
    EXPECT_DROP(snap, MISMATCH);
    CHECK(job_named("h16") == NULL);
    tx_reset();
    result_op = INA_OP_ADD_I32;
    sw_close();

    /* A 16-bit sparse round (op 13, §17.11) with an odd B = 3: a block is two
     * words on the wire (the third element, then a pad) and three lanes in
     * the set; the place's exponent is the largest scale of the blocks added,
     * its RESULT s (bfloat16: that exponent), the block rounded at s. */
    sw_open(T_IDLE_TIMEOUT);
    ji = START_JOB("h16sparse", 2, K * 2, 2, 9350, 0x9350);
    const int32_t sp0[6] = {(int32_t)ina__sparse_layout(3, 1), 0, (int32_t)INA_SPARSE_END,
                            (int32_t)ina__sparse_info(1, 0, 0), h16_word(0x3F80, 0x4000), /* 1, 2 */
                            h16_word(0x4040, 0)},                                         /* 3 */
                  sp1[6] = {(int32_t)ina__sparse_layout(3, 1), 0, (int32_t)INA_SPARSE_END,
                            (int32_t)ina__sparse_info(1, 0, 1), h16_word(0x3F80, 0x3F00), /* 2, 1 */
                            h16_word(0xFF80, 0)};                                         /* -Inf */
    send_h16(&ji, 0, 0, 0, 6, INA_OP_SPARSE_BF16, 0, sp0);
    send_h16(&ji, 1, 0, 0, 6, INA_OP_SPARSE_BF16, 0, sp1);
    result_op = INA_OP_SPARSE_BF16;
    const int32_t want_sp[6] = {(int32_t)ina__sparse_layout(3, 1), 0, (int32_t)INA_SPARSE_END,
                                (int32_t)ina__sparse_info(1, 0, 1),
                                h16_word(0x3FC0, 0x3FC0), /* 3 / 2, 3 / 2 */
                                h16_word(0xFF80, 0)};     /* -Inf, the pad +0 */
    CHECK_MULTICAST(&ji, 0, 0, 0, 6, 0, want_sp);
    tx_reset();
    result_op = INA_OP_ADD_I32;
    sw_close();

    /* No binary32 adds (--int-ops-only): bit 9 not offered, ops 10..13 dropped. */
    open_int_ops_only = 1;
    sw_open(T_IDLE_TIMEOUT);
    CHECK_EQ_INT(ack_flags("caps", 9300) & INA_FLAG_CAP_H16, 0);
    ji = START_JOB("h16int", 2, K, 2, 9340, 0x9340);
    for (uint8_t op = INA_OP_ADD_F16; op <= INA_OP_SPARSE_BF16; op++) {
        snap = sw->c;
        send_h16(&ji, 0, 0, 0, 1, op, 0, big);
        EXPECT_DROP(snap, OP);
    }
    CHECK_EQ_INT(tx_n(), 0);
    sw_close();
    open_int_ops_only = 0;
}

/* ---- Block-sparse rounds (wire ops 7 and 8, PROTOCOL.md §17) ------------------ */

#define SP_B 4 /* block length of these tests */

struct sp_place {
    uint32_t pos, next;
    int has, first;
    int16_t exp;
    int32_t blk[SP_B];
};

/* A sparse payload of np places (blocks after the descriptors) into w. @return its words. */
static unsigned sp_payload(int32_t *w, const struct sp_place *pl, unsigned np)
{
    unsigned n = 1 + 3 * np;
    w[0] = (int32_t)ina__sparse_layout(SP_B, np);
    for (unsigned j = 0; j < np; j++) {
        w[1 + 3 * j] = (int32_t)pl[j].pos;
        w[2 + 3 * j] = (int32_t)pl[j].next;
        w[3 + 3 * j] = (int32_t)ina__sparse_info(pl[j].has, pl[j].first, pl[j].exp);
        if (pl[j].has)
            for (int i = 0; i < SP_B; i++)
                w[n++] = pl[j].blk[i];
    }
    return n;
}

static void sp_send(const struct job_info *ji, int rank, uint32_t idx, uint32_t seq, uint8_t op,
                    const struct sp_place *pl, unsigned np)
{
    int32_t w[64];
    unsigned n = sp_payload(w, pl, np);
    send_data_op(ji, rank, idx, seq & 1, seq, n, op, w);
}

/* Counters of sparse traffic must have moved by exactly these amounts since snap. */
#define EXPECT_SPARSE(snap, rxp, rxb, txp, txb)                                         \
    do {                                                                                \
        CHECK_EQ_INT(sw->c.sparse_rx_packets - (snap).sparse_rx_packets, rxp);           \
        CHECK_EQ_INT(sw->c.sparse_rx_blocks - (snap).sparse_rx_blocks, rxb);             \
        CHECK_EQ_INT(sw->c.sparse_tx_packets - (snap).sparse_tx_packets, txp);           \
        CHECK_EQ_INT(sw->c.sparse_tx_blocks - (snap).sparse_tx_blocks, txb);             \
    } while (0)

static void sw_open_elems(uint32_t max_elems)
{
    sw_open(T_IDLE_TIMEOUT);
    sw_close();
    struct ina_switch_params p;
    memset(&p, 0, sizeof(p));
    p.nslots = T_NSLOTS;
    p.max_elems = max_elems;
    p.join_timeout_ns = T_JOIN_TIMEOUT;
    p.idle_timeout_ns = T_IDLE_TIMEOUT;
    p.int_ops_only = open_int_ops_only;
    sw = malloc(sizeof(*sw));
    CHECK(sw && ina__switch_init(sw, &p) == 0);
}

static void test_sparse_rounds(void)
{
    sw_open_elems(64);
    struct job_info ji = START_JOB("sparse", 3, 64, 2, 9500, 0x9500);
    /* Round 0 of slot 0: three places. Place 0 is a column's first round
     * (no blocks, each rank's first non-zero block of it); place 1 has
     * blocks from ranks 0 and 1; place 2 only from rank 1. */
    struct sp_place r0[3] = {
        {100, 105, 0, 1, -3, {0}},
        {10, 12, 1, 0, 7, {1, 2, 3, -4}},
        {20, INA_SPARSE_END, 0, 0, INA_EXP_ZERO, {0}},
    };
    struct sp_place r1[3] = {
        {100, 103, 0, 1, -9, {0}},
        {10, 14, 1, 0, 2, {10, 20, 30, INT32_MAX}},
        {20, 21, 1, 0, 5, {7, 7, 7, 7}},
    };
    struct sp_place r2[3] = {
        {100, 103, 0, 1, 4, {0}},
        {10, 11, 0, 0, -1, {0}},
        {20, INA_SPARSE_END, 0, 0, INA_EXP_ZERO, {0}},
    };
    struct ina_sw_counters snap = sw->c;
    sp_send(&ji, 0, 0, 0, INA_OP_SPARSE_I32, r0, 3);
    sp_send(&ji, 1, 0, 0, INA_OP_SPARSE_I32, r1, 3);
    CHECK_EQ_INT(tx_n(), 0);
    sp_send(&ji, 2, 0, 0, INA_OP_SPARSE_I32, r2, 3);
    /* The sum: per place the minimum next, the largest exponent among the
     * ranks at that minimum, HAS where some rank sent a block. */
    struct sp_place want[3] = {
        {100, 103, 0, 1, 4, {0}},
        {10, 11, 1, 0, -1, {11, 22, 33, wadd(-4, INT32_MAX)}},
        {20, 21, 1, 0, 5, {7, 7, 7, 7}},
    };
    int32_t ww[64];
    unsigned wn = sp_payload(ww, want, 3);
    CHECK_EQ_INT(wn, 1 + 9 + 8);
    result_op = INA_OP_SPARSE_I32;
    CHECK_MULTICAST(&ji, 0, 0, 0, wn, 0, ww);
    EXPECT_SPARSE(snap, 3, 3, 3, 6);
    CHECK_EQ_INT(sw->c.sparse_tx_bytes - snap.sparse_tx_bytes, 3 * (INA_HDR_LEN + 4 * wn));
    EXPECT_NO_DROP(snap);
    tx_reset();

    /* A duplicate of a finished round gets the stored result, to that rank
     * only; nothing is added twice. */
    snap = sw->c;
    sp_send(&ji, 1, 0, 0, INA_OP_SPARSE_I32, r1, 3);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_RESULT(0, &ji, &ji.addr[1], 0, 0, 0, wn, 0, ww);
    CHECK_EQ_INT(sw->c.results_resent - snap.results_resent, 1);
    tx_reset();

    /* Round 2 in the same set: its first contribution overwrites whatever
     * the last round left (no clearing pass). One place, a block only from
     * rank 2, a duplicate while pending (DUP_PENDING). */
    struct sp_place a[1] = {{11, INA_SPARSE_END, 0, 0, INA_EXP_ZERO, {0}}};
    struct sp_place c[1] = {{11, INA_SPARSE_END, 1, 0, INA_EXP_ZERO, {5, 6, 7, 8}}};
    snap = sw->c;
    sp_send(&ji, 0, 0, 2, INA_OP_SPARSE_I32, a, 1);
    sp_send(&ji, 0, 0, 2, INA_OP_SPARSE_I32, a, 1);
    EXPECT_DROP(snap, DUP_PENDING);
    sp_send(&ji, 2, 0, 2, INA_OP_SPARSE_I32, c, 1);
    sp_send(&ji, 1, 0, 2, INA_OP_SPARSE_I32, a, 1);
    wn = sp_payload(ww, c, 1);
    CHECK_MULTICAST(&ji, 0, 0, 2, wn, 0, ww);
    tx_reset();

    /* An empty round (every place taken: a placeholder) is its layout word. */
    for (int r = 0; r < 3; r++)
        sp_send(&ji, r, 1, 0, INA_OP_SPARSE_I32, a, 0);
    wn = sp_payload(ww, a, 0);
    CHECK_EQ_INT(wn, 1);
    CHECK_MULTICAST(&ji, 1, 0, 0, 1, 0, ww);
    tx_reset();

    /* Malformed payloads are dropped (SPARSE), the round stays open. */
    int32_t w[64];
    unsigned n = sp_payload(w, r1, 3);
    snap = sw->c;
    send_data_op(&ji, 0, 1, 1, 1, n - 1, INA_OP_SPARSE_I32, w); /* count disagrees with HAS */
    EXPECT_DROP(snap, SPARSE);
    struct sp_place bad = r1[1];
    bad.next = bad.pos; /* next must be past pos */
    snap = sw->c;
    sp_send(&ji, 0, 1, 1, INA_OP_SPARSE_I32, &bad, 1);
    EXPECT_DROP(snap, SPARSE);
    bad = r0[0];
    bad.has = 1; /* a first round carries no block */
    snap = sw->c;
    sp_send(&ji, 0, 1, 1, INA_OP_SPARSE_I32, &bad, 1);
    EXPECT_DROP(snap, SPARSE);
    struct sp_place many[10];
    for (unsigned j = 0; j < 10; j++)
        many[j] = r0[0]; /* 10 places of 3 + 4 words could carry 71 words, more than 64 */
    snap = sw->c;
    sp_send(&ji, 0, 1, 1, INA_OP_SPARSE_I32, many, 10);
    EXPECT_DROP(snap, SPARSE);
    CHECK_EQ_INT(tx_n(), 0);
    CHECK(job_named("sparse") != NULL);

    /* op 8: blocks added as binary32. */
    struct sp_place f[3][1];
    const float fx[3][SP_B] = {{1.5f, -2.0f, 1e-45f, INFINITY}, {2.25f, 0.5f, 1e-45f, 1.0f},
                               {0, 0, 0, 0}};
    int32_t fsum[SP_B];
    for (int r = 0; r < 3; r++) {
        f[r][0] = (struct sp_place){7, INA_SPARSE_END, r < 2, 0, 0, {0}};
        for (int i = 0; i < SP_B; i++)
            f[r][0].blk[i] = (int32_t)float_bits(fx[r][i]);
    }
    for (int i = 0; i < SP_B; i++) {
        volatile float acc = fx[0][i];
        acc = acc + fx[1][i];
        fsum[i] = (int32_t)float_bits(acc);
    }
    for (int r = 0; r < 3; r++)
        sp_send(&ji, r, 1, 1, INA_OP_SPARSE_F32, f[r], 1);
    struct sp_place fw = f[0][0];
    memcpy(fw.blk, fsum, sizeof(fsum));
    wn = sp_payload(ww, &fw, 1);
    result_op = INA_OP_SPARSE_F32;
    CHECK_MULTICAST(&ji, 1, 1, 1, wn, 0, ww);
    tx_reset();

    /* Ranks disagreeing on the places of a round: MISMATCH, the job aborts. */
    result_op = INA_OP_SPARSE_I32;
    sp_send(&ji, 0, 0, 4, INA_OP_SPARSE_I32, r0, 3);
    struct sp_place moved[3];
    memcpy(moved, r1, sizeof(moved));
    moved[2].pos = 19;
    moved[2].next = 21;
    snap = sw->c;
    sp_send(&ji, 1, 0, 4, INA_OP_SPARSE_I32, moved, 3);
    EXPECT_DROP(snap, MISMATCH);
    CHECK(job_named("sparse") == NULL);
    tx_reset();

    /* Also a FIRST bit that differs, another layout, or a dense op against a sparse one. */
    for (int kind = 0; kind < 3; kind++) {
        ji = START_JOB("sparse2", 2, 64, 2, 9520, 0x9520 + (uint64_t)kind * 16);
        sp_send(&ji, 0, 0, 0, INA_OP_SPARSE_I32, r0, 3);
        memcpy(moved, r0, sizeof(moved));
        moved[1].first = 1;
        moved[1].has = 0;
        snap = sw->c;
        if (kind == 0)
            sp_send(&ji, 1, 0, 0, INA_OP_SPARSE_I32, moved, 3);
        else if (kind == 1)
            sp_send(&ji, 1, 0, 0, INA_OP_SPARSE_I32, r0, 2);
        else
            send_data_op(&ji, 1, 0, 0, 0, 4, INA_OP_ADD_I32, r0[1].blk);
        EXPECT_DROP(snap, MISMATCH);
        CHECK(job_named("sparse2") == NULL);
        tx_reset();
    }
    result_op = INA_OP_ADD_I32;
    sw_close();

    /* --int-ops-only: no sparse offered, ops 7 and 8 dropped (OP). */
    open_int_ops_only = 1;
    sw_open_elems(64);
    ji = START_JOB("sparse3", 2, 64, 2, 9540, 0x9540);
    snap = sw->c;
    sp_send(&ji, 0, 0, 0, INA_OP_SPARSE_I32, r0, 3);
    sp_send(&ji, 0, 0, 0, INA_OP_SPARSE_F32, r0, 3);
    EXPECT_DROPS(snap, OP, 2);
    tx_reset();
    sw_close();
    open_int_ops_only = 0;
}

/*
 * Rings (PROTOCOL.md §5.9), the switch's side: an attach of a sealed memfd is
 * acknowledged; RESULTs stay on UDP until the rank's up ring has delivered a
 * datagram (a rank that gave up waiting for SHM_ACK never uses its rings),
 * and go down the ring after that. A POSIX shm name (version 1: its size is
 * not sealed) is refused unless --shm-unsealed.
 */
/* Rank `rank` of ji asks for rings: SHM_ATTACH for the object `name` (a memfd that
 * this process holds as fd, or a POSIX shm name), a body of bodylen bytes, nonce 0x5348. */
static void send_shm_attach(const struct job_info *ji, int rank, const char *name, int fd,
                            uint32_t slot_size, size_t bodylen)
{
    uint8_t b[INA_HDR_LEN + INA_SHM_ATTACH_BODY_LEN];
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_SHM_ATTACH);
    h.job = ji->job;
    h.rank = (uint16_t)rank;
    h.session = ji->session;
    h.token = ji->token;
    ina__hdr_encode(b, &h);
    memset(b + INA_HDR_LEN, 0, INA_SHM_ATTACH_BODY_LEN);
    ina__put32(b + INA_HDR_LEN + 4, 0x5348);
    ina__put32(b + INA_HDR_LEN + 8, 16);
    ina__put32(b + INA_HDR_LEN + 12, slot_size);
    memcpy(b + INA_HDR_LEN + 16, name, strlen(name));
    ina__put32(b + INA_HDR_LEN + 80, (uint32_t)getpid());
    ina__put32(b + INA_HDR_LEN + 84, (uint32_t)fd);
    input(b, INA_HDR_LEN + bodylen, &ji->addr[rank]);
}

/* The queue is one SHM_ACK echoing nonce 0x5348: @return its reason (-1 if it is not). */
static int32_t shm_ack_reason(void)
{
    size_t len;
    struct ina_hdr ah;
    uint64_t nonce = 0;
    int32_t reason = -1;
    if (tx_n() != 1 || tx_hdr(0, &ah) != INA_PARSE_OK || ah.kind != INA_K_SHM_ACK)
        return -1;
    const uint8_t *ack = tx_buf(0, &len);
    if (ina__nak_decode(ack + INA_HDR_LEN, len - INA_HDR_LEN, &nonce, &reason) != INA_PARSE_OK ||
        nonce != 0x5348)
        return -1;
    return reason;
}

/* A POSIX shm object of §5.9's first version, 16 slots of slot_size: its name in
 * name, its descriptor (-1 if none could be made). */
static int named_ring(char *name, uint32_t slot_size)
{
    snprintf(name, INA_SHM_NAME_MAX, "/ina.%u.%016llx", (unsigned)geteuid(),
             (unsigned long long)(0x5348000000000000ull | (unsigned)getpid()));
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    size_t size = ina__ring_size(16, slot_size);
    struct ina_shm_hdr *h = fd >= 0 && ftruncate(fd, (off_t)size) == 0
                                ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                : MAP_FAILED;
    if (h == MAP_FAILED) {
        if (fd >= 0)
            close(fd);
        shm_unlink(name);
        return -1;
    }
    h->version = INA_SHM_VERSION;
    h->nslots = 16;
    h->slot_size = slot_size;
    h->magic = INA_SHM_MAGIC;
    munmap(h, size);
    return fd;
}

static void test_shm_attach(void)
{
    struct ina_shm w; /* rank 0's side of the object */
    char name[INA_SHM_NAME_MAX];
    int fd;
    uint32_t slot_size = ina__ring_slot_size(INA_HDR_LEN + 4 * T_MAX_ELEMS);
    if (ina__ring_create(&w, name, &fd, 16, slot_size) != 0) {
        printf("test_switch: shm attach: SKIP (no sealed memfd here)\n");
        return;
    }
    /* A switch without --shm offers no rings and refuses them (NOTSUP, drop SHM). */
    sw_open(T_IDLE_TIMEOUT);
    struct job_info ji = START_JOB("rings", 2, 8, 2, 9400, 0x9400);
    struct ina_sw_counters snap = sw->c;
    send_shm_attach(&ji, 0, name, fd, slot_size, INA_SHM_ATTACH_BODY_LEN);
    CHECK_EQ_INT(shm_ack_reason(), INA_ERR_NOTSUP);
    EXPECT_DROP(snap, SHM);
    CHECK_EQ_INT(sw->c.shm_attached, 0);
    tx_reset();
    sw_close();

    open_shm = 1;
    sw_open(T_IDLE_TIMEOUT);
    CHECK_EQ_INT(ack_flags("caps", 9399), INA_FLAG_CAP_BFP | INA_FLAG_CAP_F32 | INA_FLAG_CAP_SHM |
                                              INA_FLAG_CAP_SPARSE | INA_FLAG_CAP_FIX |
                                              INA_FLAG_CAP_H16);
    ji = START_JOB("rings", 2, 8, 2, 9400, 0x9400);
    /* Rank 1 names a POSIX shm object: its size is not sealed, refused (EPERM). */
    char pname[INA_SHM_NAME_MAX];
    int pfd = named_ring(pname, slot_size);
    CHECK(pfd >= 0);
    snap = sw->c;
    send_shm_attach(&ji, 1, pname, -1, slot_size, INA_SHM_ATTACH_NAMED_LEN);
    CHECK_EQ_INT(shm_ack_reason(), -EPERM);
    EXPECT_DROP(snap, SHM);
    tx_reset();
    /* A memfd's name in a body without its pid and descriptor: EINVAL. */
    send_shm_attach(&ji, 0, name, fd, slot_size, INA_SHM_ATTACH_NAMED_LEN);
    CHECK_EQ_INT(shm_ack_reason(), -EINVAL);
    tx_reset();
    send_shm_attach(&ji, 0, name, fd, slot_size, INA_SHM_ATTACH_BODY_LEN);
    CHECK_EQ_INT(shm_ack_reason(), 0);
    CHECK_EQ_INT(sw->c.shm_attached, 1);
    tx_reset();
    close(fd); /* libina closes it once answered; the switch keeps its mapping */
    send_shm_attach(&ji, 0, name, fd, slot_size, INA_SHM_ATTACH_BODY_LEN); /* lost ACK: again */
    CHECK_EQ_INT(shm_ack_reason(), 0);
    CHECK_EQ_INT(sw->c.shm_attached, 1);
    tx_reset();
    size_t len;
    struct ina_hdr ah;

    /* Attached, but nothing came through the ring yet: both RESULTs by UDP. */
    int32_t v0[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v1[8] = {10, 20, 30, 40, 50, 60, 70, 80}, want[8];
    for (int i = 0; i < 8; i++)
        want[i] = v0[i] + v1[i];
    send_data(&ji, 0, 0, 0, 0, 8, 0, v0);
    send_data(&ji, 1, 0, 0, 0, 8, 0, v1);
    CHECK_MULTICAST(&ji, 0, 0, 0, 8, 0, want);
    CHECK(ina__ring_peek(&w, 0, &len) == NULL);
    tx_reset();

    /* Rank 0's DATA through its up ring: its RESULT goes down the ring, rank 1's by UDP. */
    uint8_t d[PKT_MAX];
    struct ina_hdr dh = data_hdr(&ji, 0, 1, 0, 0, 8, 0);
    size_t dlen = build(d, &dh, v0);
    ina__switch_input_ring(sw, job_named("rings"), 0, d, dlen, now_ns);
    send_data(&ji, 1, 1, 0, 0, 8, 0, v1);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_RESULT(0, &ji, &ji.addr[1], 1, 0, 0, 8, 0, want);
    const uint8_t *p = ina__ring_peek(&w, 0, &len);
    CHECK(p != NULL && ina__hdr_decode(p, len, &ah) == INA_PARSE_OK && ah.kind == INA_K_RESULT &&
          ah.slot == 1 && ah.count == 8 && ina__get32(p + INA_HDR_LEN) == (uint32_t)want[0]);
    CHECK_EQ_INT(sw->c.shm_rx_packets, 1);
    CHECK_EQ_INT(sw->c.shm_tx_packets, 1);
    tx_reset();
    sw_close();
    ina__ring_unmap(&w);

    /* --shm-unsealed: the POSIX shm object is mapped, and its name removed. */
    open_shm_unsealed = 1;
    sw_open(T_IDLE_TIMEOUT);
    ji = START_JOB("rings", 2, 8, 2, 9400, 0x9400);
    send_shm_attach(&ji, 1, pname, -1, slot_size, INA_SHM_ATTACH_NAMED_LEN);
    CHECK_EQ_INT(shm_ack_reason(), 0);
    CHECK_EQ_INT(sw->c.shm_attached, 1);
    int gone = shm_open(pname, O_RDWR, 0);
    CHECK(gone < 0 && errno == ENOENT);
    if (gone >= 0)
        close(gone);
    tx_reset();
    sw_close();
    open_shm_unsealed = 0;
    open_shm = 0;
    if (pfd >= 0)
        close(pfd);
    shm_unlink(pname);
}

/* ---- Registrations live only while their rank waits (PROTOCOL.md §5.2) ---------- */

/* A JOIN with the joiner's remaining join time (header seq, ms; 0 = none said). */
static void send_join_deadline(const char *name, int rank, int world, uint64_t nonce,
                               uint32_t deadline_ms, const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, name, rank, world, 4, 2, nonce);
    ina__put32(b + 20, deadline_ms);
    input(b, len, src);
}

static void send_withdraw(const char *name, int rank, int world, uint64_t nonce,
                          const struct sockaddr_in *src)
{
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, name, rank, world, 4, 2, nonce);
    b[3] = INA_K_WITHDRAW;
    input(b, len, src);
}

/* Datagram i is a JOIN_WAIT to dst for nonce: world, joined, state and the ranks in it. */
static void check_join_wait_at(int line, int i, const struct sockaddr_in *dst, uint64_t nonce,
                               int world, int joined, int state, uint64_t ranks)
{
    int before = check_failures;
    const uint8_t *b = check_ctl(i, INA_K_JOIN_WAIT, INA_JOIN_WAIT_BODY_LEN, dst);
    if (!b)
        return;
    const uint8_t *body = b + INA_HDR_LEN;
    CHECK(((uint64_t)ina__get32(body) << 32 | ina__get32(body + 4)) == nonce);
    CHECK_EQ_INT(ina__get16(body + 8), world);
    CHECK_EQ_INT(ina__get16(body + 10), joined);
    CHECK_EQ_INT(body[12], state);
    for (int r = 0; r < 64; r++)
        CHECK_EQ_INT((body[16 + (r >> 3)] >> (r & 7)) & 1, (int)((ranks >> r) & 1));
    if (check_failures != before)
        fprintf(stderr, "  (check_join_wait called from line %d, datagram %d)\n", line, i);
}
#define CHECK_JOIN_WAIT(i, dst, nonce, world, joined, state, ranks) \
    check_join_wait_at(__LINE__, i, dst, nonce, world, joined, state, ranks)

static void test_join_lifecycle(void)
{
    sw_open(0);
    struct sockaddr_in a0 = addr_port(15000), a1 = addr_port(15001), a2 = addr_port(15002);
    struct ina_sw_counters snap;

    /* JOIN_WAIT answers every JOIN of a job still joining: who is in. */
    send_join_deadline("wait", 0, 3, 0x10, 0, &a0);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_JOIN_WAIT(0, &a0, 0x10, 3, 1, 0, 0x1);
    tx_reset();
    send_join_deadline("wait", 2, 3, 0x12, 0, &a2);
    CHECK_JOIN_WAIT(0, &a2, 0x12, 3, 2, 0, 0x5);
    tx_reset();

    /* Rank 0 falls silent (killed, say: no WITHDRAW): after INA_SW_JOIN_SILENT_NS
     * the tick forgets it, and rank 1 does not start a session with it. */
    now_ns += INA_SW_JOIN_SILENT_NS / 2;
    send_join_deadline("wait", 2, 3, 0x12, 0, &a2); /* rank 2 is still there */
    tx_reset();
    now_ns += INA_SW_JOIN_SILENT_NS / 2 + 1000;
    ina__switch_tick(sw, now_ns);
    CHECK_EQ_INT(sw->c.joins_expired, 1);
    CHECK_EQ_INT(job_named("wait")->njoined, 1);
    CHECK_EQ_INT(tx_n(), 0);
    send_join_deadline("wait", 1, 3, 0x11, 0, &a1);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_JOIN_WAIT(0, &a1, 0x11, 3, 2, 0, 0x6); /* ranks 1 and 2: no session */
    CHECK_EQ_INT(sw->c.jobs_started, 0);
    tx_reset();
    /* The forgotten rank comes back (its process was only slow): the job starts. */
    send_join_deadline("wait", 0, 3, 0x10, 0, &a0);
    CHECK_EQ_INT(tx_n(), 3);
    CHECK_EQ_INT(sw->c.jobs_started, 1);
    CHECK_EQ_INT(job_named("wait")->state, INA_JOB_ACTIVE);
    tx_reset();

    /* A registration whose stated deadline passed is forgotten, even while it
     * still re-sends; the last one gone frees the job, and with it the name. */
    send_join_deadline("dl", 0, 2, 0x20, 1000, &a0);
    tx_reset();
    now_ns += 500000000ull;
    send_join_deadline("dl", 0, 2, 0x20, 500, &a0); /* the same deadline, restated */
    tx_reset();
    now_ns += 600000000ull;
    ina__switch_tick(sw, now_ns);
    CHECK_EQ_INT(sw->c.joins_expired, 2);
    CHECK(job_named("dl") == NULL);
    /* So a corrected job of that name with another world size starts at once. */
    send_join_deadline("dl", 0, 1, 0x21, 1000, &a0);
    CHECK_EQ_INT(tx_n(), 1);
    struct ina_hdr h;
    CHECK_EQ_INT(tx_hdr(0, &h), INA_PARSE_OK);
    CHECK_EQ_INT(h.kind, INA_K_JOIN_ACK);
    tx_reset();

    /* The N-th JOIN does not start a session with a member already past its
     * deadline, even before a tick has looked. */
    send_join_deadline("start", 0, 2, 0x30, 100, &a0);
    tx_reset();
    now_ns += 200000000ull;
    send_join_deadline("start", 1, 2, 0x31, 0, &a1);
    CHECK_EQ_INT(tx_n(), 1);
    CHECK_JOIN_WAIT(0, &a1, 0x31, 2, 1, 0, 0x2);
    CHECK_EQ_INT(job_named("start")->state, INA_JOB_JOINING);
    tx_reset();

    /* WITHDRAW: a rank that gave up takes its registration back; only with its
     * own nonce, rank and address. */
    send_join_deadline("wd", 0, 2, 0x40, 0, &a0);
    tx_reset();
    snap = sw->c;
    send_withdraw("wd", 0, 2, 0x41, &a0); /* another nonce */
    send_withdraw("wd", 0, 2, 0x40, &a1); /* another address */
    send_withdraw("wd", 1, 2, 0x40, &a0); /* a rank that never joined */
    send_withdraw("nope", 0, 2, 0x40, &a0); /* no such job */
    EXPECT_DROPS(snap, JOIN, 4);
    CHECK_EQ_INT(job_named("wd")->njoined, 1);
    CHECK_EQ_INT(tx_n(), 0);
    send_withdraw("wd", 0, 2, 0x40, &a0);
    CHECK_EQ_INT(sw->c.joins_withdrawn, 1);
    CHECK(job_named("wd") == NULL);
    CHECK_EQ_INT(tx_n(), 0);
    /* Rank 1 arriving later waits: no session with the rank that left. */
    send_join_deadline("wd", 1, 2, 0x42, 0, &a1);
    CHECK_JOIN_WAIT(0, &a1, 0x42, 2, 1, 0, 0x2);
    tx_reset();
    /* A withdrawal of an active job's rank is not one: dropped, job untouched. */
    struct job_info ji = START_JOB("act", 2, 4, 2, 15100, 0x50);
    snap = sw->c;
    send_withdraw("act", 0, 2, 0x50, &ji.addr[0]);
    EXPECT_DROP(snap, JOIN);
    CHECK_EQ_INT(job_named("act")->state, INA_JOB_ACTIVE);
    CHECK_EQ_INT(tx_n(), 0);
    sw_close();

    /* A job waiting for slots (state 1) that loses a rank waits for it again. */
    sw_open(0);
    sw->p.max_job_slots = 16;
    sw->p.min_job_slots = 16;
    START_JOB("hog", 1, 4, 16, 15200, 0x60);
    uint8_t b[INA_HDR_LEN + INA_JOIN_BODY_LEN];
    size_t len = make_join(b, "slow", 0, 2, 4, 16, 0x70);
    ina__put16(b + INA_HDR_LEN + 30, 100); /* may wait 10 s */
    input(b, len, &a0);
    tx_reset();
    len = make_join(b, "slow", 1, 2, 4, 16, 0x71);
    ina__put16(b + INA_HDR_LEN + 30, 100);
    input(b, len, &a1);
    CHECK_EQ_INT(job_named("slow")->state, INA_JOB_WAITING);
    CHECK_JOIN_WAIT(0, &a1, 0x71, 2, 2, 1, 0x3);
    tx_reset();
    send_withdraw("slow", 1, 2, 0x71, &a1);
    CHECK_EQ_INT(job_named("slow")->state, INA_JOB_JOINING);
    CHECK_EQ_INT(job_named("slow")->njoined, 1);
    sw_close();
}

int main(void)
{
    ina__log_setup(INA_LOG_ERROR, INA_LOG_TEXT); /* only errors: job events are expected here */
    test_init_and_names();
    test_shards_and_lanes();
    test_lanes_auto();
    test_bfp_one_round();
    test_float_add();
    test_h16_rounds();
    test_sparse_rounds();
    test_shm_attach();
    test_join_basic();
    test_join_refused();
    test_join_mismatch_and_rejoin();
    test_join_lifecycle();
    test_join_nospace();
    test_admission();
    test_slot_rounds();
    test_tag_mismatch();
    test_slot_ops();
    test_slot_many_rounds();
    test_hostile();
    test_leave();
    test_tick();
    return check_report("test_switch");
}
