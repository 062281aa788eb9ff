/* lanes.c: a context of several parts (lanes x shards): a socket and window per part, a thread per lane (none for one lane), each op split over them. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lib/ctx.h"
#include "lib/lanes.h"
#include "lib/req.h"
#include "lib/session.h"
#include "lib/stream.h"
#include "lib/transport.h"

/*
 * Why lanes: one thread moving one stream is bound by one core's cost per
 * datagram (system calls, conversion). SwitchML gives each core its own
 * slice of the tensor and its own slots; so does this. Lane l streams part l
 * of every operation through its own context: its own socket, its own job at
 * the switch (name, lane l), its own window. The switch may serve each lane
 * on another dataplane thread (ina-switch --threads).
 *
 * Ordering: every rank submits the same operations in the same order, and
 * splits each the same way, so lane l of every rank sees the same sequence
 * of parts: each lane is a correct single-lane stream on its own.
 *
 * Shards (PROTOCOL.md §12) are more parts of the same kind: part
 * p = shard i x lanes + lane j streams to shard i. A thread per lane drives
 * that lane's part at every shard, so shards add sockets and windows but no
 * threads (on hosts whose cores the workers need, threads cost more than
 * they give). With one lane there is no thread at all: the caller's thread
 * drives every part inside libina calls, one poll over their sockets, as a
 * plain context drives its one (ina.h's threading and progress rules). It
 * saves two thread wake-ups per operation, and a rank that stops calling
 * libina stops its operations, so that finalizing with operations in
 * flight ends them for the other ranks.
 *
 * Threads and locking: one mutex per context, taken per operation and per
 * progress round of a thread (a burst of packets), never per packet. A
 * thread owns its parts' contexts; the caller's thread touches them only
 * after the threads have stopped (finalize), or, with one lane, always (it
 * is the only thread; the mutex is then never contended).
 *
 * Busy polling (INA_BUSY_POLL_US) applies here too, at both hand-offs: an
 * idle lane thread spins on its inbox before it sleeps on its condition
 * variable, one with parts in flight spins on its rings and sockets before
 * it sleeps in poll(), and the caller spins on its operation's done flag
 * (part_done()'s last write, so the caller needs no lock once it sees it).
 * Otherwise every small operation would pay two thread wake-ups (caller to
 * lane, lane to caller) beside the network's.
 */

struct ina_part {
    struct ina_req *parent;
    const uint8_t *src;
    uint8_t *dst;
    size_t offset, count; /* elements [offset, offset + count) of the parent */
};

struct ina_runner;

/* One part: a stream of its own (a lane at one shard). */
struct ina_lane {
    struct ina_ctx *ctx;
    struct ina_lanes *group;
    struct ina_runner *runner; /* the thread that drives it */
    struct ina_part *inbox; /* ring of INA_MAX_REQS parts not yet taken by the thread */
    unsigned in_head, in_count;
    ina_stats stats;   /* the part's counters as of its last round */
};

/* One thread, driving parts index, index + nrun, index + 2 nrun, ...: with
 * shards x lanes parts and one thread per lane, thread j drives lane j of
 * every shard. Shards spread the bytes over aggregators, lanes over cores:
 * only lanes add threads. */
struct ina_runner {
    pthread_t thread;
    int started;
    int index;
    int busy;    /* progressing its parts or waiting on their sockets: wake it with wake_fd */
    int wake_fd; /* eventfd that interrupts its poll */
    pthread_cond_t cv; /* work arrived, or stop */
    struct ina_lanes *group;
};

struct ina_lanes {
    int n;    /* parts */
    int nrun; /* threads: run[0 .. nrun-1] */
    int caller_drives; /* one lane: no thread; run[0] is the caller's (lanes_drive) */
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* some operation finished */
    int stop;
    int broken; /* first error of any part: breaks the whole context */
    char errmsg[INA_ERRMSG_LEN]; /* the failing lane's ina_last_error() message */
    uint64_t ops;
    struct ina_lane lane[INA_MAX_PARTS];
    struct ina_runner run[INA_MAX_LANES];
};

