/* ina-ctl: operator client of ina-switch --metrics: list jobs, show one, abort one, print counters; with the switch's secret, it proves it knows it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/opauth.h"
#include "common/clock.h"
#include "ina.h"

/* With --secret-file: the operator key, the read token for reads (docs/TOOLS.md). */
static int have_secret;
static struct ina_hmac_key op_key;
static char read_auth[sizeof("Bearer ") + INA_OPAUTH_HEX];

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ina-ctl [--metrics ADDR:PORT] [--secret-file F] [--json] [--timeout S] COMMAND\n"
            "\n"
            "Talks to the operator endpoint of a running ina-switch (started with\n"
            "--metrics ADDR:PORT).\n"
            "\n"
            "Commands:\n"
            "  jobs          one line per job: id, name, lane, world, members joined,\n"
            "                slots held, state, age, DATA packets, drops\n"
            "  job ID        one job: its counters (retransmitted duplicates, drops by\n"
            "                cause) and its workers' packets and bytes\n"
            "  abort ID      end job ID now: its workers fail with INA_ERR_ABORTED\n"
            "  evict ID      take job ID's slots: its workers finish what they sent and\n"
            "                carry on at rank 0's host aggregator (INA_FALLBACK=host),\n"
            "                or fail with INA_ERR_NOSPACE (INA_FALLBACK=none)\n"
            "  counters      the switch's totals, drops by cause\n"
            "  read-token    print the read token of --secret-file, for a Prometheus\n"
            "                scraper (Authorization: Bearer TOKEN); needs no switch\n"
            "\n"
            "Options:\n"
            "  --metrics ADDR:PORT  the switch's --metrics address (default: $INA_METRICS,\n"
            "                       else 127.0.0.1:9464); a bare PORT means 127.0.0.1:PORT\n"
            "  --secret-file F      the switch's shared secret (default: $INA_SECRET_FILE):\n"
            "                       needed, when the switch has one, for jobs, job, abort,\n"
            "                       evict and --json jobs; counters need none\n"
            "  --json               print the switch's JSON instead of a table (jobs and\n"
            "                       job: GET /jobs; counters: GET /counters; abort: the reply)\n"
            "  --timeout S          give up after S seconds (default 3)\n"
            "  --version            print the version and exit\n"
            "  --help               this text\n"
            "\n"
            "Exit status: 0 done, 1 the switch is unreachable or refused (no such job, no\n"
            "proof of its secret: HTTP 401), 2 usage or an unreadable --secret-file.\n");
}

static int left_ms(double deadline)
{
    double l = deadline - ina__clock_s();
    return l <= 0 ? 0 : (int)(l * 1000) + 1;
}

/* One HTTP/1.0 request, with Authorization: auth unless NULL; *body gets the
 * malloc'ed response body. @return status, or -1. */
static int http(const char *hostport, const char *method, const char *path, const char *auth,
                double timeout_s, char **body)
{
    char host[256], port[16] = "9464";
    const char *colon = strrchr(hostport, ':');
    if (strspn(hostport, "0123456789") == strlen(hostport)) {
        snprintf(host, sizeof(host), "127.0.0.1");
        snprintf(port, sizeof(port), "%s", hostport);
    } else if (colon) {
        snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
        snprintf(port, sizeof(port), "%s", colon + 1);
    } else {
        snprintf(host, sizeof(host), "%s", hostport);
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
        fprintf(stderr, "ina-ctl: cannot resolve '%s'\n", hostport);
        return -1;
    }
    double deadline = ina__clock_s() + timeout_s;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t el = sizeof(err);
        if (poll(&pfd, 1, left_ms(deadline)) == 1 &&
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
            rc = 0;
        else
            errno = err ? err : ETIMEDOUT;
    }
    if (rc != 0) {
        fprintf(stderr, "ina-ctl: cannot reach the switch at %s: %s (is ina-switch running with "
                        "--metrics %s?)\n", hostport, strerror(errno), hostport);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.0\r\nHost: %s\r\n%s%s%sContent-Length: 0\r\n\r\n", method,
                     path, host, auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    for (int off = 0; off < n;) {
        ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w > 0) {
            off += (int)w;
            continue;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if ((w < 0 && errno != EAGAIN) || poll(&pfd, 1, left_ms(deadline)) <= 0) {
            fprintf(stderr, "ina-ctl: sending to %s failed or timed out\n", hostport);
            close(fd);
            return -1;
        }
    }
    size_t len = 0, cap = 65536;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fprintf(stderr, "ina-ctl: out of memory\n");
            close(fd);
            return -1;
        }
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                continue;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r > 0) {
            len += (size_t)r;
            continue;
        }
        if (r == 0)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (errno != EAGAIN || poll(&pfd, 1, left_ms(deadline)) <= 0) {
            fprintf(stderr, "ina-ctl: no complete answer from %s within %.1f s\n", hostport,
                    timeout_s);
            free(buf);
            close(fd);
            return -1;
        }
    }
    close(fd);
    buf[len] = '\0';
    int status = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/%*s %d", &status) != 1 || !sep) {
        fprintf(stderr, "ina-ctl: %s did not answer in HTTP\n", hostport);
        free(buf);
        return -1;
    }
    memmove(buf, sep + 4, strlen(sep + 4) + 1);
    *body = buf;
    return status;
}

