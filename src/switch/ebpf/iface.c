/* iface.c: interface facts (index, addresses, driver), its UDP GSO offload, and its neighbour table. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "switch/ebpf/iface.h"

static int ifreq_ioctl(const char *name, unsigned long req, struct ifreq *r)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    memset(r->ifr_name, 0, sizeof(r->ifr_name));
    strncpy(r->ifr_name, name, sizeof(r->ifr_name) - 1);
    int rc = ioctl(fd, req, r) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

int ina__iface_info(const char *name, struct ina_iface *out)
{
    memset(out, 0, sizeof(*out));
    if (!name || strlen(name) >= IFNAMSIZ)
        return -ENODEV;
    out->ifindex = (int)if_nametoindex(name);
    if (out->ifindex == 0)
        return -ENODEV;
    struct ifreq r;
    memset(&r, 0, sizeof(r));
    if (ifreq_ioctl(name, SIOCGIFFLAGS, &r) == 0)
        out->loopback = (r.ifr_flags & IFF_LOOPBACK) != 0;
    memset(&r, 0, sizeof(r));
    if (ifreq_ioctl(name, SIOCGIFHWADDR, &r) == 0)
        memcpy(out->mac, r.ifr_hwaddr.sa_data, 6);
    memset(&r, 0, sizeof(r));
    r.ifr_addr.sa_family = AF_INET;
    if (ifreq_ioctl(name, SIOCGIFADDR, &r) == 0)
        out->addr = ((struct sockaddr_in *)&r.ifr_addr)->sin_addr.s_addr;
    memset(&r, 0, sizeof(r));
    if (ifreq_ioctl(name, SIOCGIFMTU, &r) == 0)
        out->mtu = r.ifr_mtu;
    struct ethtool_drvinfo di;
    memset(&di, 0, sizeof(di));
    di.cmd = ETHTOOL_GDRVINFO;
    memset(&r, 0, sizeof(r));
    r.ifr_data = (void *)&di;
    if (ifreq_ioctl(name, SIOCETHTOOL, &r) == 0)
        snprintf(out->driver, sizeof(out->driver), "%s", di.driver);
    return 0;
}

/* Index of the ethtool feature bit called `feature`, or -1. */
static int feature_bit(const char *name, const char *feature)
{
    /* The header and room for its one data word (a flexible array member:
     * not inside another struct in ISO C). */
    uint64_t mem[(sizeof(struct ethtool_sset_info) + sizeof(uint32_t) + 7) / 8];
    memset(mem, 0, sizeof(mem));
    struct ethtool_sset_info *ss = (struct ethtool_sset_info *)(void *)mem;
    ss->cmd = ETHTOOL_GSSET_INFO;
    ss->sset_mask = 1ull << ETH_SS_FEATURES;
    struct ifreq r;
    memset(&r, 0, sizeof(r));
    r.ifr_data = (void *)mem;
    if (ifreq_ioctl(name, SIOCETHTOOL, &r) != 0 || ss->sset_mask == 0)
        return -1;
    uint32_t n = ss->data[0];
    struct ethtool_gstrings *gs = calloc(1, sizeof(*gs) + (size_t)n * ETH_GSTRING_LEN);
    if (!gs)
        return -1;
    gs->cmd = ETHTOOL_GSTRINGS;
    gs->string_set = ETH_SS_FEATURES;
    gs->len = n;
    r.ifr_data = (void *)gs;
    int bit = -1;
    if (ifreq_ioctl(name, SIOCETHTOOL, &r) == 0)
        for (uint32_t i = 0; i < n && bit < 0; i++)
            if (strncmp((const char *)gs->data + (size_t)i * ETH_GSTRING_LEN, feature,
                        ETH_GSTRING_LEN) == 0)
                bit = (int)i;
    free(gs);
    return bit;
}

int ina__iface_udp_gso(const char *name, int on, int *was)
{
    int bit = feature_bit(name, "tx-udp-segmentation");
    if (bit < 0)
        return -EOPNOTSUPP;
    unsigned words = (unsigned)bit / 32 + 1;
    struct ethtool_gfeatures *gf =
        calloc(1, sizeof(*gf) + words * sizeof(struct ethtool_get_features_block));
    struct ethtool_sfeatures *sf =
        calloc(1, sizeof(*sf) + words * sizeof(struct ethtool_set_features_block));
    int rc = -ENOMEM;
    if (gf && sf) {
        struct ifreq r;
        memset(&r, 0, sizeof(r));
        gf->cmd = ETHTOOL_GFEATURES;
        gf->size = words;
        r.ifr_data = (void *)gf;
        rc = ifreq_ioctl(name, SIOCETHTOOL, &r);
        if (rc == 0) {
            *was = (gf->features[bit / 32].active >> (bit % 32)) & 1;
            sf->cmd = ETHTOOL_SFEATURES;
            sf->size = words;
            sf->features[bit / 32].valid = 1u << (bit % 32);
            sf->features[bit / 32].requested = on ? 1u << (bit % 32) : 0;
            r.ifr_data = (void *)sf;
            rc = ifreq_ioctl(name, SIOCETHTOOL, &r);
            if (rc > 0) /* ETHTOOL_F_* flags: the request was changed or refused in part */
                rc = 0;
        }
    }
    free(gf);
    free(sf);
    return rc;
}

int ina__iface_neighbour(const char *name, uint32_t ip, uint8_t mac[6])
{
    FILE *f = fopen("/proc/net/arp", "r");
    if (!f)
        return -ENOENT;
    char line[256], ips[64], hw[64], dev[64];
    unsigned type, flags;
    int rc = -ENOENT;
    while (rc != 0 && fgets(line, sizeof(line), f)) {
        unsigned m[6];
        struct in_addr a;
        if (sscanf(line, "%63s 0x%x 0x%x %63s %*s %63s", ips, &type, &flags, hw, dev) != 5 ||
            inet_pton(AF_INET, ips, &a) != 1 || a.s_addr != ip || strcmp(dev, name) != 0 ||
            !(flags & 0x2) /* ATF_COM: resolved */ ||
            sscanf(hw, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6)
            continue;
        for (int i = 0; i < 6; i++)
            mac[i] = (uint8_t)m[i];
        rc = 0;
    }
    fclose(f);
    return rc;
}
