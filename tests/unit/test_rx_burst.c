/* test_rx_burst.c: one receive burst (common/rx_burst.h), the loop of ina-switch, ina-ps and libina: datagrams in order with their sender, GRO trains split, oversized ones dropped and counted, the messages taken, errors as -errno, the caller's memory left alone. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "common/rx_burst.h"
#include "common/udp_gso.h"

/* A non-blocking UDP socket on 127.0.0.1 (a free port), its address in *a. */
static int udp_socket(struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(*a);
    if (fd < 0 || bind(fd, (struct sockaddr *)a, sizeof(*a)) != 0 ||
        getsockname(fd, (struct sockaddr *)a, &len) != 0) {
        perror("test_rx_burst: socket");
        exit(1);
    }
    return fd;
}

/* Datagram i of a test: len bytes, each (i * 31 + byte index) & 0xFF. */
static void fill(uint8_t *b, size_t len, unsigned i)
{
    for (size_t k = 0; k < len; k++)
        b[k] = (uint8_t)(i * 31u + k);
}

static int same(const struct ina_rx_pkt *pk, size_t len, unsigned i)
{
    uint8_t want[2048];
    fill(want, len, i);
    return pk->len == len && memcmp(pk->data, want, len) == 0;
}

static void wait_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK_EQ_INT(poll(&p, 1, 2000), 1);
}

/* Bursts until n datagrams came (a GRO train may arrive as one message or as several),
 * at most 50 tries. @return the datagrams, copied in order into pk (data in store). */
static unsigned take(struct ina_rx *rx, int fd, unsigned n, struct ina_rx_pkt *pk,
                     uint8_t (*store)[2048], unsigned *msgs)
{
    static struct ina_rx_pkt burst[INA_RX_MAX_PKTS];
    unsigned got = 0;
    *msgs = 0;
    for (int tries = 0; got < n && tries < 50; tries++) {
        wait_readable(fd);
        int k = ina__rx_burst(rx, fd, burst, INA_RX_MAX_PKTS);
        if (k < 0)
            continue;
        *msgs += rx->got;
        for (int i = 0; i < k && got < n; i++, got++) {
            memcpy(store[got], burst[i].data, burst[i].len);
            pk[got] = burst[i];
            pk[got].data = store[got];
        }
    }
    return got;
}

static void test_init(void)
{
    struct ina_rx rx;
    uint8_t mem[64];
    CHECK_EQ_INT(ina__rx_init(&rx, 0, 2048), -EINVAL);
    CHECK_EQ_INT(ina__rx_init(&rx, INA_RX_MAX_MSGS + 1, 2048), -EINVAL);
    CHECK_EQ_INT(ina__rx_init(&rx, 4, 0), -EINVAL);
    CHECK_EQ_INT(ina__rx_init_mem(&rx, 4, 16, NULL), -EINVAL);
    /* The caller's memory stays the caller's: ina__rx_free leaves it (ASan: no bad free). */
    CHECK_EQ_INT(ina__rx_init_mem(&rx, 4, 16, mem), 0);
    CHECK(rx.mem == mem && rx.nmsgs == 4 && rx.bufsize == 16);
    ina__rx_free(&rx);
    CHECK(rx.mem == NULL);
    memset(mem, 1, sizeof(mem));
    CHECK_EQ_INT(ina__rx_init(&rx, INA_RX_MAX_MSGS, 64), 0);
    ina__rx_free(&rx);
    ina__rx_free(&rx); /* twice: nothing left to free */
}

/* Plain datagrams of different sizes: one each, in order, with their sender. */
static void test_datagrams(void)
{
    struct sockaddr_in ra, sa;
    int r = udp_socket(&ra), s = udp_socket(&sa);
    struct ina_rx rx;
    struct ina_rx_pkt pk[INA_RX_MAX_PKTS];
    CHECK_EQ_INT(ina__rx_init(&rx, 4, 2048), 0);
    CHECK_EQ_INT(ina__rx_burst(&rx, r, pk, INA_RX_MAX_PKTS), -EAGAIN); /* nothing queued */
    CHECK_EQ_INT(rx.got, 0);
    const size_t lens[6] = {32, 100, 1, 2048, 77, 500};
    for (unsigned i = 0; i < 6; i++) {
        uint8_t b[2048];
        fill(b, lens[i], i);
        CHECK_EQ_INT(sendto(s, b, lens[i], 0, (struct sockaddr *)&ra, sizeof(ra)), lens[i]);
    }
    static uint8_t store[INA_RX_MAX_PKTS][2048];
    struct ina_rx_pkt got[INA_RX_MAX_PKTS];
    unsigned msgs;
    CHECK_EQ_INT(take(&rx, r, 6, got, store, &msgs), 6);
    CHECK_EQ_INT(msgs, 6); /* no GRO on this socket: a message is a datagram */
    for (unsigned i = 0; i < 6; i++) {
        CHECK(same(&got[i], lens[i], i));
        CHECK(got[i].src->sin_port == sa.sin_port && got[i].src->sin_addr.s_addr == sa.sin_addr.s_addr);
    }
    CHECK_EQ_INT(rx.truncated, 0);
    ina__rx_free(&rx);
    close(r);
    close(s);
}

/* A datagram longer than a buffer is no datagram of ours: dropped, counted, and the
 * burst goes on with the next; the messages taken count it. */
