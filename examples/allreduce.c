/* allreduce.c: the smallest libina program: join a job from the environment, sum a vector, check it. */
#include <stdio.h>

#include <ina.h>

int main(void)
{
    ina_ctx *ctx;
    /* INA_SWITCH=host:port, INA_RANK (or RANK), INA_WORLD_SIZE (or WORLD_SIZE), INA_JOB */
    int rc = ina_init_env(&ctx);
    if (rc) {
        fprintf(stderr, "ina_init: %s (%s)\n", ina_strerror(rc), ina_err_name(rc));
        return 1;
    }
    ina_info info;
    ina_get_info(ctx, &info);

    float grad[1000];
    for (int i = 0; i < 1000; i++)
        grad[i] = (float)(info.rank + 1) * 0.5f; /* rank r contributes (r+1)/2 */
    rc = ina_allreduce(ctx, grad, grad, 1000, INA_FLOAT32, INA_SUM); /* in place */
    if (rc) {
        fprintf(stderr, "ina_allreduce: %s (%s)\n", ina_strerror(rc), ina_err_name(rc));
        ina_finalize(ctx);
        return 1;
    }
    /* sum over r of (r+1)/2 = N(N+1)/4, exact in float for small N */
    float want = (float)info.world_size * (float)(info.world_size + 1) / 4.0f;
    int ok = grad[0] == want && grad[999] == want;
    printf("rank %d of %d: grad[0] = %g (want %g): %s\n", info.rank, info.world_size, grad[0],
           want, ok ? "ok" : "WRONG");
    ina_finalize(ctx);
    return ok ? 0 : 1;
}
