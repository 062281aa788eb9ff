/* test_spin.c: the rules of busy polling by default (issue 35): the auto budget from cores and
 * spinners, the yield on every turn of a crowded CPU, and the auto spin's back-off: no spin
 * for an operation with more than a window of packets to come, none after 4 misses in a row,
 * a probe every 8 waits, and spinning again when a wait would have paid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/busy_poll.h"
#include "lib/ctx.h"
#include "lib/req.h"
#include "lib/stream.h"

static void test_budget(void)
{
    CHECK_EQ_INT(ina__busy_poll_auto_us(16, 5), INA_AUTO_BUSY_POLL_US); /* a core each */
    CHECK_EQ_INT(ina__busy_poll_auto_us(4, 4), 50);
    CHECK_EQ_INT(ina__busy_poll_auto_us(2, 5), 20);  /* the 2-core VM at N = 4 */
    CHECK_EQ_INT(ina__busy_poll_auto_us(2, 3), 33);
    CHECK_EQ_INT(ina__busy_poll_auto_us(1, 10), 5);  /* the floor itself still spins */
    CHECK_EQ_INT(ina__busy_poll_auto_us(1, 11), 0); /* 4.5 us: sleep at once */
    CHECK_EQ_INT(ina__busy_poll_auto_us(0, 1), 50); /* a count below 1 is taken as 1 */
    CHECK_EQ_INT(ina__busy_poll_auto_us(8, 257), 0);
}

static void test_yield_every(void)
{
    CHECK_EQ_INT(ina__busy_yield_every(300), INA_BUSY_POLL_YIELD_NS); /* came back at once */
    CHECK_EQ_INT(ina__busy_yield_every(INA_BUSY_POLL_SHARED_NS), INA_BUSY_POLL_YIELD_NS);
    CHECK_EQ_INT(ina__busy_yield_every(INA_BUSY_POLL_SHARED_NS + 1), 0); /* others ran */
}

static void test_backoff(void)
{
    struct ina_ctx *ctx = calloc(1, sizeof(*ctx));
    struct ina_req req;
    memset(&req, 0, sizeof(req));
    ctx->window = 128;
    ctx->busy_poll_ns = 20000;
    ctx->busy_auto = 1;
    CHECK_EQ_INT(ina__spin_now(ctx), 1); /* nothing in flight yet: as a small op */
    ctx->head = &req;
    req.npackets = 1000; /* 1000 - 0 > a window to come: a long operation */
    CHECK_EQ_INT(ina__spin_now(ctx), 0);
    req.ndone = 872; /* 128 to come: the last window spins */
    CHECK_EQ_INT(ina__spin_now(ctx), 1);
    req.npackets = 1;
    req.ndone = 0;
    for (int i = 0; i < 4; i++) { /* four spins in a row find nothing */
        CHECK_EQ_INT(ina__spin_now(ctx), 1);
        ina__spin_learn(ctx, 1, 0, 0);
    }
    CHECK_EQ_INT(ina__spin_now(ctx), 0); /* backed off: sleep at once */
    for (int i = 0; i < 7; i++) { /* long sleeps: still backed off */
        ina__spin_learn(ctx, 0, 1, 5000000);
        CHECK_EQ_INT(ina__spin_now(ctx), 0);
    }
    ina__spin_learn(ctx, 0, 1, 5000000); /* the 8th wait since the last spin */
    CHECK_EQ_INT(ina__spin_now(ctx), 1); /* a probe */
    ina__spin_learn(ctx, 1, 0, 0);       /* it missed: back off again */
    CHECK_EQ_INT(ina__spin_now(ctx), 0);
    ina__spin_learn(ctx, 0, 1, 5000); /* a sleep answered within the spin: it would have paid */
    CHECK_EQ_INT(ina__spin_now(ctx), 1);
    for (int i = 0; i < 3; i++)
        ina__spin_learn(ctx, 1, 0, 0);
    ina__spin_learn(ctx, 1, 1, 0); /* a hit clears the misses */
    CHECK_EQ_INT(ina__spin_now(ctx), 1);
    /* A spin set by number always spins, long operations too; 0 never does. */
    ctx->busy_auto = 0;
    for (int i = 0; i < 10; i++)
        ina__spin_learn(ctx, 1, 0, 0);
    req.npackets = 100000;
    CHECK_EQ_INT(ina__spin_now(ctx), 1);
    ctx->busy_poll_ns = 0;
    CHECK_EQ_INT(ina__spin_now(ctx), 0);
    free(ctx);
}

int main(void)
{
    test_budget();
    test_yield_every();
    test_backoff();
    return check_report("test_spin");
}
