#!/usr/bin/env bash
# test_install.sh: `make install` works like a real C library's: installed into a staging
# DESTDIR and into a plain prefix (cmake --install, what `make install` runs), the tree
# holds libina (SONAME links, static), ina.h, ina.pc, the CMake package, the tools, the
# interposer, the man pages; examples/allreduce.c builds from it with pkg-config alone
# and with find_package(ina) alone, and the programs run against a switch; man renders
# the pages without warnings; scripts/uninstall.sh removes it all again.
set -uo pipefail
B=${INA_BUILD_DIR:-build}
SRC=${INA_SOURCE_DIR:-$(pwd)}
SW=$B/bin/ina-switch
# shellcheck source=tests/scripts/harness.sh
source "$(dirname "$0")/harness.sh"

# cmake --install records what it installed in the build's install_manifest.txt, which
# `make uninstall` reads: keep the user's and put it back at the end.
manifest=$B/install_manifest.txt
[ -f "$manifest" ] && cp "$manifest" "$tmp/manifest.saved"
restore_manifest() {
    if [ -f "$tmp/manifest.saved" ]; then cp "$tmp/manifest.saved" "$manifest"; else rm -f "$manifest"; fi
}
trap 'restore_manifest; cleanup' EXIT

# Build consumers with the compiler of this build; an ASan/UBSan libina needs instrumented
# programs (they carry the runtime).
CC=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$B/CMakeCache.txt")
CFLAGS="-Wall -Wextra -Werror"
if grep -q '^INA_SANITIZE:BOOL=ON' "$B/CMakeCache.txt"; then
    CFLAGS+=" -fsanitize=address,undefined -fno-omit-frame-pointer"
fi
echo "note: consumers built with $CC $CFLAGS"

# The version, from the one place it is written (include/ina.h), and the SONAME that follows
# it (docs/API.md#abi): libina.so.0.MINOR before 1.0, libina.so.MAJOR after.
read -r major minor patch < <(sed -n 's/^#define INA_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9][0-9]*\)$/\2/p' \
    "$SRC/include/ina.h" | xargs)
ver=$major.$minor.$patch
if [ "$major" -eq 0 ]; then soname=libina.so.$major.$minor; else soname=libina.so.$major; fi
echo "note: ina.h says version $ver, SONAME $soname"

# ---- 1. Staged install: DESTDIR=stage, prefix /opt/ina-test ------------------------------
stage=$tmp/stage prefix=/opt/ina-test
root=$stage$prefix
DESTDIR=$stage cmake --install "$B" --prefix "$prefix" >"$tmp/install1.log" 2>&1
check "cmake --install with DESTDIR exits 0" test $? -eq 0
check "nothing installed outside DESTDIR" test "$(find "$stage" -mindepth 1 -maxdepth 1)" = "$stage/opt"
for f in lib/libina.so.$ver lib/libina.a include/ina.h lib/pkgconfig/ina.pc \
    lib/cmake/ina/inaConfig.cmake lib/cmake/ina/inaConfigVersion.cmake \
    lib/cmake/ina/inaTargets.cmake bin/ina-switch bin/ina-bench bin/ina-ctl bin/ina-ps \
    bin/ina-sched bin/ina-mlf bin/ina-glm share/man/man1/ina-switch.1 share/man/man1/ina-bench.1 \
    share/man/man1/ina-ctl.1 share/man/man1/ina-ps.1 share/man/man1/ina-sched.1 \
    share/man/man1/ina-mlf.1 share/man/man1/ina-glm.1 share/man/man3/ina.3 \
    lib/systemd/system/ina-switch.service; do
    check "installed $f" test -f "$root/$f"
done
check "$soname -> libina.so.$ver" test "$(readlink "$root/lib/$soname")" = "libina.so.$ver"
check "libina.so -> $soname" test "$(readlink "$root/lib/libina.so")" = "$soname"
check "SONAME $soname" bash -c "readelf -d '$root/lib/libina.so.$ver' | grep -q 'SONAME.*\[$soname\]'"
check "tools run from the installed tree" bash -c "'$root/bin/ina-switch' --version | grep -q ina-switch"
if [ -f "$B/lib/libina-mpi.so" ]; then
    check "installed lib/libina-mpi.so" test -f "$root/lib/libina-mpi.so"
    check "installed libina-mpi.so exports MPI_Allreduce, not ina_*" bash -c \
        "nm -D --defined-only '$root/lib/libina-mpi.so' | grep -q ' MPI_Allreduce$' &&
         ! nm -D --defined-only '$root/lib/libina-mpi.so' | grep -q ' ina_'"
