/* test_hostile.c: garbage, forged, spoofed and replayed packets hit the switch during a run; every sum stays correct and every drop is counted. */
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "check.h"
#include "e2e/harness.h"
#include "lib/internal.h"

#define NOPS 300
static struct sw_proc sw;

struct shared {
    volatile int ready, done;
    uint16_t job;
    uint32_t session, token;      /* the running session */
    uint32_t old_session, old_token; /* an earlier session of the same job name */
    uint64_t sent;
};
static struct shared *sh;

static size_t op_count(int i) { return (size_t)(i % 7) * 777 + 1; }

static int worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "hostile", rank, n, addr, sizeof(addr));
    cfg.elems_per_packet = 64;
    cfg.window = 8;
    ina_ctx *ctx;
    if (ina_init(&ctx, &cfg))
        return 1;
    if (rank == 0) {
        sh->job = ctx->job_id;
        sh->session = ctx->session;
        sh->token = ctx->token;
        sh->ready = 1;
    }
    int fails = 0;
    int32_t *in = malloc(5000 * 4), *out = malloc(5000 * 4);
    for (int i = 0; i < NOPS && !fails; i++) {
        size_t count = op_count(i);
        for (size_t j = 0; j < count; j++)
            in[j] = h_i32(rank, (uint64_t)i, j);
        int rc = ina_allreduce(ctx, in, out, count, INA_INT32, INA_SUM);
        if (rc) {
            fprintf(stderr, "rank %d op %d: %s\n", rank, i, ina_err_name(rc));
            fails++;
        }
        for (size_t j = 0; j < count && !rc; j++) {
            uint32_t e = 0;
            for (int r = 0; r < n; r++)
                e += (uint32_t)h_i32(r, (uint64_t)i, j);
            if ((uint32_t)out[j] != e) {
                fprintf(stderr, "rank %d op %d: WRONG SUM at %zu\n", rank, i, j);
                fails++;
                break;
            }
        }
        usleep(1000); /* leave the attacker room on 2 cores */
    }
    free(in);
    free(out);
    ina_finalize(ctx);
    return fails;
}

static uint64_t rng = 12345;
static uint32_t rnd(void) { return (uint32_t)(h_mix(rng++) >> 32); }

/* One forged datagram of kind `what` into buf. @return its length. */
static size_t forge(uint8_t *buf, int what)
{
    struct ina_hdr h;
    ina__hdr_init(&h, INA_K_DATA);
    h.job = sh->job;
    h.session = sh->session;
    h.token = sh->token;
    h.rank = (uint16_t)(rnd() % 3);
    h.slot = rnd() % 8;
    h.seq = rnd() % 64;
    h.slot |= (h.seq & 1) ? INA_SLOT_SET_BIT : 0;
    h.count = (uint16_t)(rnd() % 65);
    h.exp = 0;
    switch (what) {
    case 0: { /* pure garbage */
        size_t len = rnd() % 1500;
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)rnd();
        return len;
    }
    case 1: /* random header fields, right magic and version */
        h.kind = (uint8_t)rnd();
        h.job = (uint16_t)rnd();
        h.session = rnd();
        h.token = rnd();
        h.rank = (uint16_t)rnd();
        h.slot = rnd();
        h.seq = rnd();
        break;
    case 2: h.token ^= 1 + rnd() % 0xFFFF; break;        /* right job/session, wrong token */
    case 3: break;                                       /* right token, wrong source address */
    case 4: h.session = sh->old_session; h.token = sh->old_token; break; /* replayed old session */
    case 5: h.count = (uint16_t)(h.count + 1); break;    /* truncated: length disagrees */
    default: break;
    }
    ina__hdr_encode(buf, &h);
    for (unsigned i = 0; i < h.count; i++)
        ina__put32(buf + INA_HDR_LEN + 4 * i, rnd());
    size_t len = INA_HDR_LEN + 4 * (size_t)h.count;
    return what == 5 ? len - 4 : len;
}

static void attacker(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sw.port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint8_t buf[2048];
    while (!sh->ready)
        usleep(1000);
    while (!sh->done) {
        for (int i = 0; i < 50; i++) {
            size_t len = forge(buf, (int)(rnd() % 6));
            sendto(fd, buf, len, 0, (struct sockaddr *)&dst, sizeof(dst));
            sh->sent++;
        }
        usleep(2000);
    }
    close(fd);
}

/* An earlier session of the same job name, to replay its ids later. */
static int old_session_worker(int rank, int n, void *arg)
{
    (void)arg;
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "hostile", rank, n, addr, sizeof(addr));
    ina_ctx *ctx;
    if (ina_init(&ctx, &cfg))
        return 1;
    if (rank == 0) {
        sh->old_session = ctx->session;
        sh->old_token = ctx->token;
    }
    int32_t x = 1, y = 0;
    int rc = ina_allreduce(ctx, &x, &y, 1, INA_INT32, INA_SUM);
    ina_finalize(ctx);
    return rc || y != n;
}

int main(void)
{
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char log[64];
    snprintf(log, sizeof(log), "/tmp/ina-hostile.%d.log", (int)getpid());
    sw.log_path = log;
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    CHECK_EQ_INT(run_workers(3, old_session_worker, NULL, 30), 0);
    fflush(NULL);
    pid_t att = fork();
    if (att == 0) {
        attacker();
        _exit(0);
    }
    double t0 = ina__clock_s();
    int failed = run_workers(3, worker, NULL, 120);
    sh->done = 1;
    waitpid(att, NULL, 0);
    printf("%d ops x 3 workers under attack: %d workers failed (%.1f s), %llu forged datagrams\n",
           NOPS, failed, ina__clock_s() - t0, (unsigned long long)sh->sent);
    CHECK_EQ_INT(failed, 0);
    CHECK(sh->sent > 1000);
    CHECK_EQ_INT(switch_stop(&sw), 0);
    const char *causes[] = {"drop_SHORT", "drop_MAGIC", "drop_TOKEN", "drop_SOURCE",
                            "drop_SESSION", "drop_LENGTH", "drop_NO_JOB"};
    for (size_t i = 0; i < sizeof(causes) / sizeof(causes[0]); i++) {
        long long v = switch_counter(&sw, causes[i]);
        printf("  %-14s %lld\n", causes[i], v);
        CHECK(v > 0);
    }
    CHECK_EQ_INT(switch_counter(&sw, "drop_MISMATCH"), 0); /* no forged packet reached a slot */
    unlink(log);
    munmap(sh, sizeof(*sh));
    return check_report("test_hostile");
}
