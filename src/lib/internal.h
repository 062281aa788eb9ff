/* internal.h: every private header of libina, for the tests and fuzz targets that reach inside; the library's own files include only the headers they use. */
#ifndef INA_INTERNAL_H
#define INA_INTERNAL_H

/* What the one internal.h brought in before the split, which the tests rely on. */
#include "common/kv_wire.h"
#include "common/shm_ring.h"
#include "common/udp_gso.h"
#include "lib/codec.h"
#include "lib/ctx.h"
#include "lib/lanes.h"
#include "lib/req.h"
#include "lib/session.h"
#include "lib/stream.h"
#include "lib/transport.h"

#endif
