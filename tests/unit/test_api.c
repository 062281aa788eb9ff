/* test_api.c: public API misuse and edge cases that need no switch: arguments, errors, config, deadlines. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "check.h"
#include "common/version.h"
#include "ina.h"
#include "lib/internal.h"

/* A port with nobody listening: bind a UDP socket, note its port, close it. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_errors(void)
{
    CHECK(strcmp(ina_err_name(INA_ERR_TIMEOUT), "INA_ERR_TIMEOUT") == 0);
    CHECK(strcmp(ina_err_name(-EINVAL), "EINVAL") == 0);
    CHECK(strcmp(ina_err_name(INA_OK), "INA_OK") == 0);
    CHECK(strstr(ina_strerror(INA_ERR_NOTSUP), "not supported") != NULL);
    CHECK(ina_strerror(12345) != NULL && ina_err_name(-99999) != NULL);
    CHECK(ina_version_number() == INA_VERSION_NUMBER);
    CHECK(strlen(ina_version_string()) >= 5);
}

/* The ABI block of ina.h: the library's struct sizes are the header's, its version
 * string is the header's, and ina_config_init() writes nothing past sizeof(ina_config). */
static void test_abi(void)
{
    CHECK_EQ_INT(ina_config_size(), sizeof(ina_config));
    CHECK_EQ_INT(ina_stats_size(), sizeof(ina_stats));
    CHECK_EQ_INT(ina_info_size(), sizeof(ina_info));
    CHECK_EQ_INT(ina_kv_config_size(), sizeof(ina_kv_config));
    CHECK_EQ_INT(ina_kv_stats_size(), sizeof(ina_kv_stats));
    char want[INA_VERSION_STR_LEN], buf[INA_VERSION_STR_LEN];
    snprintf(want, sizeof(want), "%d.%d.%d", INA_VERSION_MAJOR, INA_VERSION_MINOR,
             INA_VERSION_PATCH);
    CHECK(strcmp(ina_version_string(), want) == 0);
    CHECK(strcmp(ina__version_str(ina_version_number(), buf, sizeof(buf)), want) == 0);
    CHECK(strcmp(ina__version_str(500, buf, sizeof(buf)), "0.5.0") == 0);
    CHECK(strcmp(ina__version_str(10203, buf, sizeof(buf)), "1.2.3") == 0);
    CHECK(strcmp(ina__version_str(0, buf, sizeof(buf)), "unknown") == 0);
    CHECK(strcmp(ina__version_str(UINT32_MAX, buf, sizeof(buf)), "429496.72.95") == 0);
    union {
        ina_config cfg;
        unsigned char bytes[sizeof(ina_config) + 64];
    } u;
    memset(u.bytes, 0xA5, sizeof(u.bytes));
    ina_config_init(&u.cfg);
    int intact = 1;
    for (size_t i = sizeof(ina_config); i < sizeof(u.bytes); i++)
        intact &= u.bytes[i] == 0xA5;
    CHECK(intact);
}

