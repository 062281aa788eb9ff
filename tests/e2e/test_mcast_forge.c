/* test_mcast_forge.c: a process that joins a --multicast job's group forges RESULTs and an ABORT (PROTOCOL.md §4.1, §4.6, §7.5); as another user, and as root spoofing the switch's source with a raw socket against a job with a secret: every sum stays right, nothing is aborted, the forgeries are counted. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "check.h"
#include "e2e/harness.h"
#include "lib/internal.h"

/*
 * The attack of issue 30 item 1. A local process reads job, session, token,
 * slot and seq from any RESULT it sees on the job's group, and sends RESULTs
 * for the next slots of the stream to the group (every tag: 256 datagrams per
 * slot, so one of them carries the in-flight packet's tag), plus one ABORT.
 * Rank 1 computes 2 ms before each operation, so rank 0's packet waits in
 * flight long enough for a forgery to arrive first. Before the group rules a
 * worker took those RESULTs as sums, and the ABORT ended the job.
 *
 * The unprivileged forger (uid 65534) also tries every way to send from the
 * switch's own port without raw sockets (a socket bound to another local or a
 * multicast address on that port, SO_REUSEPORT, SO_REUSEADDR, IP_FREEBIND):
 * the switch holds the port on every address (its guard), so each bind fails.
 * It also forges DATA as rank 1 (whose packets come late) from rank 1's own
 * port: the token it read makes them look right to the switch, and only the
 * source address stops them. Binding rank 1's port on another address would
 * give it that source, so a rank of a multicast job holds its port on every
 * address too, and those binds fail as well.
 * The root forger spoofs the switch's source with a raw socket: that passes
 * the source check, and only the tag of the shared secret's session key stops
 * it (DATA from a spoofed rank is what --integrity stops: test_integrity).
 */

#define NOPS 200
#define COUNT 64
#define NEXT_SLOTS 2 /* forged slots ahead of each RESULT seen */

struct shared {
    volatile int ready, forger_ready, done;
    uint32_t group;  /* host order */
    uint16_t gport, swport, wport1; /* wport1: rank 1's port (another user finds it in /proc/net/udp) */
    uint32_t window;
    volatile int wrong[2], failed[2];
    ina_stats st[2];
    volatile long forged, results_seen, aborts_sent, spoof_bound;
};
static struct shared *sh;
static struct sw_proc sw;
static char secret_path[64], log_path[64];
static const char *use_secret; /* this scenario's secret file, or NULL */

static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "mcast-forge", rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = COUNT;
    cfg.window = 8;
    cfg.lanes = 1;
    cfg.secret_file = use_secret;
    ina_ctx *ctx;
    int rc = ina_init(&ctx, &cfg);
    if (rc) {
        fprintf(stderr, "rank %d: ina_init: %s (%s)\n", rank, ina_err_name(rc), ina_last_error(NULL));
        return 1;
    }
    if (rank == 1) {
        struct sockaddr_in local;
        socklen_t len = sizeof(local);
        getsockname(ctx->fd, (struct sockaddr *)&local, &len);
        sh->wport1 = ntohs(local.sin_port);
    }
    if (rank == 0) {
        sh->group = ctx->mcast_group;
        sh->gport = ctx->mcast_port;
        sh->swport = ntohs(ctx->switch_addr.sin_port);
        sh->window = ctx->window;
        for (double t0 = ina__clock_s(); !sh->wport1 && ina__clock_s() - t0 < 10;)
            usleep(1000);
        sh->ready = 1;
    }
    for (double t0 = ina__clock_s(); !sh->forger_ready && ina__clock_s() - t0 < 10;)
        usleep(1000);
    int32_t in[COUNT], out[COUNT];
    for (int i = 0; i < NOPS; i++) {
        if (rank == 1)
            usleep(2000); /* computing: rank 0's packet waits in flight */
        for (int j = 0; j < COUNT; j++)
            in[j] = h_i32(rank, (uint64_t)i, (uint64_t)j);
        rc = ina_allreduce(ctx, in, out, COUNT, INA_INT32, INA_SUM);
        if (rc) {
            fprintf(stderr, "rank %d op %d: %s\n", rank, i, ina_err_name(rc));
            sh->failed[rank]++;
            break;
        }
        if (h_check_sum(out, COUNT, 1, n, (uint64_t)i, 0, 0) != 0)
            sh->wrong[rank]++;
    }
    ina_get_stats(ctx, &sh->st[rank]);
    ina_finalize(ctx);
    return 0;
}

