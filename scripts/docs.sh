#!/usr/bin/env bash
# Builds the DocC documentation of the public modules, failing on any warning.
# Symbol graphs are extracted from the modules of the ordinary debug build (after `make test` it is up to date, so
# nothing is compiled again; CI runs this right after the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --target EntityStoreSync
modules="$(swift build --show-bin-path)/Modules"
graphs="$PWD/.build/symbol-graphs"
rm -rf "$graphs" && mkdir -p "$graphs" docs-out
for module in LMDB SectionedDiff EntityStore EntityStoreSync; do
    dir="$graphs/$module"
    mkdir -p "$dir"
    # EntityStore re-exports SectionedDiff's change types, and its articles link to them.
    swift-symbolgraph-extract -module-name "$module" -I "$modules" -target "$(uname -m)-unknown-linux-gnu" \
        -output-dir "$dir" -minimum-access-level public -experimental-allowed-reexported-modules=SectionedDiff \
        -Xcc -fmodule-map-file=Sources/CLMDB/module.modulemap \
        -Xcc -fmodule-map-file=Sources/CLibPQ/module.modulemap -Xcc -I"$(pkg-config --variable=includedir libpq)"
    docc convert "Sources/$module/$module.docc" --additional-symbol-graph-dir "$dir" \
        --output-path "docs-out/$module.doccarchive" --fallback-display-name "$module" \
        --fallback-bundle-identifier "org.entitystore.$module" --warnings-as-errors \
        --experimental-documentation-coverage --coverage-summary-level detailed > /dev/null
    python3 scripts/doc-coverage.py "$module" "docs-out/$module.doccarchive/documentation-coverage.json"
done
echo "documentation in docs-out/"
