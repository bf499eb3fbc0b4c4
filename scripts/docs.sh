#!/usr/bin/env bash
# Builds the DocC documentation of the public modules, failing on any warning.
# Symbol graphs come from a build of its own (.build-docs), so they exist even when the main build is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
graphs="$PWD/.build-docs/symbol-graphs"
mkdir -p "$graphs"
swift build --scratch-path .build-docs --target EntityStoreSync \
    -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$graphs"
mkdir -p docs-out
for module in LMDB SectionedDiff EntityStore EntityStoreSync; do
    dir=".build-docs/graphs-$module"
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$graphs/$module".symbols.json "$dir/"
    for extension in "$graphs/$module"@*.symbols.json; do
        [ -e "$extension" ] && cp "$extension" "$dir/"
    done
    docc convert "Sources/$module/$module.docc" --additional-symbol-graph-dir "$dir" \
        --output-path "docs-out/$module.doccarchive" --fallback-display-name "$module" \
        --fallback-bundle-identifier "org.entitystore.$module" --warnings-as-errors \
        --experimental-documentation-coverage --coverage-summary-level detailed > /dev/null
    python3 scripts/doc-coverage.py "$module" "docs-out/$module.doccarchive/documentation-coverage.json"
done
echo "documentation in docs-out/"