fi
if [ -d "$SRC/python/ina" ]; then
    check "installed the Python package" test -f "$root/lib/python3/dist-packages/ina/__init__.py"
    check "no __pycache__ installed" test -z "$(find "$root/lib/python3" -name __pycache__)"
else
    echo "note: no python/ina in the sources: no Python package to install"
fi

# The systemd unit starts the installed switch (tests/scripts/test_systemd.sh checks the rest).
check "ina-switch.service: ExecStart=$prefix/bin/ina-switch" \
    grep -q "^ExecStart=$prefix/bin/ina-switch " "$root/lib/systemd/system/ina-switch.service"

# ina.pc names the real prefix, not the staging directory
pc=$root/lib/pkgconfig/ina.pc
check "ina.pc: prefix=$prefix" grep -qx "prefix=$prefix" "$pc"
# shellcheck disable=SC2016 # ${libdir} is pkg-config's, not the shell's
check "ina.pc: Libs: -L\${libdir} -lina" grep -qx 'Libs: -L${libdir} -lina' "$pc"
check "ina.pc: Libs.private: -lm -pthread" grep -qx 'Libs.private: -lm -pthread' "$pc"
export PKG_CONFIG_PATH=$root/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_LIBDIR=
check "pkg-config --modversion ina = $ver" test "$(pkg-config --modversion ina)" = "$ver"
check "pkg-config --cflags --libs ina (sysroot $stage)" \
    test "$(pkg-config --cflags --libs ina | xargs)" = "-I$root/include -L$root/lib -lina"
check "pkg-config --static --libs ina adds -lm -pthread" \
    test "$(pkg-config --static --libs ina | xargs)" = "-L$root/lib -lina -lm -pthread"

# examples/allreduce.c with nothing but pkg-config's flags
# shellcheck disable=SC2046,SC2086
$CC $CFLAGS $(pkg-config --cflags ina) -o "$tmp/ex_pc" "$SRC/examples/allreduce.c" \
    $(pkg-config --libs ina) 2>"$tmp/cc.log"
check "example builds with pkg-config --cflags --libs ina" test $? -eq 0
check "example links the installed $soname" bash -c \
    "LD_LIBRARY_PATH='$root/lib' ldd '$tmp/ex_pc' | grep -q '$soname => $root/lib/$soname'"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR

# man renders the installed pages without warnings (groff-base and man-db are on every
# Debian system but minimal containers; without them, say so)
command -v groff >/dev/null || echo "note: groff not installed (apt-get install groff-base): pages not checked"
command -v man >/dev/null || echo "note: man not installed (apt-get install man-db): man -l not checked"
for page in man1/ina-switch.1 man1/ina-bench.1 man1/ina-ctl.1 man1/ina-ps.1 man1/ina-sched.1 \
    man1/ina-mlf.1 man1/ina-glm.1 man3/ina.3; do
    f=$root/share/man/$page
    if command -v groff >/dev/null; then
        check "groff: $page without warnings" test -z "$(groff -man -Tutf8 -ww -z "$f" 2>&1)"
    fi
    if command -v man >/dev/null; then
        check "man -l $page renders without warnings" bash -c \
            "MANWIDTH=80 man --warnings -l '$f' 2>'$tmp/man.err' | grep -q 'SEE ALSO' && ! [ -s '$tmp/man.err' ]"
    fi
done
if command -v man >/dev/null; then
    check "man -M finds ina(3) in the installed tree" \
        test "$(man -M "$root/share/man" -w 3 ina 2>/dev/null)" = "$root/share/man/man3/ina.3"
fi