static void test_config(void)
{
    ina_config cfg;
    setenv("INA_SWITCH", "10.1.2.3:999", 1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("INA_JOB", "torchjob", 1);
    unsetenv("INA_RANK");
    unsetenv("INA_WORLD_SIZE");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK(strcmp(cfg.switch_addr, "10.1.2.3:999") == 0);
    CHECK_EQ_INT(cfg.rank, 3);
    CHECK_EQ_INT(cfg.world_size, 8);
    CHECK(strcmp(cfg.job, "torchjob") == 0);
    setenv("INA_RANK", "5", 1); /* INA_RANK wins over RANK */
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 5);
    setenv("INA_WORLD_SIZE", "eight", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    unsetenv("INA_WORLD_SIZE");
    CHECK_EQ_INT(cfg.float_add, INA_FLOAT_ADD_QUANTIZED); /* the default */
    setenv("INA_FLOAT_ADD", "switch", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.float_add, INA_FLOAT_ADD_SWITCH);
    setenv("INA_FLOAT_ADD", "quantized", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.float_add, INA_FLOAT_ADD_QUANTIZED);
    setenv("INA_FLOAT_ADD", "floats", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    unsetenv("INA_FLOAT_ADD");
    unsetenv("INA_SWITCH");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("INA_RANK");
    unsetenv("INA_JOB");
    CHECK_EQ_INT(ina_config_from_env(NULL), -EINVAL);
}

/* ina_config_from_env with one variable set (then unset): INA_ERR_CONFIG and a message that
 * names the variable and contains want, or 0 (want NULL). */
static void env_case(const char *name, const char *value, const char *want)
{
    ina_config cfg;
    setenv(name, value, 1);
    int rc = ina_config_from_env(&cfg);
    const char *msg = ina_last_error(NULL);
    if (want) {
        CHECK_EQ_INT(rc, INA_ERR_CONFIG);
        CHECK(strstr(msg, name) != NULL && strstr(msg, want) != NULL);
        if (rc != INA_ERR_CONFIG || !strstr(msg, name) || !strstr(msg, want))
            fprintf(stderr, "  %s='%s': %s, '%s' (want '%s')\n", name, value, ina_err_name(rc), msg,
                    want);
    } else {
        CHECK_EQ_INT(rc, 0);
    }
    unsetenv(name);
}

/* Issue 30, item 13: an empty variable is an error, not unset (and lets nothing else
 * decide); out-of-range values are refused by ina_config_from_env, naming the variable
 * and the range, not left to ina_init. */
static void test_config_edges(void)
{
    ina_config cfg;
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("INA_RANK", "", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG); /* was: rank 2, from RANK */
    CHECK(strcmp(ina_last_error(NULL), "INA_RANK is set but empty: unset it for the default") == 0);
    unsetenv("INA_RANK");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 2);
    setenv("RANK", "", 1); /* torchrun's (and launchers') empty variables say nothing */
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.rank, 0);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    static const char *const vars[] = {
        "INA_SWITCH", "INA_RANK", "INA_WORLD_SIZE", "INA_JOB", "INA_ELEMS", "INA_WINDOW",
        "INA_TIMEOUT_MS", "INA_JOIN_TIMEOUT_MS", "INA_RTO_MS", "INA_LANES", "INA_ADMISSION_WAIT_MS",
        "INA_FALLBACK", "INA_SECRET_FILE", "INA_FLOAT_ADD", "INA_SPARSE", "INA_SPARSE_BLOCK",
        "INA_SPARSE_THRESHOLD", "INA_SPARSE_CROSSOVER", "INA_SPARSE_MIN_BYTES",
        "INA_BUSY_POLL_US", "INA_FIXED_POINT"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        env_case(vars[i], "", "set but empty");
    /* The values, then each range's edges. */
    env_case("INA_BUSY_POLL_US", "-5", "outside 0..1000000");
    env_case("INA_BUSY_POLL_US", "1000000", NULL);
    env_case("INA_BUSY_POLL_US", "auto", NULL);
    env_case("INA_BUSY_POLL_US", "fast", "not a decimal integer");
    setenv("INA_BUSY_POLL_US", "0", 1); /* off, over the default (auto) */
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.busy_poll_us, 0);
    setenv("INA_BUSY_POLL_US", "auto", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.busy_poll_us, INA_BUSY_POLL_AUTO);
    unsetenv("INA_BUSY_POLL_US");
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.busy_poll_us, INA_BUSY_POLL_AUTO);
    env_case("INA_LANES", "17", "'auto' or a lane count 1..16");
    env_case("INA_LANES", "16", NULL);
    env_case("INA_SPARSE_BLOCK", "12", "0 (the default, 256) or 32..256");
    env_case("INA_SPARSE_BLOCK", "257", "outside 0..256");
    env_case("INA_SPARSE_BLOCK", "32", NULL);
    env_case("INA_FIXED_POINT", "40", "outside 0..30");
    env_case("INA_FIXED_POINT", "30", NULL);
    env_case("INA_SWITCH", "a,,b", "an empty entry");
    env_case("INA_SWITCH", "a:70000", "not a number in 1..65535");
    env_case("INA_SWITCH", "no-such-host.invalid:1,b", NULL); /* resolving is ina_init's */
    env_case("INA_WINDOW", "100", "not a power of 2");
    env_case("INA_WINDOW", "8192", "outside 0..4096");
    env_case("INA_WINDOW", "4096", NULL);
    env_case("INA_ELEMS", "16369", "outside 0..16368");
    env_case("INA_ELEMS", "16368", NULL);
    env_case("INA_WORLD_SIZE", "257", "outside 1..256");
    env_case("INA_WORLD_SIZE", "0", "outside 1..256");
    env_case("INA_RANK", "-1", "outside 0..255");
    env_case("INA_TIMEOUT_MS", "-1", "outside 0..");
    env_case("INA_JOIN_TIMEOUT_MS", "-1", "outside 0..");
    env_case("INA_RTO_MS", "-1", "outside 0..");
    env_case("INA_ADMISSION_WAIT_MS", "-1", "outside 0..");
    env_case("INA_SPARSE_MIN_BYTES", "-1", "outside 0..");
    env_case("INA_SPARSE_CROSSOVER", "300", "not a number in 0..256");
    env_case("INA_SPARSE_THRESHOLD", "inf", "not a finite number >= 0");
    env_case("INA_JOB", "a-job-name-that-is-longer-than-31-bytes", "longer than 31 bytes");
    /* Pairs. */
    setenv("INA_WORLD_SIZE", "2", 1);
    env_case("INA_RANK", "2", "INA_RANK=2 is not below INA_WORLD_SIZE=2");
    unsetenv("INA_WORLD_SIZE");
    env_case("INA_RANK", "2", NULL); /* the world size may still be set in code */
    setenv("INA_FLOAT_ADD", "switch", 1);
    env_case("INA_FIXED_POINT", "23", "INA_FLOAT_ADD=switch");
    unsetenv("INA_FLOAT_ADD");
    /* What ina_init refuses (docs: the limits of ina_config), it refuses with the rule. */
    ina_ctx *ctx;
    ina_config_init(&cfg);
    cfg.window = INA_MAX_WINDOW * 2;
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    CHECK(strstr(ina_last_error(NULL), "power of 2 up to 4096") != NULL);
    ina_config_init(&cfg);
    cfg.elems_per_packet = INA_MAX_ELEMS + 1;
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    CHECK(strstr(ina_last_error(NULL), "outside 0..16368") != NULL);
}