static void test_truncated(void)
{
    struct sockaddr_in ra, sa;
    int r = udp_socket(&ra), s = udp_socket(&sa);
    struct ina_rx rx;
    struct ina_rx_pkt pk[INA_RX_MAX_PKTS];
    CHECK_EQ_INT(ina__rx_init(&rx, 4, 64), 0);
    uint8_t b[2048];
    fill(b, 100, 0);
    sendto(s, b, 100, 0, (struct sockaddr *)&ra, sizeof(ra));
    fill(b, 64, 1);
    sendto(s, b, 64, 0, (struct sockaddr *)&ra, sizeof(ra));
    wait_readable(r);
    usleep(20000); /* both queued */
    CHECK_EQ_INT(ina__rx_burst(&rx, r, pk, INA_RX_MAX_PKTS), 1);
    CHECK_EQ_INT(rx.got, 2);
    CHECK_EQ_INT(rx.truncated, 1);
    CHECK(same(&pk[0], 64, 1));
    /* Only oversized: no datagram, yet a message was taken. */
    fill(b, 65, 2);
    sendto(s, b, 65, 0, (struct sockaddr *)&ra, sizeof(ra));
    wait_readable(r);
    CHECK_EQ_INT(ina__rx_burst(&rx, r, pk, INA_RX_MAX_PKTS), 0);
    CHECK_EQ_INT(rx.got, 1);
    CHECK_EQ_INT(rx.truncated, 2);
    ina__rx_free(&rx);
    close(r);
    close(s);
}

/* A GSO train of equal datagrams and a short last one: with GRO the kernel hands it over as
 * one message, split back into the datagrams in order; without, one by one. Either way the
 * same datagrams. A caller's array shorter than the train takes its first datagrams, and
 * the message whose rest it lost is counted. */
static void test_gro_train(void)
{
    struct sockaddr_in ra, sa;
    int r = udp_socket(&ra), s = udp_socket(&sa);
    int gro = ina__udp_enable_gro(r) == 0;
    struct ina_rx rx;
    CHECK_EQ_INT(ina__rx_init(&rx, INA_RX_MAX_MSGS, INA_GRO_BUF), 0);
    struct ina_gso_batch batch;
    CHECK_EQ_INT(ina__gso_batch_init(&batch, 4, 64), 0);
    static uint8_t out[8][2048];
    const unsigned n = 8;
    for (unsigned i = 0; i < n; i++) {
        size_t len = i < n - 1 ? 1000 : 300;
        fill(out[i], len, 10 + i);
        ina__gso_batch_add(&batch, out[i], len, &ra);
    }
    uint64_t errors = 0;
    CHECK_EQ_INT(ina__gso_batch_send(&batch, s, &errors), n);
    CHECK_EQ_INT(errors, 0);
    static uint8_t store[INA_RX_MAX_PKTS][2048];
    struct ina_rx_pkt got[INA_RX_MAX_PKTS];
    unsigned msgs;
    CHECK_EQ_INT(take(&rx, r, n, got, store, &msgs), n);
    for (unsigned i = 0; i < n; i++)
        CHECK(same(&got[i], i < n - 1 ? 1000 : 300, 10 + i));
    CHECK(msgs >= 1 && msgs <= n);
    printf("GRO %s: %u datagrams in %u message(s)\n", gro ? "on" : "unavailable", n, msgs);
    CHECK_EQ_INT(rx.truncated, 0);

    /* The same train into an array of 3. */
    ina__gso_batch_reset(&batch);
    for (unsigned i = 0; i < n; i++)
        ina__gso_batch_add(&batch, out[i], i < n - 1 ? 1000 : 300, &ra);
    CHECK_EQ_INT(ina__gso_batch_send(&batch, s, &errors), n);
    wait_readable(r);
    usleep(20000);
    struct ina_rx_pkt three[3];
    int k = ina__rx_burst(&rx, r, three, 3);
    CHECK(k >= 1 && k <= 3);
    for (int i = 0; i < k; i++)
        CHECK(same(&three[i], 1000, 10 + (unsigned)i));
    if (rx.got == 1) /* one message of n datagrams: its rest lost, the message counted */
        CHECK_EQ_INT(rx.truncated, 1);
    ina__gso_batch_free(&batch);
    ina__rx_free(&rx);
    close(r);
    close(s);
}

/* A connected socket whose peer has no socket: the ICMP port unreachable comes back as
 * -ECONNREFUSED, which libina reads as "no switch at that address". */
static void test_refused(void)
{
    struct sockaddr_in ra, dead;
    int r = udp_socket(&ra), d = udp_socket(&dead);
    close(d); /* its port now has no socket */
    CHECK_EQ_INT(connect(r, (struct sockaddr *)&dead, sizeof(dead)), 0);
    CHECK_EQ_INT(send(r, "x", 1, 0), 1);
    struct ina_rx rx;
    struct ina_rx_pkt pk[4];
    CHECK_EQ_INT(ina__rx_init(&rx, 4, 2048), 0);
    int rc = -EAGAIN;
    for (int tries = 0; tries < 100 && rc == -EAGAIN; tries++) {
        rc = ina__rx_burst(&rx, r, pk, 4);
        if (rc == -EAGAIN)
            usleep(10000);
    }
    CHECK_EQ_INT(rc, -ECONNREFUSED);
    CHECK_EQ_INT(rx.got, 0);
    ina__rx_free(&rx);
    close(r);
}

int main(void)
{
    test_init();
    test_datagrams();
    test_truncated();
    test_gro_train();
    test_refused();
    return check_report("test_rx_burst");
}
