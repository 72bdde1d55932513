#!/usr/bin/env bash
# The long campaigns that CI keeps short versions of, in one script. Its last run is recorded in
# BENCHMARKS.md ("Reliability" and "Scene families"), with the date, machine and build.
#
#   scripts/long-checks.sh [STEP ...]     (default: every step but gpu; a log per step in
#                                          target/long-checks/)
#
# Steps:
#   soak     ten minutes of audio through replay and the daemon (tests/soak.rs, SOAK_SECONDS=600),
#            then a day of audio through both (scripts/day_soak.sh; about 40 minutes)
#   fuzz     ten million fuzz cases over the parsers (tests/fuzz.rs, FUZZ_CASES=1430000 per target)
#   trials   every family, 20 scenes, seeds 1 and 2 (`sonotrack trial`; JSON in the log folder)
#   qemu     the whole unit suite on aarch64 under qemu-aarch64 (needs root: cross toolchain)
#   install  the README's install line, as written (`cargo install --locked --path .`)
#   gpu      on a machine with a CUDA device: the parity tests and the curves search's ROC
#            (tests/parity.rs and tests/tbd_roc.rs, both ignored elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
out=target/long-checks
mkdir -p "$out"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(soak fuzz trials qemu install)

families="pass-through manoeuvre faults crossing weak-source compact-ring distributed-room
    line-room soundbar towed-line two-array noise-only"

run_step() {
    local name=$1 t=$SECONDS
    echo "== $name (log: $out/$name.log)"
    "step_$name" > "$out/$name.log" 2>&1
    echo "-- $name: $((SECONDS - t)) s"
}

step_soak() {
    SOAK_SECONDS=600 cargo test --release --test soak -- --nocapture
    cargo build --release
    SONOTRACK=target/release/sonotrack scripts/day_soak.sh
}

step_fuzz() {
    FUZZ_CASES=1430000 cargo test --release --test fuzz -- --nocapture
}

step_trials() {
    cargo build --release
    for seed in 1 2; do
        for f in $families; do
            target/release/sonotrack -q trial --family "$f" --runs 20 --seed "$seed" \
                --backend cpu --no-progress --json "$out/trial-$f-$seed.json"
        done
    done
}

step_qemu() {
    scripts/build-aarch64.sh --install-deps
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null
    RUSTC=/usr/bin/rustc cargo test --lib --release --target aarch64-unknown-linux-gnu \
        --target-dir target/board-test --no-run 2>&1 | tee target/board-test.log
    local bin
    bin=$(grep -m1 -o 'target/board-test/aarch64-unknown-linux-gnu/release/deps/sonotrack-[0-9a-f]*' \
        target/board-test.log | head -1)
    # (The loader must come from the same glibc build as libc.so.6: see .ci/run.)
    local root=/usr/aarch64-linux-gnu
    [ -e /lib/ld-linux-aarch64.so.1 ] && root=/
    qemu-aarch64-static -L "$root" "$bin" --test-threads 2
}

step_install() {
    CARGO_TARGET_DIR=target cargo install --locked --path .
    "${CARGO_HOME:-$HOME/.cargo}/bin/sonotrack" --version
}

step_gpu() {
    cargo test --release --test parity -- --ignored --test-threads=1 --nocapture
    cargo test --release --test tbd_roc -- --ignored --nocapture
}

for s in "${steps[@]}"; do
    declare -F "step_$s" >/dev/null || { echo "unknown step $s" >&2; exit 2; }
    run_step "$s"
done
echo "== long checks passed: ${steps[*]}"
