/* check.h: minimal test harness: typed checks that print both values, and a pass/fail summary. */
#ifndef INA_CHECK_H
#define INA_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count++;                                                               \
        if (!(cond)) {                                                               \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                   \
    do {                                                                                     \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                \
        check_count++;                                                                       \
        if (va_ != vb_) {                                                                    \
            check_failures++;                                                                \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n", __FILE__,   \
                    __LINE__, #a, #b, va_, vb_);                                             \
        }                                                                                    \
    } while (0)

#define CHECK_LE_DBL(a, b)                                                                  \
    do {                                                                                    \
        double va_ = (double)(a), vb_ = (double)(b);                                        \
        check_count++;                                                                      \
        if (!(va_ <= vb_)) {                                                                \
            check_failures++;                                                               \
            fprintf(stderr, "%s:%d: CHECK_LE failed: %s <= %s (%.9g vs %.9g)\n", __FILE__,  \
                    __LINE__, #a, #b, va_, vb_);                                            \
        }                                                                                   \
    } while (0)

/* Print the summary line and return the process exit status. */
static inline int check_report(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
