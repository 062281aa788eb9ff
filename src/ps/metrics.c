/* metrics.c: ina-ps's /metrics (Prometheus) and /counters (JSON), rendered from the published snapshot. */
#include "ps/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/http.h"

int ina__ps_pub_init(struct ina_ps_pub *pub)
{
    memset(pub, 0, sizeof(*pub));
    return pthread_mutex_init(&pub->mu, NULL) == 0 ? 0 : -ENOMEM;
}

void ina__ps_pub_destroy(struct ina_ps_pub *pub) { pthread_mutex_destroy(&pub->mu); }

void ina__ps_pub_publish(struct ina_ps_pub *pub, const struct ina_ps *ps)
{
    if (pthread_mutex_trylock(&pub->mu) != 0)
        return; /* the HTTP thread is reading: next period */
    pub->c = ps->c;
    pub->shard = ps->p.shard;
    pub->nshards = ps->p.nshards;
    pub->mem_used = ps->mem_used;
    pub->max_memory = ps->p.max_memory;
    unsigned n = 0;
    for (int i = 0; i < INA_PS_MAX_JOBS; i++) {
        const struct ina_ps_job *j = &ps->jobs[i];
        if (j->state == INA_PS_FREE)
            continue;
        struct ina_ps_pub_job *o = &pub->jobs[n++];
        o->id = j->id;
        memcpy(o->name, j->p.name, sizeof(o->name));
        o->state = j->state;
        o->world = j->world;
        o->njoined = j->njoined;
        o->applied = j->applied;
        o->keys = j->store.n;
        o->bytes = j->store.bytes;
        o->rx_packets = j->rx_packets;
        o->pushes = j->pushes;
        o->pulls = j->pulls;
        o->steps_applied = j->steps_applied;
    }
    pub->njobs = n;
    pthread_mutex_unlock(&pub->mu);
}

struct ina_ps_metrics {
    struct ina_http *http;
    struct ina_ps_pub *pub;
    unsigned long long start_ns;
};

#define PS_TOTALS(X)                                                                     \
    X(rx_packets, "Datagrams received")                                                  \
    X(rx_bytes, "Bytes received (UDP payload)")                                          \
    X(tx_packets, "Datagrams sent")                                                      \
    X(tx_bytes, "Bytes sent (UDP payload)")                                              \
    X(tx_errors, "Datagrams the kernel refused to send")                                 \
    X(pushes, "PUSH packets added")                                                      \
    X(push_entries, "Key entries added by PUSH")                                         \
    X(push_dups, "PUSH copies not added again (retransmissions)")                        \
    X(commits, "Steps committed by ranks")                                               \
    X(steps_applied, "Synchronous steps applied")                                        \
    X(keys_applied, "Key updates applied")                                               \
    X(pulls, "PULL requests answered")                                                   \
    X(pull_keys, "Keys pulled")                                                          \
    X(assigns, "ASSIGN requests (hot-set write-backs)")                                  \
    X(assign_entries, "ASSIGN entries taken")                                            \
    X(assign_stale, "ASSIGN entries ignored: the key already holds a later step")        \
    X(jobs_started, "Jobs started")                                                      \
    X(jobs_ended, "Jobs ended (all ranks left)")                                         \
    X(jobs_aborted, "Jobs aborted")                                                      \
    X(jobs_refused, "Jobs refused (job table full, or no memory)")                       \
    X(memory_refusals, "Keys refused at --max-memory")                                   \
    X(updates_applied, "Bounded-staleness UPDATEs applied")                              \
    X(updates_stale, "UPDATEs refused: delay above the job's bound D")                   \
    X(update_dups, "UPDATE copies answered again, not applied again")                    \
    X(delay_violations, "UPDATEs applied with delay above D (a bug; must stay 0)")       \
    X(delay_max, "Largest delay of an applied UPDATE")                                  \
    X(updates_held, "Stamped UPDATEs kept until the stamps before them came")                   \
    X(updates_aggregated, "Applied UPDATEs that were the sum of a group of workers' updates")  \
    X(aggregated_members, "Workers' updates summed into those")

