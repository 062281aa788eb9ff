/* fault.h: seeded fault injection (drop, duplicate, reorder, corrupt) for tests and operators, kept out of the dataplane. */
#ifndef INA_FAULT_H
#define INA_FAULT_H


/*
 * A fault injector sits between a component and its socket, like the
 * original SwitchML's drop simulator: the dataplane never knows. It works on
 * a burst of datagrams at once (the unit both the switch and libina send and
 * receive in) and produces the order in which they are to be delivered:
 *   drop     the datagram is left out
 *   dup      it is delivered twice in a row
 *   reorder  it is moved to the end of the burst (after later datagrams)
 *   corrupt  one bit of a DATA's or RESULT's payload (past the 32-byte
 *            header) is flipped, as an attacker on the path would rewrite a
 *            sum (the owner calls ina__fault_corrupt on each datagram it sends
 *            or receives; other kinds are left alone)
 * Decisions come from a seeded PRNG, so a failing run can be replayed.
 * Disabled injectors (all rates 0) cost one branch per burst.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ina_fault {
    double drop, dup, reorder, corrupt; /* probabilities, 0..1 */
    uint64_t rng;
    uint64_t dropped, duplicated, reordered, corrupted; /* what it did, for reports */
};

/*
 * Parse "drop=P,dup=P,reorder=P,corrupt=P,seed=N" (any subset, any order; P in [0,1]).
 * Resets f. @return 0, or -1 with f disabled if the text is malformed.
 */
int ina__fault_parse(struct ina_fault *f, const char *spec);

static inline int ina__fault_active(const struct ina_fault *f)
{
    return f->drop > 0 || f->dup > 0 || f->reorder > 0 || f->corrupt > 0;
}

/* With probability corrupt, flip one random bit of buf past the header, if it
 * is a DATA or RESULT (HOT_DATA, HOT_RESULT) with a payload (a datagram of len
 * bytes). @return 1 if it did. */
int ina__fault_corrupt(struct ina_fault *f, uint8_t *buf, size_t len);

/*
 * Plan the delivery of a burst of n datagrams: writes the indices to deliver,
 * in order, into out (capacity 2n) and returns how many.
 */
unsigned ina__fault_plan(struct ina_fault *f, unsigned n, unsigned *out);

#endif
