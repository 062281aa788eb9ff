/* addr.c: "host[:port]" parsing; see addr.h. */
#include "common/addr.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ina.h"

int ina__parse_hostport_why(const char *s, int allow_port0, struct sockaddr_in *out, char *why,
                           size_t whylen)
{
    char host[256], dummy[8];
    if (!why) {
        why = dummy;
        whylen = sizeof(dummy);
    }
    const char *colon = strrchr(s, ':');
    long port = INA_DEFAULT_PORT;
    size_t hl = colon ? (size_t)(colon - s) : strlen(s);
    if (hl == 0 || hl >= sizeof(host)) {
        snprintf(why, whylen, "'%s' has %s host name (want HOST or HOST:PORT)", s,
                 hl ? "too long a" : "no");
        return -1;
    }
    memcpy(host, s, hl);
    host[hl] = 0;
    if (colon) {
        char *end;
        port = strtol(colon + 1, &end, 10);
        if (*end || end == colon + 1 || port < (allow_port0 ? 0 : 1) || port > 65535) {
            snprintf(why, whylen, "'%s': the port '%s' is not a number in %d..65535", s,
                     colon + 1, allow_port0 ? 0 : 1);
            return -1;
        }
    }
    if (!out)
        return 0; /* the syntax only */
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0) {
        snprintf(why, whylen, "cannot resolve '%s' (IPv4): %s", host, gai_strerror(gai));
        return -1;
    }
    memset(out, 0, sizeof(*out));
    *out = *(struct sockaddr_in *)res->ai_addr;
    out->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

int ina__parse_hostport(const char *s, int allow_port0, struct sockaddr_in *out)
{
    return ina__parse_hostport_why(s, allow_port0, out, NULL, 0);
}

int ina__parse_hostport_list(const char *s, int allow_port0, struct sockaddr_in *out, int max,
                            char *why, size_t whylen)
{
    char dummy[8];
    if (!why) {
        why = dummy;
        whylen = sizeof(dummy);
    }
    int n = 0;
    for (const char *p = s;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        char one[300];
        if (len == 0 || len >= sizeof(one) || n == max) {
            if (n == max)
                snprintf(why, whylen, "'%s': more than %d addresses", s, max);
            else
                snprintf(why, whylen, "'%s': %s", s, len ? "an address too long"
                                                     : "an empty entry (want HOST:PORT,HOST:PORT,...)");
            return -1;
        }
        memcpy(one, p, len);
        one[len] = 0;
        if (ina__parse_hostport_why(one, allow_port0, out ? &out[n] : NULL, why, whylen) != 0)
            return -1;
        n++;
        if (!end)
            return n;
        p = end;
    }
}
