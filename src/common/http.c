/* http.c: the operator HTTP server and text helpers of ina-switch --metrics and ina-ps --metrics. */
#include "common/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

#define REQ_MAX 4096            /* bytes of request head we read; more is refused */
#define CLIENT_DEADLINE_MS 2000 /* per connection, reading and writing together */

void ina_bputs(struct ina_buf *b, const char *s, size_t n)
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

void ina_bprintf(struct ina_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        ina_bputs(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

void ina_bname(struct ina_buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char c = (*p < 0x20 || *p > 0x7e) ? '?' : (char)*p;
        if (c == '\\' || c == '"')
            ina_bputs(b, "\\", 1);
        ina_bputs(b, &c, 1);
    }
}

void ina_prom_family(struct ina_buf *b, const char *name, const char *type, const char *help)
{
    ina_bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int ina_http_error(struct ina_buf *body, int status, const char *msg)
{
    ina_bprintf(body, "{\"error\":\"%s\"}\n", msg);
    return status;
}

unsigned long long ina_http_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

struct ina_http {
    int fd;
    pthread_t thread;
    atomic_int stop;
    ina_http_handler handler;
    void *arg;
};

static int remaining_ms(unsigned long long deadline)
{
    unsigned long long now = ina_http_now_ns();
    return now >= deadline ? 0 : (int)((deadline - now) / 1000000 + 1);
}

static void send_all(int fd, const char *p, size_t n, unsigned long long deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) <= 0)
            return; /* slow or gone client: give up, the next one waits */
    }
}

static void respond(int fd, int status, const char *ctype, const struct ina_buf *body,
                    unsigned long long deadline)
{
    const char *reason = status == 200 ? "OK" : status == 202 ? "Accepted"
                       : status == 400 ? "Bad Request" : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed" : status == 431
                           ? "Request Header Fields Too Large" : "Service Unavailable";
    char head[256];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      status, reason, ctype, body && body->p ? body->n : 0);
    send_all(fd, head, (size_t)hn, deadline);
    if (body && body->p)
        send_all(fd, body->p, body->n, deadline);
}

static void respond_error(int fd, int status, const char *msg, unsigned long long deadline)
{
    struct ina_buf b = {0};
    ina_http_error(&b, status, msg);
    respond(fd, status, "application/json", &b, deadline);
    free(b.p);
}

static void serve_client(struct ina_http *h, int fd)
{
    unsigned long long deadline = ina_http_now_ns() + (unsigned long long)CLIENT_DEADLINE_MS * 1000000ull;
    char req[REQ_MAX + 1];
    size_t n = 0;
    req[0] = '\0';
    while (!strstr(req, "\r\n\r\n") && !strstr(req, "\n\n")) {
        if (n == REQ_MAX) {
            respond_error(fd, 431, "request too large", deadline);
            return;
        }
        ssize_t r = recv(fd, req + n, REQ_MAX - n, 0);
        if (r > 0) {
            n += (size_t)r;
            req[n] = '\0';
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) <= 0)
            return; /* too slow: drop the connection */
    }
    char method[8], path[256];
    if (sscanf(req, "%7s %255s", method, path) != 2) {
        respond_error(fd, 400, "bad request", deadline);
        return;
    }
    char *q = strchr(path, '?');
    if (q)
        *q = '\0'; /* no query parameters are used */
    struct ina_buf b = {0};
    const char *ctype = "application/json";
    int status = h->handler(h->arg, method, path, &b, &ctype);
    if (b.oom)
        respond_error(fd, 503, "out of memory", deadline);
    else
        respond(fd, status, ctype, &b, deadline);
    free(b.p);
}

static void *http_main(void *arg)
{
    struct ina_http *h = arg;
    while (!atomic_load(&h->stop)) {
        struct pollfd pfd = {.fd = h->fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        int c = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0)
            continue;
        serve_client(h, c);
        close(c);
    }
    return NULL;
}

struct ina_http *ina_http_start(const struct sockaddr_in *addr, const char *port_file,
                                ina_http_handler handler, void *arg)
{
    struct ina_http *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->handler = handler;
    h->arg = arg;
    atomic_init(&h->stop, 0);
    struct sockaddr_in a = *addr;
    int one = 1;
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0 || setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(h->fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(h->fd, 16) != 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
        ina_log(INA_LOG_ERROR, "metrics_listen_failed", INA_KV_S("addr", ip),
                INA_KV_I("port", ntohs(a.sin_port)), INA_KV_S("reason", strerror(errno)));
        goto fail;
    }
    socklen_t alen = sizeof(a);
    getsockname(h->fd, (struct sockaddr *)&a, &alen);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%u\n", ntohs(a.sin_port)) < 0 || fclose(f) != 0 ||
            rename(tmp, port_file) != 0) {
            ina_log(INA_LOG_ERROR, "metrics_port_file_failed", INA_KV_S("path", port_file),
                    INA_KV_S("reason", strerror(errno)));
            goto fail;
        }
    }
    if (pthread_create(&h->thread, NULL, http_main, h) != 0)
        goto fail;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
    ina_log(INA_LOG_INFO, "metrics_listening", INA_KV_S("addr", ip),
            INA_KV_I("port", ntohs(a.sin_port)));
    return h;
fail:
    if (h->fd >= 0)
        close(h->fd);
    free(h);
    return NULL;
}

void ina_http_stop(struct ina_http *h)
{
    if (!h)
        return;
    atomic_store(&h->stop, 1);
    pthread_join(h->thread, NULL);
    close(h->fd);
    free(h);
}
