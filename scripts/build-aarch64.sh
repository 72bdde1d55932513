#!/usr/bin/env bash
# Build the board binary: aarch64, live capture on, runs on JetPack 5 (glibc 2.31) and 6.
#
#   scripts/build-aarch64.sh            -> target/board/aarch64-unknown-linux-gnu/release/sonotrack
#
# Needs (Debian 12, as root: scripts/build-aarch64.sh --install-deps installs them):
#   dpkg --add-architecture arm64; apt-get install rustc-web cargo-web libstd-rust-web-dev:arm64
#   gcc-aarch64-linux-gnu libc6-dev-arm64-cross libasound2-dev:arm64 binutils-aarch64-linux-gnu
#   pip install cargo-zigbuild ziglang
# Debian's rustc carries the arm64 standard library; zig links against glibc 2.31 symbols.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--install-deps" ]]; then
    dpkg --add-architecture arm64
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc-web cargo-web \
        libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
        libasound2-dev:arm64 binutils-aarch64-linux-gnu python3-pip >/dev/null
    command -v cargo-zigbuild >/dev/null || pip install --quiet --break-system-packages cargo-zigbuild ziglang 2>/dev/null \
        || pip install --quiet cargo-zigbuild ziglang
fi

export RUSTC=/usr/bin/rustc
# Debian's arm64 libasound asks for newer glibc symbols than the board's; the board's own
# libasound is what loads at run time.
export RUSTFLAGS="-C link-arg=-Wl,--allow-shlib-undefined"
export PKG_CONFIG_ALLOW_CROSS=1
export PKG_CONFIG_PATH=/usr/lib/aarch64-linux-gnu/pkgconfig
cargo zigbuild --release --features capture --target aarch64-unknown-linux-gnu.2.31 \
    --target-dir target/board
out=target/board/aarch64-unknown-linux-gnu/release/sonotrack
objdump=$(command -v aarch64-linux-gnu-objdump || command -v objdump)
newest=$("$objdump" -T "$out" | grep -o 'GLIBC_[0-9.]*' | sort -t. -k1,1 -k2,2n -V | tail -1)
echo "built $out (newest glibc symbol: $newest)"
if [[ "$(printf '%s\n%s\n' "$newest" GLIBC_2.31 | sort -V | tail -1)" != "GLIBC_2.31" ]]; then
    echo "error: $out needs $newest, newer than JetPack 5's glibc 2.31" >&2
    exit 1
fi
