/* optim.h: the server-side optimizers of the key-value store, applied by ina-ps and by libina's hot replica. */
#ifndef INA_OPTIM_H
#define INA_OPTIM_H


/*
 * One function applies one step's summed gradient to parameters. ina-ps
 * applies it to the keys it owns; with a hot set, every worker applies it
 * to its replica of the hot keys with the sums the switch returned. Both
 * run this same code on the same float inputs, so a parameter has the same
 * bits wherever it was updated: a key that moves between the switch and the
 * server (a hot-set reinstall) carries its value and state across unchanged.
 * (optim.c is compiled without floating-point contraction for that reason.)
 *
 * A gradient element that is +0 or -0 is skipped: nothing is applied. So a
 * key no rank touched and a key whose contributions summed to zero are
 * treated alike on both sides.
 */
#include <stddef.h>
#include <stdint.h>

enum { INA_OPTIM_SGD = 0, INA_OPTIM_ADAGRAD = 1 };
enum { INA_INIT_ZERO = 0, INA_INIT_UNIFORM = 1 };

struct ina_optim {
    int kind;       /* INA_OPTIM_* */
    float lr;       /* learning rate eta */
    float eps;      /* Adagrad: beta in w -= eta g / (beta + sqrt(n)) */
    float init_acc; /* Adagrad: initial n */
};

/*
 *   SGD:     w -= lr * g
 *   Adagrad: n += g * g;  w -= lr * g / (eps + sqrt(n))     (PS-lite's examples)
 * for each i < len with g[i] != 0. acc (the n) is not read for SGD and may
 * be NULL then.
 */
void ina__optim_apply(const struct ina_optim *o, float *w, float *acc, const float *g, size_t len);

/* 1 if the optimizer keeps state per parameter (Adagrad's n). */
static inline int ina__optim_has_state(int kind) { return kind == INA_OPTIM_ADAGRAD; }

/*
 * The initial value of component j of key's parameter: 0, or uniform in
 * [-scale, scale) from a hash of (seed, key, j). The same on every server
 * and worker, so a parameter needs no storage until it is first updated.
 */
float ina__param_init(int kind, float scale, uint64_t seed, uint64_t key, unsigned j);

#endif