# ---- 2. Plain install into a prefix; a CMake project with find_package(ina) -------------
pfx=$tmp/prefix
cmake --install "$B" --prefix "$pfx" >"$tmp/install2.log" 2>&1
check "cmake --install --prefix exits 0" test $? -eq 0
check "ina.pc: prefix=$pfx" grep -qx "prefix=$pfx" "$pfx/lib/pkgconfig/ina.pc"
if [ -d "$SRC/python/ina" ]; then
    check "python3 imports the installed package" bash -c "cd / && env -u INA_LIBRARY \
        PYTHONPATH='$pfx/lib/python3/dist-packages' python3 -c 'import ina; print(ina.__file__)' |
        grep -q '^$pfx/lib/python3/dist-packages/ina/__init__.py$'"
    if grep -q '^INA_SANITIZE:BOOL=ON' "$B/CMakeCache.txt"; then
        echo "note: sanitizer build: the installed package does not load its libina here"
    else
        check "the installed package loads $pfx/lib/$soname" bash -c "cd / && env -u INA_LIBRARY \
            PYTHONPATH='$pfx/lib/python3/dist-packages' python3 -c \
            'import ina; print(ina.library_path(), ina.library_version())' |
            grep -qx '$pfx/lib/$soname $ver'"
    fi
fi
mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(ina $major.$minor REQUIRED)
add_executable(ex_shared $SRC/examples/allreduce.c)
target_link_libraries(ex_shared PRIVATE ina::ina)
add_executable(ex_static $SRC/examples/allreduce.c)
target_link_libraries(ex_static PRIVATE ina::ina_static)
EOF
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_PREFIX_PATH="$pfx" >"$tmp/consumer.log" 2>&1 &&
    cmake --build "$tmp/consumer/build" >>"$tmp/consumer.log" 2>&1
rc=$?
check "CMake project with find_package(ina) configures and builds" test "$rc" -eq 0
[ "$rc" -eq 0 ] || cat "$tmp/consumer.log"
check "ina::ina links the installed $soname" bash -c \
    "ldd '$tmp/consumer/build/ex_shared' | grep -q '$soname => $pfx/lib/$soname'"
check "ina::ina_static links no libina.so" bash -c \
    "! ldd '$tmp/consumer/build/ex_static' | grep -q libina.so"
check "find_package(ina $major.$((minor + 1))) refuses version $ver" bash -c \
    "sed 's/find_package(ina $major.$minor /find_package(ina $major.$((minor + 1)) /' '$tmp/consumer/CMakeLists.txt' >'$tmp/v.txt' &&
     mkdir -p '$tmp/v' && cp '$tmp/v.txt' '$tmp/v/CMakeLists.txt' &&
     ! cmake -S '$tmp/v' -B '$tmp/v/build' -DCMAKE_PREFIX_PATH='$pfx' >/dev/null 2>&1"

# ---- 3. The three programs are one job of 3 ranks against a switch ----------------------
start_switch "$tmp/sw.err"
export INA_JOB=install-test INA_WORLD_SIZE=3
INA_RANK=0 LD_LIBRARY_PATH=$root/lib timeout 60 "$tmp/ex_pc" >"$tmp/r0" 2>&1 &
p0=$!
INA_RANK=1 timeout 60 "$tmp/consumer/build/ex_shared" >"$tmp/r1" 2>&1 &
p1=$!
INA_RANK=2 timeout 60 "$tmp/consumer/build/ex_static" >"$tmp/r2" 2>&1
r2=$?
wait $p0; r0=$?
wait $p1; r1=$?
check "pkg-config build, ina::ina and ina::ina_static builds all exit 0" test "$r0$r1$r2" = 000
for r in 0 1 2; do
    check "rank $r got the sum" grep -q "rank $r of 3: grad\[0\] = 3 (want 3): ok" "$tmp/r$r"
done
stop_switch
check "the switch saw the job end cleanly" grep -q "jobs_ended  *1" "$tmp/sw.err"

# ---- 4. Uninstall removes every installed file ------------------------------------------
bash "$SRC/scripts/uninstall.sh" "$manifest" >"$tmp/uninstall.log"
check "uninstall.sh exits 0" test $? -eq 0
left=$(find "$pfx" -type f -o -type l)
check "uninstall leaves no file in the prefix${left:+ (left: $left)}" test -z "$left"
check "uninstall removes lib/cmake/ina" test ! -e "$pfx/lib/cmake/ina"

finish test_install
