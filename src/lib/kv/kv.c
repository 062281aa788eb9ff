/* kv.c: the key-value API (ina_kv_*): configuration, handles, push and pull operations and their progress. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/kv/kv.h"

static const char kv_default_ps[] = "127.0.0.1:48870";

void ina_kv_config_init(ina_kv_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->ps_addrs = kv_default_ps;
    cfg->job = "default";
    cfg->world_size = 1;
    cfg->dim = 1;
    cfg->optimizer = INA_KV_SGD;
    cfg->lr = 0.1f;
    cfg->eps = 1.0f;
    cfg->init = INA_KV_INIT_ZERO;
    cfg->profile_steps = 8;
}

static int env_int(const char *name, const char *alt, int *out)
{
    const char *v = getenv(name);
    if (!v && alt)
        v = getenv(alt);
    if (!v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end || x < 0 || x > 1000000000)
        return ina__fail(NULL, INA_ERR_CONFIG, "%s='%s' is not a number >= 0", name, v);
    *out = (int)x;
    return 0;
}

int ina_kv_config_from_env(ina_kv_config *cfg)
{
    if (!cfg)
        return -EINVAL;
    ina_kv_config_init(cfg);
    const char *v;
    if ((v = getenv("INA_PS")) && *v)
        cfg->ps_addrs = v;
    if ((v = getenv("INA_KV_SWITCH")) && *v)
        cfg->switch_addr = v;
    if ((v = getenv("INA_JOB")) && *v)
        cfg->job = v;
    int rc = env_int("INA_RANK", "RANK", &cfg->rank);
    if (!rc)
        rc = env_int("INA_WORLD_SIZE", "WORLD_SIZE", &cfg->world_size);
    if (!rc)
        rc = env_int("INA_TIMEOUT_MS", NULL, &cfg->timeout_ms);
    return rc;
}

static int config_check(const ina_kv_config *c)
{
#define BAD(...) ina__fail(NULL, -EINVAL, __VA_ARGS__)
    size_t jl = c->job ? strlen(c->job) : 0;
    if (!c->ps_addrs)
        return BAD("ps_addrs is NULL (want \"HOST:PORT[,HOST:PORT...]\")");
    if (jl < 1 || jl > INA_JOB_NAME_MAX)
        return BAD("job name is empty, NULL or longer than %d bytes", INA_JOB_NAME_MAX);
    if (c->world_size < 1 || c->world_size > INA_MAX_WORKERS)
        return BAD("world_size %d is outside 1..%d", c->world_size, INA_MAX_WORKERS);
    if (c->rank < 0 || c->rank >= c->world_size)
        return BAD("rank %d is not in 0..world_size-1 (%d)", c->rank, c->world_size);
    if (c->dim < 1 || c->dim > INA_PS_MAX_DIM)
        return BAD("dim %d is outside 1..%d", c->dim, INA_PS_MAX_DIM);
    if (c->optimizer != INA_KV_SGD && c->optimizer != INA_KV_ADAGRAD)
        return BAD("optimizer %d is not INA_KV_SGD (0) or INA_KV_ADAGRAD (1)", c->optimizer);
    if (!isfinite(c->lr) || !isfinite(c->eps) || !isfinite(c->init_acc) ||
        !isfinite(c->init_scale) || (c->optimizer == INA_KV_ADAGRAD && (c->eps <= 0 || c->init_acc < 0)))
        return BAD("lr %g, eps %g, init_acc %g or init_scale %g is not finite (Adagrad: eps > 0, "
                   "init_acc >= 0)", (double)c->lr, (double)c->eps, (double)c->init_acc,
                   (double)c->init_scale);
    if (c->init != INA_KV_INIT_ZERO && c->init != INA_KV_INIT_UNIFORM)
        return BAD("init %d is not INA_KV_INIT_ZERO or INA_KV_INIT_UNIFORM", c->init);
    if (c->hot_keys < 0 || c->profile_steps < 0 || c->reprofile_steps < 0)
        return BAD("hot_keys %d, profile_steps %d or reprofile_steps %d is negative",
                   c->hot_keys, c->profile_steps, c->reprofile_steps);
    if (c->datagram_bytes && (c->datagram_bytes < 256 || c->datagram_bytes > 65000))
        return BAD("datagram_bytes %d is outside 256..65000 (0: the default)", c->datagram_bytes);
    if (c->timeout_ms < 0 || c->join_timeout_ms < 0)
        return BAD("timeout_ms %d or join_timeout_ms %d is negative", c->timeout_ms,
                   c->join_timeout_ms);
    if (c->switch_addr && c->hot_keys == 0)
        return BAD("switch_addr is set but hot_keys is 0 (no key would go to the switch)");
    if (c->switch_addr && c->dim != 1)
        return ina__fail(NULL, INA_ERR_NOTSUP, "a hot set needs dim 1 (dim is %d): keys of "
                         "several floats go to ina-ps only in this version", c->dim);
    return 0;
#undef BAD
}

/* Closed handles keep a shell, as ina_ctx (a stale handle gets INA_ERR_CLOSED). */
static void op_advance(struct ina_kv *kv);
static kv_answered_fn on_push_ack, on_commit_ack, on_pull_resp;

