/* metrics.c: the operator HTTP endpoint of ina-switch (Prometheus /metrics, JSON /jobs, abort). */
#include "switch/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "switch/log.h"

#define REQ_MAX 4096           /* bytes of request head we read; more is refused */
#define CLIENT_DEADLINE_MS 2000 /* per connection, reading and writing together */

/* ---- Shard side ---------------------------------------------------------- */

int ina_sw_pub_init(struct ina_sw_pub *pub)
{
    memset(pub, 0, sizeof(*pub));
    atomic_init(&pub->pending, 0);
    return pthread_mutex_init(&pub->mu, NULL) == 0 ? 0 : -ENOMEM;
}

void ina_sw_pub_destroy(struct ina_sw_pub *pub) { pthread_mutex_destroy(&pub->mu); }

void ina_sw_pub_publish(struct ina_sw_pub *pub, const struct ina_switch *sw)
{
    if (pthread_mutex_trylock(&pub->mu) != 0)
        return; /* the HTTP thread is reading: publish next period */
    pub->c = sw->c;
    pub->nslots = sw->p.nslots;
    unsigned n = 0;
    for (int i = 0; i < INA_SW_MAX_JOBS; i++)
        if (sw->jobs[i].state != INA_JOB_FREE)
            pub->jobs[n++] = sw->jobs[i];
    pub->njobs = n;
    pthread_mutex_unlock(&pub->mu);
}

unsigned ina_sw_pub_take_aborts(struct ina_sw_pub *pub, uint16_t ids[INA_SW_MAILBOX])
{
    if (atomic_load_explicit(&pub->pending, memory_order_relaxed) == 0 ||
        pthread_mutex_trylock(&pub->mu) != 0)
        return 0;
    unsigned n = pub->nabort;
    memcpy(ids, pub->abort_ids, n * sizeof(ids[0]));
    pub->nabort = 0;
    atomic_store_explicit(&pub->pending, 0, memory_order_relaxed);
    pthread_mutex_unlock(&pub->mu);
    return n;
}

/* ---- Output buffer ------------------------------------------------------- */

struct buf {
    char *p;
    size_t n, cap;
    int oom;
};

