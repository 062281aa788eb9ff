/* version.h: INA_VERSION_NUMBER values as text, for the messages that name a peer's version. */
#ifndef INA_COMMON_VERSION_H
#define INA_COMMON_VERSION_H


#include <stddef.h>
#include <stdint.h>

/*
 * Write v, an INA_VERSION_NUMBER as a JOIN carries it (PROTOCOL.md §4.1:
 * major * 10000 + minor * 100 + patch), as "MAJOR.MINOR.PATCH" into buf, or
 * "unknown" for 0 (a peer that does not say). @return buf.
 */
const char *ina__version_str(uint32_t v, char *buf, size_t len);

/* Room for any uint32_t as "MAJOR.MINOR.PATCH": 429496.72.95 and a NUL. */
#define INA_VERSION_STR_LEN 16

#endif
