/* http.c: the operator HTTP server (one thread, an event loop over a bounded set of connections) and text helpers of ina-switch --metrics and ina-ps --metrics. */
#include "common/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/daemon.h"
#include "common/log.h"

#define REQ_MAX 4096            /* bytes of request head we read; more is refused (431) */
#define CLIENT_DEADLINE_MS 2000 /* per connection: reading, answering and writing together */

void ina__bputs(struct ina_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void ina__bprintf(struct ina_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        ina__bputs(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

void ina__bname(struct ina_buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char c = (*p < 0x20 || *p > 0x7e) ? '?' : (char)*p;
        if (c == '\\' || c == '"')
            ina__bputs(b, "\\", 1);
        ina__bputs(b, &c, 1);
    }
}

void ina__prom_family(struct ina_buf *b, const char *name, const char *type, const char *help)
{
    ina__bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int ina__http_error(struct ina_buf *body, int status, const char *msg)
{
    ina__bprintf(body, "{\"error\":\"%s\"}\n", msg);
    return status;
}

void ina__http_prom(struct ina_buf *b, const char *prefix, const struct ina_http_stats *s)
{
    char name[96];
#define X(f, kind, help)                                                                 \
    snprintf(name, sizeof(name), "%s_http_" #f "%s", prefix, kind[0] == 'c' ? "_total" : ""); \
    ina__prom_family(b, name, kind, help);                                                \
    ina__bprintf(b, "%s %llu\n", name, (unsigned long long)s->f);
    INA_HTTP_STATS(X)
#undef X
}

void ina__http_json(struct ina_buf *b, const struct ina_http_stats *s)
{
    const char *sep = "{";
#define X(f, kind, help)                                                            \
    ina__bprintf(b, "%s\"" #f "\":%llu", sep, (unsigned long long)s->f);          \
    sep = ",";
    INA_HTTP_STATS(X)
#undef X
    ina__bputs(b, "}", 1);
}

/*
 * The server: one thread and one poll() over the listener and at most
 * CONN_MAX connections, an event loop in the manner of Redis's ae, so a slow
 * client delays no one. Each connection has one deadline for its whole
 * request (reading the head, answering, writing the answer): a client that
 * trickles a byte a second is closed at it however often it sends.
 *
 * When every place is taken, a new connection takes the place of the oldest
 * one still reading its request (of the oldest one, if all are answering):
 * the one that has been slow the longest, which is what a client holding
 * places open has. An honest client sends its request at once, and is not
 * exposed to that: the kernel hands a connection over only once its first
 * bytes are in (TCP_DEFER_ACCEPT), and a connection is read as soon as it is
 * accepted, so a whole request is answered before anyone can take its place.
 * At most ACCEPT_BURST connections are accepted per round, fewer than
 * CONN_MAX, so a request that came in parts is read at least once more before
 * its place can go. Answers held for clients that read slowly are bounded
 * together by OUT_MAX.
 */
#define CONN_MAX 64
#define ACCEPT_BURST 16
#define OUT_MAX ((size_t)32 << 20)
#define LISTEN_BACKLOG 128
#define ACCEPT_REST_NS 100000000ull /* 100 ms */

struct conn {
    int fd; /* -1: a free place */
    struct sockaddr_in peer;
    unsigned long long born, deadline; /* ns, monotonic */
    int answering;                     /* the request was read: writing the answer */
    size_t n;                          /* request bytes read */
    char head[320];                    /* the answer's status line and headers */
    size_t headn, sent;                /* bytes of head + body, and sent so far */
    struct ina_buf body;
    char req[REQ_MAX + 1];
};

struct ina_http {
    int fd;
    pthread_t thread;
    atomic_int stop;
    ina_http_handler handler;
    void *arg;
    struct ina_http_stats st;
    size_t out_bytes; /* answer bytes held by connections still writing */
    unsigned long long accept_rest_until; /* ns: accept() failed for want of descriptors */
    struct conn conns[CONN_MAX];
};

static int remaining_ms(unsigned long long deadline)
{
    unsigned long long now = ina__clock_ns();
    return now >= deadline ? 0 : (int)((deadline - now) / 1000000 + 1);
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
    }
}

static void conn_close(struct ina_http *h, struct conn *c)
{
    if (c->answering)
        h->out_bytes -= c->headn + c->body.n;
    close(c->fd);
    free(c->body.p);
    c->fd = -1;
    c->body = (struct ina_buf){0};
    h->st.open_connections--;
}

/* The oldest open connection other than `keep` that is answering (answering
 * 1) or still reading (0); NULL if none. */
static struct conn *conn_oldest(struct ina_http *h, const struct conn *keep, int answering)
{
    struct conn *old = NULL;
    for (int i = 0; i < CONN_MAX; i++) {
        struct conn *c = &h->conns[i];
        if (c->fd >= 0 && c != keep && c->answering == answering && (!old || c->born < old->born))
            old = c;
    }
    return old;
}

/* Queue the answer: status line and headers, then body (taken over). */
static void conn_answer(struct ina_http *h, struct conn *c, int status, const char *ctype,
                        struct ina_buf *body)
{
    if (body->oom) {
        free(body->p);
        *body = (struct ina_buf){0};
        ina__http_error(body, 503, "out of memory");
        status = 503;
        ctype = "application/json";
    }
    if (status == 401)
        h->st.unauthorized++;
    int hn = snprintf(c->head, sizeof(c->head),
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                      "Connection: close\r\n\r\n",
                      status, reason_phrase(status), ctype, body->p ? body->n : 0,
                      status == 401 ? "WWW-Authenticate: INA-HMAC-SHA256 realm=\"ina\", "
                                      "Bearer realm=\"ina\"\r\n"
                                    : "");
    c->headn = hn > 0 && (size_t)hn < sizeof(c->head) ? (size_t)hn : 0;
    c->body = *body;
    *body = (struct ina_buf){0};
    c->sent = 0;
    c->answering = 1;
    h->out_bytes += c->headn + c->body.n;
    /* Answers waiting for slow readers, together, stay under OUT_MAX: the
     * oldest go first (this one always gets its chance). */
    struct conn *old;
    while (h->out_bytes > OUT_MAX && (old = conn_oldest(h, c, 1))) {
        h->st.dropped++;
        conn_close(h, old);
    }
}

static void conn_error(struct ina_http *h, struct conn *c, int status, const char *msg)
{
    struct ina_buf b = {0};
    ina__http_error(&b, status, msg);
    conn_answer(h, c, status, "application/json", &b);
}

/* The value of header `name` (case-insensitive) in the request head, cut out
 * in place (NUL-terminated, leading blanks skipped); NULL if absent. */
static const char *header_value(char *req, const char *name)
{
    size_t nl = strlen(name);
    for (char *line = strchr(req, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        char *p = line + 1;
        if (*p == '\r' || *p == '\n')
            break; /* the blank line: the head ends here */
        if (strncasecmp(p, name, nl) != 0 || p[nl] != ':')
            continue;
        p += nl + 1;
        p += strspn(p, " \t");
        p[strcspn(p, "\r\n")] = '\0';
        return p;
    }
    return NULL;
}

/* The request head is complete: route it. */
static void conn_request(struct ina_http *h, struct conn *c)
{
    char method[8], target[256];
    int end = 0;
    if (sscanf(c->req, "%7s %255s%n", method, target, &end) != 2 ||
        !strchr(" \t\r\n", c->req[end])) {
        conn_error(h, c, 400, "bad request");
        return;
    }
    char path[256];
    memcpy(path, target, sizeof(path));
    path[strcspn(path, "?")] = '\0'; /* no query parameters are used */
    struct ina_http_req r = {.method = method, .target = target, .path = path,
                             .peer = &c->peer, .stats = &h->st};
    r.authorization = header_value(c->req, "Authorization");
    struct ina_buf b = {0};
    const char *ctype = "application/json";
    int status = h->handler(h->arg, &r, &b, &ctype);
    conn_answer(h, c, status, ctype, &b);
}

/* Send what the socket takes. @return 1 when the whole answer is out, 0 to
 * wait, -1 if the client is gone. */
static int conn_write(struct conn *c)
{
    for (;;) {
        struct iovec iov[2];
        int n = 0;
        if (c->sent < c->headn)
            iov[n++] = (struct iovec){c->head + c->sent, c->headn - c->sent};
        size_t boff = c->sent > c->headn ? c->sent - c->headn : 0;
        if (boff < c->body.n)
            iov[n++] = (struct iovec){c->body.p + boff, c->body.n - boff};
        if (n == 0)
            return 1;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w > 0)
            c->sent += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else
            return w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
}

/* Read what has come. @return 0 to go on, -1 if the client is gone. */
static int conn_read(struct ina_http *h, struct conn *c)
{
    while (!c->answering) {
        if (c->n == REQ_MAX) {
            h->st.too_large++;
            conn_error(h, c, 431, "request too large");
            break;
        }
        ssize_t r = recv(c->fd, c->req + c->n, REQ_MAX - c->n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (r <= 0)
            return -1;
        /* Look for the blank line from a little before the new bytes. */
        size_t from = c->n > 3 ? c->n - 3 : 0;
        c->n += (size_t)r;
        c->req[c->n] = '\0';
        if (strstr(c->req + from, "\r\n\r\n") || strstr(c->req + from, "\n\n"))
            conn_request(h, c);
    }
    return 0;
}

static void conn_io(struct ina_http *h, struct conn *c)
{
    int rc = c->answering ? 0 : conn_read(h, c);
    if (rc == 0 && c->answering)
        rc = conn_write(c);
    if (rc == 1)
        h->st.answered++;
    if (rc != 0)
        conn_close(h, c);
}

/* Take the connections waiting to be accepted, at most ACCEPT_BURST. */
static void accept_some(struct ina_http *h)
{
    for (int k = 0; k < ACCEPT_BURST; k++) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(h->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* None left (EAGAIN), or none to be had: out of descriptors or
             * memory leaves the listener readable, so rest it a while rather
             * than spin on it. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                h->accept_rest_until = ina__clock_ns() + ACCEPT_REST_NS;
            return;
        }
        struct conn *c = NULL;
        for (int i = 0; i < CONN_MAX && !c; i++)
            if (h->conns[i].fd < 0)
                c = &h->conns[i];
        if (!c) {
            c = conn_oldest(h, NULL, 0);
            c = c ? c : conn_oldest(h, NULL, 1);
            h->st.dropped++;
            conn_close(h, c);
        }
        unsigned long long now = ina__clock_ns();
        *c = (struct conn){.fd = fd, .peer = peer, .born = now,
                           .deadline = now + (unsigned long long)CLIENT_DEADLINE_MS * 1000000ull};
        c->req[0] = '\0';
        h->st.connections++;
        h->st.open_connections++;
        conn_io(h, c); /* its request is likely in already (TCP_DEFER_ACCEPT) */
    }
}

static void *http_main(void *arg)
{
    struct ina_http *h = arg;
    struct pollfd pfd[1 + CONN_MAX];
    struct conn *who[1 + CONN_MAX];
    while (!atomic_load(&h->stop)) {
        unsigned long long now = ina__clock_ns();
        int n = 1, ms = 100; /* the stop flag is looked at this often */
        pfd[0] = (struct pollfd){.fd = h->fd, .events = now < h->accept_rest_until ? 0 : POLLIN};
        for (int i = 0; i < CONN_MAX; i++) {
            struct conn *c = &h->conns[i];
            if (c->fd < 0)
                continue;
            if (now >= c->deadline) {
                h->st.timeouts++;
                conn_close(h, c);
                continue;
            }
            int left = remaining_ms(c->deadline);
            ms = left < ms ? left : ms;
            who[n] = c;
            pfd[n++] = (struct pollfd){.fd = c->fd, .events = c->answering ? POLLOUT : POLLIN};
        }
        if (poll(pfd, (nfds_t)n, ms) <= 0)
            continue;
        /* The connections first, then new ones: a request that came in the
         * last round is answered before anyone can take its place. */
        for (int k = 1; k < n; k++)
            if (pfd[k].revents && who[k]->fd == pfd[k].fd) /* not closed meanwhile */
                conn_io(h, who[k]);
        if (pfd[0].revents & POLLIN)
            accept_some(h);
    }
    for (int i = 0; i < CONN_MAX; i++)
        if (h->conns[i].fd >= 0)
            conn_close(h, &h->conns[i]);
    return NULL;
}

struct ina_http *ina__http_start(const struct sockaddr_in *addr, const char *port_file,
                                ina_http_handler handler, void *arg)
{
    struct ina_http *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->handler = handler;
    h->arg = arg;
    atomic_init(&h->stop, 0);
    for (int i = 0; i < CONN_MAX; i++)
        h->conns[i].fd = -1;
    struct sockaddr_in a = *addr;
    int one = 1;
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0 || setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(h->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(h->fd, LISTEN_BACKLOG) != 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
        ina__log(INA_LOG_ERROR, "metrics_listen_failed", INA_KV_S("addr", ip),
                INA_KV_I("port", ntohs(a.sin_port)), INA_KV_S("reason", strerror(errno)));
        goto fail;
    }
    /* Connections come to accept() with their first bytes (best effort: a
     * client that sends nothing still comes, after about a second). */
    setsockopt(h->fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &one, sizeof(one));
    socklen_t alen = sizeof(a);
    getsockname(h->fd, (struct sockaddr *)&a, &alen);
    int rc;
    if (port_file && (rc = ina__port_file_write(port_file, ntohs(a.sin_port))) != 0) {
        ina__log(INA_LOG_ERROR, "metrics_port_file_failed", INA_KV_S("path", port_file),
                INA_KV_S("reason", strerror(-rc)));
        goto fail;
    }
    if (pthread_create(&h->thread, NULL, http_main, h) != 0)
        goto fail;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
    ina__log(INA_LOG_INFO, "metrics_listening", INA_KV_S("addr", ip),
            INA_KV_I("port", ntohs(a.sin_port)));
    return h;
fail:
    if (h->fd >= 0)
        close(h->fd);
    free(h);
    return NULL;
}

void ina__http_stop(struct ina_http *h)
{
    if (!h)
        return;
    atomic_store(&h->stop, 1);
    pthread_join(h->thread, NULL);
    close(h->fd);
    free(h);
}
