/* http.h: the operator HTTP endpoint shared by ina-switch and ina-ps: a text buffer, Prometheus helpers, a one-thread event-loop server. */
#ifndef INA_HTTP_H
#define INA_HTTP_H


#include <netinet/in.h>
#include <stddef.h>

/* A growing text buffer; oom set once an allocation failed (the response is then 503). */
struct ina_buf {
    char *p;
    size_t n, cap;
    int oom;
};

void ina__bputs(struct ina_buf *b, const char *s, size_t n);
void ina__bprintf(struct ina_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A name from the network inside a quoted Prometheus label or JSON string: \ and "
 * escaped, bytes outside printable ASCII as '?', so the output is valid UTF-8. */
void ina__bname(struct ina_buf *b, const char *s);
/* "# HELP name help\n# TYPE name type\n" (Prometheus text format 0.0.4). */
void ina__prom_family(struct ina_buf *b, const char *name, const char *type, const char *help);

/*
 * What the server counts about its clients (one thread updates and reads
 * them: the handler may render them into its answer). X(field, kind, help).
 */
#define INA_HTTP_STATS(X)                                                                     \
    X(connections, "counter", "Connections accepted by the operator view")                    \
    X(answered, "counter", "Answers sent whole")                                             \
    X(timeouts, "counter", "Connections closed at their 2 s deadline (slow request or reader)") \
    X(dropped, "counter", "Connections closed to make room for newer ones (64 at once)")     \
    X(too_large, "counter", "Requests refused: head over 4096 bytes (431)")                  \
    X(unauthorized, "counter", "Requests refused: no valid proof of the shared secret (401)") \
    X(open_connections, "gauge", "Connections open now")

struct ina_http_stats {
#define X(f, kind, help) unsigned long long f;
    INA_HTTP_STATS(X)
#undef X
};

/* The stats as Prometheus families PREFIX_http_NAME_total (counters) and
 * PREFIX_http_open_connections, or as one JSON object {"connections": n, ...}. */
void ina__http_prom(struct ina_buf *b, const char *prefix, const struct ina_http_stats *s);
void ina__http_json(struct ina_buf *b, const struct ina_http_stats *s);

/* One request, as the handler sees it. */
struct ina_http_req {
    const char *method;        /* "GET", "POST", ... */
    const char *target;        /* the request-target as sent, query included */
    const char *path;          /* the target less its query */
    const char *authorization; /* the Authorization header's value; NULL if none */
    const struct sockaddr_in *peer;
    const struct ina_http_stats *stats; /* this server's, up to this request */
};

/*
 * A request handler, run on the server's thread. It fills body and *ctype
 * (default "application/json") and returns the HTTP status. For errors,
 * ina__http_error() writes the usual {"error": "..."} body. A 401 answer gets
 * a WWW-Authenticate header naming the schemes of common/opauth.h.
 */
typedef int (*ina_http_handler)(void *arg, const struct ina_http_req *req, struct ina_buf *body,
                                const char **ctype);
int ina__http_error(struct ina_buf *body, int status, const char *msg);

struct ina_http;

/*
 * Bind a TCP listener at addr (port 0: a free one, written to port_file if
 * not NULL) and serve it on a thread of its own: one request per connection,
 * up to 64 connections at once, each within a 2 s deadline for its whole
 * request; a new connection past 64 takes the oldest one's place. Slow
 * clients delay no one (the counts are in ina_http_stats). @return the
 * server, or NULL after logging why.
 */
struct ina_http *ina__http_start(const struct sockaddr_in *addr, const char *port_file,
                                ina_http_handler handler, void *arg);
void ina__http_stop(struct ina_http *h); /* accepts NULL */

#endif