/* Make progress: the operations' next requests, the connections' progress (kv_rpc.c:
 * answers, resends, deadlines; waits up to timeout_ms for input), the operations again. */
static void progress(struct ina_kv *kv, int timeout_ms)
{
    if (!ina__kv_rx_ready(kv) || kv->broken)
        return;
    op_advance(kv);
    ina__kv_rpc_progress(kv, timeout_ms);
    if (!kv->broken)
        op_advance(kv);
}

static struct ina_kv *closed_kv;
static pthread_mutex_t closed_lock = PTHREAD_MUTEX_INITIALIZER;

static int kv_check(const ina_kv *kv)
{
    if (!kv)
        return -EINVAL;
    return kv->magic == INA_KV_LIVE ? 0 : INA_ERR_CLOSED;
}

static void kv_release(struct ina_kv *kv)
{
    ina__kv_switch_close(kv, 0);
    for (unsigned s = 0; s < kv->nshards; s++)
        if (kv->shard[s].fd >= 0)
            close(kv->shard[s].fd);
    while (kv->rpcs) {
        struct kv_rpc *r = kv->rpcs;
        kv->rpcs = r->next;
        free(r);
    }
    while (kv->live) {
        struct ina_kv_req *op = kv->live;
        kv->live = op->live_next;
        free(op->order);
        free(op->hot_grad);
        free(op);
    }
    free(kv->hot_keys);
    free(kv->hot_vals);
    free(kv->hot_state);
    ina__kmap_free(&kv->hot_map);
    ina__kmap_free(&kv->prof_map);
    free(kv->prof_count);
    free(kv->prof_keys);
}

int ina_kv_open(ina_kv **out, const ina_kv_config *cfg)
{
    ina__fail_clear(NULL);
    if (!out)
        return ina__fail(NULL, -EINVAL, "ina_kv_open: out is NULL");
    *out = NULL;
    if (!cfg)
        return ina__fail(NULL, -EINVAL, "ina_kv_open: cfg is NULL (fill one with ina_kv_config_init)");
    int rc = config_check(cfg);
    if (rc)
        return rc;
    struct ina_kv *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return -ENOMEM;
    kv->magic = INA_KV_LIVE;
    kv->cfg = *cfg;
    snprintf(kv->job, sizeof(kv->job), "%s", cfg->job);
    kv->cfg.job = kv->job;
    kv->cfg.ps_addrs = NULL; /* the caller's string: only read here */
    kv->cfg.switch_addr = NULL;
    if (!kv->cfg.timeout_ms)
        kv->cfg.timeout_ms = INA_DEFAULT_TIMEOUT_MS;
    if (!kv->cfg.join_timeout_ms)
        kv->cfg.join_timeout_ms = INA_DEFAULT_JOIN_TIMEOUT_MS;
    const char *rto = getenv("INA_RTO_MS");
    kv->rto_ms = rto && atoi(rto) > 0 ? (uint32_t)atoi(rto) : INA_DEFAULT_RTO_MS;
    const char *smp = getenv("INA_KV_SAMPLE");
    kv->sample_rate = smp && atoi(smp) > 0 ? (uint32_t)atoi(smp) : INA_HOT_SAMPLE_RATE;
    kv->optim = (struct ina_optim){.kind = cfg->optimizer, .lr = cfg->lr, .eps = cfg->eps,
                                   .init_acc = cfg->init_acc};
    for (unsigned s = 0; s < INA_KV_MAX_SHARDS; s++)
        kv->shard[s].fd = -1;
    kv->next_transition = UINT32_MAX;
    kv->cfg.ps_addrs = cfg->ps_addrs;
    rc = ina__kv_shards_open(kv);
    kv->cfg.ps_addrs = NULL;
    if (rc == 0) {
        kv->dgram = (size_t)cfg->datagram_bytes;
        if (!kv->dgram)
            kv->dgram = (ntohl(kv->shard[0].addr.sin_addr.s_addr) >> 24) == 127
                            ? INA_KV_DEFAULT_DGRAM_LOOPBACK : INA_KV_DEFAULT_DGRAM_NET;
        rc = ina__kv_shards_join(kv);
    }
    if (rc == 0 && cfg->switch_addr) {
        kv->cfg.switch_addr = cfg->switch_addr;
        rc = ina__kv_hot_open(kv);
        kv->cfg.switch_addr = NULL;
        kv->next_transition = (uint32_t)cfg->profile_steps;
    }
    if (rc != 0) {
        ina__kv_shards_close(kv, 1); /* joined shards: end the job for the other ranks too */
        kv_release(kv);
        free(kv);
        return rc;
    }
    *out = kv;
    return 0;
}

