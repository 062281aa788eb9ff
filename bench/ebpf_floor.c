/* ebpf_floor.c: times the parts of the eBPF dataplane's per-packet work (ebpf_floor.bpf.c) and the userspace switch's add, per 1 KiB packet. */

/*
 * Usage: ebpf_floor OBJ ELEMS [ROUNDS]
 *
 * OBJ is ebpf_floor.bpf.o compiled with -DFLOOR_ELEMS=ELEMS (bench/ebpf.sh
 * builds both and runs it first). Each of ROUNDS (default 7) rounds, interleaved, runs every
 * program of OBJ on one DATA frame of ELEMS int32 by BPF_PROG_TEST_RUN,
 * 200,000 times (the kernel reports the mean ns per run), and times the
 * userspace switch's add of the same payload into a slot (ina__be32_add:
 * AVX2 where the CPU has it) 200,000 times. Prints each median and the
 * differences: what the copy and the adds cost a BPF program per packet.
 * Needs root (BPF programs); exits 77 with a SKIP line where they cannot load.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "common/be32.h"
#include "common/clock.h"

#define REPEAT 200000
#define MAX_ROUNDS 31
#define PAYLOAD_OFF 74

static const char *const progs[] = {"floor_empty", "floor_copy", "floor_add", "floor_add1"};
#define NPROGS 4

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The userspace switch's add of one payload into a slot: ns per packet. */
static double time_userspace_add(int32_t *slot, const uint8_t *payload, size_t elems)
{
    double t0 = (double)ina__clock_ns();
    for (int i = 0; i < REPEAT; i++) {
        ina__be32_add(slot, payload, elems);
        __asm__ volatile("" : : "r"(slot) : "memory"); /* keep every add */
    }
    return ((double)ina__clock_ns() - t0) / REPEAT;
}

int main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: ebpf_floor OBJ ELEMS [ROUNDS]\n");
        return argc < 3 ? 2 : 0;
    }
    size_t elems = strtoul(argv[2], NULL, 10);
    int rounds = argc > 3 ? atoi(argv[3]) : 7;
    if (elems < 1 || elems > 2048 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "ebpf_floor: ELEMS 1..2048, ROUNDS 1..%d\n", MAX_ROUNDS);
        return 2;
    }
    libbpf_set_print(NULL);
    struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
    if (!obj) {
        fprintf(stderr, "ebpf_floor: cannot open %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    if (bpf_object__load(obj) != 0) {
        printf("SKIP: ebpf_floor: cannot load BPF programs here (%s)\n", strerror(errno));
        bpf_object__close(obj);
        return 77;
    }
    int fds[NPROGS];
    for (int p = 0; p < NPROGS; p++) {
        struct bpf_program *prog = bpf_object__find_program_by_name(obj, progs[p]);
        fds[p] = prog ? bpf_program__fd(prog) : -1;
        if (fds[p] < 0) {
            fprintf(stderr, "ebpf_floor: no program %s in %s\n", progs[p], argv[1]);
            bpf_object__close(obj);
            return 1;
        }
    }

    /* An Ethernet/IPv4/UDP frame with an ina header and elems int32 of payload. */
    size_t flen = PAYLOAD_OFF + 4 * elems;
    uint8_t *frame = calloc(1, flen);
    int32_t *slot = calloc(elems, sizeof(*slot));
    if (!frame || !slot) {
        fprintf(stderr, "ebpf_floor: out of memory\n");
        free(frame);
        free(slot);
        bpf_object__close(obj);
        return 1;
    }
    frame[12] = 0x08; /* IPv4 */
    frame[14] = 0x45;
    frame[23] = 17; /* UDP */
    for (size_t i = PAYLOAD_OFF; i < flen; i++)
        frame[i] = (uint8_t)(i * 131 + 7);

    double t[NPROGS + 1][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        for (int p = 0; p < NPROGS; p++) {
            LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame, .data_size_in = (uint32_t)flen,
                        .repeat = REPEAT);
            if (bpf_prog_test_run_opts(fds[p], &o) != 0) {
                fprintf(stderr, "ebpf_floor: test run of %s: %s\n", progs[p], strerror(errno));
                free(frame);
                free(slot);
                bpf_object__close(obj);
                return 1;
            }
            t[p][r] = (double)o.duration;
        }
        t[NPROGS][r] = time_userspace_add(slot, frame + PAYLOAD_OFF, elems);
    }
    double m[NPROGS + 1];
    for (int p = 0; p <= NPROGS; p++)
        m[p] = median(t[p], rounds);
    printf("per packet of %zu int32 (%zu B), medians of %d rounds x %d runs:\n", elems, 4 * elems,
           rounds, REPEAT);
    printf("  BPF test run, empty program        %7.1f ns\n", m[0]);
    printf("  + map lookups and payload copy-in  %7.1f ns (the copy: %.1f ns)\n", m[1], m[1] - m[0]);
    printf("  + spin lock and the adds           %7.1f ns (the locked adds: %.1f ns)\n", m[2],
           m[2] - m[1]);
    printf("    (one element at a time instead:  %7.1f ns, the locked adds %.1f ns)\n", m[3],
           m[3] - m[1]);
    printf("  BPF floor (copy + locked adds)     %7.1f ns\n", m[2] - m[0]);
    printf("  userspace switch's add (ina__be32_add) %4.1f ns\n", m[4]);
    printf("floor_ns %.1f adds_ns %.1f adds1_ns %.1f copy_ns %.1f userspace_add_ns %.1f\n",
           m[2] - m[0], m[2] - m[1], m[3] - m[1], m[1] - m[0], m[4]);
    free(frame);
    free(slot);
    bpf_object__close(obj);
    return 0;
}