/* ---- Prometheus text parsing (the subset ina-switch writes) ---------------- */

struct sample {
    char name[96];
    char labels[512]; /* raw, without braces */
    double value;
};

/* Parse "name{labels} value". @return 0, or -1 for comments and junk. */
static int parse_sample(const char *line, struct sample *s)
{
    if (line[0] == '#' || line[0] == '\0')
        return -1;
    size_t nl = strcspn(line, "{ ");
    if (nl == 0 || nl >= sizeof(s->name))
        return -1;
    memcpy(s->name, line, nl);
    s->name[nl] = '\0';
    const char *p = line + nl;
    s->labels[0] = '\0';
    if (*p == '{') {
        const char *q = p + 1;
        int inq = 0;
        for (; *q && (inq || *q != '}'); q++) {
            if (inq && *q == '\\' && q[1])
                q++;
            else if (*q == '"')
                inq = !inq;
        }
        if (*q != '}' || (size_t)(q - p - 1) >= sizeof(s->labels))
            return -1;
        memcpy(s->labels, p + 1, (size_t)(q - p - 1));
        s->labels[q - p - 1] = '\0';
        p = q + 1;
    }
    char *end;
    s->value = strtod(p, &end);
    return end == p ? -1 : 0;
}

/* Value of label `key` (unescaped) into out. @return 0 or -1. */
static int label(const struct sample *s, const char *key, char *out, size_t outlen)
{
    size_t kl = strlen(key);
    const char *p = s->labels;
    while (*p) {
        int match = strncmp(p, key, kl) == 0 && p[kl] == '=' && p[kl + 1] == '"';
        p = strchr(p, '"');
        if (!p)
            return -1;
        p++;
        size_t o = 0;
        for (; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++;
            if (match && o + 1 < outlen)
                out[o++] = *p;
        }
        if (match) {
            out[o] = '\0';
            return 0;
        }
        if (*p == '"')
            p++;
        if (*p == ',')
            p++;
    }
    return -1;
}

struct job {
    unsigned id;
    char name[64], lane[8];
    double world, members, slots, state, age, packets, bytes, drops, retransmits;
    double contributions, completions, dropc[64];
    char dropname[64][24];
    int ndrop;
};

static struct job *job_get(struct job **jobs, int *n, int *cap, unsigned id)
{
    for (int i = 0; i < *n; i++)
        if ((*jobs)[i].id == id)
            return &(*jobs)[i];
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        struct job *nj = realloc(*jobs, (size_t)nc * sizeof(*nj));
        if (!nj)
            return NULL;
        *jobs = nj;
        *cap = nc;
    }
    struct job *j = &(*jobs)[(*n)++];
    memset(j, 0, sizeof(*j));
    j->id = id;
    return j;
}

/* The numeric state of the metrics (engine/engine.h: enum ina_job_state). */
static const char *state_name(double s)
{
    return s == 3 ? "active" : s == 2 ? "waiting" : s == 1 ? "joining" : "?";
}

/* The Authorization of a read: the read token, if we have the secret. */
static const char *reader(void) { return have_secret ? read_auth : NULL; }

/* GET path with the read token: 0 and *body (malloc'ed), or 1 after saying why. */
static int get(const char *metrics, const char *path, double timeout_s, char **body)
{
    int status = http(metrics, "GET", path, reader(), timeout_s, body);
    if (status == 200)
        return 0;
    if (status >= 0) {
        fprintf(stderr, "ina-ctl: GET %s: HTTP %d %s", path, status, *body);
        if (status == 401)
            fprintf(stderr, "ina-ctl: %s\n", have_secret
                                                ? "the switch has another secret than --secret-file"
                                                : "the switch has a secret: pass --secret-file "
                                                  "(or set INA_SECRET_FILE)");
    }
    free(*body);
    *body = NULL;
    return 1;
}

