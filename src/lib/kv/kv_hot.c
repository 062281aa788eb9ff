/* kv_hot.c: the hot set of a key-value job: every rank's sample, sent to and fetched from the switch, the replica and its moves. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/addr.h"
#include "lib/kv/kv.h"

/*
 * Hot keys are summed by the switch and their sums come back to every rank,
 * which applies them to its replica of the hot keys with the job's
 * optimizer (optim.c), as ina-ps would: every rank gets the same sums, so
 * the replicas stay equal, bit for bit, to what the shards would hold.
 * Why back to the workers and not to the shard that owns the key: a sum
 * sent on to a shard would cross the shard's link once more and come back
 * to the ranks from there (N copies), so the shard's link, the bottleneck of
 * an all-PS job, would still carry every hot key; with the sums at the
 * workers the shards see only cold keys (docs/PS.md, "Where hot sums go").
 *
 * The hot set changes only at a step boundary T, with no operation in
 * flight (ina__kv_hot_transition): every rank sends its sample of epoch
 * e + 1 to the switch, which sums them into the epoch's table, and then
 * fetches that table; keys that leave the set are written back to their
 * shards as of step T (ASSIGN, versioned so a late copy never undoes a
 * later update), and keys that enter it are read with their optimizer
 * state (PULL with STATE) after step T - 1 was applied. So no update is
 * lost and none is applied twice (PROTOCOL.md §14.4).
 */

int ina__kv_hot_open(struct ina_kv *kv)
{
    int rc = ina__kv_switch_open(kv);
    if (rc == 0 && ina__kmap_init(&kv->hot_map, 16) != 0)
        rc = -ENOMEM;
    return rc;
}

/* ---- Profile (every rank): a sample of the keys it pushed in the last P steps ------ */

void ina__kv_hot_profile(struct ina_kv *kv, const uint64_t *keys, size_t n)
{
    uint32_t T = kv->next_transition, P = (uint32_t)kv->cfg.profile_steps, R = kv->sample_rate;
    if (T == UINT32_MAX || kv->steps_started + P < T)
        return; /* not in the window before the next transition */
    if (!kv->prof_map.cap && ina__kmap_init(&kv->prof_map, 1024) != 0)
        return;
    /* 1 in R entries, by a hash of (rank, step, index): a run samples the same again */
    uint64_t base = ina__hot_sample_base((uint32_t)kv->cfg.rank, kv->steps_started);
    for (size_t i = 0; i < n; i++) {
        if (!ina__hot_sampled(base, i, R))
            continue;
        if (kv->prof_map.n == kv->prof_cap) {
            uint32_t cap = kv->prof_cap ? 2 * kv->prof_cap : 1024;
            uint32_t *c = realloc(kv->prof_count, cap * sizeof(*c));
            if (c)
                kv->prof_count = c;
            uint64_t *k = realloc(kv->prof_keys, cap * sizeof(*k));
            if (k)
                kv->prof_keys = k;
            if (!c || !k)
                return; /* out of memory: the profile is a sample anyway */
            kv->prof_cap = cap;
        }
        if (ina__kmap_full(&kv->prof_map) && ina__kmap_grow(&kv->prof_map) != 0)
            return;
        uint32_t before = kv->prof_map.n;
        uint32_t idx = ina__kmap_put(&kv->prof_map, keys[i], before);
        if (kv->prof_map.n != before) { /* a new key */
            kv->prof_keys[idx] = keys[i];
            kv->prof_count[idx] = 0;
        }
        kv->prof_count[idx]++;
    }
}

struct kc {
    uint32_t count;
    uint64_t key;
};