/* INA_LANES=auto and ina_auto_lanes(): one lane per core a worker of this host has, 1..4. */
static void test_auto_lanes(void)
{
    ina_config cfg;
    ina_config_init(&cfg);
    CHECK_EQ_INT(cfg.lanes, 0); /* auto, the default */
    setenv("INA_LANES", "auto", 1);
    cfg.lanes = 7;
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.lanes, 0);
    setenv("INA_LANES", "3", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK_EQ_INT(cfg.lanes, 3);
    setenv("INA_LANES", "many", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    CHECK(strstr(ina_last_error(NULL), "INA_LANES") != NULL);
    unsetenv("INA_LANES");

    const char *launchers[] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                               "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < 4; i++)
        unsetenv(launchers[i]);
    int cores = 0, local = 0;
    ina_config_init(&cfg);
    /* Loopback: every rank is on this host. 16 cores / 4 ranks = 4 lanes. */
    setenv("INA_AUTO_CORES", "16", 1);
    cfg.world_size = 4;
    CHECK_EQ_INT(ina_auto_lanes(&cfg, &cores, &local), 4);
    CHECK_EQ_INT(cores, 16);
    CHECK_EQ_INT(local, 4);
    cfg.world_size = 8;
    CHECK_EQ_INT(ina_auto_lanes(&cfg, NULL, NULL), 2);
    cfg.world_size = 15;
    CHECK_EQ_INT(ina_auto_lanes(&cfg, NULL, NULL), 1);
    cfg.world_size = 1;
    CHECK_EQ_INT(ina_auto_lanes(&cfg, NULL, NULL), 1); /* nothing to aggregate across */
    cfg.world_size = 2;
    setenv("INA_AUTO_CORES", "64", 1);
    CHECK_EQ_INT(ina_auto_lanes(&cfg, NULL, NULL), 4); /* capped */
    setenv("INA_AUTO_CORES", "2", 1);
    cfg.world_size = 4;
    CHECK_EQ_INT(ina_auto_lanes(&cfg, NULL, NULL), 1); /* at least one */
    /* Another host's switch: the launcher says how many workers share this host; else 1. */
    cfg.switch_addr = "10.1.2.3:999";
    cfg.world_size = 32;
    setenv("INA_AUTO_CORES", "16", 1);
    CHECK_EQ_INT(ina_auto_lanes(&cfg, &cores, &local), 4);
    CHECK_EQ_INT(local, 1);
    for (size_t i = 0; i < 4; i++) {
        setenv(launchers[i], i == 3 ? "8(x4)" : "8", 1); /* Slurm's form too */
        CHECK_EQ_INT(ina_auto_lanes(&cfg, &cores, &local), 2);
        CHECK_EQ_INT(local, 8);
        unsetenv(launchers[i]);
    }
    setenv("LOCAL_WORLD_SIZE", "zero", 1); /* not a count: ignored */
    CHECK_EQ_INT(ina_auto_lanes(&cfg, &cores, &local), 4);
    CHECK_EQ_INT(local, 1);
    unsetenv("LOCAL_WORLD_SIZE");
    /* INA_AUTO_CORES out of range or not a number: the host's own count (>= 1). */
    setenv("INA_AUTO_CORES", "0", 1);
    ina_auto_lanes(&cfg, &cores, &local);
    CHECK(cores >= 1 && cores != 0);
    setenv("INA_AUTO_CORES", "lots", 1);
    ina_auto_lanes(&cfg, &cores, &local);
    CHECK(cores >= 1);
    unsetenv("INA_AUTO_CORES");
    CHECK_EQ_INT(ina_auto_lanes(NULL, NULL, NULL), -EINVAL);
    cfg.world_size = 0;
    CHECK_EQ_INT(ina_auto_lanes(&cfg, NULL, NULL), -EINVAL);
    cfg.world_size = 2;
    cfg.switch_addr = NULL;
    CHECK_EQ_INT(ina_auto_lanes(&cfg, NULL, NULL), -EINVAL);
}

static void test_init_args(void)
{
    ina_config cfg;
    ina_ctx *ctx = (ina_ctx *)1;
    ina_config_init(&cfg);
    CHECK_EQ_INT(ina_init(NULL, &cfg), -EINVAL);
    CHECK_EQ_INT(ina_init(&ctx, NULL), -EINVAL);
    CHECK(ctx == NULL);
    cfg.world_size = 0;
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    cfg.world_size = INA_MAX_WORKERS + 1;
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    ina_config_init(&cfg);
    cfg.float_add = 2; /* not an INA_FLOAT_ADD_* */
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    ina_config_init(&cfg);
    cfg.rank = 1;
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    /* The message names the value and the rule (ina_last_error(NULL): no context). */
    CHECK(strstr(ina_last_error(NULL), "rank 1 is not in 0..world_size-1 (world_size 1)") != NULL);
    ina_config_init(&cfg);
    cfg.window = 100; /* not a power of two */
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    ina_config_init(&cfg);
    cfg.job = "a-job-name-that-is-longer-than-31-bytes";
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    ina_config_init(&cfg);
    cfg.job = "";
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    ina_config_init(&cfg);
    cfg.elems_per_packet = INA_MAX_ELEMS + 1;
    CHECK_EQ_INT(ina_init(&ctx, &cfg), -EINVAL);
    ina_config_init(&cfg);
    cfg.switch_addr = "127.0.0.1:notaport";
    CHECK_EQ_INT(ina_init(&ctx, &cfg), INA_ERR_CONFIG);
    CHECK(strstr(ina_last_error(NULL), "the port 'notaport' is not a number") != NULL);
    cfg.switch_addr = "no-such-host.invalid";
    CHECK_EQ_INT(ina_init(&ctx, &cfg), INA_ERR_CONFIG);
    CHECK(ctx == NULL);
    CHECK(strstr(ina_last_error(NULL), "cannot resolve 'no-such-host.invalid'") != NULL);
    CHECK(strstr(ina_last_error(NULL), "INA_SWITCH") != NULL); /* where it may have come from */
    /* A malformed variable is named with its value. */
    setenv("INA_WINDOW", "lots", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), INA_ERR_CONFIG);
    CHECK(strcmp(ina_last_error(NULL), "INA_WINDOW='lots' is not a decimal integer") == 0);
    setenv("INA_WINDOW", "64", 1);
    CHECK_EQ_INT(ina_config_from_env(&cfg), 0);
    CHECK(strcmp(ina_last_error(NULL), "") == 0); /* a call that succeeds clears it */
    unsetenv("INA_WINDOW");
    CHECK_EQ_INT(ina_finalize(NULL), 0);
    CHECK_EQ_INT(ina_wait(NULL), 0);
}

