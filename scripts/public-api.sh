#!/usr/bin/env bash
# The public-API snapshot: the crate's whole public surface (every item at
# every path it is reachable by, methods, fields, variants, trait impls with
# their methods, auto traits; blanket impls left out), with all features, as
# `cargo public-api` lists it, checked in as tests/public-api.txt so that any
# change of the surface shows in review and is deliberate.
#
#   scripts/public-api.sh          # check: fail with a diff when the surface changed
#   scripts/public-api.sh --bless  # regenerate tests/public-api.txt after a deliberate change
#
# It installs what it needs when missing: the pinned nightly toolchain (for
# rustdoc's JSON output) and the pinned cargo-public-api that reads that
# nightly's JSON format. Move both pins together (cargo-public-api's README
# has the compatibility matrix), then regenerate the snapshot with --bless.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLCHAIN="${PUBLIC_API_TOOLCHAIN:-nightly-2026-05-20}"
VERSION="0.52.0"
SNAPSHOT="tests/public-api.txt"

if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$TOOLCHAIN" --profile minimal
fi
if [ "$(cargo public-api --version 2>/dev/null)" != "cargo-public-api $VERSION" ]; then
    cargo install --locked cargo-public-api --version "$VERSION"
fi

current="$(mktemp)"
trap 'rm -f "$current"' EXIT
cargo "+$TOOLCHAIN" public-api --all-features --omit blanket-impls --color never >"$current"

if [ "${1:-}" = "--bless" ]; then
    cp "$current" "$SNAPSHOT"
    echo "wrote $SNAPSHOT ($(wc -l <"$SNAPSHOT") lines)"
elif ! diff -u "$SNAPSHOT" "$current"; then
    echo "The public API differs from $SNAPSHOT (- snapshot, + now)." >&2
    echo "If the change is deliberate, run scripts/public-api.sh --bless and commit the file." >&2
    exit 1
else
    echo "public API unchanged ($(wc -l <"$SNAPSHOT") lines in $SNAPSHOT)"
fi
