/* mlf_client.h: a worker's side of MLfabric: join a STALE job on ina-ps (and its replica), pull,
 * ask ina-sched, send stamped updates to both servers, fall back and fail over. */
#ifndef INA_MLF_CLIENT_H
#define INA_MLF_CLIENT_H

#include <netinet/in.h>
#include <stdint.h>

#include "common/kv_wire.h"
#include "ina.h"

struct mlf_server {
    struct sockaddr_in addr;
    uint16_t job;
    uint32_t session, token;
    int alive;
};

struct mlf_stats {
    uint64_t applied, stale, sched_refused, retransmits, pulls;
    uint64_t failovers, fallbacks;
    uint64_t tx_bytes[2]; /* UPDATE bytes sent to server 0 (primary) and 1 (replica) */
    uint64_t groups_led;   /* group sums this rank sent as the leader (§15.7) */
    uint64_t aggregated;   /* this rank's updates summed into a group another member sent */
    uint64_t agg_failures; /* groups not summed (a dead member or switch): sent alone, or lost */
    uint64_t voided;       /* updates answered VOIDED: their grant's lease ran out (§15.9) */
    uint64_t sched_waits;  /* times ina-sched went silent and this rank waited for it */
    uint64_t reattaches;   /* ... and got a grant again (a restarted scheduler) */
    uint64_t shared_pulls; /* models this rank got from its group's leader through the switch
                              (--agg-pull switch) instead of pulling them from the server */
};

struct mlf_client {
    int fd;
    int rank;
    struct ina_ps_join join;
    struct mlf_server srv[2];
    int nsrv, primary;      /* primary: index of the server whose answers count */
    int replica_synced;     /* 0 once updates went unstamped (the replica is left behind) */
    int chain;              /* --replication chain: UPDATEs to the primary alone, which forwards
                               them to the replica (PROTOCOL.md §15.8); the replica after a failover */
    struct sockaddr_in sched;
    int use_sched;
    int fetch;              /* ask ina-sched before the pull (a fetch request), not after */
    int granted;            /* a fetch grant is held: the next update carries its stamp */
    uint32_t grant_stamp;
    uint64_t grant_ns;      /* when it came: DONE's duration runs from here */
    uint32_t uid, pull_id; /* uid: the servers' update id (+1 per update sent) */
    uint32_t req_id;       /* the scheduler's request id (+1 per REQ, sent or refused) */
    uint64_t rto_ns;        /* resend an unanswered datagram after this */
    uint64_t failover_ns;   /* a server silent this long is dead */
    uint64_t sched_timeout_ns; /* no GRANT this long: warn, keep the bound, wait for ina-sched */
    uint64_t sched_fallback_ns; /* no GRANT this long: send unscheduled from now on */
    int trace;              /* each update's outcome on stderr (--trace) */
    int sync;               /* --sync: ina-ps's SYNC mode, a barrier per version (PROTOCOL.md
                               §14.2.4): each update is PUSH + COMMIT of step `step`, applied
                               once every rank committed it */
    uint32_t step;          /* sync: the steps applied (the model's version) */
    uint64_t barrier_ns;    /* sync: deadline for every rank to commit a step */
    uint32_t nkeys;
    const char *agg_switch; /* ina-switch "host:port" for group sums (--switch), or NULL */
    int agg_timeout_ms;     /* deadline of a group's join and sum */
    int agg_mean;           /* the leader sends the members' mean, not their sum */
    int agg_pull_switch;    /* --agg-pull switch: a group's leader pulls the model, and the
                               switch gives it to the other members (one pull per group) */
    ina_ctx *agg_ctx;       /* the group's job at the switch, open from the fetch to the sum */
    int agg_fetch_rc;       /* the group fetch's error (1 while none was made for the grant) */
    uint16_t group_size, group_index; /* of the grant held: 1, 0 when alone */
    float *agg_buf;         /* the group's sum (nkeys x dim), allocated at the first group */
    int agg_fail_streak;    /* groups not summed in a row: at MLF_AGG_GIVE_UP, stop asking */
    struct mlf_stats st;
};

/* The outcome of one update. */
struct mlf_result {
    int32_t status;   /* 0 applied (or, for a group member not its leader, summed into the
                         group's update), INA_ERR_STALE refused (by the server or the
                         scheduler), INA_PS_UPDATE_VOIDED (its grant's lease ran out and
                         its stamp was voided), another INA_ERR_* when a member's part was
                         not summed */
    uint32_t version; /* the model version after it */
    uint32_t delay;
};

/* @return 0, or a negative errno / INA_ERR_* (with a message on stderr). Deadline: timeout_ns. */
int mlf_join(struct mlf_client *c, uint64_t timeout_ns);
/* With a scheduler in fetch mode: ask for the next update's grant before the pull (a fetch
 * request, PROTOCOL.md §15.3), so that the pull and the update it yields both fit the bound.
 * Otherwise nothing. @return 0 (granted, or unscheduled from now on: c->use_sched is 0 after
 * a warning), or INA_ERR_PROTO (the scheduler refused a fetch request: it never should). */
int mlf_begin(struct mlf_client *c);
/* Ask for the next update's grant (fetch mode) or send (update mode) as mlf_begin() and
 * mlf_update() say; when ina-sched is silent for sched_timeout_ns, the worker sends nothing
 * unscheduled (the bound and the replica are kept) and asks again until a scheduler answers
 * (a restarted one: §15.9) or sched_fallback_ns passes. */
/* Pull the whole model (nkeys x dim floats) and its version. @return 0 or INA_ERR_TIMEOUT. */
int mlf_pull(struct mlf_client *c, float *model, uint32_t *version);
/* The model for this iteration: mlf_pull(), or, for a group grant with agg_pull_switch, the
 * leader's pull through the switch (PROTOCOL.md §15.7; a broken group: each member pulls
 * for itself, and the group's sum is not tried). @return as mlf_pull(). */
int mlf_fetch(struct mlf_client *c, float *model, uint32_t *version);
/* Ask (unless mlf_begin() holds a grant), send, wait for the answers; entries: nkeys x dim
 * gradient floats of base version. With c->sync: PUSH and COMMIT the gradient as step
 * c->step and wait (at most barrier_ns) until every rank committed it and the server
 * applied their sum (res->version: the steps applied; INA_ERR_ABORTED if the server ended
 * the job).
 * @return 0 (see *res) or INA_ERR_TIMEOUT (every server silent). */
int mlf_update(struct mlf_client *c, const float *grad, uint32_t base, struct mlf_result *res);
/* Leave: PS_LEAVE to the servers, and a REQ with flag LEAVE to ina-sched (each twice). */
void mlf_leave(struct mlf_client *c);

#endif
