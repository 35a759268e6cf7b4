#!/usr/bin/env bash
# Coverage-guided fuzzing of the public API (fuzz/, cargo-fuzz, libFuzzer):
# builds every target, then runs each for N seconds (default 30) from its
# checked-in seed corpus, and fails if any target finds a crash, a broken
# invariant, a hang over 10 s or an allocation over 4 GiB.
#
#   scripts/fuzz.sh          # 30 s a target
#   scripts/fuzz.sh 10       # 10 s a target (what CI runs: the seeds and a little more)
#   scripts/fuzz.sh 600      # the long run: 10 minutes a target
#   scripts/fuzz.sh 60 plan  # some targets only
#
# Needs the pinned nightly (FUZZ_TOOLCHAIN) and cargo-fuzz; .ci/run installs
# both. New corpus entries go to fuzz/corpus/<target>/ next to the seeds
# (ignored by git); a crash leaves its input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLCHAIN="${FUZZ_TOOLCHAIN:-nightly-2026-05-20}"
SECONDS_EACH="${1:-30}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(pack partition plan cost calibrator serde balance_input)
fi

cargo "+$TOOLCHAIN" fuzz build
failed=()
for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    echo "==> fuzz $t for ${SECONDS_EACH}s"
    if ! cargo "+$TOOLCHAIN" fuzz run "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -malloc_limit_mb=4096 \
        -timeout=10 -print_final_stats=1 2>"fuzz/$t.log"; then
        grep -E "invariant \[|panicked at|ERROR: |SUMMARY" "fuzz/$t.log" | head -5 >&2 || true
        failed+=("$t")
    fi
    grep -E "stat::number_of_executed_units" "fuzz/$t.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzzing found crashes in: ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/<target>.log)" >&2
    exit 1
fi
echo "fuzzing: no crash in ${TARGETS[*]} (${SECONDS_EACH}s each)"
