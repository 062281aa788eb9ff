/* size.h: byte sizes on command lines (--max-memory 512M, --hot-memory 64M). */
#ifndef INA_SIZE_H
#define INA_SIZE_H


#include <stddef.h>

/*
 * A size: a positive number, optionally with a suffix K, M or G (powers of 1024, either
 * case), e.g. 4096, 1.5M, 4G. @return 0 and *out, or -1 if it does not parse or is below
 * min bytes or above 10^15.
 */
int ina__parse_size(const char *s, size_t min, size_t *out);

#endif
