/* test_lifecycle.c: context lifetime misuse: calls after finalize, double finalize, re-init in one process. */
#include "check.h"
#include "e2e/harness.h"

static struct sw_proc sw;

int main(void)
{
    CHECK_EQ_INT(switch_start(&sw, NULL), 0);
    char addr[64];
    ina_config cfg;
    worker_config(&cfg, &sw, "lifecycle", 0, 1, addr, sizeof(addr));
    for (int round = 0; round < 3; round++) { /* init/finalize repeatedly in one process */
        ina_ctx *ctx;
        CHECK_EQ_INT(ina_init(&ctx, &cfg), 0);
        int32_t x[3] = {1, 2, 3}, y[3] = {0};
        CHECK_EQ_INT(ina_allreduce(ctx, x, y, 3, INA_INT32, INA_SUM), 0);
        CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3);
        CHECK_EQ_INT(ina_finalize(ctx), 0);
        /* The handle is dead: every call says so, none touches freed memory. */
        ina_stats st;
        ina_info info;
        ina_req *req = (ina_req *)1;
        CHECK_EQ_INT(ina_allreduce(ctx, x, y, 3, INA_INT32, INA_SUM), INA_ERR_CLOSED);
        CHECK_EQ_INT(ina_allreduce_start(ctx, x, y, 3, INA_INT32, INA_SUM, &req), INA_ERR_CLOSED);
        CHECK(req == NULL);
        CHECK_EQ_INT(ina_get_stats(ctx, &st), INA_ERR_CLOSED);
        CHECK_EQ_INT(ina_get_info(ctx, &info), INA_ERR_CLOSED);
        CHECK_EQ_INT(ina_finalize(ctx), INA_ERR_CLOSED);
    }
    CHECK_EQ_INT(switch_stop(&sw), 0);
    return check_report("test_lifecycle");
}
