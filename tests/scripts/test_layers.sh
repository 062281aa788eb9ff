#!/usr/bin/env bash
# test_layers.sh: scripts/check-layers.py finds what it must (issue 31). On a small made-up
# tree (src/lib and src/switch, its objects compiled here), it fails on a library file that
# includes a daemon's header (a), on two headers that include each other (b) and on two
# object files that call each other (c), naming the files and a symbol; it passes when the
# allowlist names exactly those; and it fails on an allowlist entry that no longer occurs,
# and on a cycle that shrank (printing the line to write). Then the rooms' order (common <
# engine < the daemon and the library): on a second tree, an include against it (the engine
# including a daemon's header, the library one of the engine's headers other than engine.h,
# a daemon another room's internal.h) and a call against it (an engine object using a
# symbol of the library) fail, each named; the arrows that follow the order pass. The real
# tree is checked by the ctest check_layers.
set -uo pipefail
exec </dev/null
SRC=${INA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=tests/scripts/harness.sh
. "$SRC/tests/scripts/harness.sh" # $tmp, ok/bad/check, finish
CHECK=$SRC/scripts/check-layers.py
T=$tmp/tree
mkdir -p "$T/src/lib" "$T/src/switch" "$T/build/CMakeFiles/ina_obj.dir/src/lib"
cat >"$T/src/switch/s.h" <<'C'
int s_fn(void);
C
cat >"$T/src/lib/x.h" <<'C'
#ifndef X_H
#define X_H
#include "y.h"
#endif
C
cat >"$T/src/lib/y.h" <<'C'
#ifndef Y_H
#define Y_H
#include "x.h"
#endif
C
cat >"$T/src/lib/a.c" <<'C'
#include "switch/s.h"
int b_fn(int);
int a_fn(int n) { return n ? b_fn(n - 1) : 0; }
C
cat >"$T/src/lib/b.c" <<'C'
int a_fn(int);
int b_fn(int n) { return n ? a_fn(n - 1) : 1; }
C
cat >"$T/src/lib/c.c" <<'C'
int a_fn(int);
int c_fn(void) { return a_fn(3); }
C
for f in a b c; do
    cc -c -I"$T/src" -o "$T/build/CMakeFiles/ina_obj.dir/src/lib/$f.c.o" "$T/src/lib/$f.c" ||
        bad "cc $f.c"
done

# run ALLOWLIST-TEXT: check-layers on the made-up tree; its output in $tmp/out, status in $rc.
run() {
    printf '%s\n' "$1" >"$tmp/allow"
    python3 "$CHECK" --src "$T" --build "$T/build" --allowlist "$tmp/allow" >"$tmp/out" 2>&1
    rc=$?
}
has() { grep -qF -- "$1" "$tmp/out"; }

run "# nothing allowed"
cat "$tmp/out"
check "no allowlist: the check fails" test "$rc" -eq 1
check "(a) names the library file and the daemon's header" \
    has "FAIL: src/lib/a.c includes src/switch/s.h"
check "(b) prints the include cycle" has "FAIL: include cycle in src/lib/ (2 files): x.h -> y.h -> x.h"
check "(c) prints the call cycle" has "FAIL: link cycle in src/lib/ (2 files): a.c -> b.c -> a.c"
check "(c) names a symbol of each edge" bash -c "grep -qF 'a.c -> b.c (b_fn)' '$tmp/out' &&
    grep -qF 'b.c -> a.c (a_fn)' '$tmp/out'"
check "(c) c.c, which calls into the cycle, is not in it" bash -c "! grep -qF 'c.c' '$tmp/out'"

exact="include src/lib/a.c -> src/switch/s.h
include-cycle src/lib: x.h y.h
link-cycle src/lib: b.c a.c   # any order"
run "$exact"
check "the allowlist names exactly what is there: the check passes" test "$rc" -eq 0
has "check-layers: passed" || cat "$tmp/out"

run "$exact
include src/lib/b.c -> src/switch/s.h"
check "an entry that no longer occurs fails the check" test "$rc" -eq 1
check "... and is named, with its line" \
    has "FAIL: allowlist line 4 (include src/lib/b.c -> src/switch/s.h) no longer occurs"

run "include src/lib/a.c -> src/switch/s.h
include-cycle src/lib: x.h y.h
link-cycle src/lib: a.c b.c c.c"
check "a cycle that shrank fails the check" test "$rc" -eq 1
check "... and the check prints the entry to write instead" \
    has "link-cycle src/lib: a.c b.c"
[ "$rc" -eq 1 ] || cat "$tmp/out"

run "frobnicate src/lib: a.c"
check "an entry of an unknown kind is refused" bash -c "[ $rc -ne 0 ] && grep -q 'unknown kind' '$tmp/out'"

# ---- The rooms' order -------------------------------------------------------------------
O=$tmp/order
mkdir -p "$O/src/common" "$O/src/engine" "$O/src/lib" "$O/src/switch" \
    "$O/build/CMakeFiles/ina_engine.dir/src/engine" "$O/build/CMakeFiles/ina_obj.dir/src/lib" \
    "$O/build/CMakeFiles/ina_common.dir/src/common"
echo 'int k_fn(void);' >"$O/src/common/k.h"
printf '%s\n' '#include "common/k.h"' 'int e_fn(void);' >"$O/src/engine/engine.h"
echo 'int e_slot(void);' >"$O/src/engine/slots.h"
echo 'int e_private(void);' >"$O/src/engine/internal.h"
echo 'int m_fn(void);' >"$O/src/switch/m.h"
cat >"$O/src/common/k.c" <<'C'
#include "common/k.h"
int k_fn(void) { return 1; }
C
cat >"$O/src/engine/e.c" <<'C'
#include "engine/engine.h"
#include "switch/m.h"
int l_fn(void);
int e_fn(void) { return k_fn() + l_fn(); }
C
cat >"$O/src/lib/l.c" <<'C'
#include "engine/engine.h"
#include "engine/slots.h"
int l_fn(void) { return e_fn() + k_fn(); }
C
cat >"$O/src/switch/m.c" <<'C'
#include "engine/engine.h"
#include "engine/internal.h"
#include "switch/m.h"
int m_fn(void) { return e_fn(); }
C
cc -c -I"$O/src" -o "$O/build/CMakeFiles/ina_common.dir/src/common/k.c.o" "$O/src/common/k.c" &&
    cc -c -I"$O/src" -o "$O/build/CMakeFiles/ina_engine.dir/src/engine/e.c.o" "$O/src/engine/e.c" &&
    cc -c -I"$O/src" -o "$O/build/CMakeFiles/ina_obj.dir/src/lib/l.c.o" "$O/src/lib/l.c" ||
    bad "cc (order tree)"
echo "# nothing allowed" >"$tmp/allow"
python3 "$CHECK" --src "$O" --build "$O/build" --allowlist "$tmp/allow" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
check "arrows against the order: the check fails" test "$rc" -eq 1
check "(a) the engine includes a daemon's header" has "FAIL: src/engine/e.c includes src/switch/m.h"
check "(a) the library includes an engine header other than engine.h" \
    has "FAIL: src/lib/l.c includes src/engine/slots.h"
check "(a) another room's internal.h is private" has "FAIL: src/switch/m.c includes src/engine/internal.h"
check "(a) engine.h from the library, the engine's headers from the daemon, common from all: allowed" \
    bash -c "! grep -qE 'includes src/engine/engine.h|includes src/common/k.h|m.c includes src/switch/m.h' '$tmp/out'"
check "(d) the engine calls up into the library: named with the symbol" \
    has "FAIL: src/engine/e.c uses l_fn of src/lib/l.c, a room not below src/engine/"
check "(d) the library calls down into the engine and common: allowed" \
    bash -c "! grep -qF 'src/lib/l.c uses' '$tmp/out'"

finish test_layers
