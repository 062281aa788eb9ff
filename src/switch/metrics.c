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

#include "common/clock.h"
#include "common/http.h"
#include "common/log.h"
#include "common/opauth.h"


/* ---- Shard side ---------------------------------------------------------- */

int ina__sw_pub_init(struct ina_sw_pub *pub)
{
    memset(pub, 0, sizeof(*pub));
    atomic_init(&pub->pending, 0);
    return pthread_mutex_init(&pub->mu, NULL) == 0 ? 0 : -ENOMEM;
}

void ina__sw_pub_destroy(struct ina_sw_pub *pub) { pthread_mutex_destroy(&pub->mu); }

void ina__sw_pub_publish(struct ina_sw_pub *pub, const struct ina_switch *sw)
{
    if (pthread_mutex_trylock(&pub->mu) != 0)
        return; /* the HTTP thread is reading: publish next period */
    pub->c = sw->c;
    pub->nslots = sw->p.nslots;
    pub->has_secret = sw->p.has_secret; /* SIGHUP's new secret reaches the view too */
    pub->secret = sw->p.secret;
    unsigned n = 0;
    for (int i = 0; i < INA_SW_MAX_JOBS; i++)
        if (sw->jobs[i].state != INA_JOB_FREE)
            pub->jobs[n++] = sw->jobs[i];
    pub->njobs = n;
    pthread_mutex_unlock(&pub->mu);
}

unsigned ina__sw_pub_take_aborts(struct ina_sw_pub *pub, uint16_t ids[INA_SW_MAILBOX])
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

/* ---- The view: every shard's snapshot, gathered --------------------------- */

struct view {
    struct ina_sw_counters c;
    uint32_t nslots, slots_used;
    unsigned njobs;
    struct ina_job *jobs;
    int has_secret; /* thread 0's: reading and acting need proof of it */
    struct ina_hmac_key secret;
};

struct ina_metrics {
    struct ina_http *http;
    struct ina_sw_pub *pubs;
    unsigned npubs;
    uint64_t start_ns;
    struct ina_opauth auth;   /* challenges handed out and used (HTTP thread only) */
    uint64_t refusal_logged_ns; /* refused acts are logged at most once a second */
};

