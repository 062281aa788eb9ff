/* mac_rate.c: single-core cost of a datagram's tag (keyed BLAKE2b-128 under a session key, PROTOCOL.md §4.6), per packet and per byte, against memcpy of the same bytes. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/mac.h"
#include "common/clock.h"

/*
 * For each datagram size (default: a 256-element packet, 1 KiB of payload,
 * 1056 bytes; a 2048-element one, 8 KiB, 8224 bytes; and 64 B and 64 KiB for
 * the shape), measure the tag of one datagram (ina__mac: what the sender and
 * the receiver each compute once per datagram) and memcpy of the same bytes,
 * as the median of --runs runs of about --ms milliseconds each, each run a
 * loop over --bufs buffers so the data comes from the cache a socket leaves
 * it in. Prints one JSON line per size: ns per datagram, ns per byte,
 * cycles per byte at --ghz (default: read from /proc/cpuinfo, the nominal
 * clock), and the tag's rate in GB/s (1e9 bytes/s).
 */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double cpu_ghz(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double mhz = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "cpu MHz : %lf", &mhz) == 1)
            break;
    if (f)
        fclose(f);
    return mhz / 1000.0;
}

static volatile uint8_t sink;

/* Seconds per call of one run: tags (mac) or copies of len bytes, cycling over nbuf buffers. */
static double one_run(int mac, const struct ina_mac_key *k, uint8_t *bufs, uint8_t *dst,
                      size_t len, int nbuf, double ms)
{
    long calls = 0;
    uint8_t tag[INA_MAC_LEN];
    double t0 = ina__clock_s(), t;
    do {
        for (int i = 0; i < 64; i++, calls++) {
            uint8_t *b = bufs + (size_t)(calls % nbuf) * len;
            if (mac) {
                ina__mac(k, b, len, tag);
                sink ^= tag[0];
            } else {
                memcpy(dst, b, len);
                sink ^= dst[len - 1];
            }
        }
        t = ina__clock_s();
    } while (t - t0 < ms / 1000.0);
    return (t - t0) / (double)calls;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"sizes", required_argument, 0, 's'},
                                         {"runs", required_argument, 0, 'r'},
                                         {"ms", required_argument, 0, 'm'},
                                         {"bufs", required_argument, 0, 'b'},
                                         {"ghz", required_argument, 0, 'g'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *sizes = "64,1056,8224,65536";
    int runs = 9, nbuf = 16, c;
    double ms = 100, ghz = cpu_ghz();
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': sizes = optarg; break;
        case 'r': runs = atoi(optarg); break;
        case 'm': ms = atof(optarg); break;
        case 'b': nbuf = atoi(optarg); break;
        case 'g': ghz = atof(optarg); break;
        default:
            printf("Usage: mac_rate [--sizes B,B,...] [--runs N] [--ms MS] [--bufs N] [--ghz G]\n"
                   "Datagram sizes in bytes (default %s: header + 16, 256, 2048 elements, 64 KiB).\n",
                   sizes);
            return c == 'h' ? 0 : 2;
        }
    }
    if (runs < 1 || runs > 99 || nbuf < 1 || ms <= 0) {
        fprintf(stderr, "mac_rate: --runs 1..99, --bufs >= 1, --ms > 0\n");
        return 2;
    }
    uint8_t key[INA_SESSION_KEY_LEN];
    for (int i = 0; i < INA_SESSION_KEY_LEN; i++)
        key[i] = (uint8_t)(i * 37 + 1);
    struct ina_mac_key k;
    ina__mac_key_init(&k, key);
    for (const char *p = sizes; *p;) {
        char *end;
        size_t len = strtoul(p, &end, 10);
        if (end == p || len == 0 || len > (1u << 20)) {
            fprintf(stderr, "mac_rate: bad --sizes '%s'\n", sizes);
            return 2;
        }
        p = *end == ',' ? end + 1 : end;
        uint8_t *bufs = malloc(len * (size_t)nbuf), *dst = malloc(len);
        if (!bufs || !dst) {
            perror("malloc");
            return 1;
        }
        for (size_t i = 0; i < len * (size_t)nbuf; i++)
            bufs[i] = (uint8_t)(i * 131 + 7);
        double t_mac[99], t_cpy[99];
        for (int r = 0; r < runs; r++) { /* interleaved, so both see the same machine */
            t_mac[r] = one_run(1, &k, bufs, dst, len, nbuf, ms);
            t_cpy[r] = one_run(0, &k, bufs, dst, len, nbuf, ms);
        }
        qsort(t_mac, (size_t)runs, sizeof(double), cmp_double);
        qsort(t_cpy, (size_t)runs, sizeof(double), cmp_double);
        double mac = t_mac[runs / 2], cpy = t_cpy[runs / 2];
        printf("{\"bytes\":%zu,\"mac_ns\":%.1f,\"mac_ns_per_byte\":%.3f,\"mac_cycles_per_byte\":%.2f,"
               "\"mac_gbps\":%.2f,\"mac_best_ns\":%.1f,\"memcpy_ns\":%.1f,\"ghz\":%.2f,\"runs\":%d}\n",
               len, mac * 1e9, mac * 1e9 / (double)len, mac * 1e9 * ghz / (double)len,
               (double)len / mac / 1e9, t_mac[0] * 1e9, cpy * 1e9, ghz, runs);
        free(bufs);
        free(dst);
    }
    return 0;
}
