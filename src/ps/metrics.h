/* metrics.h: ina-ps's operator view: a snapshot the loop publishes, served over HTTP by common/http.c. */
#ifndef INA_PS_METRICS_H
#define INA_PS_METRICS_H

#include <netinet/in.h>
#include <pthread.h>

#include "ps/ps.h"

/* What the HTTP thread may read: copied in by the loop every INA_PS_PUBLISH_NS
 * under mu with trylock (the loop never waits for a client). */
struct ina_ps_pub_job {
    uint16_t id;
    char name[32];
    int state, world, njoined;
    uint32_t applied, keys;
    size_t bytes;
    uint64_t rx_packets, pushes, pulls, steps_applied;
};

struct ina_ps_pub {
    pthread_mutex_t mu;
    struct ina_ps_counters c;
    unsigned shard, nshards, njobs;
    size_t mem_used, max_memory;
    struct ina_ps_pub_job jobs[INA_PS_MAX_JOBS];
};

#define INA_PS_PUBLISH_NS 100000000ull

int ina__ps_pub_init(struct ina_ps_pub *pub);
void ina__ps_pub_destroy(struct ina_ps_pub *pub);
void ina__ps_pub_publish(struct ina_ps_pub *pub, const struct ina_ps *ps);

struct ina_ps_metrics;
/* GET /metrics (Prometheus text 0.0.4) and GET /counters (JSON). @return NULL on failure. */
struct ina_ps_metrics *ina__ps_metrics_start(const struct sockaddr_in *addr, const char *port_file,
                                            struct ina_ps_pub *pub);
void ina__ps_metrics_stop(struct ina_ps_metrics *m);

#endif