static void bputs(struct buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

__attribute__((format(printf, 2, 3))) static void bprintf(struct buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        bputs(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A job name (bytes from the network) as the inside of a quoted Prometheus
 * label value or JSON string: \ and " escaped, anything outside printable
 * ASCII replaced by '?', so the output is always valid UTF-8. */
static void bname(struct buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char c = (*p < 0x20 || *p > 0x7e) ? '?' : (char)*p;
        if (c == '\\' || c == '"')
            bputs(b, "\\", 1);
        bputs(b, &c, 1);
    }
}

/* ---- The view: every shard's snapshot, gathered --------------------------- */

struct view {
    struct ina_sw_counters c;
    uint32_t nslots, slots_used;
    unsigned njobs;
    struct ina_job *jobs;
};

struct ina_metrics {
    int fd;
    pthread_t thread;
    atomic_int stop;
    struct ina_sw_pub *pubs;
    unsigned npubs;
    uint64_t start_ns;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int view_collect(struct ina_metrics *m, struct view *v)
{
    memset(v, 0, sizeof(*v));
    v->jobs = malloc((size_t)m->npubs * INA_SW_MAX_JOBS * sizeof(*v->jobs));
    if (!v->jobs)
        return -ENOMEM;
    for (unsigned s = 0; s < m->npubs; s++) {
        struct ina_sw_pub *pub = &m->pubs[s];
        pthread_mutex_lock(&pub->mu);
        ina_sw_counters_add(&v->c, &pub->c);
        v->nslots += pub->nslots;
        memcpy(v->jobs + v->njobs, pub->jobs, pub->njobs * sizeof(*v->jobs));
        v->njobs += pub->njobs;
        pthread_mutex_unlock(&pub->mu);
    }
    for (unsigned i = 0; i < v->njobs; i++)
        if (v->jobs[i].state == INA_JOB_ACTIVE)
            v->slots_used += v->jobs[i].window;
    return 0;
}

static const char *state_name(enum ina_job_state s)
{
    return s == INA_JOB_ACTIVE    ? "active"
           : s == INA_JOB_JOINING ? "joining"
           : s == INA_JOB_WAITING ? "waiting"
                                  : "free";
}

static uint32_t job_slots(const struct ina_job *j)
{
    return j->state == INA_JOB_ACTIVE ? j->window : 0;
}

/* ---- Prometheus text format 0.0.4 ------------------------------------------ */

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
    bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void job_labels(struct buf *b, const struct ina_job *j)
{
    bprintf(b, "id=\"%u\",job=\"", j->id);
    bname(b, j->name);
    bprintf(b, "\",lane=\"%u\"", j->lane);
}

#define SW_COUNTERS(X)                                                                     \
    X(rx_packets, "Datagrams received")                                                    \
    X(rx_bytes, "Bytes received (UDP payload)")                                            \
    X(tx_packets, "Datagrams sent")                                                        \
    X(tx_bytes, "Bytes sent (UDP payload)")                                                \
    X(tx_errors, "Datagrams the kernel refused to send")                                   \
    X(contributions, "DATA packets added into a slot")                                     \
    X(completions, "Rounds completed (sums sent)")                                         \
    X(results_resent, "Duplicates answered with a finished result")                        \
    X(jobs_started, "Jobs started (all ranks joined)")                                     \
    X(jobs_ended, "Jobs ended (all ranks left)")                                           \
    X(jobs_aborted, "Jobs aborted (a rank failed, idle timeout, mismatch, operator)")      \
    X(jobs_refused, "Jobs refused (slot pool or job table full)")                          \
    X(join_redirects, "JOINs redirected to the dataplane thread that owns the lane")        \
    X(shm_attached, "Ranks that attached shared-memory rings")                              \
    X(shm_rx_packets, "Datagrams taken from shared-memory rings")                           \
    X(shm_tx_packets, "Results put into shared-memory rings")                               \
    X(doorbells, "Doorbells sent to workers asleep on a ring")                              \
    X(joins_withdrawn, "Registrations withdrawn by a rank that gave up joining")            \
    X(joins_expired, "Registrations forgotten: deadline passed or the rank fell silent")    \
    X(tree_joins, "TREE_JOINs of child switches registered")                                \
    X(up_packets, "Partial sums sent to the parent (--parent)")                             \
    X(up_resent, "Partial sums sent to the parent again (a worker retransmitted)")          \
    X(up_results, "Results of the parent passed down to the workers")

#define JOB_GAUGES(X)                                                                 \
    X(world, "Ranks of the job", (double)j->world)                                    \
    X(lanes, "Lanes of the job's group", (double)(j->nlanes ? j->nlanes : 1))          \
    X(members, "Ranks that have joined", (double)j->njoined)                           \
    X(slots, "Slots held", (double)job_slots(j))                                       \
    X(state, "Job state: 1 joining, 2 waiting for slots, 3 active", (double)j->state)                       \
    X(age_seconds, "Seconds since the first JOIN", (double)(now - j->created_ns) / 1e9)

#define JOB_COUNTERS(X)                                                      \
    X(rx_packets, "DATA datagrams carrying the job's id")                   \
    X(rx_bytes, "Bytes of those datagrams")                                 \
    X(contributions, "Contributions added")                                 \
    X(completions, "Rounds completed")                                      \
    X(retransmits, "Retransmitted duplicates (answered or dropped pending)")

static void render_metrics(struct ina_metrics *m, const struct view *v, struct buf *b)
{
    uint64_t now = mono_ns();
    family(b, "ina_switch_info", "gauge", "Version of this ina-switch");
    bprintf(b, "ina_switch_info{version=\"%s\"} 1\n", ina_version_string());
    family(b, "ina_switch_threads", "gauge", "Dataplane threads");
    bprintf(b, "ina_switch_threads %u\n", m->npubs);
    family(b, "ina_switch_uptime_seconds", "gauge", "Seconds since start");
    bprintf(b, "ina_switch_uptime_seconds %.3f\n", (double)(now - m->start_ns) / 1e9);
    family(b, "ina_switch_slots", "gauge", "Slots in the pool");
    bprintf(b, "ina_switch_slots %u\n", v->nslots);
    family(b, "ina_switch_slots_used", "gauge", "Slots held by active jobs");
    bprintf(b, "ina_switch_slots_used %u\n", v->slots_used);
    family(b, "ina_switch_jobs", "gauge", "Jobs in the job tables (joining, waiting or active)");
    bprintf(b, "ina_switch_jobs %u\n", v->njobs);
#define X(f, help)                                                          \
    family(b, "ina_switch_" #f "_total", "counter", help);                  \
    bprintf(b, "ina_switch_" #f "_total %llu\n", (unsigned long long)v->c.f);
    SW_COUNTERS(X)
#undef X
    family(b, "ina_switch_drops_total", "counter", "Datagrams dropped, by cause");
    for (int d = 0; d < INA_DROP__COUNT; d++)
        bprintf(b, "ina_switch_drops_total{cause=\"%s\"} %llu\n", ina_drop_name(d),
                (unsigned long long)v->c.drops[d]);

#define X(f, help, val)                                               \
    family(b, "ina_job_" #f, "gauge", help);                          \
    for (unsigned i = 0; i < v->njobs; i++) {                         \
        const struct ina_job *j = &v->jobs[i];                        \
        bputs(b, "ina_job_" #f "{", sizeof("ina_job_" #f "{") - 1);    \
        job_labels(b, j);                                             \
        bprintf(b, "} %.17g\n", val);                                 \
    }
    JOB_GAUGES(X)
#undef X
#define X(f, help)                                                              \
    family(b, "ina_job_" #f "_total", "counter", help);                         \
    for (unsigned i = 0; i < v->njobs; i++) {                                   \
        const struct ina_job *j = &v->jobs[i];                                  \
        bputs(b, "ina_job_" #f "_total{", sizeof("ina_job_" #f "_total{") - 1); \
        job_labels(b, j);                                                       \
        bprintf(b, "} %llu\n", (unsigned long long)j->c.f);                     \
    }
    JOB_COUNTERS(X)
#undef X
    family(b, "ina_job_drops_total", "counter", "Datagrams of the job dropped, by cause");
    for (unsigned i = 0; i < v->njobs; i++)
        for (int d = 0; d < INA_DROP__COUNT; d++) {
            bputs(b, "ina_job_drops_total{", 20);
            job_labels(b, &v->jobs[i]);
            bprintf(b, ",cause=\"%s\"} %llu\n", ina_drop_name(d),
                    (unsigned long long)v->jobs[i].c.drops[d]);
        }
    static const char *const wnames[3] = {"ina_worker_joined", "ina_worker_rx_packets_total",
                                          "ina_worker_rx_bytes_total"};
    static const char *const whelp[3] = {"1 if the rank has joined",
                                         "DATA datagrams from the rank's registered address",
                                         "Bytes of those datagrams"};
    for (int k = 0; k < 3; k++) {
        family(b, wnames[k], k ? "counter" : "gauge", whelp[k]);
        for (unsigned i = 0; i < v->njobs; i++) {
            const struct ina_job *j = &v->jobs[i];
            for (int r = 0; r < j->world; r++) {
                const struct ina_member *mb = &j->members[r];
                unsigned long long val = k == 0 ? mb->joined : k == 1 ? mb->rx_packets : mb->rx_bytes;
                bprintf(b, "%s{", wnames[k]);
                job_labels(b, j);
                bprintf(b, ",rank=\"%d\"} %llu\n", r, val);
            }
        }
    }
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_counters(struct buf *b, const struct ina_sw_counters *c)
{
    bputs(b, "{", 1);
#define X(f, help) bprintf(b, "\"" #f "\":%llu,", (unsigned long long)c->f);
    SW_COUNTERS(X)
#undef X
    bputs(b, "\"drops\":{", 9);
    for (int d = 0; d < INA_DROP__COUNT; d++)
        bprintf(b, "%s\"%s\":%llu", d ? "," : "", ina_drop_name(d),
                (unsigned long long)c->drops[d]);
    bputs(b, "}}", 2);
}

static void render_counters(struct ina_metrics *m, const struct view *v, struct buf *b)
{
    bprintf(b, "{\"version\":\"%s\",\"threads\":%u,\"slots\":%u,\"slots_used\":%u,\"jobs\":%u,"
               "\"counters\":",
            ina_version_string(), m->npubs, v->nslots, v->slots_used, v->njobs);
    json_counters(b, &v->c);
    bputs(b, "}\n", 2);
}

static void render_jobs(const struct view *v, struct buf *b)
{
    uint64_t now = mono_ns();
    bputs(b, "{\"jobs\":[", 9);
    for (unsigned i = 0; i < v->njobs; i++) {
        const struct ina_job *j = &v->jobs[i];
        bprintf(b, "%s{\"id\":%u,\"name\":\"", i ? "," : "", j->id);
        bname(b, j->name);
        bprintf(b,
                "\",\"lane\":%u,\"lanes\":%u,\"world\":%d,\"joined\":%d,\"left\":%d,"
                "\"state\":\"%s\",\"slots\":%u,\"session\":\"%08x\",\"age_s\":%.3f,",
                j->lane, j->nlanes ? j->nlanes : 1, j->world, j->njoined, j->nleft,
                state_name(j->state), job_slots(j), j->session,
                (double)(now - j->created_ns) / 1e9);
#define X(f, help) bprintf(b, "\"" #f "\":%llu,", (unsigned long long)j->c.f);
        JOB_COUNTERS(X)
#undef X
        bputs(b, "\"drops\":{", 9);
        for (int d = 0; d < INA_DROP__COUNT; d++)
            bprintf(b, "%s\"%s\":%llu", d ? "," : "", ina_drop_name(d),
                    (unsigned long long)j->c.drops[d]);
        bputs(b, "},\"workers\":[", 13);
        for (int r = 0; r < j->world; r++) {
            const struct ina_member *mb = &j->members[r];
            char ip[INET_ADDRSTRLEN] = "";
            if (mb->joined)
                inet_ntop(AF_INET, &mb->addr.sin_addr, ip, sizeof(ip));
            bprintf(b,
                    "%s{\"rank\":%d,\"joined\":%s,\"left\":%s,\"addr\":\"%s:%u\","
                    "\"rx_packets\":%llu,\"rx_bytes\":%llu}",
                    r ? "," : "", r, mb->joined ? "true" : "false", mb->left ? "true" : "false",
                    ip, ntohs(mb->addr.sin_port), (unsigned long long)mb->rx_packets,
                    (unsigned long long)mb->rx_bytes);
        }
        bputs(b, "]}", 2);
    }
    bputs(b, "]}\n", 3);
}

/* ---- Abort ---------------------------------------------------------------- */

/* @return 202 queued, 404 no such job, 503 mailbox full. */
static int request_abort(struct ina_metrics *m, const struct view *v, unsigned long id, int evict)
{
    const struct ina_job *found = NULL;
    for (unsigned i = 0; i < v->njobs; i++)
        if (v->jobs[i].id == id)
            found = &v->jobs[i];
    unsigned shard = found ? (unsigned)(id - 1) / INA_SW_MAX_JOBS : 0;
    if (!found || shard >= m->npubs)
        return 404;
    struct ina_sw_pub *pub = &m->pubs[shard];
    int rc = 503;
    pthread_mutex_lock(&pub->mu);
    if (pub->nabort < INA_SW_MAILBOX) {
        pub->abort_ids[pub->nabort++] = (uint16_t)(id | (evict ? INA_SW_EVICT_FLAG : 0));
        atomic_store_explicit(&pub->pending, pub->nabort, memory_order_relaxed);
        rc = 202;
    }
    pthread_mutex_unlock(&pub->mu);
    if (rc == 202)
        ina_log(INA_LOG_INFO, evict ? "evict_requested" : "abort_requested", INA_KV_I("job", id),
                INA_KV_S("name", found->name),
                INA_KV_I("lane", found->lane));
    return rc;
}

/* ---- HTTP ------------------------------------------------------------------ */

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = mono_ns();
    return now >= deadline ? 0 : (int)((deadline - now) / 1000000 + 1);
}

static void send_all(int fd, const char *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) <= 0)
            return; /* slow or gone client: give up, the next one waits */
    }
}

static void respond(int fd, int status, const char *ctype, const struct buf *body,
                    uint64_t deadline)
{
    const char *reason = status == 200 ? "OK" : status == 202 ? "Accepted"
                       : status == 400 ? "Bad Request" : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed" : status == 431
                           ? "Request Header Fields Too Large" : "Service Unavailable";
    char head[256];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      status, reason, ctype, body && body->p ? body->n : 0);
    send_all(fd, head, (size_t)hn, deadline);
    if (body && body->p)
        send_all(fd, body->p, body->n, deadline);
}

static void respond_text(int fd, int status, const char *msg, uint64_t deadline)
{
    struct buf b = {0};
    bprintf(&b, "{\"error\":\"%s\"}\n", msg);
    respond(fd, status, "application/json", &b, deadline);
    free(b.p);
}

static void serve_client(struct ina_metrics *m, int fd)
{
    uint64_t deadline = mono_ns() + (uint64_t)CLIENT_DEADLINE_MS * 1000000ull;
    char req[REQ_MAX + 1];
    size_t n = 0;
    req[0] = '\0';
    while (!strstr(req, "\r\n\r\n") && !strstr(req, "\n\n")) {
        if (n == REQ_MAX) {
            respond_text(fd, 431, "request too large", deadline);
            return;
        }
        ssize_t r = recv(fd, req + n, REQ_MAX - n, 0);
        if (r > 0) {
            n += (size_t)r;
            req[n] = '\0';
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) <= 0)
            return; /* too slow: drop the connection */
    }
    char method[8], path[256];
    if (sscanf(req, "%7s %255s", method, path) != 2) {
        respond_text(fd, 400, "bad request", deadline);
        return;
    }
    char *q = strchr(path, '?');
    if (q)
        *q = '\0'; /* no query parameters are used */
    int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    unsigned long id = 0;
    int idlen = 0;
    int is_abort = sscanf(path, "/jobs/%lu/abort%n", &id, &idlen) == 1 &&
                   path[idlen] == '\0';
    idlen = 0;
    int is_evict = !is_abort && sscanf(path, "/jobs/%lu/evict%n", &id, &idlen) == 1 &&
                   idlen > 0 && path[idlen] == '\0';
    if (is_evict && id >= INA_SW_EVICT_FLAG)
        is_evict = 0; /* not a job id: 404 below */
    is_abort |= is_evict;
    if (strcmp(path, "/metrics") != 0 && strcmp(path, "/jobs") != 0 &&
        strcmp(path, "/counters") != 0 && !is_abort) {
        respond_text(fd, 404, "no such path (try /metrics, /jobs, /counters, POST /jobs/ID/abort, "
                              "POST /jobs/ID/evict)",
                     deadline);
        return;
    }
    if ((is_abort && !post) || (!is_abort && !get)) {
        respond_text(fd, 405, is_abort ? "use POST" : "use GET", deadline);
        return;
    }
    struct view v;
    if (view_collect(m, &v) != 0) {
        respond_text(fd, 503, "out of memory", deadline);
        return;
    }
    struct buf b = {0};
    int status = 200;
    const char *ctype = "application/json";
    if (is_abort) {
        status = request_abort(m, &v, id, is_evict);
        bprintf(&b, "{\"job\":%lu,\"%s\":\"%s\"}\n", id, is_evict ? "evict" : "abort",
                status == 202 ? "requested" : status == 404 ? "no such job" : "mailbox full");
    } else if (strcmp(path, "/metrics") == 0) {
        ctype = "text/plain; version=0.0.4; charset=utf-8";
        render_metrics(m, &v, &b);
    } else if (strcmp(path, "/jobs") == 0) {
        render_jobs(&v, &b);
    } else {
        render_counters(m, &v, &b);
    }
    free(v.jobs);
    if (b.oom)
        respond_text(fd, 503, "out of memory", deadline);
    else
        respond(fd, status, ctype, &b, deadline);
    free(b.p);
}

static void *metrics_main(void *arg)
{
    struct ina_metrics *m = arg;
    while (!atomic_load(&m->stop)) {
        struct pollfd pfd = {.fd = m->fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        int c = accept4(m->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0)
            continue;
        serve_client(m, c);
        close(c);
    }
    return NULL;
}

struct ina_metrics *ina_metrics_start(const struct sockaddr_in *addr, const char *port_file,
                                      struct ina_sw_pub *pubs, unsigned npubs)
{
    struct ina_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->pubs = pubs;
    m->npubs = npubs;
    m->start_ns = mono_ns();
    atomic_init(&m->stop, 0);
    struct sockaddr_in a = *addr;
    int one = 1;
    m->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m->fd < 0 || setsockopt(m->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(m->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(m->fd, 16) != 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
        ina_log(INA_LOG_ERROR, "metrics_listen_failed", INA_KV_S("addr", ip),
                INA_KV_I("port", ntohs(a.sin_port)), INA_KV_S("reason", strerror(errno)));
        goto fail;
    }
    socklen_t alen = sizeof(a);
    getsockname(m->fd, (struct sockaddr *)&a, &alen);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%u\n", ntohs(a.sin_port)) < 0 || fclose(f) != 0 ||
            rename(tmp, port_file) != 0) {
            ina_log(INA_LOG_ERROR, "metrics_port_file_failed", INA_KV_S("path", port_file),
                    INA_KV_S("reason", strerror(errno)));
            goto fail;
        }
    }
    if (pthread_create(&m->thread, NULL, metrics_main, m) != 0)
        goto fail;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
    ina_log(INA_LOG_INFO, "metrics_listening", INA_KV_S("addr", ip),
            INA_KV_I("port", ntohs(a.sin_port)));
    return m;
fail:
    if (m->fd >= 0)
        close(m->fd);
    free(m);
    return NULL;
}

void ina_metrics_stop(struct ina_metrics *m)
{
    if (!m)
        return;
    atomic_store(&m->stop, 1);
    pthread_join(m->thread, NULL);
    close(m->fd);
    free(m);
}
