/* lanes.c: a context of several lanes: one thread, socket and window per lane, each op split over them. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lib/internal.h"

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
 * Threads and locking: one mutex per context, taken per operation and per
 * progress round of a lane (a burst of packets), never per packet. A lane
 * thread owns its lane context; the caller's thread touches it only after
 * the threads have stopped (finalize).
 */

struct ina_part {
    struct ina_req *parent;
    const uint8_t *src;
    uint8_t *dst;
    size_t count;
};

struct ina_lane {
    struct ina_ctx *ctx;
    struct ina_lanes *group;
    pthread_t thread;
    int started;
    int busy;              /* in ina__stream_progress(): wake it with wake_fd */
    struct ina_part *inbox; /* ring of INA_MAX_REQS parts not yet taken by the thread */
    unsigned in_head, in_count;
    pthread_cond_t cv; /* work arrived, or stop */
    ina_stats stats;   /* the lane's counters as of its last round */
};

struct ina_lanes {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* some operation finished */
    int stop;
    int broken; /* first error of any part: breaks the whole context */
    char errmsg[INA_ERRMSG_LEN]; /* the failing lane's ina_last_error() message */
    uint64_t ops;
    struct ina_lane lane[INA_MAX_LANES];
};

static void lane_wake(struct ina_lane *ln)
{
    pthread_cond_signal(&ln->cv);
    if (ln->busy) {
        uint64_t one = 1;
        if (write(ln->ctx->wake_fd, &one, sizeof(one)) < 0) {
            /* counter saturated: a wake-up is pending anyway */
        }
    }
}

/* A part finished (status): account it to its parent. Under g->mu. */
static void part_done(struct ina_lanes *g, struct ina_req *parent, int status)
{
    if (status && !parent->status)
        parent->status = status;
    /* INA_ERR_RANGE reports a completed part (fixed point: some elements are
     * NaN, on every rank alike); it breaks nothing. */
    if (status && status != INA_ERR_RANGE && !g->broken) {
        /* One lane failed: so does every operation after it, on every lane. */
        g->broken = status;
        for (int i = 0; i < g->n; i++)
            lane_wake(&g->lane[i]);
    }
    if (--parent->remaining == 0) {
        parent->done = 1;
        if (!parent->status)
            g->ops++;
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
        ln->in_count--;
        struct ina_req *r = ina__req_create(c, pt->src, pt->dst, pt->count, pt->parent->dtype,
                                            pt->parent->op);
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

static void *lane_main(void *arg)
{
    struct ina_lane *ln = arg;
    struct ina_lanes *g = ln->group;
    struct ina_ctx *c = ln->ctx;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        take_inbox(ln);
        if (g->broken && c->head)
            ina__stream_fail_all(c, g->broken); /* another lane failed */
        harvest(ln);
        ln->stats = c->stats;
        if (g->stop)
            break;
        if (!c->head) {
            pthread_cond_wait(&ln->cv, &g->mu);
            continue;
        }
        ln->busy = 1;
        pthread_mutex_unlock(&g->mu);
        ina__stream_progress(c, 100); /* bounded: the lane's deadlines fail its parts */
        pthread_mutex_lock(&g->mu);
        ln->busy = 0;
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static void lanes_stop(struct ina_lanes *g)
{
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    for (int i = 0; i < g->n; i++)
        lane_wake(&g->lane[i]);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n; i++)
        if (g->lane[i].started)
            pthread_join(g->lane[i].thread, NULL);
}

static void lanes_free(struct ina_lanes *g)
{
    for (int i = 0; i < g->n; i++) {
        struct ina_lane *ln = &g->lane[i];
        if (ln->ctx->wake_fd >= 0)
            close(ln->ctx->wake_fd);
        ln->ctx->wake_fd = -1;
        ina__lane_close(ln->ctx);
        free(ln->inbox);
        pthread_cond_destroy(&ln->cv);
    }
    pthread_cond_destroy(&g->done_cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int ina__lanes_start(struct ina_ctx *parent, struct ina_ctx **lane_ctx, int n)
{
    struct ina_lanes *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->done_cv, NULL);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct ina_lane *ln = &g->lane[i];
        ln->ctx = lane_ctx[i];
        ln->group = g;
        pthread_cond_init(&ln->cv, NULL);
        g->n = i + 1;
        ln->inbox = calloc(INA_MAX_REQS, sizeof(*ln->inbox));
        ln->ctx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (!ln->inbox || ln->ctx->wake_fd < 0)
            rc = ln->inbox ? -errno : -ENOMEM;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        rc = -pthread_create(&g->lane[i].thread, NULL, lane_main, &g->lane[i]);
        g->lane[i].started = rc == 0;
    }
    if (rc != 0) {
        /* The caller closes the lane contexts: take them back. */
        lanes_stop(g);
        for (int i = 0; i < g->n; i++) {
            if (g->lane[i].ctx->wake_fd >= 0)
                close(g->lane[i].ctx->wake_fd);
            g->lane[i].ctx->wake_fd = -1;
            free(g->lane[i].inbox);
            pthread_cond_destroy(&g->lane[i].cv);
        }
        pthread_cond_destroy(&g->done_cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return rc;
    }
    parent->lanes = g;
    return 0;
}

/*
 * Split an operation into one contiguous part per lane, cut at multiples of
 * lane 0's packet size so that no part starts with a short block. Parts of
 * zero elements are not sent (every rank skips the same ones).
 */
int ina__lanes_submit(struct ina_ctx *parent, struct ina_req *req)
{
    struct ina_lanes *g = parent->lanes;
    size_t elems = g->lane[0].ctx->elems, bytes = req->esize;
    size_t nblocks = (req->count + elems - 1) / elems;
    pthread_mutex_lock(&g->mu);
    if (g->broken) {
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
        ln->in_count++; /* cannot overflow: the parent has < INA_MAX_REQS requests */
        pt->parent = req;
        pt->src = req->src + e0 * bytes;
        pt->dst = req->dst + e0 * bytes;
        pt->count = e1 - e0;
        req->remaining++;
        lane_wake(ln);
    }
    part_done(g, req, 0); /* count 0: done at once */
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int ina__lanes_test(struct ina_req *req, int *done)
{
    struct ina_lanes *g = req->ctx->lanes;
    pthread_mutex_lock(&g->mu);
    *done = req->done;
    int status = req->done ? req->status : 0;
    pthread_mutex_unlock(&g->mu);
    return status;
}

int ina__lanes_wait(struct ina_req *req)
{
    struct ina_lanes *g = req->ctx->lanes;
    pthread_mutex_lock(&g->mu);
    while (!req->done)
        pthread_cond_wait(&g->done_cv, &g->mu);
    int status = req->status;
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
    /* Parts still queued or in flight: their lanes leave with abort (a
     * rank that quits mid-operation ends it for the others). */
    lanes_free(g);
    parent->lanes = NULL;
}

const struct ina_ctx *ina__lanes_ctx(const struct ina_ctx *parent, int i)
{
    return parent->lanes->lane[i].ctx;
}

void ina__lanes_last_error(struct ina_ctx *parent)
{
    struct ina_lanes *g = parent->lanes;
    pthread_mutex_lock(&g->mu);
    if (g->errmsg[0])
        snprintf(parent->errmsg, sizeof(parent->errmsg), "%s", g->errmsg);
    pthread_mutex_unlock(&g->mu);
}
