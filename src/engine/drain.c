/* drain.c: the graceful stop (SIGTERM): refuse new jobs, let running operations finish, end the rest. */
#include "engine/internal.h"

/*
 * Why "between operations" and not "when the job leaves": a training job
 * holds its session for hours and leaves only at its end, so waiting for
 * LEAVEs would wait for the deadline every time. What must not be cut is an
 * operation whose rounds are half summed: its ranks would lose the work of
 * every packet in flight. So a job is ended as soon as none of its rounds is
 * partly received and its ranks have sent no DATA for a moment (the next
 * operation's first packet would otherwise race the ABORT); its ranks get
 * INA_ERR_SHUTDOWN from their next operation, at once. A job still busy at
 * the deadline is ended anyway, with the same reason.
 *
 * A job whose slots live in the kernel (the eBPF dataplane) shows only its
 * last DATA time (synced once a tick): quiet is all that is checked there.
 */
static int job_busy(const struct ina_switch *sw, const struct ina_job *job, uint64_t now_ns)
{
    if (job->last_rx_ns > now_ns || now_ns - job->last_rx_ns < INA_SW_DRAIN_QUIET_NS)
        return 1; /* (a clock of another dataplane may be ahead) */
    if (sw->dp)
        return 0;
    for (uint32_t i = 0; i < job->window; i++)
        for (unsigned set = 0; set < 2; set++)
            if (!sw->slots[job->slot_base + i].set[set].complete)
                return 1; /* a round started and not finished (or awaiting the parent) */
    return 0;
}

void ina__switch_drain_start(struct ina_switch *sw, uint64_t now_ns, uint64_t timeout_ns)
{
    if (sw->draining)
        return;
    sw->draining = 1;
    sw->drain_deadline_ns = now_ns + timeout_ns;
    ina__switch_drain_step(sw, now_ns);
}

int ina__switch_drain_step(struct ina_switch *sw, uint64_t now_ns)
{
    int left = 0;
    const int deadline_passed = now_ns >= sw->drain_deadline_ns;
    for (int i = 0; i < INA_SW_MAX_JOBS; i++) {
        struct ina_job *job = &sw->jobs[i];
        if (job->state == INA_JOB_FREE)
            continue;
        if (ina__switch_tx_full(sw)) {
            left++; /* no room for the NAKs or the ABORT: the next step sends them */
            continue;
        }
        if (job->state != INA_JOB_ACTIVE) {
            /* Joining or waiting for slots: nothing runs yet. */
            ina__job_refuse(sw, job, INA_ERR_SHUTDOWN, now_ns);
        } else if (deadline_passed) {
            ina__job_abort_why(sw, job, INA_ERR_SHUTDOWN, "drain_deadline");
        } else if (!job_busy(sw, job, now_ns)) {
            ina__job_abort_why(sw, job, INA_ERR_SHUTDOWN, "drained");
        } else {
            left++;
        }
    }
    return left;
}
