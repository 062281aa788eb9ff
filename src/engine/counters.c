/* counters.c: names and printing for the switch counters. */
#include "engine/counters.h"

static const char *const drop_names[] = {
#define INA__DROP_NAME(name, text) #name,
    INA_DROP_MAP(INA__DROP_NAME)
#undef INA__DROP_NAME
};
static const char *const drop_texts[] = {
#define INA__DROP_TEXT(name, text) text,
    INA_DROP_MAP(INA__DROP_TEXT)
#undef INA__DROP_TEXT
};

const char *ina__drop_name(enum ina_drop d)
{
    return (unsigned)d < INA_DROP__COUNT ? drop_names[d] : "?";
}

const char *ina__drop_text(enum ina_drop d)
{
    return (unsigned)d < INA_DROP__COUNT ? drop_texts[d] : "?";
}

void ina__sw_counters_print(const struct ina_sw_counters *c, FILE *f)
{
    fprintf(f, "ina-switch counters:\n");
    fprintf(f, "  rx_packets      %llu\n", (unsigned long long)c->rx_packets);
    fprintf(f, "  rx_bytes        %llu\n", (unsigned long long)c->rx_bytes);
    fprintf(f, "  tx_packets      %llu\n", (unsigned long long)c->tx_packets);
    fprintf(f, "  tx_bytes        %llu\n", (unsigned long long)c->tx_bytes);
    fprintf(f, "  tx_errors       %llu\n", (unsigned long long)c->tx_errors);
    fprintf(f, "  contributions   %llu\n", (unsigned long long)c->contributions);
    fprintf(f, "  completions     %llu\n", (unsigned long long)c->completions);
    fprintf(f, "  results_resent  %llu\n", (unsigned long long)c->results_resent);
    fprintf(f, "  jobs_started    %llu\n", (unsigned long long)c->jobs_started);
    fprintf(f, "  jobs_ended      %llu\n", (unsigned long long)c->jobs_ended);
    fprintf(f, "  jobs_aborted    %llu\n", (unsigned long long)c->jobs_aborted);
    fprintf(f, "  jobs_refused    %llu\n", (unsigned long long)c->jobs_refused);
    fprintf(f, "  join_redirects  %llu\n", (unsigned long long)c->join_redirects);
    fprintf(f, "  jobs_shrunk     %llu\n", (unsigned long long)c->jobs_shrunk);
    fprintf(f, "  jobs_waited     %llu\n", (unsigned long long)c->jobs_waited);
    fprintf(f, "  jobs_evicted    %llu\n", (unsigned long long)c->jobs_evicted);
    fprintf(f, "  jobs_drained    %llu\n", (unsigned long long)c->jobs_drained);
    fprintf(f, "  joins_refused_draining %llu\n", (unsigned long long)c->joins_refused_draining);
    fprintf(f, "  secret_reloads  %llu\n", (unsigned long long)c->secret_reloads);
    fprintf(f, "  shm_attached    %llu\n", (unsigned long long)c->shm_attached);
    fprintf(f, "  shm_rx_packets  %llu\n", (unsigned long long)c->shm_rx_packets);
    fprintf(f, "  shm_tx_packets  %llu\n", (unsigned long long)c->shm_tx_packets);
    fprintf(f, "  doorbells       %llu\n", (unsigned long long)c->doorbells);
    fprintf(f, "  shm_faults      %llu\n", (unsigned long long)c->shm_faults);
    fprintf(f, "  joins_withdrawn %llu\n", (unsigned long long)c->joins_withdrawn);
    fprintf(f, "  joins_expired   %llu\n", (unsigned long long)c->joins_expired);
    fprintf(f, "  join_challenges %llu\n", (unsigned long long)c->join_challenges);
    fprintf(f, "  joins_replayed  %llu\n", (unsigned long long)c->joins_replayed);
    fprintf(f, "  joins_refused_taken %llu\n", (unsigned long long)c->joins_refused_taken);
    fprintf(f, "  hot_installs    %llu\n", (unsigned long long)c->hot_installs);
    fprintf(f, "  hot_keyed       %llu\n", (unsigned long long)c->hot_keyed);
    fprintf(f, "  hot_bitmap      %llu\n", (unsigned long long)c->hot_bitmap);
    fprintf(f, "  hot_refusals    %llu\n", (unsigned long long)c->hot_refusals);
    fprintf(f, "  hot_samples     %llu\n", (unsigned long long)c->hot_samples);
    fprintf(f, "  hot_sample_drops %llu\n", (unsigned long long)c->hot_sample_drops);
    fprintf(f, "  tree_joins      %llu\n", (unsigned long long)c->tree_joins);
    fprintf(f, "  up_packets      %llu\n", (unsigned long long)c->up_packets);
    fprintf(f, "  up_resent       %llu\n", (unsigned long long)c->up_resent);
    fprintf(f, "  up_results      %llu\n", (unsigned long long)c->up_results);
    fprintf(f, "  sparse_rx_packets %llu\n", (unsigned long long)c->sparse_rx_packets);
    fprintf(f, "  sparse_rx_bytes %llu\n", (unsigned long long)c->sparse_rx_bytes);
    fprintf(f, "  sparse_rx_blocks %llu\n", (unsigned long long)c->sparse_rx_blocks);
    fprintf(f, "  sparse_tx_packets %llu\n", (unsigned long long)c->sparse_tx_packets);
    fprintf(f, "  sparse_tx_bytes %llu\n", (unsigned long long)c->sparse_tx_bytes);
    fprintf(f, "  sparse_tx_blocks %llu\n", (unsigned long long)c->sparse_tx_blocks);
    for (int d = 0; d < INA_DROP__COUNT; d++)
        fprintf(f, "  drop_%-11s %llu\n", drop_names[d], (unsigned long long)c->drops[d]);
}

/* Every field is a uint64_t counter: add them as an array. */
_Static_assert(sizeof(struct ina_sw_counters) % sizeof(uint64_t) == 0, "counters are uint64_t");

void ina__sw_counters_add(struct ina_sw_counters *sum, const struct ina_sw_counters *c)
{
    uint64_t *d = (uint64_t *)sum;
    const uint64_t *s = (const uint64_t *)c;
    for (size_t i = 0; i < sizeof(*c) / sizeof(uint64_t); i++)
        d[i] += s[i];
}