static void lane_wake(struct ina_lane *ln)
{
    struct ina_runner *rn = ln->runner;
    pthread_cond_signal(&rn->cv);
    if (rn->busy) {
        uint64_t one = 1;
        if (write(rn->wake_fd, &one, sizeof(one)) < 0) {
            /* counter saturated: a wake-up is pending anyway */
        }
    }
}

/*
 * A failure of the parent's operations says why in the failing lane's words
 * (ina_last_error): the first message a lane thread kept in g->errmsg is
 * copied up into the parent's errmsg when the caller's thread is told of
 * the failure (submit, test, wait). Only that thread writes parent->errmsg,
 * so ina_last_error() reads it without a lock. Under g->mu. @return status.
 */
static int say_lane_error(struct ina_ctx *parent, struct ina_lanes *g, int status)
{
    if (status && g->errmsg[0])
        snprintf(parent->errmsg, sizeof(parent->errmsg), "%s", g->errmsg);
    return status;
}

/* The same, taking g->mu, on a failure only (a success needs no lock). */
static int lanes_failed(struct ina_ctx *parent, struct ina_lanes *g, int status)
{
    if (status) {
        pthread_mutex_lock(&g->mu);
        say_lane_error(parent, g, status);
        pthread_mutex_unlock(&g->mu);
    }
    return status;
}

/* A part finished (status): account it to its parent. Under g->mu. */
static void part_done(struct ina_lanes *g, struct ina_req *parent, int status)
{
    if (status && !parent->status)
        parent->status = status;
    /* INA_ERR_RANGE reports a completed part (fixed point: some elements are
     * NaN, on every rank alike); it breaks nothing. */
    if (status && status != INA_ERR_RANGE && !g->broken) {
        /* One part failed: so does every operation after it, on every part. */
        g->broken = status;
        for (int i = 0; i < g->n; i++)
            lane_wake(&g->lane[i]);
    }
    if (--parent->remaining == 0) {
        if (!parent->status)
            g->ops++;
        /* The last access to parent: a spinning waiter (ina__lanes_wait) that
         * sees it returns without the lock, and may release parent at once. */
        __atomic_store_n(&parent->done, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&g->done_cv);
    }
}

/* Take the parts queued for this lane into its stream. Under g->mu. */
static void take_inbox(struct ina_lane *ln)
{
    struct ina_lanes *g = ln->group;
    struct ina_ctx *c = ln->ctx;
    while (ln->in_count) {
        struct ina_part *pt = &ln->inbox[ln->in_head];
        ln->in_head = (ln->in_head + 1) % INA_MAX_REQS;
        __atomic_sub_fetch(&ln->in_count, 1, __ATOMIC_RELAXED); /* idle_spin reads it */
        struct ina_req *r = ina__req_create(c, pt->src, pt->dst, pt->count, pt->parent->dtype,
                                            pt->parent->op, pt->parent->sparse_mode, pt->offset,
                                            pt->parent->count);
        if (!r) {
            part_done(g, pt->parent, -ENOMEM);
            continue;
        }
        r->parent = pt->parent;
        if (!r->done && c->broken)
            ina__stream_fail_all(c, c->broken); /* a broken lane sends nothing more */
    }
}

/* Hand finished parts to their parents and free them. Under g->mu. */
static void harvest(struct ina_lane *ln)
{
    struct ina_ctx *c = ln->ctx;
    for (struct ina_req *r = c->live, *next; r; r = next) {
        next = r->live_next;
        if (!r->done)
            continue;
        if (r->status && !ln->group->errmsg[0] && c->errmsg[0]) /* c is this thread's lane */
            snprintf(ln->group->errmsg, sizeof(ln->group->errmsg), "lane %d: %.230s", c->lane,
                     c->errmsg);
        part_done(ln->group, r->parent, r->status);
        ina__live_unlink(c, r);
        ina__req_release(c, r);
    }
}

/* New work, failures and finished operations of one part. @return 1 if it
 * has something in flight. Under g->mu. */