int ina_kv_close(ina_kv *kv)
{
    if (!kv)
        return 0;
    int rc = kv_check(kv);
    if (rc)
        return rc;
    if (kv->head)
        ina__kv_fail(kv, INA_ERR_CLOSED, "closed with operations in flight");
    ina__kv_shards_close(kv, kv->broken == INA_ERR_CLOSED);
    kv_release(kv);
    memset(kv, 0, sizeof(*kv));
    pthread_mutex_lock(&closed_lock);
    kv->rpcs = (struct kv_rpc *)closed_kv; /* keep the shell reachable */
    closed_kv = kv;
    pthread_mutex_unlock(&closed_lock);
    return 0;
}

/* ---- Operations ----------------------------------------------------------------- */

/* Say why a call on kv fails (ina_kv_last_error). @return code. */
__attribute__((format(printf, 3, 4))) static int refuse(struct ina_kv *kv, int code,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kv->errmsg, sizeof(kv->errmsg), fmt, ap);
    va_end(ap);
    return code;
}

static int args_check(ina_kv *kv, const uint64_t *keys, const void *vals, size_t n)
{
    int rc = kv_check(kv);
    if (rc)
        return rc;
    if (n > 0 && (!keys || !vals))
        return refuse(kv, -EINVAL, "%s is NULL with n %zu", keys ? "vals" : "keys", n);
    if (n > (1u << 31))
        return refuse(kv, -EOVERFLOW, "n %zu is above 2^31", n);
    if (kv->broken)
        return INA_ERR_CLOSED;
    if (kv->nreqs >= INA_KV_MAX_REQS)
        return INA_ERR_BUSY;
    return 0;
}

/* Sort the entries that are not hot by shard (counting sort): order, sh_off. */
static int by_shard(struct ina_kv *kv, struct ina_kv_req *op)
{
    unsigned S = kv->nshards;
    op->order = malloc((op->n ? op->n : 1) * sizeof(uint32_t) + (5 * (size_t)S + 1) * sizeof(uint32_t));
    if (!op->order)
        return -ENOMEM;
    op->sh_off = op->order + (op->n ? op->n : 1);
    op->sent = op->sh_off + S + 1;
    op->acked = op->sent + S;
    op->commit = (uint8_t *)(op->acked + S);
    memset(op->sh_off, 0, (5 * (size_t)S + 1) * sizeof(uint32_t));
    uint32_t *cnt = op->sent; /* scratch before use */
    for (size_t i = 0; i < op->n; i++)
        if (ina__kmap_get(&kv->hot_map, op->keys[i]) == INA_KMAP_NONE)
            cnt[ina__kv_shard_of(kv, op->keys[i])]++;
    for (unsigned s = 0; s < S; s++)
        op->sh_off[s + 1] = op->sh_off[s] + cnt[s];
    for (unsigned s = 0; s < S; s++)
        cnt[s] = op->sh_off[s];
    for (size_t i = 0; i < op->n; i++)
        if (ina__kmap_get(&kv->hot_map, op->keys[i]) == INA_KMAP_NONE)
            op->order[cnt[ina__kv_shard_of(kv, op->keys[i])]++] = (uint32_t)i;
    memset(op->sent, 0, 4 * (size_t)S * sizeof(uint32_t));
    return 0;
}

