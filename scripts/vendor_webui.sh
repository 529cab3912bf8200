#!/usr/bin/env bash
# Vendor the web UI's JavaScript libraries (bittern/webui/static/vendor/) from the npm
# registry: `npm pack` each pinned package into a temp dir, copy its browser build and
# its licence, and record name, version, licence and sha256 in VENDOR.json. The result
# is committed: tests and users never need npm (no CDN, no internet at run time).
# Run it again only to change a version (edit PACKAGES below).
set -euo pipefail
cd "$(dirname "$0")/.."

# name@version  file-in-package  copied-as
PACKAGES=(
    "@dagrejs/dagre@3.1.3 dist/dagre.min.js dagre.min.js"          # graph layout (bundles @dagrejs/graphlib)
    "@dagrejs/graphlib@4.0.6 - -"                                   # (its licence only: dagre bundles it)
    "uplot@1.6.32 dist/uPlot.iife.min.js uPlot.iife.min.js"        # time-series charts
    "uplot@1.6.32 dist/uPlot.min.css uPlot.min.css"
)
MAX_TOTAL_KB=400  # what ships in the wheel

command -v npm >/dev/null || { echo "vendor_webui: npm is missing (apt-get install npm)" >&2; exit 1; }
out=bittern/webui/static/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
rm -f "$out"/*.js "$out"/*.css "$out"/LICENSE.* "$out"/VENDOR.json

declare -A done_pkgs=()
entries=()
for line in "${PACKAGES[@]}"; do
    read -r spec src dst <<<"$line"
    name=${spec%@*}
    version=${spec##*@}
    dir="$tmp/$(echo "$name" | tr '/@' '__')"
    if [ -z "${done_pkgs[$spec]:-}" ]; then
        mkdir -p "$dir"
        (cd "$dir" && npm pack --silent "$spec" >/dev/null && tar xzf ./*.tgz)
        got=$(node -p "require('$dir/package/package.json').version")
        [ "$got" = "$version" ] || { echo "vendor_webui: $spec: npm gave version $got" >&2; exit 1; }
        licence=$(node -p "require('$dir/package/package.json').license")
        lic_file=$(ls "$dir"/package/LICEN[CS]E* 2>/dev/null | head -1)
        [ -n "$lic_file" ] || { echo "vendor_webui: $spec has no LICENSE file" >&2; exit 1; }
        cp "$lic_file" "$out/LICENSE.$(echo "$name" | tr '/@' '__' | sed 's/^_//').txt"
        done_pkgs[$spec]=$licence
    fi
    [ "$src" = "-" ] && { entries+=("{\"name\": \"$name\", \"version\": \"$version\", \"license\": \"${done_pkgs[$spec]}\", \"file\": null, \"note\": \"bundled in its dependent's build; licence recorded\"}"); continue; }
    cp "$dir/package/$src" "$out/$dst"
    sum=$(sha256sum "$out/$dst" | cut -d' ' -f1)
    size=$(stat -c %s "$out/$dst")
    entries+=("{\"name\": \"$name\", \"version\": \"$version\", \"license\": \"${done_pkgs[$spec]}\", \"file\": \"$dst\", \"from\": \"$src\", \"bytes\": $size, \"sha256\": \"$sum\"}")
done

{
    echo "["
    for i in "${!entries[@]}"; do
        sep=","; [ "$i" = $((${#entries[@]} - 1)) ] && sep=""
        echo "  ${entries[$i]}$sep"
    done
    echo "]"
} >"$out/VENDOR.json"
node -e "JSON.parse(require('fs').readFileSync('$out/VENDOR.json', 'utf8'))"

total_kb=$(( $(cat "$out"/*.js "$out"/*.css | wc -c) / 1024 ))
echo "vendor_webui: $out: ${total_kb} kB of JavaScript and CSS"
[ "$total_kb" -le "$MAX_TOTAL_KB" ] || { echo "vendor_webui: over ${MAX_TOTAL_KB} kB" >&2; exit 1; }