static int lane_update(struct ina_lane *ln)
{
    struct ina_lanes *g = ln->group;
    struct ina_ctx *c = ln->ctx;
    take_inbox(ln);
    if (g->broken && !c->broken) {
        /* Another part failed. If the failure is this rank's own (not an
         * ABORT it was told of), this part's switch must hear it too, even
         * with nothing in flight here, so that it ends the job for every
         * rank now (PROTOCOL.md §12) rather than at their deadlines. */
        if (!c->head && g->broken != INA_ERR_ABORTED && g->broken != INA_ERR_CLOSED &&
            g->broken != INA_ERR_SHUTDOWN)
            ina__session_leave(c, 1);
        ina__stream_fail_all(c, g->broken);
    }
    harvest(ln);
    ln->stats = c->stats;
    return c->head != NULL;
}

/* Busy polling (INA_BUSY_POLL_US) for a lane thread: until (ns), without
 * sleeping, look at the rings of its parts and at pfd (their sockets, its
 * wake-up descriptor), turn by turn as stream.c spins (ina__spin_turn).
 * @return 1 if something is ready, else 0. */
static int spin_poll(struct ina_runner *rn, struct pollfd *pfd, int n, uint64_t until)
{
    struct ina_lanes *g = rn->group;
    uint64_t now = ina__now_ns(), yielded = now;
    do {
        for (int i = rn->index; i < g->n; i += g->nrun)
            if (ina__transport_readable(g->lane[i].ctx) > 0) /* the rings (memory) */
                return 1;
        if (poll(pfd, (nfds_t)n, 0) > 0)
            return 1;
    } while (ina__spin_turn(&now, &yielded, until));
    return 0;
}

/* An idle lane thread, busy polling: spin, outside g->mu, until work is
 * queued for one of its parts, the context stops, or busy_poll_ns pass,
 * rather than sleep on its condition variable at once (a wake-up per small
 * operation). The caller looks at the inbox again under the lock after. */
static void idle_spin(struct ina_runner *rn, uint64_t spin_ns)
{
    struct ina_lanes *g = rn->group;
    pthread_mutex_unlock(&g->mu);
    uint64_t now = ina__now_ns(), until = now + spin_ns, yielded = now;
    int found;
    do {
        found = __atomic_load_n(&g->stop, __ATOMIC_RELAXED);
        for (int i = rn->index; !found && i < g->n; i += g->nrun)
            found = __atomic_load_n(&g->lane[i].in_count, __ATOMIC_RELAXED) != 0;
    } while (!found && ina__spin_turn(&now, &yielded, until));
    pthread_mutex_lock(&g->mu);
}

/*
 * Wait, at most 100 ms, until a part of this thread may have something to
 * do: a datagram on one of their sockets, a wake-up (work or stop), or the
 * earliest of their retransmission timers. A part whose ring holds data
 * (shm), or that finished an operation in the last round (its caller waits
 * for it), means no wait at all. Outside g->mu: only this thread touches its
 * parts' streams and live lists.
 */
