#!/usr/bin/env bash
# Coverage-guided fuzzing of the public API (fuzz/, cargo-fuzz, libFuzzer):
# builds every target, then runs each for N seconds (default 30) from its
# checked-in seed corpus, and fails if any target finds a crash, a broken
# invariant, a hang over 10 s or an allocation over 4 GiB. libFuzzer replays
# the whole corpus before it looks at the clock, so every seed (every past
# finding) runs whatever N is.
#
#   scripts/fuzz.sh          # 30 s a target
#   scripts/fuzz.sh 10       # 10 s a target (what CI runs: the seeds and a little more)
#   scripts/fuzz.sh 600      # the long run: 10 minutes a target
#   scripts/fuzz.sh 60 plan  # some targets only
#
# FUZZ_JOBS=N runs N targets at a time (default 1; one libFuzzer process is
# one core: CI runs 2 on its 2 cores). FUZZ_BUILD="..." adds options of
# `cargo fuzz build` (given to `cargo fuzz run` too, else it rebuilds).
#
# Needs the pinned nightly (FUZZ_TOOLCHAIN) and cargo-fuzz; .ci/run installs
# both. New corpus entries go to fuzz/corpus/<target>/ next to the seeds
# (ignored by git); a crash leaves its input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLCHAIN="${FUZZ_TOOLCHAIN:-nightly-2026-05-20}"
JOBS="${FUZZ_JOBS:-1}"
read -r -a BUILD <<<"${FUZZ_BUILD:-}"
SECONDS_EACH="${1:-30}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(pack partition plan cost calibrator serde balance_input)
fi

cargo "+$TOOLCHAIN" fuzz build ${BUILD[@]+"${BUILD[@]}"}

# One target: its output in fuzz/<target>.log, its exit status in fuzz/<target>.rc.
fuzz_one() {
    local t="$1" rc=0
    mkdir -p "fuzz/corpus/$t"
    cargo "+$TOOLCHAIN" fuzz run ${BUILD[@]+"${BUILD[@]}"} "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -malloc_limit_mb=4096 \
        -timeout=10 -print_final_stats=1 >"fuzz/$t.log" 2>&1 || rc=$?
    echo "$rc" >"fuzz/$t.rc"
}

running=0
for t in "${TARGETS[@]}"; do
    if [ "$running" -ge "$JOBS" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    echo "==> fuzz $t for ${SECONDS_EACH}s"
    rm -f "fuzz/$t.rc"
    fuzz_one "$t" &
    running=$((running + 1))
done
wait

# The results in the targets' order, whatever order they ended in.
failed=()
for t in "${TARGETS[@]}"; do
    if [ "$(cat "fuzz/$t.rc" 2>/dev/null || echo missing)" != 0 ]; then
        echo "==> $t failed:" >&2
        grep -E "invariant \[|panicked at|ERROR: |SUMMARY" "fuzz/$t.log" | head -5 >&2 || true
        failed+=("$t")
    fi
    echo "$t: $(grep -E "stat::number_of_executed_units|INITED" "fuzz/$t.log" | tr -s ' \n' ' ' || true)"
    rm -f "fuzz/$t.rc"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzzing found crashes in: ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/<target>.log)" >&2
    exit 1
fi
echo "fuzzing: no crash in ${TARGETS[*]} (${SECONDS_EACH}s each, $JOBS at a time)"