static int show(const char *metrics, const char *cmd, long id_want, double timeout_s)
{
    char *body = NULL;
    if (get(metrics, "/metrics", timeout_s, &body) != 0)
        return 1;
    struct job *jobs = NULL;
    int njobs = 0, cap = 0, rc = 0, withheld = 0;
    int counters = strcmp(cmd, "counters") == 0;
    if (counters)
        printf("%-28s %s\n", "counter", "value");
    for (char *line = strtok(body, "\n"); line; line = strtok(NULL, "\n")) {
        struct sample s;
        char idb[16];
        if (parse_sample(line, &s) != 0)
            continue;
        if (strcmp(s.name, "ina_switch_view_details") == 0) {
            withheld = s.value == 0; /* about this answer, not a count */
            continue;
        }
        if (counters) {
            if (strncmp(s.name, "ina_switch_", 11) != 0)
                continue;
            char cause[32];
            if (label(&s, "cause", cause, sizeof(cause)) == 0) {
                if (s.value != 0)
                    printf("drop_%-23s %.0f\n", cause, s.value);
            } else if (strcmp(s.name, "ina_switch_info") != 0) {
                size_t nl = strlen(s.name + 11);
                if (nl > 6 && !strcmp(s.name + 11 + nl - 6, "_total"))
                    nl -= 6; /* the Prometheus suffix says nothing here */
                printf("%-28.*s %.*f\n", (int)nl, s.name + 11,
                       strstr(s.name, "seconds") ? 3 : 0, s.value);
            }
            continue;
        }
        if (strncmp(s.name, "ina_job_", 8) != 0 && strncmp(s.name, "ina_worker_", 11) != 0)
            continue;
        if (label(&s, "id", idb, sizeof(idb)) != 0)
            continue;
        unsigned id = (unsigned)strtoul(idb, NULL, 10);
        if (id_want >= 0 && id != (unsigned long)id_want)
            continue;
        if (strncmp(s.name, "ina_worker_", 11) == 0)
            continue; /* per-worker rows: show_workers() */
        struct job *j = job_get(&jobs, &njobs, &cap, id);
        if (!j) {
            rc = 1;
            break;
        }
        label(&s, "job", j->name, sizeof(j->name));
        label(&s, "lane", j->lane, sizeof(j->lane));
        const char *f = s.name + 8;
        char cause[24];
        if (!strcmp(f, "world")) j->world = s.value;
        else if (!strcmp(f, "members")) j->members = s.value;
        else if (!strcmp(f, "slots")) j->slots = s.value;
        else if (!strcmp(f, "state")) j->state = s.value;
        else if (!strcmp(f, "age_seconds")) j->age = s.value;
        else if (!strcmp(f, "rx_packets_total")) j->packets = s.value;
        else if (!strcmp(f, "rx_bytes_total")) j->bytes = s.value;
        else if (!strcmp(f, "contributions_total")) j->contributions = s.value;
        else if (!strcmp(f, "completions_total")) j->completions = s.value;
        else if (!strcmp(f, "retransmits_total")) j->retransmits = s.value;
        else if (!strcmp(f, "drops_total") && label(&s, "cause", cause, sizeof(cause)) == 0) {
            j->drops += s.value;
            if (s.value != 0 && j->ndrop < 64) {
                snprintf(j->dropname[j->ndrop], sizeof(j->dropname[0]), "%s", cause);
                j->dropc[j->ndrop++] = s.value;
            }
        }
    }
    if (!counters && withheld) {
        fprintf(stderr, "ina-ctl: the switch has a secret and withholds its jobs: pass "
                        "--secret-file (or set INA_SECRET_FILE)\n");
        rc = 1;
    } else if (!counters && id_want < 0) {
        printf("%5s  %-20s %4s %5s %7s %6s %-8s %8s %12s %8s\n", "ID", "NAME", "LANE", "WORLD",
               "JOINED", "SLOTS", "STATE", "AGE_S", "PACKETS", "DROPS");
        for (int i = 0; i < njobs; i++) {
            struct job *j = &jobs[i];
            printf("%5u  %-20s %4s %5.0f %7.0f %6.0f %-8s %8.1f %12.0f %8.0f\n", j->id, j->name,
                   j->lane, j->world, j->members, j->slots, state_name(j->state), j->age,
                   j->packets, j->drops);
        }
    } else if (!counters) {
        if (njobs == 0) {
            fprintf(stderr, "ina-ctl: no job %ld at the switch\n", id_want);
            rc = 1;
        } else {
            struct job *j = &jobs[0];
            printf("job %u \"%s\" lane %s: %s, %.0f of %.0f ranks joined, %.0f slots, age %.1f s\n",
                   j->id, j->name, j->lane, state_name(j->state), j->members, j->world, j->slots,
                   j->age);
            printf("  rx_packets     %.0f\n  rx_bytes       %.0f\n  contributions  %.0f\n"
                   "  completions    %.0f\n  retransmits    %.0f\n  drops          %.0f\n",
                   j->packets, j->bytes, j->contributions, j->completions, j->retransmits,
                   j->drops);
            for (int d = 0; d < j->ndrop; d++)
                printf("    drop_%-12s %.0f\n", j->dropname[d], j->dropc[d]);
        }
    }
    free(jobs);
    free(body);
    return rc;
}