static void op_link(struct ina_kv *kv, struct ina_kv_req *op)
{
    op->next = NULL;
    if (kv->tail)
        kv->tail->next = op;
    else
        kv->head = op;
    kv->tail = op;
    op->live_next = kv->live;
    if (kv->live)
        kv->live->live_prev = op;
    kv->live = op;
    kv->nreqs++;
}

/* Wait until every operation started before is done (a hot-set change needs it). */
static int drain(struct ina_kv *kv)
{
    while (kv->head && !kv->broken)
        progress(kv, 100);
    return kv->broken;
}

int ina_kv_push_start(ina_kv *kv, const uint64_t *keys, const float *vals, size_t n,
                      ina_kv_req **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    int rc = args_check(kv, keys, vals, n);
    if (rc)
        return rc;
    size_t nv = n * (size_t)kv->cfg.dim;
    for (size_t i = 0; i < nv; i++)
        if (!isfinite(vals[i]))
            return refuse(kv, -EINVAL, "value %zu (key %llu) is %s: nothing was pushed", i,
                                (unsigned long long)keys[i / (size_t)kv->cfg.dim],
                                isnan(vals[i]) ? "NaN" : "infinite");
    if (kv->hctx && kv->steps_started == kv->next_transition) {
        if ((rc = drain(kv)) != 0 || (rc = ina__kv_hot_transition(kv)) != 0)
            return rc;
    }
    if (kv->hctx)
        ina__kv_hot_profile(kv, keys, n);
    struct ina_kv_req *op = calloc(1, sizeof(*op));
    if (!op)
        return -ENOMEM;
    op->kv = kv;
    op->kind = KV_PUSH;
    op->keys = keys;
    op->vals = vals;
    op->n = n;
    op->step = kv->steps_started;
    if (by_shard(kv, op) != 0) {
        free(op);
        return -ENOMEM;
    }
    if (kv->epoch && kv->nhot) {
        op->hot_grad = calloc(2 * (size_t)kv->nhot, sizeof(float));
        if (!op->hot_grad) {
            free(op->order);
            free(op);
            return -ENOMEM;
        }
        op->hot_sum = op->hot_grad + kv->nhot;
        for (size_t i = 0; i < n; i++) {
            uint32_t p = ina__kmap_get(&kv->hot_map, keys[i]);
            if (p != INA_KMAP_NONE) {
                op->hot_grad[p] += vals[i];
                kv->stats.hot_entries++;
            }
        }
        op->hot_epoch = kv->epoch;
        op->hot_req = ina__req_create_hot(kv->hctx, op->hot_grad, op->hot_sum, kv->nhot,
                                          kv->epoch, kv->hot_keys);
        if (!op->hot_req) {
            free(op->hot_grad);
            free(op->order);
            free(op);
            return -ENOMEM;
        }
    }
    kv->steps_started++;
    kv->stats.push_entries += n;
    op_link(kv, op);
    progress(kv, 0);
    *out = op;
    return 0;
}

int ina_kv_pull_start(ina_kv *kv, const uint64_t *keys, float *vals, size_t n, ina_kv_req **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    int rc = args_check(kv, keys, vals, n);
    if (rc)
        return rc;
    struct ina_kv_req *op = calloc(1, sizeof(*op));
    if (!op)
        return -ENOMEM;
    op->kv = kv;
    op->kind = KV_PULL;
    op->keys = keys;
    op->out = vals;
    op->n = n;
    op_link(kv, op);
    progress(kv, 0);
    *out = op;
    return 0;
}

int ina_kv_test(ina_kv_req *op, int *done)
{
    if (!op || !done)
        return -EINVAL;
    if (!op->done)
        progress(op->kv, 0);
    *done = op->done;
    return op->done ? op->status : 0;
}

int ina_kv_wait(ina_kv_req *op)
{
    if (!op)
        return 0;
    struct ina_kv *kv = op->kv;
    while (!op->done)
        progress(kv, 100); /* bounded: the shards' deadlines fail every operation */
    int status = op->status;
    if (op->live_prev)
        op->live_prev->live_next = op->live_next;
    else
        kv->live = op->live_next;
    if (op->live_next)
        op->live_next->live_prev = op->live_prev;
    kv->nreqs--;
    free(op->order);
    free(op->hot_grad);
    free(op);
    return status;
}