static void runner_wait(struct ina_runner *rn)
{
    struct ina_lanes *g = rn->group;
    struct pollfd pfd[INA_XP_MAX * INA_MAX_PARTS + 1];
    int n = 0, sleep_ok = 1;
    uint64_t now = ina__now_ns(), wake = now + 100000000ull;
    for (int i = rn->index; i < g->n; i += g->nrun) {
        struct ina_ctx *c = g->lane[i].ctx;
        for (const struct ina_req *r = c->live; r; r = r->live_next)
            sleep_ok &= !r->done; /* finished in the last round: hand it over first */
        if (!c->head || c->broken)
            continue;
        n += ina__transport_pollfds(c, pfd + n); /* the socket, the group's */
        if (c->next_rto_ns && c->next_rto_ns < wake)
            wake = c->next_rto_ns;
    }
    pfd[n++] = (struct pollfd){.fd = rn->wake_fd, .events = POLLIN};
    struct ina_ctx *c0 = g->lane[rn->index].ctx; /* this thread's: it counts the spins */
    const int spun = sleep_ok && wake > now && ina__spin_now(c0);
    if (spun) {
        /* Spin first, before the rings' doorbells are armed (a switch rings
         * an armed one with a datagram per result). */
        uint64_t until = now + c0->busy_poll_ns;
        if (spin_poll(rn, pfd, n, until < wake ? until : wake)) {
            c0->stats.busy_poll_hits++;
            sleep_ok = 0;
        } else {
            c0->stats.busy_poll_sleeps++;
            now = ina__now_ns(); /* the spin used part of the time to the next timer */
        }
        ina__spin_learn(c0, 1, !sleep_ok, 0);
    }
    for (int i = rn->index; sleep_ok && i < g->n; i += g->nrun) {
        struct ina_ctx *c = g->lane[i].ctx;
        if (c->head && !c->broken)
            sleep_ok &= ina__transport_may_sleep(c); /* rings: arms the doorbell; 0 if data */
    }
    int ms = !sleep_ok || wake <= now ? 0 : (int)((wake - now + 999999) / 1000000);
    int ready = poll(pfd, (nfds_t)n, ms);
    if (!spun && ms > 0)
        ina__spin_learn(c0, 0, ready > 0, ina__now_ns() - now);
    if (ready > 0 && (pfd[n - 1].revents & POLLIN)) {
        uint64_t v;
        if (read(rn->wake_fd, &v, sizeof(v)) < 0) {
            /* nothing to do: the eventfd is non-blocking and was only a wake-up */
        }
    }
    for (int i = rn->index; i < g->n; i += g->nrun)
        if (g->lane[i].ctx->head)
            ina__transport_awake(g->lane[i].ctx);
}

static void *runner_main(void *arg)
{
    struct ina_runner *rn = arg;
    struct ina_lanes *g = rn->group;
    uint64_t spin_ns = g->lane[rn->index].ctx->busy_poll_ns;
    int spun = 0; /* idle: spun once already, so sleep now (the inbox was read after it) */
    pthread_mutex_lock(&g->mu);
    for (;;) {
        int active = 0;
        for (int i = rn->index; i < g->n; i += g->nrun)
            active |= lane_update(&g->lane[i]);
        if (g->stop)
            break;
        if (!active) {
            if (spin_ns && !spun && ina__spin_now(g->lane[rn->index].ctx)) {
                spun = 1;
                idle_spin(rn, spin_ns);
                continue;
            }
            spun = 0;
            pthread_cond_wait(&rn->cv, &g->mu);
            continue;
        }
        spun = 0;
        rn->busy = 1;
        pthread_mutex_unlock(&g->mu);
        /* Each part's deadlines fail its operations: this loop ends. */
        for (int i = rn->index; i < g->n; i += g->nrun)
            ina__stream_progress(g->lane[i].ctx, 0);
        runner_wait(rn);
        pthread_mutex_lock(&g->mu);
        rn->busy = 0;
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/*
 * One lane, no thread: the caller's thread does a lane thread's round inside
 * libina calls. New parts go into their streams, every stream is advanced
 * without blocking (sends, results, timers, deadlines), and finished parts
 * are handed to their operations.
 */
static void lanes_drive(struct ina_lanes *g)
{
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n; i++)
        lane_update(&g->lane[i]);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n; i++)
        ina__stream_progress(g->lane[i].ctx, 0);
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n; i++)
        lane_update(&g->lane[i]);
    /* A part that failed in this round breaks the parts before it now, not
     * at the next call (there may be none): their switches must hear it. */
    for (int i = 0; g->broken && i < g->n; i++)
        lane_update(&g->lane[i]);
    pthread_mutex_unlock(&g->mu);
}

