/* daemon.h: the frame of ina's three daemons (ina-switch, ina-ps, ina-sched): signals, the command line's common parts, the listen socket, --port-file, the exit report. */
#ifndef INA_DAEMON_H
#define INA_DAEMON_H


/*
 * What the daemons do alike, written once (Redis's ae/anet spirit: small,
 * one concern each); each keeps its own options, its engine and its loop.
 * Messages for the command line go to stderr as "NAME: ...", NAME the
 * daemon's ("ina-ps"); the functions that print one return -1, and the
 * daemon exits 2 (a usage error) or 1 (a failure to start), as before.
 */

#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

#include "common/fault.h"
#include "common/log.h"

/* ---- Signals ------------------------------------------------------------------------- */

#define INA_DAEMON_DRAIN 1u   /* the first SIGTERM asks to drain; a second one, or SIGINT, stops */
#define INA_DAEMON_HUP 2u     /* SIGHUP is counted (ina__daemon_hups) rather than fatal */
#define INA_DAEMON_NOPIPE 4u  /* SIGPIPE is ignored (a daemon that writes to TCP clients) */

/*
 * Install the handlers: SIGINT and SIGTERM ask to stop (or, with
 * INA_DAEMON_DRAIN, the first SIGTERM to drain), without SA_RESTART so that
 * a poll() returns at once. The state is lock-free atomics, safe to read
 * from any thread and from the handlers. Call again to change the flags.
 */
void ina__daemon_signals(unsigned flags);
/* A stop was asked (SIGINT, SIGTERM, a second SIGTERM when draining, or ina__daemon_stop). */
int ina__daemon_stopping(void);
/* Ask every loop of the process to stop (the daemon's own decision). */
void ina__daemon_stop(void);
/* The first SIGTERM came, with INA_DAEMON_DRAIN. */
int ina__daemon_draining(void);
/* SIGHUPs so far (INA_DAEMON_HUP): a loop compares it with the count it last acted on. */
unsigned ina__daemon_hups(void);

/* Periodic work in a loop: 1 (and *last = now) once more than period_ns passed since *last. */
static inline int ina__daemon_due(uint64_t *last, uint64_t now, uint64_t period_ns)
{
    if (now - *last <= period_ns)
        return 0;
    *last = now;
    return 1;
}

/* ---- The command line ------------------------------------------------------------------ */

/* --version: "NAME VERSION (protocol N)" on stdout. */
void ina__daemon_version(const char *name);
/* After getopt_long: no operand may follow the options (first: its optind). @return 0, or -1
 * (said). */
int ina__daemon_no_operands(const char *name, int argc, char **argv, int first);
/* --log-level L. @return 0, or -1 (said). */
int ina__daemon_log_level(const char *name, const char *arg, enum ina_log_level *out);
/* --fault-rx or --fault-tx (which: "rx" or "tx") SPEC, checked. @return 0, or -1 (said). */
int ina__daemon_fault_spec(const char *name, const char *which, const char *spec);
/* --listen "ADDR[:PORT]", resolved, default_port where no port is given (port 0: the
 * kernel's choice). @return 0, or -1 (said). */
int ina__daemon_listen_addr(const char *name, const char *s, uint16_t default_port,
                            struct sockaddr_in *out);
/* --metrics "ADDR:PORT", or a bare PORT for 127.0.0.1:PORT (the operator view is not for
 * the network by default), and --metrics-port-file, which needs it. metrics NULL: off
 * (*on = 0). @return 0, or -1 (said). */
int ina__daemon_metrics_addr(const char *name, const char *metrics, const char *port_file,
                             struct sockaddr_in *out, int *on);

/* ---- Sockets and files ------------------------------------------------------------------- */

/* A non-blocking UDP socket bound to *addr, which becomes the bound address (the port the
 * kernel chose). @return the fd, or -1 (said: "NAME: cannot bind ADDR: reason"). */
int ina__daemon_bind(const char *name, struct sockaddr_in *addr);
/* Socket buffers of bytes each way: a burst of windows arriving at once must not overflow
 * the socket, or it looks like network loss. Root may exceed rmem_max. Best effort. */
void ina__sock_buffers(int fd, int bytes);
/* Write port and a newline to path through a temporary file and a rename, so that a reader
 * never sees half of it (--port-file, --metrics-port-file). @return 0, or -errno. */
int ina__port_file_write(const char *path, unsigned port);

/* ---- The exit report ----------------------------------------------------------------------- */

/* The fault injectors' counts (--fault-rx, --fault-tx): two lines, for a daemon that ran
 * either (the counts may be the sums over several injectors). */
void ina__daemon_fault_report(FILE *f, const struct ina_fault *rx, const struct ina_fault *tx);

#endif