int ina_kv_push(ina_kv *kv, const uint64_t *keys, const float *vals, size_t n)
{
    ina_kv_req *op;
    int rc = ina_kv_push_start(kv, keys, vals, n, &op);
    return rc ? rc : ina_kv_wait(op);
}

int ina_kv_pull(ina_kv *kv, const uint64_t *keys, float *vals, size_t n)
{
    ina_kv_req *op;
    int rc = ina_kv_pull_start(kv, keys, vals, n, &op);
    return rc ? rc : ina_kv_wait(op);
}

int ina_kv_get_stats(const ina_kv *kv, ina_kv_stats *st)
{
    if (!st || kv_check(kv))
        return -EINVAL;
    *st = kv->stats;
    st->hot_keys = kv->nhot;
    if (kv->hctx) /* what the hot vector really cost on the wire (dense or keyed blocks) */
        st->switch_bytes_sent = kv->hctx->stats.bytes_sent;
    return 0;
}

const char *ina_kv_last_error(const ina_kv *kv)
{
    return kv && kv->magic == INA_KV_LIVE ? kv->errmsg : "";
}

/* ---- Progress of the operations --------------------------------------------------- */

static uint32_t push_per_dgram(const struct ina_kv *kv)
{
    return (uint32_t)((kv->dgram - INA_HDR_LEN) / ina__ps_entry_len((unsigned)kv->cfg.dim));
}

static uint32_t pull_per_dgram(const struct ina_kv *kv)
{
    size_t per = 4 * (size_t)kv->cfg.dim > 8 ? 4 * (size_t)kv->cfg.dim : 8;
    return (uint32_t)((kv->dgram - INA_HDR_LEN) / per);
}

/* Send what shard windows allow of a push: its packets, then its COMMIT. */
static void push_send(struct ina_kv *kv, struct ina_kv_req *op)
{
    static _Thread_local uint8_t body[65536];
    uint32_t per = push_per_dgram(kv), dim = (uint32_t)kv->cfg.dim;
    size_t el = ina__ps_entry_len(dim);
    for (unsigned s = 0; s < kv->nshards && !kv->broken; s++) {
        uint32_t cnt = op->sh_off[s + 1] - op->sh_off[s], npk = (cnt + per - 1) / per;
        while (op->sent[s] < npk && ina__kv_window_room(kv, s, INA_HDR_LEN + per * el)) {
            uint32_t first = op->sent[s] * per, m = cnt - first < per ? cnt - first : per;
            for (uint32_t e = 0; e < m; e++) {
                uint32_t i = op->order[op->sh_off[s] + first + e];
                ina__put64(body + e * el, op->keys[i]);
                for (uint32_t j = 0; j < dim; j++)
                    ina__putf(body + e * el + 8 + 4 * j, op->vals[(size_t)i * dim + j]);
            }
            if (!ina__kv_rpc_send(kv, op, s, INA_K_PS_PUSH, op->sent[s], op->step, (uint16_t)m, 0,
                                  body, m * el, on_push_ack))
                return;
            op->sent[s]++;
        }
        if (op->acked[s] == npk && op->commit[s] == 0) {
            if (!ina__kv_rpc_send(kv, op, s, INA_K_PS_COMMIT, npk, op->step, 0, 0, NULL, 0,
                                  on_commit_ack))
                return;
            op->commit[s] = 1;
        }
    }
}

/* Start a pull: hot keys from the replica now, the rest requested from the shards. */
static void pull_send(struct ina_kv *kv, struct ina_kv_req *op)
{
    static _Thread_local uint8_t body[65536];
    size_t d = (size_t)kv->cfg.dim;
    if (!op->started) {
        op->started = 1;
        for (size_t i = 0; i < op->n; i++) {
            uint32_t p = ina__kmap_get(&kv->hot_map, op->keys[i]);
            if (p != INA_KMAP_NONE) {
                op->out[i] = kv->hot_vals[p];
                kv->stats.hot_pull_keys++;
            }
        }
        kv->stats.pull_keys += op->n;
    }
    uint32_t per = pull_per_dgram(kv);
    for (unsigned s = 0; s < kv->nshards && !kv->broken; s++) {
        uint32_t cnt = op->sh_off[s + 1] - op->sh_off[s];
        while (op->sent[s] < cnt && ina__kv_window_room(kv, s, INA_HDR_LEN + 8 * (size_t)per)) {
            uint32_t m = cnt - op->sent[s] < per ? cnt - op->sent[s] : per;
            for (uint32_t e = 0; e < m; e++)
                ina__put64(body + 8 * e, op->keys[op->order[op->sh_off[s] + op->sent[s] + e]]);
            struct kv_rpc *r = ina__kv_rpc_send(kv, op, s, INA_K_PS_PULL, ++kv->next_id, 0,
                                                (uint16_t)m, 0, body, 8 * (size_t)m, on_pull_resp);
            if (!r)
                return;
            r->off = op->sent[s];
            r->n = m;
            op->sent[s] += m;
        }
    }
    (void)d;
}