static void render_metrics(const struct ina_ps_metrics *m, const struct ina_ps_pub *p,
                           struct ina_buf *b)
{
    ina__prom_family(b, "ina_ps_info", "gauge", "Version and shard of this ina-ps");
    ina__bprintf(b, "ina_ps_info{version=\"%s\",shard=\"%u\",nshards=\"%u\"} 1\n",
                ina_version_string(), p->shard, p->nshards);
    ina__prom_family(b, "ina_ps_uptime_seconds", "gauge", "Seconds since start");
    ina__bprintf(b, "ina_ps_uptime_seconds %.3f\n", (double)(ina__clock_ns() - m->start_ns) / 1e9);
    ina__prom_family(b, "ina_ps_memory_bytes", "gauge", "Bytes held by the jobs' stores");
    ina__bprintf(b, "ina_ps_memory_bytes %zu\n", p->mem_used);
    ina__prom_family(b, "ina_ps_memory_limit_bytes", "gauge", "--max-memory");
    ina__bprintf(b, "ina_ps_memory_limit_bytes %zu\n", p->max_memory);
#define X(f, help)                                                     \
    ina__prom_family(b, "ina_ps_" #f "_total", "counter", help);        \
    ina__bprintf(b, "ina_ps_" #f "_total %llu\n", (unsigned long long)p->c.f);
    PS_TOTALS(X)
    INA_PS_CHAIN_COUNTERS(X)
    INA_PS_MEMBER_COUNTERS(X)
#undef X
    ina__prom_family(b, "ina_ps_drops_total", "counter", "Datagrams dropped, by cause");
    for (int d = 0; d < INA_PS_DROP__COUNT; d++)
        ina__bprintf(b, "ina_ps_drops_total{cause=\"%s\"} %llu\n", ina__ps_drop_name(d),
                    (unsigned long long)p->c.drops[d]);
    static const char *const names[] = {"keys", "memory_bytes", "steps_applied_total",
                                        "rx_packets_total", "pushes_total", "pulls_total",
                                        "members"};
    static const char *const helps[] = {"Keys stored", "Bytes of the job's store",
                                        "Steps applied", "Datagrams of the job",
                                        "PUSH packets added", "PULL requests answered",
                                        "Ranks joined"};
    for (int k = 0; k < 7; k++) {
        char fam[64];
        snprintf(fam, sizeof(fam), "ina_ps_job_%s", names[k]);
        ina__prom_family(b, fam, k >= 2 && k <= 5 ? "counter" : "gauge", helps[k]);
        for (unsigned i = 0; i < p->njobs; i++) {
            const struct ina_ps_pub_job *j = &p->jobs[i];
            unsigned long long v = k == 0 ? j->keys : k == 1 ? j->bytes : k == 2 ? j->steps_applied
                                 : k == 3 ? j->rx_packets : k == 4 ? j->pushes : k == 5 ? j->pulls
                                 : (unsigned long long)j->njoined;
            ina__bprintf(b, "%s{id=\"%u\",job=\"", fam, j->id);
            ina__bname(b, j->name);
            ina__bprintf(b, "\"} %llu\n", v);
        }
    }
}

static void render_counters(const struct ina_ps_pub *p, const struct ina_http_stats *hs,
                            struct ina_buf *b)
{
    ina__bprintf(b, "{\"version\":\"%s\",\"shard\":%u,\"nshards\":%u,\"memory_bytes\":%zu,"
                   "\"memory_limit_bytes\":%zu,\"jobs\":%u,\"counters\":{",
                ina_version_string(), p->shard, p->nshards, p->mem_used, p->max_memory, p->njobs);
#define X(f, help) ina__bprintf(b, "\"" #f "\":%llu,", (unsigned long long)p->c.f);
    PS_TOTALS(X)
    INA_PS_CHAIN_COUNTERS(X)
    INA_PS_MEMBER_COUNTERS(X)
#undef X
    ina__bputs(b, "\"drops\":{", 9);
    for (int d = 0; d < INA_PS_DROP__COUNT; d++)
        ina__bprintf(b, "%s\"%s\":%llu", d ? "," : "", ina__ps_drop_name(d),
                    (unsigned long long)p->c.drops[d]);
    ina__bprintf(b, "}},\"http\":");
    ina__http_json(b, hs);
    ina__bputs(b, "}\n", 2);
}

static int handle(void *arg, const struct ina_http_req *rq, struct ina_buf *b, const char **ctype)
{
    struct ina_ps_metrics *m = arg;
    const char *path = rq->path;
    if (strcmp(path, "/metrics") != 0 && strcmp(path, "/counters") != 0)
        return ina__http_error(b, 404, "no such path (try /metrics, /counters)");
    if (strcmp(rq->method, "GET") != 0)
        return ina__http_error(b, 405, "use GET");
    struct ina_ps_pub *snap = malloc(sizeof(*snap));
    if (!snap)
        return ina__http_error(b, 503, "out of memory");
    pthread_mutex_lock(&m->pub->mu);
    memcpy(snap, m->pub, sizeof(*snap));
    pthread_mutex_unlock(&m->pub->mu);
    if (strcmp(path, "/metrics") == 0) {
        *ctype = "text/plain; version=0.0.4; charset=utf-8";
        render_metrics(m, snap, b);
        ina__http_prom(b, "ina_ps", rq->stats);
    } else {
        render_counters(snap, rq->stats, b);
    }
    free(snap);
    return 200;
}

struct ina_ps_metrics *ina__ps_metrics_start(const struct sockaddr_in *addr, const char *port_file,
                                            struct ina_ps_pub *pub)
{
    struct ina_ps_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->pub = pub;
    m->start_ns = ina__clock_ns();
    m->http = ina__http_start(addr, port_file, handle, m);
    if (!m->http) {
        free(m);
        return NULL;
    }
    return m;
}

void ina__ps_metrics_stop(struct ina_ps_metrics *m)
{
    if (!m)
        return;
    ina__http_stop(m->http);
    free(m);
}
