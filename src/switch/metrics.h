/* metrics.h: ina-switch's operator view: per-shard snapshots, abort mailboxes, and the HTTP thread. */
#ifndef INA_SW_METRICS_H
#define INA_SW_METRICS_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>

#include "engine/engine.h"

/*
 * Where one dataplane thread (shard) publishes its state for the HTTP thread,
 * and where the HTTP thread leaves it requests. The shard copies its counters
 * and its used job-table entries in under `mu` every publish period, with
 * pthread_mutex_trylock: if the HTTP thread holds the lock, the shard skips
 * that publish rather than wait, so the dataplane never blocks on a client.
 * Requests (job ids to abort) go the other way; `pending` lets the shard see
 * an empty mailbox without touching the lock.
 */
#define INA_SW_MAILBOX 16
struct ina_sw_pub {
    pthread_mutex_t mu;
    struct ina_sw_counters c;
    unsigned njobs;
    struct ina_job jobs[INA_SW_MAX_JOBS]; /* the used entries, compacted */
    uint32_t nslots;                      /* this shard's pool */
    int has_secret;                       /* --secret-file, as last read (SIGHUP) */
    struct ina_hmac_key secret;
    uint16_t abort_ids[INA_SW_MAILBOX]; /* job ids; | INA_SW_EVICT_FLAG: evict, not abort */
    unsigned nabort;
    atomic_uint pending; /* nabort, readable without the lock */
};

#define INA_SW_PUBLISH_NS 100000000ull /* 100 ms */

int ina__sw_pub_init(struct ina_sw_pub *pub);
void ina__sw_pub_destroy(struct ina_sw_pub *pub);
/* Shard side: copy sw's counters and jobs in, unless the lock is busy. */
void ina__sw_pub_publish(struct ina_sw_pub *pub, const struct ina_switch *sw);
/* Shard side: take the pending abort requests. @return how many (into ids). */
unsigned ina__sw_pub_take_aborts(struct ina_sw_pub *pub, uint16_t ids[INA_SW_MAILBOX]);

struct ina_metrics;

/*
 * Bind the HTTP listener at addr (port 0: a free port; written to port_file
 * if not NULL) and start its thread. It serves, one request per connection:
 *   GET  /metrics          Prometheus text format 0.0.4
 *   GET  /jobs             JSON: every job with its per-worker counters
 *   GET  /counters         JSON: the switch totals
 *   GET  /challenge        JSON: a challenge for a signed act (common/opauth.h)
 *   POST /jobs/ID/abort    ask the shard that owns job ID to abort it
 *   POST /jobs/ID/evict    ask it to move the job to its host fallback
 * With a secret (thread 0's, as published), /jobs and /metrics's per-job
 * series need the read token or a signed request, abort and evict a signed
 * request. @return the server, or NULL (a message on stderr).
 */
struct ina_metrics *ina__metrics_start(const struct sockaddr_in *addr, const char *port_file,
                                      struct ina_sw_pub *pubs, unsigned npubs);
void ina__metrics_stop(struct ina_metrics *m);

#endif
