/* iface.h: what the eBPF dataplane needs to know about, and change on, its network interface. */
#ifndef INA_EBPF_IFACE_H
#define INA_EBPF_IFACE_H

#include <stdint.h>

struct ina_iface {
    int ifindex;
    int loopback;      /* IFF_LOOPBACK */
    uint8_t mac[6];    /* its Ethernet address (lo: zeros) */
    uint32_t addr;     /* its first IPv4 address, network order; 0 = none */
    char driver[32];   /* ETHTOOL_GDRVINFO, e.g. "veth"; "" if unknown */
    int mtu;           /* SIOCGIFMTU, bytes of IP datagram; 0 if unknown */
};

/* @return 0, or -errno (-ENODEV: no such interface). */
int ina__iface_info(const char *name, struct ina_iface *out);

/* Turn the interface's UDP segmentation offload (tx-udp-segmentation) on or
 * off; *was gets its previous state. @return 0, or -errno. */
int ina__iface_udp_gso(const char *name, int on, int *was);

/* The Ethernet address the kernel's neighbour table holds for IPv4 address
 * ip (network order) on interface name. @return 0, or -ENOENT. */
int ina__iface_neighbour(const char *name, uint32_t ip, uint8_t mac[6]);

#endif
