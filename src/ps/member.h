/* member.h: ina-sched's link at ina-ps (PROTOCOL.md §15.9): a STALE job's state for a scheduler
 * that restarts or watches a replica, voided stamps, replays of taken updates, departed ranks. */
#ifndef INA_PS_MEMBER_H
#define INA_PS_MEMBER_H

/*
 * A server started with --sched ADDR:PORT takes PS_SYNC (kind 53) and PS_REPLAY (kind 57)
 * from that address only. PS_SYNC names a STALE job and an action, and is answered with a
 * PS_STATE (kind 54): the job's version V, next stamp G, held stamps, ranks joined and left,
 * a digest of the model, and the fate of the stamp asked about (taken, voided, held, not
 * here yet). The actions:
 *   STATE   nothing else (ina-sched's probe, and a restarted ina-sched's view of the job);
 *   VOID    resolve the stamps g .. g + n - 1 in order while G is among them: an update held
 *           for G is taken, a stamp with no update here is voided (a worker died holding its
 *           grant). A later UPDATE with a voided stamp is answered VOIDED (ps.c);
 *   REPLAY  send the update taken with stamp g again, as a PS_REPLAY, to ina-sched, which
 *           passes it to the replica that lacks it (its worker died before the replica had it);
 *   DEPART  the rank has gone: it counts as left when the job's end is decided.
 * A PS_REPLAY from --sched is taken as its rank's UPDATE, as a CHAIN_FWD is at a chain's
 * replica (§15.8), so a replica stays bit-identical.
 *
 * The state lives here; ps.c calls the hooks of struct ina_ps_sched_ops (ps.h).
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>

#include "ps/ps.h"

#define INA_PS_VOID_RUNS 32 /* runs of voided stamps remembered per job, for fate questions */

/* The stamps first .. first + n - 1 were voided. */
struct ina_ps_void_run {
    uint32_t first, n;
};

/* A rank's last stamped update taken: its PS_REPLAY datagram, ready to send. */
struct ina_ps_kept {
    uint8_t *buf;
    size_t len, cap;
    uint32_t stamp;
    uint8_t valid;
};

/* Per job slot (ps->jobs[i]), for the job session `session`. */
struct ina_ps_sched_job {
    uint32_t session; /* 0: none yet */
    struct ina_ps_void_run runs[INA_PS_VOID_RUNS]; /* a ring, oldest at head */
    unsigned head, nruns;
    uint64_t runs_total; /* runs ever recorded: above INA_PS_VOID_RUNS the oldest are gone */
    struct ina_ps_kept kept[INA_MAX_WORKERS];
};

struct ina_ps_sched {
    struct sockaddr_in addr; /* --sched */
    struct ina_ps_sched_job jobs[INA_PS_MAX_JOBS];
};

/* Attach ina-sched's link to ps: PS_SYNC and PS_REPLAY from addr only. @return 0, -EINVAL. */
int ina__ps_sched_init(struct ina_ps_sched *sc, struct ina_ps *ps, const struct sockaddr_in *addr);
/* Detach and free (before ina__ps_free). */
void ina__ps_sched_free(struct ina_ps *ps);

#endif