static void lanes_stop(struct ina_lanes *g)
{
    pthread_mutex_lock(&g->mu);
    __atomic_store_n(&g->stop, 1, __ATOMIC_RELAXED); /* an idle_spin() reads it unlocked */
    for (int i = 0; i < g->nrun; i++) {
        pthread_cond_signal(&g->run[i].cv);
        uint64_t one = 1;
        if (g->run[i].wake_fd >= 0 && write(g->run[i].wake_fd, &one, sizeof(one)) < 0) {
            /* a wake-up is pending anyway */
        }
    }
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->nrun; i++)
        if (g->run[i].started)
            pthread_join(g->run[i].thread, NULL);
}

/* Free the threads' and the parts' bookkeeping (not the part contexts). */
static void lanes_destroy(struct ina_lanes *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->lane[i].inbox);
    for (int i = 0; i < g->nrun; i++) {
        if (g->run[i].wake_fd >= 0)
            close(g->run[i].wake_fd);
        pthread_cond_destroy(&g->run[i].cv);
    }
    pthread_cond_destroy(&g->done_cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int ina__lanes_start(struct ina_ctx *parent, struct ina_ctx **lane_ctx, int n, int nthreads)
{
    struct ina_lanes *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->done_cv, NULL);
    g->nrun = nthreads < 1 ? 1 : nthreads > n ? n : nthreads;
    g->caller_drives = g->nrun == 1; /* run[0]: the caller's thread, in lanes_drive */
    int rc = 0;
    for (int i = 0; i < g->nrun; i++) {
        struct ina_runner *rn = &g->run[i];
        rn->index = i;
        rn->group = g;
        pthread_cond_init(&rn->cv, NULL);
        rn->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (rn->wake_fd < 0 && rc == 0)
            rc = -errno;
    }
    g->n = n;
    for (int i = 0; i < n; i++) {
        struct ina_lane *ln = &g->lane[i];
        ln->ctx = lane_ctx[i];
        ln->group = g;
        ln->runner = &g->run[i % g->nrun];
        ln->inbox = calloc(INA_MAX_REQS, sizeof(*ln->inbox));
        if (!ln->inbox && rc == 0)
            rc = -ENOMEM;
    }
    for (int i = 0; i < g->nrun && rc == 0 && !g->caller_drives; i++) {
        rc = -pthread_create(&g->run[i].thread, NULL, runner_main, &g->run[i]);
        g->run[i].started = rc == 0;
    }
    if (rc != 0) {
        /* The caller closes the part contexts: take them back. */
        lanes_stop(g);
        lanes_destroy(g);
        return rc;
    }
    parent->lanes = g;
    return 0;
}

/*
 * Split an operation into one contiguous part per lane, cut at multiples of
 * lane 0's packet size (2k elements on the 16-bit wire) so that no part
 * starts with a short block. Parts of zero elements are not sent (every rank
 * skips the same ones).
 */
int ina__lanes_submit(struct ina_ctx *parent, struct ina_req *req)
{
    struct ina_lanes *g = parent->lanes;
    size_t elems = g->lane[0].ctx->elems, bytes = req->esize;
    if ((req->op == INA_SUM || req->op == INA_AVG) && ina__wire16_fmt(g->lane[0].ctx, req->dtype) >= 0)
        elems *= 2;
    size_t nblocks = (req->count + elems - 1) / elems;
    pthread_mutex_lock(&g->mu);
    if (g->broken) {
        say_lane_error(parent, g, INA_ERR_CLOSED);
        pthread_mutex_unlock(&g->mu);
        return INA_ERR_CLOSED;
    }
    req->remaining = 1; /* held until every part is queued */
    for (int i = 0; i < g->n; i++) {
        size_t b0 = nblocks * (size_t)i / (size_t)g->n, b1 = nblocks * (size_t)(i + 1) / (size_t)g->n;
        size_t e0 = b0 * elems, e1 = b1 * elems < req->count ? b1 * elems : req->count;
        if (e1 <= e0)
            continue;
        struct ina_lane *ln = &g->lane[i];
        struct ina_part *pt = &ln->inbox[(ln->in_head + ln->in_count) % INA_MAX_REQS];
        /* Cannot overflow: the parent has < INA_MAX_REQS requests. Atomic:
         * an idle lane thread reads it without the lock (idle_spin). */
        __atomic_add_fetch(&ln->in_count, 1, __ATOMIC_RELAXED);
        pt->parent = req;
        pt->src = req->src + e0 * bytes;
        pt->dst = req->dst + e0 * bytes;
        pt->offset = e0;
        pt->count = e1 - e0;
        req->remaining++;
        lane_wake(ln);
    }
    part_done(g, req, 0); /* count 0: done at once */
    pthread_mutex_unlock(&g->mu);
    if (g->caller_drives)
        lanes_drive(g); /* its first packets go now, as a plain context's do */
    return 0;
}

