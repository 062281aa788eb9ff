/* http.h: the operator HTTP endpoint shared by ina-switch and ina-ps: a text buffer, Prometheus helpers, a one-thread server. */
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

void ina_bputs(struct ina_buf *b, const char *s, size_t n);
void ina_bprintf(struct ina_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A name from the network inside a quoted Prometheus label or JSON string: \ and "
 * escaped, bytes outside printable ASCII as '?', so the output is valid UTF-8. */
void ina_bname(struct ina_buf *b, const char *s);
/* "# HELP name help\n# TYPE name type\n" (Prometheus text format 0.0.4). */
void ina_prom_family(struct ina_buf *b, const char *name, const char *type, const char *help);

/*
 * A request handler, run on the server's thread: method ("GET", "POST", ...)
 * and path (query string removed). It fills body and *ctype (default
 * "application/json") and returns the HTTP status. For errors,
 * ina_http_error() writes the usual {"error": "..."} body.
 */
typedef int (*ina_http_handler)(void *arg, const char *method, const char *path,
                                struct ina_buf *body, const char **ctype);
int ina_http_error(struct ina_buf *body, int status, const char *msg);

struct ina_http;

/*
 * Bind a TCP listener at addr (port 0: a free one, written to port_file if
 * not NULL), and serve one request per connection on a thread of its own,
 * each connection within a 2 s deadline (a slow client is dropped, the next
 * one waits). @return the server, or NULL after logging why.
 */
struct ina_http *ina_http_start(const struct sockaddr_in *addr, const char *port_file,
                                ina_http_handler handler, void *arg);
void ina_http_stop(struct ina_http *h); /* accepts NULL */

/* Monotonic clock in ns (uptimes, ages). */
unsigned long long ina_http_now_ns(void);

#endif