/* The RESULT header of slot, seq with the session's ids; body: COUNT words of junk. */
static size_t forge_result(uint8_t *b, const struct ina_hdr *seen, uint32_t slot, uint32_t seq,
                           uint8_t tag)
{
    struct ina_hdr h = *seen;
    h.slot = slot | ((seq & 1) ? INA_SLOT_SET_BIT : 0);
    h.seq = seq;
    h.tag = tag;
    h.exp = 0;
    ina__hdr_encode(b, &h);
    for (unsigned i = 0; i < h.count; i++)
        ina__put32(b + INA_HDR_LEN + 4 * i, 0x41414141u);
    return INA_HDR_LEN + 4 * (size_t)h.count;
}

/* Without raw sockets: any socket that may send from the switch's port. */
static int spoof_socket(uint16_t port)
{
    static const struct {
        const char *addr;
        int opt; /* SO_REUSEADDR, SO_REUSEPORT or IP_FREEBIND */
    } tries[] = {{"239.1.2.3", SO_REUSEADDR}, {"239.1.2.3", SO_REUSEPORT},
                 {"127.0.0.1", SO_REUSEPORT}, {"127.0.0.2", SO_REUSEADDR},
                 {"0.0.0.0", SO_REUSEADDR},   {"10.9.9.9", IP_FREEBIND}};
    for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
        int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1;
        if (tries[i].opt == IP_FREEBIND)
            setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
        else
            setsockopt(fd, SOL_SOCKET, tries[i].opt, &one, sizeof(one));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, tries[i].addr, &a.sin_addr);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            fprintf(stderr, "forger: bound %s:%u, sending from the switch's port\n",
                    tries[i].addr, port);
            return fd;
        }
        close(fd);
    }
    return -1;
}

/* Send datagram d of len bytes to group:gport, from src_fd, or spoofed (raw, as root). */
static void send_forged(int fd, int raw, const uint8_t *d, size_t len)
{
    struct sockaddr_in g = {.sin_family = AF_INET, .sin_port = htons(sh->gport),
                            .sin_addr.s_addr = htonl(sh->group)};
    if (!raw) {
        sendto(fd, d, len, 0, (struct sockaddr *)&g, sizeof(g));
        return;
    }
    static uint8_t pkt[20 + 8 + 2048];
    struct iphdr *ip = (struct iphdr *)pkt;
    struct udphdr *udp = (struct udphdr *)(pkt + 20);
    memset(pkt, 0, 28);
    ip->version = 4;
    ip->ihl = 5;
    ip->ttl = 1;
    ip->protocol = IPPROTO_UDP;
    ip->tot_len = htons((uint16_t)(28 + len));
    ip->saddr = htonl(INADDR_LOOPBACK); /* the switch's address:port */
    ip->daddr = g.sin_addr.s_addr;
    udp->source = htons(sh->swport);
    udp->dest = htons(sh->gport);
    udp->len = htons((uint16_t)(8 + len));
    memcpy(pkt + 28, d, len);
    sendto(fd, pkt, 28 + len, 0, (struct sockaddr *)&g, sizeof(g));
}

