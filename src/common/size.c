/* size.c: byte sizes on command lines (size.h). */
#include "common/size.h"

#include <stdlib.h>

int ina__parse_size(const char *s, size_t min, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (end == s || v <= 0)
        return -1;
    if (*end == 'K' || *end == 'k')
        mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1073741824.0, end++;
    if (*end || v * mul < (double)min || v * mul > 1e15)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
}