int ina__lanes_test(struct ina_req *req, int *done)
{
    struct ina_lanes *g = req->ctx->lanes;
    if (g->caller_drives)
        lanes_drive(g);
    pthread_mutex_lock(&g->mu);
    *done = req->done;
    int status = say_lane_error(req->ctx, g, req->done ? req->status : 0);
    pthread_mutex_unlock(&g->mu);
    return status;
}

int ina__lanes_wait(struct ina_req *req)
{
    struct ina_lanes *g = req->ctx->lanes;
    if (g->caller_drives) {
        /* Bounded: every part's deadline fails its operations (ina__stream_progress). */
        for (lanes_drive(g); !req->done; lanes_drive(g))
            runner_wait(&g->run[0]); /* a datagram, a ring's data, the next timer, or 100 ms */
        return lanes_failed(req->ctx, g, req->status);
    }
    struct ina_ctx *parent = req->ctx; /* its spin_misses: the caller's waits */
    const int spun = ina__spin_now(parent);
    uint64_t now = ina__now_ns();
    if (spun) { /* busy polling: the lane thread's part_done() may come any moment */
        uint64_t until = now + parent->busy_poll_ns, yielded = now;
        do {
            /* done is part_done()'s last write to req (release): status is
             * final, and no lane thread touches req again. */
            if (__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
                ina__spin_learn(parent, 1, 1, 0);
                return lanes_failed(parent, g, req->status);
            }
        } while (ina__spin_turn(&now, &yielded, until));
        ina__spin_learn(parent, 1, 0, 0);
    }
    pthread_mutex_lock(&g->mu);
    const int waited = !req->done;
    while (!req->done)
        pthread_cond_wait(&g->done_cv, &g->mu);
    if (!spun && waited)
        ina__spin_learn(parent, 0, 1, ina__now_ns() - now);
    int status = say_lane_error(req->ctx, g, req->status);
    pthread_mutex_unlock(&g->mu);
    return status;
}

void ina__lanes_stats(const struct ina_ctx *parent, ina_stats *st)
{
    struct ina_lanes *g = parent->lanes;
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n; i++) {
        const uint64_t *s = (const uint64_t *)&g->lane[i].stats;
        uint64_t *d = (uint64_t *)st;
        for (size_t k = 0; k < sizeof(*st) / sizeof(uint64_t); k++)
            d[k] += s[k];
    }
    st->ops = g->ops; /* operations, not parts */
    pthread_mutex_unlock(&g->mu);
}

void ina__lanes_close(struct ina_ctx *parent)
{
    struct ina_lanes *g = parent->lanes;
    lanes_stop(g);
    /* An operation in flight (started, not complete): a rank that quits
     * mid-operation ends it for the others, on every part, also one whose
     * share is done or was never taken from its queue (each part is a job
     * of its own at its switch, and the other ranks may wait on any). */
    int abort = 0;
    for (const struct ina_req *r = parent->live; r; r = r->live_next)
        abort |= !r->done;
    for (int i = 0; i < g->n; i++)
        ina__lane_close(g->lane[i].ctx, abort);
    lanes_destroy(g);
    parent->lanes = NULL;
}

const struct ina_ctx *ina__lanes_ctx(const struct ina_ctx *parent, int i)
{
    return parent->lanes->lane[i].ctx;
}

int ina__lanes_nparts(const struct ina_ctx *parent)
{
    return parent->lanes->n;
}
