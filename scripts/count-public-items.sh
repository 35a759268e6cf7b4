#!/usr/bin/env bash
# Counts the public items of `microbatch` at the crate root and module level:
# types (struct, enum, union), traits, functions, constants, statics, type
# aliases and macros whose parent is a module, each reachable path counted
# once (an item re-exported at the root counts at both paths). Modules,
# methods, associated items, fields, variants and impls are not counted.
#
#   scripts/count-public-items.sh            # the total, all features
#   scripts/count-public-items.sh --list     # one path a line, then the total
#   scripts/count-public-items.sh --list --no-default-features   # other features
#
# Extra arguments go to `cargo public-api` (default `--all-features`). It
# needs what scripts/public-api.sh installs (cargo-public-api and the pinned
# nightly; run that once first). MANIFEST=other/Cargo.toml counts another
# checkout (with CARGO_TARGET_DIR set to keep its target dir clean).
set -euo pipefail
cd "$(dirname "$0")/.."
manifest="${MANIFEST:-Cargo.toml}"

list=false
args=()
for a in "$@"; do
    if [ "$a" = "--list" ]; then list=true; else args+=("$a"); fi
done
[ ${#args[@]} -gt 0 ] || args=(--all-features)

api="$(cargo "+${PUBLIC_API_TOOLCHAIN:-nightly-2026-05-20}" public-api --manifest-path "$manifest" --omit blanket-impls,auto-trait-impls,auto-derived-impls "${args[@]}")"

items="$(printf '%s\n' "$api" | awk '
    # The modules first: an item counts when its parent path is a module.
    /^pub mod / { mods[$3] = 1; next }
    { lines[NR] = $0 }
    END {
        for (i in lines) {
            line = lines[i]
            sub(/^(#\[[^]]*\] )+/, "", line)            # attributes such as #[non_exhaustive]
            if (line !~ /^pub ((const|unsafe|async|extern "[^"]*") )*(struct|enum|union|trait|fn|const|static|type|macro) /) continue
            n = split(line, w, " ")
            k = 2                                      # skip qualifiers: const fn, unsafe fn
            while (k < n && w[k] ~ /^(const|unsafe|async|extern)$/ && w[k + 1] ~ /^(fn|unsafe|async|extern|"[^"]*")$/) k++
            while (w[k] ~ /^"/) k++                     # an ABI string
            kind = w[k]
            rest = line
            for (j = 1; j <= k; j++) sub(/^[^ ]+ /, "", rest)
            if (kind == "static") sub(/^mut /, "", rest)
            sub(/\(.*$/, "", rest)                     # a signature
            while (rest ~ /<[^<>]*>/) sub(/<[^<>]*>/, "", rest)   # generics, in the path too
            split(rest, t, " ")
            path = t[1]
            sub(/:$/, "", path)                        # `NAME: Type` of constants, supertraits
            parent = path; sub(/::[^:]+$/, "", parent)
            if (parent in mods) print kind " " path
        }
    }' | sort -u)"

if $list; then printf '%s\n' "$items"; fi
printf '%s\n' "$items" | grep -c . || true
