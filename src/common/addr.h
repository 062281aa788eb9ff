/* addr.h: "host[:port]" parsing shared by ina-switch (--listen) and libina (INA_SWITCH). */
#ifndef INA_ADDR_H
#define INA_ADDR_H


#include <netinet/in.h>

/*
 * Resolve "host[:port]" (IPv4 literal or name) into *out. A missing port is
 * INA_DEFAULT_PORT; port 0 is accepted only if allow_port0 (a listener that
 * lets the kernel choose). @return 0, or -1 if malformed or unresolvable.
 */
int ina__parse_hostport(const char *s, int allow_port0, struct sockaddr_in *out);
/* The same; on failure, why (the value and the rule) goes to why[whylen]
 * (why may be NULL). out NULL: check the syntax only, resolve nothing. */
int ina__parse_hostport_why(const char *s, int allow_port0, struct sockaddr_in *out, char *why,
                           size_t whylen);

/*
 * A comma-separated list of "host[:port]" (INA_SWITCH with shards, ina-switch
 * --parent), each resolved as by ina__parse_hostport(), into out[0..max-1].
 * Spaces around an entry are ignored; out NULL checks the syntax only (no
 * name is resolved). @return the number of entries (>= 1),
 * or -1 if the list is empty, has an empty or malformed entry, or has more
 * than max entries; then why (may be NULL) says which and why.
 */
int ina__parse_hostport_list(const char *s, int allow_port0, struct sockaddr_in *out, int max,
                            char *why, size_t whylen);

/* The same IPv4 address and port. */
static inline int ina__addr_eq(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

#endif