/* The per-worker rows of one job (a second pass over a fresh /metrics). */
static int show_workers(const char *metrics, long id, double timeout_s)
{
    char *body = NULL;
    if (get(metrics, "/metrics", timeout_s, &body) != 0)
        return 1;
    printf("  %5s %7s %12s %14s\n", "RANK", "JOINED", "PACKETS", "BYTES");
    double joined[256] = {0}, pk[256] = {0}, by[256] = {0};
    int maxr = -1;
    for (char *line = strtok(body, "\n"); line; line = strtok(NULL, "\n")) {
        struct sample s;
        char idb[16], rb[8];
        if (parse_sample(line, &s) != 0 || strncmp(s.name, "ina_worker_", 11) != 0 ||
            label(&s, "id", idb, sizeof(idb)) != 0 || strtol(idb, NULL, 10) != id ||
            label(&s, "rank", rb, sizeof(rb)) != 0)
            continue;
        int r = atoi(rb);
        if (r < 0 || r >= 256)
            continue;
        if (r > maxr)
            maxr = r;
        if (!strcmp(s.name, "ina_worker_joined")) joined[r] = s.value;
        else if (!strcmp(s.name, "ina_worker_rx_packets_total")) pk[r] = s.value;
        else if (!strcmp(s.name, "ina_worker_rx_bytes_total")) by[r] = s.value;
    }
    for (int r = 0; r <= maxr; r++)
        printf("  %5d %7s %12.0f %14.0f\n", r, joined[r] ? "yes" : "no", pk[r], by[r]);
    free(body);
    return 0;
}

/* The Authorization of an act: a fresh challenge from the switch, signed.
 * @return 0, or 1 after saying why. */
