#!/usr/bin/env bash
# Package the board binary as a .deb: the binary, the systemd unit, a default configuration in
# /etc/sonotrack, the board and array files; a `sonotrack` system user is created on install
# and the service is enabled but not started (edit /etc/sonotrack/sonotrack.toml first).
#
#   scripts/make-deb.sh [BINARY] [ARCH]   (defaults: the aarch64 build, arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/board/aarch64-unknown-linux-gnu/release/sonotrack}
arch=${2:-arm64}
version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
root=target/deb/sonotrack_${version}_${arch}
rm -rf "$root"
install -D -m 0755 "$bin" "$root/usr/bin/sonotrack"
# Ship it without debug sections (the unstripped build stays in target/ for symbolising).
case "$arch" in
    arm64) strip=$(command -v aarch64-linux-gnu-strip || true) ;;
    *) strip=$(command -v strip || true) ;;
esac
if [ -n "$strip" ]; then
    "$strip" --strip-debug "$root/usr/bin/sonotrack"
else
    echo "warning: no strip for $arch; the packaged binary keeps its debug sections" >&2
fi
install -D -m 0644 systemd/sonotrack.service "$root/lib/systemd/system/sonotrack.service"
install -D -m 0644 systemd/sonotrack.service.d/local.conf.sample \
    "$root/usr/share/doc/sonotrack/local.conf.sample"
install -D -m 0644 packaging/sonotrack.toml "$root/etc/sonotrack/sonotrack.toml"
mkdir -p "$root/usr/share/sonotrack"
cp -r boards "$root/usr/share/sonotrack/"
install -D -m 0644 README.md "$root/usr/share/doc/sonotrack/README.md"
mkdir -p "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<CONTROL
Package: sonotrack
Version: $version
Architecture: $arch
Maintainer: sonotrack developers <sonotrack@localhost>
Depends: libc6 (>= 2.31), libasound2, adduser
Section: science
Priority: optional
Description: acoustic source tracking daemon for hydrophone and microphone arrays
 GCC-PHAT time differences of arrival and a multi-model particle filter (CUDA on
 NVIDIA Jetson boards, CPU elsewhere), with positions over serial or UDP.
CONTROL
echo /etc/sonotrack/sonotrack.toml > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if ! getent passwd sonotrack >/dev/null; then
        adduser --system --group --no-create-home --home /nonexistent sonotrack
    fi
    for g in audio dialout video render; do
        getent group "$g" >/dev/null && adduser sonotrack "$g" >/dev/null || true
    done
    if command -v deb-systemd-helper >/dev/null; then
        deb-systemd-helper enable sonotrack.service >/dev/null || true
    elif command -v systemctl >/dev/null; then
        systemctl enable sonotrack.service >/dev/null 2>&1 || true
    fi
    command -v systemctl >/dev/null && systemctl daemon-reload >/dev/null 2>&1 || true
    echo "sonotrack: edit /etc/sonotrack/sonotrack.toml, then: systemctl start sonotrack"
fi
POSTINST
cat > "$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ "$1" = remove ] && command -v systemctl >/dev/null; then
    systemctl stop sonotrack.service >/dev/null 2>&1 || true
fi
PRERM
cat > "$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ "$1" = purge ]; then
    command -v deb-systemd-helper >/dev/null && deb-systemd-helper purge sonotrack.service >/dev/null || true
    rm -rf /var/cache/sonotrack
fi
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
dpkg-deb --root-owner-group --build "$root" "target/deb/sonotrack_${version}_${arch}.deb"
