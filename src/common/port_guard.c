/* port_guard.c: holding a port on every address (a --multicast switch, and its workers), and the groups' port; see port_guard.h. */
#include "common/port_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef IP_MULTICAST_ALL
#define IP_MULTICAST_ALL 49
#endif

int ina__mcast_listen_opts(int fd)
{
    int one = 1;
    return setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0 ? 0 : -errno;
}

int ina__mcast_port_exclusive(int fd, const struct sockaddr_in *addr)
{
    struct stat st;
    FILE *f = fopen("/proc/net/udp", "r");
    if (!f || fstat(fd, &st) != 0) {
        if (f)
            fclose(f);
        return 0; /* no way to look: trust the bind */
    }
    char line[512];
    int taken = 0;
    unsigned ip, port;
    unsigned long inode;
    /* "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
     *  timeout inode": the address as the 32-bit value in memory, the port in host order. */
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, " %*u: %8X:%4X %*8X:%*4X %*X %*X:%*X %*X:%*X %*X %*u %*u %lu", &ip,
                   &port, &inode) == 3 &&
            ip == addr->sin_addr.s_addr && port == ntohs(addr->sin_port) && inode != st.st_ino)
            taken = 1;
    fclose(f);
    return taken ? -EADDRINUSE : 0;
}

/* A socket on 0.0.0.0:port with option opt, that reads no group's datagrams. */
static int wildcard_socket(uint16_t port, int opt)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int one = 1, zero = 0, small = 4096;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    /* It never reads: datagrams to other local addresses on this port queue
     * up to a small buffer and are dropped, as a full socket's would be. */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
    if (setsockopt(fd, SOL_SOCKET, opt, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int ina__mcast_guard_open(uint16_t port) { return wildcard_socket(port, SO_REUSEPORT); }

int ina__mcast_group_port_open(uint16_t port) { return wildcard_socket(port, SO_REUSEADDR); }