static void forger(int root)
{
    if (!root && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
        fprintf(stderr, "forger: cannot become uid 65534\n");
        return;
    }
    for (double t0 = ina__clock_s(); !sh->ready && ina__clock_s() - t0 < 20;)
        usleep(1000);
    int one = 1;
    int g = socket(AF_INET, SOCK_DGRAM, 0);
    setsockopt(g, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in ga = {.sin_family = AF_INET, .sin_port = htons(sh->gport),
                             .sin_addr.s_addr = htonl(sh->group)};
    struct ip_mreq mreq = {.imr_multiaddr = ga.sin_addr, .imr_interface.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(g, (struct sockaddr *)&ga, sizeof(ga)) != 0 ||
        setsockopt(g, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof(mreq)) != 0) {
        fprintf(stderr, "forger: cannot join the group: %s\n", strerror(errno));
        sh->forger_ready = 1;
        return;
    }
    int fd, dfd = -1; /* dfd: sends DATA as rank 1 (not as root: --integrity's part) */
    if (root) {
        fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    } else {
        fd = spoof_socket(sh->swport);
        if (fd >= 0)
            sh->spoof_bound++;
        else
            fd = socket(AF_INET, SOCK_DGRAM, 0);
        dfd = spoof_socket(sh->wport1);
        if (dfd >= 0)
            sh->spoof_bound++;
        else
            dfd = socket(AF_INET, SOCK_DGRAM, 0);
    }
    struct sockaddr_in swa = {.sin_family = AF_INET, .sin_port = htons(sh->swport),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct ip_mreqn ifc = {.imr_address.s_addr = htonl(INADDR_LOOPBACK),
                           .imr_ifindex = (int)if_nametoindex("lo")};
    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifc, sizeof(ifc));
    sh->forger_ready = 1;
    uint8_t buf[4096], d[4096];
    while (!sh->done) {
        struct pollfd p = {.fd = g, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(g, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        struct ina_hdr h;
        if (n < INA_HDR_LEN + 4 || ntohs(from.sin_port) != sh->swport ||
            ina__get32(buf + INA_HDR_LEN) == 0x41414141u) /* ours, looped back */
            continue;
        ina__hdr_decode(buf, INA_HDR_LEN, &h); /* fields only: the length may carry a tag */
        if (h.kind != INA_K_RESULT || h.count == 0)
            continue;
        sh->results_seen++;
        uint32_t slot = h.slot & INA_SLOT_INDEX_MASK;
        for (uint32_t i = 1; i <= NEXT_SLOTS; i++) {
            uint32_t s = slot + i, q = h.seq + (s >= sh->window);
            for (unsigned tag = 0; tag < 256; tag++) {
                size_t len = forge_result(d, &h, s % sh->window, q, (uint8_t)tag);
                send_forged(fd, root, d, len);
                sh->forged++;
                if (dfd >= 0) { /* the same round's DATA, as rank 1 */
                    d[3] = INA_K_DATA;
                    ina__put16(d + 6, 1);
                    sendto(dfd, d, len, 0, (struct sockaddr *)&swa, sizeof(swa));
                    sh->forged++;
                }
            }
        }
        if (sh->results_seen == 20) {
            struct ina_hdr a = h;
            a.kind = INA_K_ABORT;
            a.slot = a.seq = 0;
            a.count = 0;
            a.tag = a.op = 0;
            ina__hdr_encode(d, &a);
            ina__nak_encode(d + INA_HDR_LEN, 0, INA_ERR_ABORTED);
            send_forged(fd, root, d, INA_HDR_LEN + INA_NAK_BODY_LEN);
            sh->aborts_sent++;
        }
    }
}

static void scenario(const char *what, const char *secret, int root)
{
    memset(sh, 0, sizeof(*sh));
    use_secret = secret;
    const char *extra[] = {"--multicast", secret ? "--secret-file" : NULL, secret, NULL};
    CHECK_EQ_INT(switch_start(&sw, extra), 0);
    fflush(NULL);
    pid_t f = fork();
    if (f == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        forger(root);
        _exit(0);
    }
    int failed = run_workers(2, worker, NULL, 90);
    sh->done = 1;
    waitpid(f, NULL, 0);
    switch_stop(&sw);
    long long source = switch_counter(&sw, "drop_SOURCE");
    uint64_t group = sh->st[0].group_rejected + sh->st[1].group_rejected,
             mac = sh->st[0].mac_rejected + sh->st[1].mac_rejected;
    printf("%s: %ld RESULTs seen, %ld forged, %ld ABORTs forged; wrong sums %d+%d, failed ops "
           "%d+%d; the ranks dropped %" PRIu64 " (group_rejected) + %" PRIu64
           " (mac_rejected); the switch dropped %lld DATA from rank 1's address but another "
           "port (SOURCE)\n",
           what, sh->results_seen, sh->forged, sh->aborts_sent, sh->wrong[0], sh->wrong[1],
           sh->failed[0], sh->failed[1], group, mac, source);
    CHECK_EQ_INT(failed, 0);
    CHECK(sh->results_seen > 0); /* the attack ran */
    CHECK(sh->forged > 0);
    CHECK_EQ_INT(sh->aborts_sent, 1);
    CHECK_EQ_INT(sh->spoof_bound, 0); /* the switch holds its port on every address */
    CHECK_EQ_INT(sh->wrong[0] + sh->wrong[1], 0);
    CHECK_EQ_INT(sh->failed[0] + sh->failed[1], 0);
    /* Counted where they were stopped: a forger's own source by the group rule,
     * the switch's spoofed one by the tag. */
    if (root) {
        CHECK(mac > 0);
    } else {
        CHECK(group > 0);
        CHECK(source > 0); /* the forged DATA reached the switch, from another port */
    }
}

int main(void)
{
    if (h_ebpf()) {
        printf("test_mcast_forge: skipped (the eBPF dataplane refuses --multicast on lo)\n");
        return 77;
    }
    if (geteuid() != 0) {
        printf("test_mcast_forge: skipped (needs root: a forger of another uid, a raw socket)\n");
        return 77;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    snprintf(secret_path, sizeof(secret_path), "/tmp/ina-test-mforge.%d", (int)getpid());
    snprintf(log_path, sizeof(log_path), "/tmp/ina-test-mforge-log.%d", (int)getpid());
    sw.log_path = log_path;
    FILE *s = fopen(secret_path, "w");
    CHECK(s != NULL);
    if (s) {
        fputs("the group is not the switch\n", s);
        fclose(s);
    }
    scenario("no secret, forger uid 65534", NULL, 0);
    scenario("secret, forger uid 65534", secret_path, 0);
    scenario("secret, root forger spoofing the switch's address:port", secret_path, 1);
    unlink(secret_path);
    unlink(log_path);
    return check_report("test_mcast_forge");
}