static int sign_act(const char *metrics, const char *method, const char *path, double timeout_s,
                    char auth[INA_OPAUTH_HEADER_LEN])
{
    char *body = NULL, challenge[INA_OPAUTH_HEX + 1];
    if (get(metrics, "/challenge", timeout_s, &body) != 0)
        return 1;
    const char *c = strstr(body, "\"challenge\":\"");
    int ok = c && sscanf(c + 13, "%64[0-9a-f]", challenge) == 1 &&
             strlen(challenge) == INA_OPAUTH_HEX;
    free(body);
    if (!ok) {
        fprintf(stderr, "ina-ctl: the switch's GET /challenge gave no challenge\n");
        return 1;
    }
    ina__opauth_sign(&op_key, method, path, challenge, auth);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"metrics", required_argument, 0, 'm'},
                                          {"secret-file", required_argument, 0, 'S'},
                                          {"json", no_argument, 0, 'j'},
                                          {"timeout", required_argument, 0, 't'},
                                          {"help", no_argument, 0, 'h'},
                                          {"version", no_argument, 0, 'V'},
                                          {0, 0, 0, 0}};
    const char *metrics = getenv("INA_METRICS"), *secret_file = getenv("INA_SECRET_FILE");
    if (!metrics || !*metrics)
        metrics = "127.0.0.1:9464";
    int json = 0, c;
    double timeout_s = 3;
    char *end;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': metrics = optarg; break;
        case 'S': secret_file = optarg; break;
        case 'j': json = 1; break;
        case 't':
            timeout_s = strtod(optarg, &end);
            if (*end || end == optarg || !(timeout_s > 0 && timeout_s <= 3600)) {
                fprintf(stderr, "ina-ctl: bad --timeout '%s' (seconds, 0 < S <= 3600)\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        case 'V':
            printf("ina-ctl %d.%d.%d\n", INA_VERSION_MAJOR, INA_VERSION_MINOR, INA_VERSION_PATCH);
            return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "ina-ctl: missing command (jobs, job ID, abort ID, evict ID, counters; "
                        "see --help)\n");
        return 2;
    }
    const char *cmd = argv[optind];
    int need_id = !strcmp(cmd, "job") || !strcmp(cmd, "abort") || !strcmp(cmd, "evict");
    if ((strcmp(cmd, "jobs") && strcmp(cmd, "counters") && strcmp(cmd, "read-token") &&
         !need_id) ||
        argc - optind != (need_id ? 2 : 1)) {
        fprintf(stderr, "ina-ctl: bad command line (want jobs | job ID | abort ID | evict ID | "
                        "counters | read-token)\n");
        return 2;
    }
    if (secret_file && *secret_file) {
        struct ina_hmac_key secret;
        int rc = ina__hmac_key_from_file(&secret, secret_file);
        if (rc != 0) {
            fprintf(stderr, "ina-ctl: cannot use --secret-file %s: %s\n", secret_file,
                    rc == -EINVAL ? "empty or longer than 4096 bytes" : strerror(-rc));
            return 2;
        }
        ina__opauth_key(&op_key, &secret);
        char token[INA_OPAUTH_HEX + 1];
        ina__opauth_read_token(&op_key, token);
        snprintf(read_auth, sizeof(read_auth), "Bearer %s", token);
        have_secret = 1;
    }
    long id = -1;
    if (need_id) {
        id = strtol(argv[optind + 1], &end, 10);
        if (*end || end == argv[optind + 1] || id < 1 || id > 65535) {
            fprintf(stderr, "ina-ctl: bad job id '%s' (see ina-ctl jobs)\n", argv[optind + 1]);
            return 2;
        }
    }
    if (!strcmp(cmd, "read-token")) {
        char token[INA_OPAUTH_HEX + 1];
        if (!have_secret) {
            fprintf(stderr, "ina-ctl: read-token needs --secret-file (or INA_SECRET_FILE)\n");
            return 2;
        }
        ina__opauth_read_token(&op_key, token);
        printf("%s\n", token);
        return 0;
    }
    if (!strcmp(cmd, "abort") || !strcmp(cmd, "evict")) {
        char path[64], *body = NULL, auth[INA_OPAUTH_HEADER_LEN];
        snprintf(path, sizeof(path), "/jobs/%ld/%s", id, cmd);
        if (have_secret && sign_act(metrics, "POST", path, timeout_s, auth) != 0)
            return 1;
        int st = http(metrics, "POST", path, have_secret ? auth : NULL, timeout_s, &body);
        if (st < 0)
            return 1;
        if (json)
            fputs(body, stdout);
        else if (st == 202 && !strcmp(cmd, "abort"))
            printf("abort of job %ld requested; its workers fail with INA_ERR_ABORTED\n", id);
        else if (st == 202)
            printf("eviction of job %ld requested; its workers move to their host fallback\n", id);
        else
            fprintf(stderr, "ina-ctl: %s of job %ld refused: HTTP %d %s", cmd, id, st, body);
        if (st == 401 && !have_secret)
            fprintf(stderr, "ina-ctl: the switch has a secret: pass --secret-file (or set "
                            "INA_SECRET_FILE)\n");
        free(body);
        return st == 202 ? 0 : 1;
    }
    if (json) {
        char *body = NULL;
        int st = http(metrics, "GET", strcmp(cmd, "counters") ? "/jobs" : "/counters", reader(),
                      timeout_s, &body);
        if (st < 0)
            return 1;
        fputs(body, stdout);
        if (st == 401 && !have_secret)
            fprintf(stderr, "ina-ctl: the switch has a secret: pass --secret-file (or set "
                            "INA_SECRET_FILE)\n");
        free(body);
        return st == 200 ? 0 : 1;
    }
    int rc = show(metrics, cmd, id, timeout_s);
    if (rc == 0 && !strcmp(cmd, "job"))
        rc = show_workers(metrics, id, timeout_s);
    return rc;
}