static int view_collect(struct ina_metrics *m, struct view *v)
{
    memset(v, 0, sizeof(*v));
    v->jobs = malloc((size_t)m->npubs * INA_SW_MAX_JOBS * sizeof(*v->jobs));
    if (!v->jobs)
        return -ENOMEM;
    for (unsigned s = 0; s < m->npubs; s++) {
        struct ina_sw_pub *pub = &m->pubs[s];
        pthread_mutex_lock(&pub->mu);
        ina__sw_counters_add(&v->c, &pub->c);
        v->nslots += pub->nslots;
        if (s == 0) {
            v->has_secret = pub->has_secret;
            v->secret = pub->secret;
        }
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

static void job_labels(struct ina_buf *b, const struct ina_job *j)
{
    ina__bprintf(b, "id=\"%u\",job=\"", j->id);
    ina__bname(b, j->name);
    ina__bprintf(b, "\",lane=\"%u\"", j->lane);
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
    X(jobs_shrunk, "Jobs admitted with fewer slots than proposed (pool busy)")              \
    X(jobs_waited, "Jobs that waited for free slots before starting")                       \
    X(jobs_evicted, "Jobs whose slots the operator took (moved to their host fallback)")    \
    X(jobs_drained, "Jobs ended by a drain (SIGTERM): ABORT or JOIN_NAK SHUTDOWN")          \
    X(joins_refused_draining, "JOINs of new jobs refused while draining")                  \
    X(secret_reloads, "Shared secret read again on SIGHUP")                                  \
    X(shm_attached, "Ranks that attached shared-memory rings")                              \
    X(shm_rx_packets, "Datagrams taken from shared-memory rings")                           \
    X(shm_tx_packets, "Results put into shared-memory rings")                               \
    X(doorbells, "Doorbells sent to workers asleep on a ring")                              \
    X(shm_faults, "Rings whose object shrank under the switch (job aborted, switch alive)")  \
    X(joins_withdrawn, "Registrations withdrawn by a rank that gave up joining")            \
    X(joins_expired, "Registrations forgotten: deadline passed or the rank fell silent")    \
    X(join_challenges, "JOINs answered with a fresh cookie (shared secret)")                  \
    X(joins_replayed, "JOINs refused: they name a registration of a session that ended")     \
    X(joins_refused_taken, "JOINs refused: a rank of theirs is registered, alive, elsewhere") \
    X(tree_joins, "TREE_JOINs of child switches registered")                                \
    X(up_packets, "Partial sums sent to the parent (--parent)")                             \
    X(up_resent, "Partial sums sent to the parent again (a worker retransmitted)")          \
    X(up_results, "Results of the parent passed down to the workers")                      \
    X(sparse_rx_packets, "Block-sparse DATA datagrams from ranks (duplicates included)")     \
    X(sparse_rx_bytes, "Bytes of those datagrams (UDP payload)")                            \
    X(sparse_rx_blocks, "Blocks carried by block-sparse DATA")                               \
    X(sparse_tx_packets, "Block-sparse RESULT datagrams queued (one per copy)")              \
    X(sparse_tx_bytes, "Bytes of those datagrams (UDP payload)")                            \
    X(sparse_tx_blocks, "Blocks carried by block-sparse RESULTs")                            \
    X(hot_installs, "Hot tables (epochs) activated")                                         \
    X(hot_keyed, "Keyed hot entries added into slots")                                      \
    X(hot_bitmap, "Values of bitmap hot blocks added into slots")                           \
    X(hot_refusals, "Hot-table installs refused: --hot-memory full")                          \
    X(hot_samples, "Sampled (key, count) pairs counted for a hot set")                      \
    X(hot_sample_drops, "Sampled pairs not counted: --hot-memory full")

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

/* details 0: the switch's totals only (no proof of the secret was given). */
static void render_metrics(struct ina_metrics *m, const struct view *v, int details,
                           const struct ina_http_stats *hs, struct ina_buf *b)
{
    uint64_t now = ina__clock_ns();
    ina__prom_family(b, "ina_switch_info", "gauge", "Version of this ina-switch");
    ina__bprintf(b, "ina_switch_info{version=\"%s\"} 1\n", ina_version_string());
    ina__prom_family(b, "ina_switch_threads", "gauge", "Dataplane threads");
    ina__bprintf(b, "ina_switch_threads %u\n", m->npubs);
    ina__prom_family(b, "ina_switch_uptime_seconds", "gauge", "Seconds since start");
    ina__bprintf(b, "ina_switch_uptime_seconds %.3f\n", (double)(now - m->start_ns) / 1e9);
    ina__prom_family(b, "ina_switch_slots", "gauge", "Slots in the pool");
    ina__bprintf(b, "ina_switch_slots %u\n", v->nslots);
    ina__prom_family(b, "ina_switch_slots_used", "gauge", "Slots held by active jobs");
    ina__bprintf(b, "ina_switch_slots_used %u\n", v->slots_used);
    ina__prom_family(b, "ina_switch_jobs", "gauge", "Jobs in the job tables (joining, waiting or active)");
    ina__bprintf(b, "ina_switch_jobs %u\n", v->njobs);
#define X(f, help)                                                          \
    ina__prom_family(b, "ina_switch_" #f "_total", "counter", help);                  \
    ina__bprintf(b, "ina_switch_" #f "_total %llu\n", (unsigned long long)v->c.f);
    SW_COUNTERS(X)
#undef X
    ina__prom_family(b, "ina_switch_drops_total", "counter", "Datagrams dropped, by cause");
    for (int d = 0; d < INA_DROP__COUNT; d++)
        ina__bprintf(b, "ina_switch_drops_total{cause=\"%s\"} %llu\n", ina__drop_name(d),
                (unsigned long long)v->c.drops[d]);
    ina__http_prom(b, "ina_switch", hs);
    ina__prom_family(b, "ina_switch_view_details", "gauge",
                    "1: this answer has the per-job and per-rank series; 0: withheld, it "
                    "carried no proof of the shared secret (--secret-file)");
    ina__bprintf(b, "ina_switch_view_details %d\n", details);
    if (!details)
        return;

#define X(f, help, val)                                               \
    ina__prom_family(b, "ina_job_" #f, "gauge", help);                          \
    for (unsigned i = 0; i < v->njobs; i++) {                         \
        const struct ina_job *j = &v->jobs[i];                        \
        ina__bputs(b, "ina_job_" #f "{", sizeof("ina_job_" #f "{") - 1);    \
        job_labels(b, j);                                             \
        ina__bprintf(b, "} %.17g\n", val);                                 \
    }
    JOB_GAUGES(X)
#undef X
#define X(f, help)                                                              \
    ina__prom_family(b, "ina_job_" #f "_total", "counter", help);                         \
    for (unsigned i = 0; i < v->njobs; i++) {                                   \
        const struct ina_job *j = &v->jobs[i];                                  \
        ina__bputs(b, "ina_job_" #f "_total{", sizeof("ina_job_" #f "_total{") - 1); \
        job_labels(b, j);                                                       \
        ina__bprintf(b, "} %llu\n", (unsigned long long)j->c.f);                     \
    }
    JOB_COUNTERS(X)
#undef X
    ina__prom_family(b, "ina_job_drops_total", "counter", "Datagrams of the job dropped, by cause");
    for (unsigned i = 0; i < v->njobs; i++)
        for (int d = 0; d < INA_DROP__COUNT; d++) {
            ina__bputs(b, "ina_job_drops_total{", 20);
            job_labels(b, &v->jobs[i]);
            ina__bprintf(b, ",cause=\"%s\"} %llu\n", ina__drop_name(d),
                    (unsigned long long)v->jobs[i].c.drops[d]);
        }
    static const char *const wnames[3] = {"ina_worker_joined", "ina_worker_rx_packets_total",
                                          "ina_worker_rx_bytes_total"};
    static const char *const whelp[3] = {"1 if the rank has joined",
                                         "DATA datagrams from the rank's registered address",
                                         "Bytes of those datagrams"};
    for (int k = 0; k < 3; k++) {
        ina__prom_family(b, wnames[k], k ? "counter" : "gauge", whelp[k]);
        for (unsigned i = 0; i < v->njobs; i++) {
            const struct ina_job *j = &v->jobs[i];
            for (int r = 0; r < j->world; r++) {
                const struct ina_member *mb = &j->members[r];
                unsigned long long val = k == 0 ? mb->joined : k == 1 ? mb->rx_packets : mb->rx_bytes;
                ina__bprintf(b, "%s{", wnames[k]);
                job_labels(b, j);
                ina__bprintf(b, ",rank=\"%d\"} %llu\n", r, val);
            }
        }
    }
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_counters(struct ina_buf *b, const struct ina_sw_counters *c)
{
    ina__bputs(b, "{", 1);
#define X(f, help) ina__bprintf(b, "\"" #f "\":%llu,", (unsigned long long)c->f);
    SW_COUNTERS(X)
#undef X
    ina__bputs(b, "\"drops\":{", 9);
    for (int d = 0; d < INA_DROP__COUNT; d++)
        ina__bprintf(b, "%s\"%s\":%llu", d ? "," : "", ina__drop_name(d),
                (unsigned long long)c->drops[d]);
    ina__bputs(b, "}}", 2);
}

static void render_counters(struct ina_metrics *m, const struct view *v,
                            const struct ina_http_stats *hs, struct ina_buf *b)
{
    ina__bprintf(b, "{\"version\":\"%s\",\"threads\":%u,\"slots\":%u,\"slots_used\":%u,\"jobs\":%u,"
               "\"counters\":",
            ina_version_string(), m->npubs, v->nslots, v->slots_used, v->njobs);
    json_counters(b, &v->c);
    ina__bprintf(b, ",\"http\":");
    ina__http_json(b, hs);
    ina__bputs(b, "}\n", 2);
}

static void render_jobs(const struct view *v, struct ina_buf *b)
{
    uint64_t now = ina__clock_ns();
    ina__bputs(b, "{\"jobs\":[", 9);
    for (unsigned i = 0; i < v->njobs; i++) {
        const struct ina_job *j = &v->jobs[i];
        ina__bprintf(b, "%s{\"id\":%u,\"name\":\"", i ? "," : "", j->id);
        ina__bname(b, j->name);
        ina__bprintf(b,
                "\",\"lane\":%u,\"lanes\":%u,\"world\":%d,\"joined\":%d,\"left\":%d,"
                "\"state\":\"%s\",\"slots\":%u,\"session\":\"%08x\",\"age_s\":%.3f,",
                j->lane, j->nlanes ? j->nlanes : 1, j->world, j->njoined, j->nleft,
                state_name(j->state), job_slots(j), j->session,
                (double)(now - j->created_ns) / 1e9);
#define X(f, help) ina__bprintf(b, "\"" #f "\":%llu,", (unsigned long long)j->c.f);
        JOB_COUNTERS(X)
#undef X
        ina__bputs(b, "\"drops\":{", 9);
        for (int d = 0; d < INA_DROP__COUNT; d++)
            ina__bprintf(b, "%s\"%s\":%llu", d ? "," : "", ina__drop_name(d),
                    (unsigned long long)j->c.drops[d]);
        ina__bputs(b, "},\"workers\":[", 13);
        for (int r = 0; r < j->world; r++) {
            const struct ina_member *mb = &j->members[r];
            char ip[INET_ADDRSTRLEN] = "";
            if (mb->joined)
                inet_ntop(AF_INET, &mb->addr.sin_addr, ip, sizeof(ip));
            ina__bprintf(b,
                    "%s{\"rank\":%d,\"joined\":%s,\"left\":%s,\"addr\":\"%s:%u\","
                    "\"rx_packets\":%llu,\"rx_bytes\":%llu}",
                    r ? "," : "", r, mb->joined ? "true" : "false", mb->left ? "true" : "false",
                    ip, ntohs(mb->addr.sin_port), (unsigned long long)mb->rx_packets,
                    (unsigned long long)mb->rx_bytes);
        }
        ina__bputs(b, "]}", 2);
    }
    ina__bputs(b, "]}\n", 3);
}

/* ---- Abort ---------------------------------------------------------------- */

/* @return 202 queued, 404 no such job, 503 mailbox full. */
static int request_abort(struct ina_metrics *m, const struct view *v, unsigned long id, int evict,
                         const char *peer)
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
        ina__log(INA_LOG_INFO, evict ? "evict_requested" : "abort_requested", INA_KV_I("job", id),
                INA_KV_S("name", found->name),
                INA_KV_I("lane", found->lane), INA_KV_S("peer", peer));
    return rc;
}

/* ---- Who may read and act (docs/TOOLS.md "Operator view and ina-ctl") ------ */

static void peer_name(const struct sockaddr_in *a, char out[INET_ADDRSTRLEN + 8])
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    snprintf(out, INET_ADDRSTRLEN + 8, "%s:%u", ip, ntohs(a->sin_port));
}

/* The request asked for more than its proof allows: 401 (503 while the
 * memory of used challenges is full). A refused act is logged, at most once
 * a second: every refusal is counted (http_unauthorized). */
static int refuse(struct ina_metrics *m, const struct ina_http_req *rq, enum ina_opauth_verdict v,
                  int act, struct ina_buf *b)
{
    uint64_t now = ina__clock_ns();
    if (act && now - m->refusal_logged_ns >= 1000000000ull) {
        char peer[INET_ADDRSTRLEN + 8];
        peer_name(rq->peer, peer);
        m->refusal_logged_ns = now;
        ina__log(INA_LOG_WARN, "operator_refused", INA_KV_S("path", rq->path),
                INA_KV_S("reason", ina__opauth_name(v)), INA_KV_S("peer", peer));
    }
    return ina__http_error(b, v == INA_OPAUTH_BUSY ? 503 : 401, ina__opauth_why(v));
}

/* ---- HTTP (common/http.c serves; this routes) ------------------------------ */

static int handle(void *arg, const struct ina_http_req *rq, struct ina_buf *b, const char **ctype)
{
    struct ina_metrics *m = arg;
    const char *path = rq->path;
    int get = strcmp(rq->method, "GET") == 0, post = strcmp(rq->method, "POST") == 0;
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
    int is_jobs = strcmp(path, "/jobs") == 0;
    if (strcmp(path, "/metrics") != 0 && !is_jobs && strcmp(path, "/counters") != 0 &&
        strcmp(path, "/challenge") != 0 && !is_abort)
        return ina__http_error(b, 404, "no such path (try /metrics, /jobs, /counters, POST "
                                      "/jobs/ID/abort, POST /jobs/ID/evict)");
    if ((is_abort && !post) || (!is_abort && !get))
        return ina__http_error(b, 405, is_abort ? "use POST" : "use GET");
    struct view v;
    if (view_collect(m, &v) != 0)
        return ina__http_error(b, 503, "out of memory");
    /* With a secret, a request that carries proof must carry a valid one;
     * reading per-job details needs the read token or a signed request, acting
     * a signed one. The totals and challenges stay open. Without a secret,
     * anyone who reaches the view may do everything, as before. */
    enum ina_opauth_verdict proof = INA_OPAUTH_ACT;
    if (v.has_secret) {
        struct ina_hmac_key op;
        ina__opauth_key(&op, &v.secret);
        proof = ina__opauth_check(&m->auth, &op, rq->authorization, rq->method, rq->target,
                                 ina__clock_ns() / 1000000u);
    }
    int may_read = proof == INA_OPAUTH_READ || proof == INA_OPAUTH_ACT;
    int status = 200;
    if (proof > INA_OPAUTH_ACT || (is_abort && proof != INA_OPAUTH_ACT) || (is_jobs && !may_read)) {
        status = refuse(m, rq, proof, is_abort, b);
    } else if (is_abort) {
        char peer[INET_ADDRSTRLEN + 8];
        peer_name(rq->peer, peer);
        status = request_abort(m, &v, id, is_evict, peer);
        ina__bprintf(b, "{\"job\":%lu,\"%s\":\"%s\"}\n", id, is_evict ? "evict" : "abort",
                    status == 202 ? "requested" : status == 404 ? "no such job" : "mailbox full");
    } else if (strcmp(path, "/metrics") == 0) {
        *ctype = "text/plain; version=0.0.4; charset=utf-8";
        render_metrics(m, &v, may_read, rq->stats, b);
    } else if (is_jobs) {
        render_jobs(&v, b);
    } else if (strcmp(path, "/challenge") == 0) {
        char c[INA_OPAUTH_HEX + 1];
        status = ina__opauth_challenge(&m->auth, ina__clock_ns() / 1000000u, c) == 0 ? 200 : 503;
        if (status == 200)
            ina__bprintf(b, "{\"challenge\":\"%s\",\"expires_s\":%d}\n", c,
                        INA_OPAUTH_CHALLENGE_MS / 1000);
        else
            ina__http_error(b, 503, "no randomness for a challenge");
    } else {
        render_counters(m, &v, rq->stats, b);
    }
    free(v.jobs);
    return status;
}

struct ina_metrics *ina__metrics_start(const struct sockaddr_in *addr, const char *port_file,
                                      struct ina_sw_pub *pubs, unsigned npubs)
{
    struct ina_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->pubs = pubs;
    m->npubs = npubs;
    m->start_ns = ina__clock_ns();
    int rc = ina__opauth_init(&m->auth);
    if (rc != 0) {
        ina__log(INA_LOG_ERROR, "metrics_listen_failed", INA_KV_S("reason", strerror(-rc)));
        free(m);
        return NULL;
    }
    m->http = ina__http_start(addr, port_file, handle, m);
    if (!m->http) {
        free(m);
        return NULL;
    }
    return m;
}

void ina__metrics_stop(struct ina_metrics *m)
{
    if (!m)
        return;
    ina__http_stop(m->http);
    free(m);
}