static int push_done(const struct ina_kv *kv, const struct ina_kv_req *op)
{
    if (!op->hot_applied)
        return 0;
    for (unsigned s = 0; s < kv->nshards; s++)
        if (op->commit[s] != 2)
            return 0;
    return 1;
}

static int pull_done(const struct ina_kv *kv, const struct ina_kv_req *op)
{
    if (!op->started || op->nwait)
        return 0;
    for (unsigned s = 0; s < kv->nshards; s++)
        if (op->acked[s] != op->sh_off[s + 1] - op->sh_off[s])
            return 0;
    return 1;
}

/* Each operation's next requests, as its shards' windows allow; finished ones off the FIFO. */
static void op_advance(struct ina_kv *kv)
{
    ina__kv_hot_apply_ready(kv);
    int pushes_open = 0;
    struct ina_kv_req **pp = &kv->head, *prev = NULL;
    while (*pp && !kv->broken) {
        struct ina_kv_req *op = *pp;
        int blocked = 0;
        if (op->kind == KV_PUSH) {
            if (pushes_open < 2)
                push_send(kv, op);
            pushes_open++;
            blocked = 1; /* a later pull waits for it */
            if (push_done(kv, op)) {
                op->done = 1;
                kv->steps_done++;
                kv->stats.steps++;
            }
        } else if (pushes_open == 0) {
            if (!op->started && by_shard(kv, op) != 0) {
                ina__kv_fail(kv, -ENOMEM, "out of memory for a pull of %zu keys", op->n);
                return;
            }
            pull_send(kv, op);
            if (pull_done(kv, op))
                op->done = 1;
        }
        if (op->done) { /* off the FIFO; it stays live until waited */
            *pp = op->next;
            if (kv->tail == op)
                kv->tail = prev;
            continue;
        }
        (void)blocked;
        prev = op;
        pp = &op->next;
    }
}

/* ---- Answers to the operations' requests (kv_answered_fn) ---------------------- */

static void on_push_ack(struct ina_kv *kv, struct kv_rpc *r, const struct ina_hdr *h,
                        const uint8_t *body, size_t blen)
{
    (void)kv;
    (void)h;
    (void)body;
    (void)blen;
    r->op->acked[r->shard]++;
}

/* The shard applied step r->seq of every rank. */
static void on_commit_ack(struct ina_kv *kv, struct kv_rpc *r, const struct ina_hdr *h,
                          const uint8_t *body, size_t blen)
{
    (void)h;
    (void)body;
    (void)blen;
    for (struct ina_kv_req *op = kv->head; op; op = op->next)
        if (op->kind == KV_PUSH && op->step == r->seq && op->commit[r->shard] == 1)
            op->commit[r->shard] = 2;
}

static void on_pull_resp(struct ina_kv *kv, struct kv_rpc *r, const struct ina_hdr *h,
                         const uint8_t *body, size_t blen)
{
    struct ina_kv_req *op = r->op;
    size_t d = (size_t)kv->cfg.dim;
    if (h->count != r->n || blen != (size_t)r->n * d * 4) {
        ina__kv_fail(kv, INA_ERR_PROTO, "shard %u answered a pull of %u keys with %u values",
                 r->shard, r->n, h->count);
        return;
    }
    for (uint32_t e = 0; e < r->n; e++) {
        uint32_t i = op->order[op->sh_off[r->shard] + r->off + e];
        for (size_t j = 0; j < d; j++)
            op->out[(size_t)i * d + j] = ina__getf(body + 4 * (e * d + j));
    }
    op->acked[r->shard] += r->n;
}
