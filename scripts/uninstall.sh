#!/usr/bin/env bash
# uninstall.sh [MANIFEST]: remove the files that the last `cmake --install` of a build
# installed, as listed in its install_manifest.txt (default build/install_manifest.txt),
# each under $DESTDIR if set (the manifest does not record DESTDIR); then ina's own
# directories (.../cmake/ina, .../dist-packages/ina) if that left them empty.
set -euo pipefail
exec </dev/null
manifest=${1:-build/install_manifest.txt}
if [ ! -f "$manifest" ]; then
    echo "uninstall: $manifest not found: nothing was installed from this build"
    exit 0
fi
n=0
while IFS= read -r f || [ -n "$f" ]; do
    [ -n "$f" ] || continue
    f=${DESTDIR:-}$f
    if [ -e "$f" ] || [ -L "$f" ]; then
        rm -f -- "$f"
        n=$((n + 1))
    fi
done <"$manifest"
# Deepest first, so that a package's subdirectories go before it.
while IFS= read -r f || [ -n "$f" ]; do [ -n "$f" ] && dirname -- "${DESTDIR:-}$f"; done <"$manifest" |
    sort -ru | while IFS= read -r d; do
        case $d in
        */cmake/ina | */dist-packages/ina | */dist-packages/ina/*) rmdir -- "$d" 2>/dev/null || true ;;
        esac
    done
echo "uninstall: removed $n files listed in $manifest${DESTDIR:+ under $DESTDIR}"