static int kc_cmp(const void *a, const void *b)
{
    const struct kc *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* The at most H most sampled keys of the profile with their counts, most first; the
 * profile is reset. */
static struct kc *top_keys(struct ina_kv *kv, uint32_t H, uint32_t *nout)
{
    uint32_t n = kv->prof_map.n;
    struct kc *all = malloc((n ? n : 1) * sizeof(*all));
    if (!all)
        return NULL;
    for (uint32_t i = 0; i < n; i++)
        all[i] = (struct kc){kv->prof_count[i], kv->prof_keys[i]};
    qsort(all, n, sizeof(*all), kc_cmp);
    *nout = n < H ? n : H;
    ina__kmap_clear(&kv->prof_map);
    return all;
}

/* ---- Talking to the switch on the hot context's socket ----------------------------- */

static void hot_send(struct ina_kv *kv, uint8_t kind, const uint8_t *body, size_t len)
{
    uint8_t b[65536];
    struct ina_hdr h;
    ina__hdr_session(&h, kv->hctx, kind);
    ina__hdr_encode(b, &h);
    memcpy(b + INA_HDR_LEN, body, len);
    ina__net_send(kv->hctx, b, INA_HDR_LEN + len);
}

/* Wait up to ms for a HOT_KEYS of the session. @return its length, 0 if none, <0 on ABORT. */
static int hot_recv(struct ina_kv *kv, uint8_t *b, size_t cap, int ms)
{
    struct pollfd pfd = {.fd = kv->hctx->fd, .events = POLLIN};
    if (poll(&pfd, 1, ms) <= 0)
        return 0;
    for (;;) {
        ssize_t n = recv(kv->hctx->fd, b, cap, MSG_DONTWAIT);
        if (n < 0)
            return 0;
        struct ina_hdr h;
        if (ina__hdr_decode(b, (size_t)n, &h) != INA_PARSE_OK || h.session != kv->hctx->session ||
            h.token != kv->hctx->token)
            continue;
        if (h.kind == INA_K_ABORT &&
            (!kv->hctx->tag_rx || ina__mac_strip(&kv->hctx->mac_key, b, (size_t)n)))
            return -1; /* (a session with tags: only the switch's, PROTOCOL.md §4.6) */
        if (h.kind == INA_K_HOT_KEYS && (size_t)n >= INA_HDR_LEN + INA_HOT_KEYS_HDR)
            return (int)n;
    }
}

/* One HOT_SAMPLE: chunk c of nchunks, top[off, off + cnt). */
static void sample_chunk(struct ina_kv *kv, uint32_t epoch, const struct kc *top, uint32_t n,
                         size_t per, uint32_t c, uint32_t nchunks)
{
    uint8_t body[65536];
    uint32_t off = (uint32_t)(c * per), cnt = n > off ? (n - off < per ? n - off : (uint32_t)per) : 0;
    ina__put32(body, epoch);
    ina__put32(body + 4, (uint32_t)kv->cfg.hot_keys);
    ina__put16(body + 8, (uint16_t)c);
    ina__put16(body + 10, (uint16_t)nchunks);
    ina__put16(body + 12, (uint16_t)cnt);
    ina__put16(body + 14, 0);
    for (uint32_t i = 0; i < cnt; i++) {
        uint8_t *p = body + INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * (size_t)i;
        ina__put64(p, top[off + i].key);
        ina__put32(p + 8, top[off + i].count);
    }
    hot_send(kv, INA_K_HOT_SAMPLE, body, INA_HOT_SAMPLE_HDR + INA_HOT_SAMPLE_PAIR * (size_t)cnt);
}

/*
 * Send this rank's sample of the next epoch to the switch (HOT_SAMPLE): top[0..n) as
 * (key, count) pairs, most sampled first, in chunks that fit a datagram. At most 64 KiB of
 * chunks are unacknowledged at once (N ranks send theirs together into the switch's one
 * link), each resent after 200 ms without its answer. The switch sums every rank's sample
 * and makes the hottest keys the epoch's table (PROTOCOL.md §14.3, §14.4).
 * @return 0 or the error.
 */
static int send_sample(struct ina_kv *kv, uint32_t epoch, const struct kc *top, uint32_t n)
{
    size_t per = (kv->dgram - INA_HDR_LEN - INA_HOT_SAMPLE_HDR) / INA_HOT_SAMPLE_PAIR;
    if (per > 4096)
        per = 4096;
    if (n > 65535 * per)
        n = (uint32_t)(65535 * per); /* nchunks is 16 bits: the rest are the coldest anyway */
    uint32_t nchunks = n ? (uint32_t)((n + per - 1) / per) : 1;
    uint32_t window = (uint32_t)(65536 / kv->dgram) > 4 ? (uint32_t)(65536 / kv->dgram) : 4;
    uint8_t *acked = calloc(nchunks, 1), rx[2048];
    uint64_t *sent_ns = calloc(nchunks, sizeof(uint64_t));
    if (!acked || !sent_ns) {
        free(acked);
        free(sent_ns);
        return -ENOMEM;
    }
    uint64_t deadline = ina__now_ns() + (uint64_t)kv->cfg.timeout_ms * 1000000ull;
    uint32_t left = nchunks, next = 0, inflight = 0;
    int rc = 0;
    while (left && !rc) {
        uint64_t now = ina__now_ns();
        if (now > deadline) {
            rc = INA_ERR_TIMEOUT;
            break;
        }
        for (uint32_t c = 0; c < next; c++)
            if (!acked[c] && now - sent_ns[c] > 200000000ull) {
                sample_chunk(kv, epoch, top, n, per, c, nchunks);
                sent_ns[c] = now;
            }
        for (; next < nchunks && inflight < window; next++, inflight++) {
            sample_chunk(kv, epoch, top, n, per, next, nchunks);
            sent_ns[next] = now;
        }
        int len, wait = 20;
        while (left && (len = hot_recv(kv, rx, sizeof(rx), wait)) != 0) {
            wait = 0;
            if (len < 0) {
                rc = INA_ERR_ABORTED;
                break;
            }
            const uint8_t *p = rx + INA_HDR_LEN;
            uint32_t e = ina__get32(p), total = ina__get32(p + 4), c = ina__get32(p + 8);
            int32_t status = (int32_t)ina__get32(p + 16);
            if (e != epoch || total != nchunks || c >= next)
                continue; /* another epoch's answer */
            if (status != 0) {
                rc = status == INA_ERR_MISMATCH ? INA_ERR_MISMATCH
                     : status == -ENOMEM        ? -ENOMEM
                                                : INA_ERR_PROTO;
                break;
            }
            if (!acked[c]) {
                acked[c] = 1;
                left--;
                inflight--;
            }
        }
    }
    free(acked);
    free(sent_ns);
    return rc;
}

/* Read epoch's keys from the switch (ask again while it is pending: until every rank's
 * sample is in). */
static uint64_t *fetch(struct ina_kv *kv, uint32_t epoch, uint32_t *nout, int *err)
{
    uint8_t body[INA_HOT_FETCH_LEN], rx[65536];
    uint64_t *keys = NULL;
    uint32_t total = UINT32_MAX, have = 0;
    uint64_t deadline = ina__now_ns() + (uint64_t)kv->cfg.timeout_ms * 1000000ull;
    *err = 0;
    size_t per = (kv->dgram - INA_HDR_LEN - INA_HOT_KEYS_HDR) / 8;
    while (have < total) {
        if (ina__now_ns() > deadline) {
            *err = INA_ERR_TIMEOUT;
            break;
        }
        ina__put32(body, epoch);
        ina__put32(body + 4, have);
        ina__put16(body + 8, (uint16_t)(per > 8192 ? 8192 : per));
        ina__put16(body + 10, 0);
        hot_send(kv, INA_K_HOT_FETCH, body, sizeof(body));
        int len = hot_recv(kv, rx, sizeof(rx), 50);
        if (len < 0) {
            *err = INA_ERR_ABORTED;
            break;
        }
        if (len == 0)
            continue;
        const uint8_t *p = rx + INA_HDR_LEN;
        uint32_t e = ina__get32(p), t = ina__get32(p + 4), off = ina__get32(p + 8);
        uint32_t cnt = ina__get16(p + 12);
        int32_t status = (int32_t)ina__get32(p + 16);
        if (e != epoch || status == INA_HOT_PENDING)
            continue;
        if (status != 0) {
            *err = status == INA_ERR_MISMATCH ? INA_ERR_MISMATCH : INA_ERR_PROTO;
            break;
        }
        if ((size_t)len != INA_HDR_LEN + INA_HOT_KEYS_HDR + 8 * (size_t)cnt || off != have)
            continue;
        if (!keys) {
            total = t;
            keys = malloc((t ? t : 1) * sizeof(*keys));
            if (!keys) {
                *err = -ENOMEM;
                break;
            }
        }
        if (t != total || cnt > total - have)
            continue;
        for (uint32_t i = 0; i < cnt; i++)
            keys[have + i] = ina__get64(p + INA_HOT_KEYS_HDR + 8 * (size_t)i);
        have += cnt;
    }
    if (*err) {
        free(keys);
        return NULL;
    }
    *nout = total;
    return keys;
}

/* ---- The transition ------------------------------------------------------------------- */

/* Scratch of one transition: the new set, and where entering keys' values go. */
static struct {
    float *vals, *state;
    uint32_t *pos; /* per PULL: positions in the new set, by shard run */
    uint32_t *sh_off;
} tr;

/* PULL_RESP with state for the transition. */
static void on_state(struct ina_kv *kv, struct kv_rpc *r, const struct ina_hdr *h,
                     const uint8_t *body, size_t blen)
{
    if (h->count != r->n || !(h->flags & INA_FLAG_PS_STATE) || blen != 8 * (size_t)r->n) {
        ina__kv_fail(kv, INA_ERR_PROTO, "shard %u answered a state pull of %u keys with %u",
                 r->shard, r->n, h->count);
        return;
    }
    for (uint32_t e = 0; e < r->n; e++) {
        uint32_t p = tr.pos[tr.sh_off[r->shard] + r->off + e];
        tr.vals[p] = ina__getf(body + 4 * e);
        tr.state[p] = ina__getf(body + 4 * ((size_t)r->n + e));
    }
}

/* Write the leaving keys back and read the entering ones: both as of step T. */
static int move_keys(struct ina_kv *kv, const uint64_t *nkeys, uint32_t nn, struct ina_kmap *nmap)
{
    unsigned S = kv->nshards;
    uint32_t T = kv->steps_started;
    uint8_t body[65536];
    /* Leaving: in the old set, not in the new. ASSIGN entries (key, value, state). */
    size_t el = ina__ps_assign_len(1), per = (kv->dgram - INA_HDR_LEN) / el;
    for (unsigned s = 0; s < S && !kv->broken; s++) {
        size_t m = 0;
        for (uint32_t i = 0; i <= kv->nhot; i++) {
            if (i < kv->nhot && (ina__kmap_get(nmap, kv->hot_keys[i]) != INA_KMAP_NONE ||
                                 ina__kv_shard_of(kv, kv->hot_keys[i]) != s))
                continue;
            if (i < kv->nhot) {
                kv->stats.hot_keys_out++;
                ina__put64(body + m * el, kv->hot_keys[i]);
                ina__putf(body + m * el + 8, kv->hot_vals[i]);
                ina__putf(body + m * el + 12, kv->hot_state ? kv->hot_state[i] : 0.0f);
                m++;
            }
            if (m && (m == per || i == kv->nhot)) {
                while (!ina__kv_window_room(kv, s, INA_HDR_LEN + m * el) && !kv->broken)
                    ina__kv_rpc_progress(kv, 10);
                if (!ina__kv_rpc_send(kv, NULL, s, INA_K_PS_ASSIGN, ++kv->next_id, T, (uint16_t)m, 0,
                                      body, m * el, NULL))
                    return kv->broken;
                m = 0;
            }
        }
    }
    /* Entering: in the new set, not in the old. Their values and state from the shards. */
    tr.pos = malloc((nn ? nn : 1) * sizeof(uint32_t));
    tr.sh_off = calloc(S + 1, sizeof(uint32_t));
    if (!tr.pos || !tr.sh_off)
        return -ENOMEM;
    for (uint32_t i = 0; i < nn; i++)
        if (ina__kmap_get(&kv->hot_map, nkeys[i]) == INA_KMAP_NONE)
            tr.sh_off[ina__kv_shard_of(kv, nkeys[i]) + 1]++;
    for (unsigned s = 0; s < S; s++)
        tr.sh_off[s + 1] += tr.sh_off[s];
    uint32_t fill[INA_KV_MAX_SHARDS];
    memcpy(fill, tr.sh_off, S * sizeof(uint32_t));
    for (uint32_t i = 0; i < nn; i++)
        if (ina__kmap_get(&kv->hot_map, nkeys[i]) == INA_KMAP_NONE) {
            tr.pos[fill[ina__kv_shard_of(kv, nkeys[i])]++] = i;
            kv->stats.hot_keys_in++;
        }
    per = (kv->dgram - INA_HDR_LEN) / 8;
    for (unsigned s = 0; s < S && !kv->broken; s++) {
        for (uint32_t off = 0; off < tr.sh_off[s + 1] - tr.sh_off[s];) {
            uint32_t m = tr.sh_off[s + 1] - tr.sh_off[s] - off;
            if (m > per)
                m = (uint32_t)per;
            for (uint32_t e = 0; e < m; e++)
                ina__put64(body + 8 * e, nkeys[tr.pos[tr.sh_off[s] + off + e]]);
            while (!ina__kv_window_room(kv, s, INA_HDR_LEN + 8 * (size_t)m) && !kv->broken)
                ina__kv_rpc_progress(kv, 10);
            struct kv_rpc *r = ina__kv_rpc_send(kv, NULL, s, INA_K_PS_PULL, ++kv->next_id, 0,
                                                (uint16_t)m, INA_FLAG_PS_STATE, body,
                                                8 * (size_t)m, on_state);
            if (!r)
                return kv->broken;
            r->off = off;
            r->n = m;
            off += m;
        }
    }
    return ina__kv_wait_rpcs(kv, NULL);
}

int ina__kv_hot_transition(struct ina_kv *kv)
{
    uint32_t epoch = kv->epoch + 1, nn = 0, nsample = 0;
    uint64_t *nkeys = NULL;
    struct kc *top = top_keys(kv, (uint32_t)kv->cfg.hot_keys, &nsample);
    int rc = top ? send_sample(kv, epoch, top, nsample) : -ENOMEM;
    free(top);
    if (rc == 0)
        nkeys = fetch(kv, epoch, &nn, &rc);
    struct ina_kmap nmap = {0};
    if (rc == 0 && ina__kmap_init(&nmap, nn) != 0)
        rc = -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < nn; i++)
        ina__kmap_put(&nmap, nkeys[i], i);
    memset(&tr, 0, sizeof(tr));
    if (rc == 0) {
        tr.vals = malloc((nn ? nn : 1) * sizeof(float));
        tr.state = calloc(nn ? nn : 1, sizeof(float));
        if (!tr.vals || !tr.state)
            rc = -ENOMEM;
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < nn; i++) { /* kept keys keep their replica */
            uint32_t o = ina__kmap_get(&kv->hot_map, nkeys[i]);
            if (o != INA_KMAP_NONE) {
                tr.vals[i] = kv->hot_vals[o];
                tr.state[i] = kv->hot_state ? kv->hot_state[o] : 0.0f;
            }
        }
        rc = move_keys(kv, nkeys, nn, &nmap);
    }
    free(tr.pos);
    free(tr.sh_off);
    if (rc != 0) {
        if (!kv->broken)
            ina__kv_fail(kv, rc, "the hot set of step %u (epoch %u) could not be sampled or "
                         "fetched: %s", kv->steps_started, epoch, ina_strerror(rc));
        free(nkeys);
        free(tr.vals);
        free(tr.state);
        ina__kmap_free(&nmap);
        return kv->broken ? kv->broken : rc;
    }
    free(kv->hot_keys);
    free(kv->hot_vals);
    free(kv->hot_state);
    ina__kmap_free(&kv->hot_map);
    kv->hot_keys = nkeys;
    kv->hot_vals = tr.vals;
    kv->hot_state = ina__optim_has_state(kv->optim.kind) ? tr.state : (free(tr.state), NULL);
    kv->hot_map = nmap;
    kv->nhot = nn;
    kv->epoch = epoch;
    kv->stats.hot_installs++;
    kv->next_transition = kv->cfg.reprofile_steps ? kv->steps_started + (uint32_t)kv->cfg.reprofile_steps
                                                  : UINT32_MAX;
    return 0;
}

/* ---- Applying the hot sums, in step order -------------------------------------------- */

void ina__kv_hot_apply_ready(struct ina_kv *kv)
{
    for (struct ina_kv_req *op = kv->head; op && !kv->broken; op = op->next) {
        if (op->kind != KV_PUSH || op->hot_applied)
            continue;
        if (op->step != kv->hot_applied_step)
            return;
        if (op->hot_req && !op->hot_req->done)
            return;
        if (op->hot_req) {
            int st = op->hot_req->status;
            ina_wait(op->hot_req);
            op->hot_req = NULL;
            if (st != 0) {
                ina__kv_fail(kv, st, "the switch failed the hot keys of step %u: %s%s%s", op->step,
                         ina_strerror(st), kv->hctx ? " (" : "",
                         kv->hctx ? ina_last_error(kv->hctx) : "");
                return;
            }
            ina__optim_apply(&kv->optim, kv->hot_vals, kv->hot_state, op->hot_sum, kv->nhot);
        }
        op->hot_applied = 1;
        kv->hot_applied_step++;
    }
}
