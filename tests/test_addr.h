/* test_addr.h: an IPv4 socket address from host-order parts, for the tests and fuzzers that feed datagrams by hand. */
#ifndef INA_TEST_ADDR_H
#define INA_TEST_ADDR_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

static inline struct sockaddr_in mkaddr(uint32_t ip, uint16_t port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip);
    a.sin_port = htons(port);
    return a;
}

#endif
