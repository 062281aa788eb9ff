/* fault.c: seeded fault injection; see fault.h. */
#include "common/fault.h"

#include "common/kv_wire.h" /* INA_K_HOT_DATA, INA_K_HOT_RESULT */
#include "common/wire.h"

#include <stdlib.h>
#include <string.h>

static uint64_t next_u64(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int chance(uint64_t *s, double p)
{
    return p > 0 && (double)(next_u64(s) >> 11) * 0x1p-53 < p;
}

int ina__fault_parse(struct ina_fault *f, const char *spec)
{
    memset(f, 0, sizeof(*f));
    f->rng = 1;
    const char *p = spec;
    while (p && *p) {
        const char *eq = strchr(p, '=');
        if (!eq)
            goto bad;
        size_t klen = (size_t)(eq - p);
        char *end;
        if (klen == 4 && strncmp(p, "seed", 4) == 0) {
            f->rng = strtoull(eq + 1, &end, 10);
        } else {
            double v = strtod(eq + 1, &end);
            if (end == eq + 1 || !(v >= 0 && v <= 1))
                goto bad;
            if (klen == 4 && strncmp(p, "drop", 4) == 0)
                f->drop = v;
            else if (klen == 3 && strncmp(p, "dup", 3) == 0)
                f->dup = v;
            else if (klen == 7 && strncmp(p, "reorder", 7) == 0)
                f->reorder = v;
            else if (klen == 7 && strncmp(p, "corrupt", 7) == 0)
                f->corrupt = v;
            else
                goto bad;
        }
        if (*end != ',' && *end != '\0')
            goto bad;
        p = *end ? end + 1 : end;
    }
    return 0;
bad:
    memset(f, 0, sizeof(*f));
    return -1;
}

unsigned ina__fault_plan(struct ina_fault *f, unsigned n, unsigned *out)
{
    unsigned k = 0, nheld = 0;
    /* Held (reordered) indices are parked at the far end of out, then
     * moved behind everything else: out has room for 2n entries. */
    unsigned *held = out + 2 * n;
    for (unsigned i = 0; i < n; i++) {
        if (chance(&f->rng, f->drop)) {
            f->dropped++;
            continue;
        }
        if (chance(&f->rng, f->reorder) && i + 1 < n) {
            f->reordered++;
            *--held = i;
            nheld++;
            continue;
        }
        out[k++] = i;
        if (chance(&f->rng, f->dup)) {
            f->duplicated++;
            out[k++] = i;
        }
    }
    for (unsigned j = 0; j < nheld; j++)
        out[k++] = out[2 * n - 1 - j];
    return k;
}

int ina__fault_corrupt(struct ina_fault *f, uint8_t *buf, size_t len)
{
    /* Sums only: a changed JOIN would just be refused (its proof fails), which
     * is not what this models. The payload, and a tag if any, follow the header. */
    const size_t hdr = INA_HDR_LEN;
    if (len <= hdr || f->corrupt <= 0 ||
        (buf[3] != INA_K_DATA && buf[3] != INA_K_RESULT && buf[3] != INA_K_HOT_DATA &&
         buf[3] != INA_K_HOT_RESULT) ||
        !chance(&f->rng, f->corrupt))
        return 0;
    uint64_t bit = next_u64(&f->rng) % (8 * (len - hdr));
    buf[hdr + bit / 8] ^= (uint8_t)(1u << (bit % 8));
    f->corrupted++;
    return 1;
}

