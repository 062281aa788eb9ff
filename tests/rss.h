/* rss.h: this process's resident set, for the tests that bound what hostile input makes a daemon allocate. */
#ifndef INA_TEST_RSS_H
#define INA_TEST_RSS_H

#include <stdio.h>

#if defined(__SANITIZE_ADDRESS__)
#define INA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define INA_TEST_ASAN 1
#endif
#endif

/* VmRSS of this process in KiB; 0 if unknown, or not meaningful: under AddressSanitizer
 * it holds the quarantine of freed memory (up to 256 MiB) too. */
static inline long test_rss_kib(void)
{
#ifdef INA_TEST_ASAN
    return 0;
#else
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
#endif
}

#endif
