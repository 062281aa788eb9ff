/* session.h: a context's control plane: its sockets (net.c), joining and leaving a job (session.c), and rank 0's host aggregator (fallback.c). */
#ifndef INA_LIB_SESSION_H
#define INA_LIB_SESSION_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

struct ina_ctx;
struct ina_fallback;

/* net.c */
int ina__net_open(struct ina_ctx *ctx, const struct sockaddr_in *addr);
int ina__net_send(struct ina_ctx *ctx, const uint8_t *buf, size_t len);

/* net.c: "a.b.c.d:port" of the switch (or aggregator) the context talks to. */
void ina__switch_str(const struct ina_ctx *ctx, char *buf, size_t len);
/* net.c: join the job's multicast group (ctx->mcast_group) on a second socket. */
int ina__net_open_mcast(struct ina_ctx *ctx);
/* net.c: talk to another port of the switch from now on (REDIRECT at join). */
int ina__net_reconnect(struct ina_ctx *ctx, uint16_t port);

/* session.c */
int ina__session_join(struct ina_ctx *ctx, int elems, int window);
/* Leave the job; with abort set, ask the switch to end the session for every rank. */
void ina__session_leave(struct ina_ctx *ctx, int abort);
/* The switch has no room for the job (a NOSPACE, or an eviction) and named
 * rank 0's aggregator in ctx->fallback_target: rank 0 starts it (fallback.c),
 * and every rank joins it there instead, with the same protocol and a fresh
 * join deadline; the path becomes INA_PATH_HOST. @return 0 or the join's error. */
int ina__session_join_host(struct ina_ctx *ctx, int elems, int window);

/* fallback.c: rank 0's host aggregator. prepare opens its socket (before
 * the JOIN that offers it), start runs it, close stops it after the job. */
int ina__fallback_prepare(struct ina_ctx *ctx);
uint16_t ina__fallback_port(const struct ina_ctx *ctx);
int ina__fallback_start(struct ina_ctx *ctx, int elems, int nslots);
/* Close and free an aggregator that was prepared but never started (NULL: nothing). */
void ina__fallback_free(struct ina_fallback *fb);
void ina__fallback_close(struct ina_ctx *ctx);

#endif