/* No switch: ina_init must give up at its deadline with INA_ERR_TIMEOUT. */
static void test_join_deadline(void)
{
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", dead_port());
    ina_config cfg;
    ina_config_init(&cfg);
    cfg.switch_addr = addr;
    cfg.join_timeout_ms = 300;
    ina_ctx *ctx = (ina_ctx *)1;
    uint64_t t0 = ina__now_ns();
    CHECK_EQ_INT(ina_init(&ctx, &cfg), INA_ERR_TIMEOUT);
    double s = (double)(ina__now_ns() - t0) / 1e9;
    CHECK(s >= 0.29 && s < 5);
    CHECK(ctx == NULL);
}

/* Argument checks of the all-reduce calls, on a context built by hand (no network). */
static void test_allreduce_args(void)
{
    struct ina_ctx fake;
    memset(&fake, 0, sizeof(fake));
    fake.magic = INA_CTX_LIVE;
    fake.elems = 64;
    fake.window = 4;
    fake.world = 1;
    fake.fd = -1;
    ina_ctx *ctx = &fake;
    _Alignas(8) int32_t a[4] = {0};
    _Alignas(8) int32_t b[4];
    ina_req *req = (ina_req *)1;
    CHECK_EQ_INT(ina_allreduce(NULL, a, b, 4, INA_INT32, INA_SUM), -EINVAL);
    CHECK_EQ_INT(ina_allreduce(ctx, NULL, b, 4, INA_INT32, INA_SUM), -EINVAL);
    CHECK_EQ_INT(ina_allreduce(ctx, a, NULL, 4, INA_INT32, INA_SUM), -EINVAL);
    /* Reserved values: NOTSUP up to 15, EINVAL beyond. */
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, (ina_dtype)5, INA_SUM), INA_ERR_NOTSUP);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, (ina_dtype)15, INA_SUM), INA_ERR_NOTSUP);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, (ina_dtype)16, INA_SUM), -EINVAL);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, (ina_dtype)99, INA_SUM), -EINVAL);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, INA_INT32, (ina_op)4), INA_ERR_NOTSUP);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, INA_INT32, (ina_op)15), INA_ERR_NOTSUP);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, INA_INT32, (ina_op)16), -EINVAL);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, INA_INT32, (ina_op)-1), -EINVAL);
    /* MAX and MIN: not on FLOAT64 (its order keys would need 64-bit lanes). */
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, INA_FLOAT64, INA_MAX), INA_ERR_NOTSUP);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, INA_FLOAT64, INA_MIN), INA_ERR_NOTSUP);
    CHECK(strstr(ina_last_error(ctx), "not implemented for FLOAT64") != NULL);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, SIZE_MAX / 2, INA_INT32, INA_SUM), -EOVERFLOW);
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, SIZE_MAX / 8 + 1, INA_FLOAT64, INA_SUM), -EOVERFLOW);
    /* Alignment to the element size: 2 bytes for the 16-bit types, 8 for FLOAT64. */
    CHECK_EQ_INT(ina_allreduce(ctx, (char *)a + 1, b, 2, INA_INT32, INA_SUM), -EINVAL);
    CHECK(strstr(ina_last_error(ctx), "sendbuf is not aligned") != NULL);
    CHECK_EQ_INT(ina_allreduce(ctx, (char *)a + 1, b, 2, INA_FLOAT16, INA_SUM), -EINVAL);
    CHECK_EQ_INT(ina_allreduce(ctx, a, (char *)b + 4, 1, INA_FLOAT64, INA_AVG), -EINVAL);
    CHECK_EQ_INT(ina_allreduce_start(ctx, a, b, 4, INA_INT32, INA_SUM, NULL), -EINVAL);
    CHECK_EQ_INT(ina_allreduce_start(ctx, NULL, b, 4, INA_INT32, INA_SUM, &req), -EINVAL);
    CHECK(req == NULL);
    /* count 0 completes at once, without the network, NULL buffers allowed;
     * every supported (dtype, op) pair is accepted */
    CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, INA_FLOAT32, INA_SUM), 0);
    CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, INA_INT32, INA_MAX), 0);
    CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, INA_INT32, INA_MIN), 0);
    for (int dt = INA_FLOAT32; dt <= INA_BFLOAT16; dt++) {
        CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, (ina_dtype)dt, INA_MAX), 0);
        CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, (ina_dtype)dt, INA_MIN), 0);
    }
    CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, INA_INT32, INA_AVG), 0);
    CHECK_EQ_INT(ina_allreduce(ctx, (char *)a + 2, b, 0, INA_FLOAT16, INA_AVG), 0);
    CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, INA_BFLOAT16, INA_SUM), 0);
    CHECK_EQ_INT(ina_allreduce(ctx, NULL, NULL, 0, INA_FLOAT64, INA_AVG), 0);
    int done = 0;
    CHECK_EQ_INT(ina_test(NULL, &done), -EINVAL);
    /* A broken context refuses new work. */
    fake.broken = INA_ERR_TIMEOUT;
    CHECK_EQ_INT(ina_allreduce(ctx, a, b, 4, INA_INT32, INA_SUM), INA_ERR_CLOSED);
    CHECK(strstr(ina_last_error(ctx), "an earlier failure broke this context (INA_ERR_TIMEOUT)") !=
          NULL);
    ina_stats st;
    ina_info info;
    CHECK_EQ_INT(ina_get_stats(NULL, &st), -EINVAL);
    CHECK_EQ_INT(ina_get_stats(ctx, NULL), -EINVAL);
    CHECK_EQ_INT(ina_get_stats(ctx, &st), 0);
    CHECK_EQ_INT(st.ops, 13); /* the count-0 calls above */
    CHECK_EQ_INT(ina_get_info(ctx, &info), 0);
    CHECK_EQ_INT(info.elems_per_packet, 64);
    CHECK_EQ_INT(ina_get_info(NULL, &info), -EINVAL);
    /* The count-0 requests came from the context's pool (reqpool.c): ina_finalize would
     * free it; this hand-made context is never finalized. */
    CHECK(fake.req_slab_allocs == 1); /* 13 operations, one slab: none allocated per op */
    ina__req_pool_free(&fake);
}

int main(void)
{
    test_errors();
    test_abi();
    test_config();
    test_config_edges();
    test_auto_lanes();
    test_init_args();
    test_join_deadline();
    test_allreduce_args();
    return check_report("test_api");
}
