#!/usr/bin/env bash
# Package the board binary as a .deb: the binary, the systemd unit, a configuration template in
# /etc/sonotrack, the board and array files, copyright (with the licences of the crates linked
# in), changelog and md5sums. On install a `sonotrack` system user is created, the board is
# recognised (/proc/device-tree/model) and /etc/sonotrack/board.toml written to include its
# file, and the service is enabled but not started: it refuses to start until
# /etc/sonotrack/sonotrack.toml describes the array. An upgrade restarts a running service.
#
#   scripts/make-deb.sh [BINARY] [ARCH]   (defaults: the aarch64 build, arm64)
#
# The binary must have live capture (the `capture` feature): a board package without it could
# only replay files.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/board/aarch64-unknown-linux-gnu/release/sonotrack}
arch=${2:-arm64}
version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
root=target/deb/sonotrack_${version}_${arch}
if ! grep -qa "(live capture: yes)" "$bin"; then
    echo "error: $bin was built without live capture; build it with --features capture" \
        "(scripts/build-aarch64.sh does)" >&2
    exit 1
fi
rm -rf "$root"
install -D -m 0755 "$bin" "$root/usr/bin/sonotrack"
# Ship it without debug sections (the unstripped build stays in target/ for symbolising).
case "$arch" in
    arm64) strip=$(command -v aarch64-linux-gnu-strip || true) ;;
    *) strip=$(command -v strip || true) ;;
esac
if [ -n "$strip" ]; then
    "$strip" --strip-unneeded --remove-section=.comment --remove-section=.note \
        "$root/usr/bin/sonotrack"
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
install -D -m 0644 docs/stream.md "$root/usr/share/doc/sonotrack/stream.md"
install -D -m 0644 docs/stream.schema.json "$root/usr/share/doc/sonotrack/stream.schema.json"
doc="$root/usr/share/doc/sonotrack"
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: sonotrack"
    echo "Comment: /usr/bin/sonotrack is statically linked with these Rust crates, each under"
    echo " its own licence (from their Cargo metadata):"
    cargo tree -e normal --features capture --prefix none --format "{p}: {l}" \
        | sed 's/ (\*)//; s/ (proc-macro)//; s/^/ /' | grep -v "^ sonotrack v" | sort -u
    cat <<COPYRIGHT

Files: *
Copyright: 2026 the sonotrack developers
License: proprietary
 All rights reserved. No licence to copy, modify or distribute has been granted
 yet; ask the developers.
COPYRIGHT
} > "$doc/copyright"
printf '%s\n' \
    "sonotrack ($version) unstable; urgency=medium" "" \
    "  * Release $version. Changes: the git history of the repository." "" \
    " -- sonotrack developers <sonotrack@example.org>  $(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")" \
    | gzip -9n > "$doc/changelog.gz"
mkdir -p "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<CONTROL
Package: sonotrack
Version: $version
Architecture: $arch
Maintainer: sonotrack developers <sonotrack@example.org>
Depends: libc6 (>= 2.31), libasound2, adduser
Installed-Size: $(du -sk "$root" | cut -f1)
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
    # The board's hardware file, chosen once (never overwritten: edit it if the guess is wrong).
    if [ ! -e /etc/sonotrack/board.toml ]; then
        model=
        if [ -r /proc/device-tree/model ]; then model=$(tr -d '\000' < /proc/device-tree/model); fi
        case "$model" in
            *"AGX Orin"*) board=agx-orin ;;
            *"Orin NX"*) board=orin-nx ;;
            *"Orin Nano"*) board=orin-nano ;;
            *"Xavier NX"*) board=xavier-nx ;;
            *) board= ;;
        esac
        {
            echo "# Written by the sonotrack package for: ${model:-no Jetson model found}"
            if [ -n "$board" ]; then
                echo "include = [\"/usr/share/sonotrack/boards/$board.toml\"]"
            else
                echo "# No supported Jetson recognised: no board file (the backend is chosen at start)."
                echo "# Supported: agx-orin, orin-nx, orin-nano, xavier-nx in /usr/share/sonotrack/boards."
            fi
        } > /etc/sonotrack/board.toml
    fi
    command -v systemctl >/dev/null && systemctl daemon-reload >/dev/null 2>&1 || true
    if [ -n "$2" ]; then
        # An upgrade: a running service restarts on the new binary.
        if command -v deb-systemd-invoke >/dev/null; then
            deb-systemd-invoke try-restart sonotrack.service >/dev/null 2>&1 || true
        elif command -v systemctl >/dev/null; then
            systemctl try-restart sonotrack.service >/dev/null 2>&1 || true
        fi
    else
        echo "sonotrack: describe your array in /etc/sonotrack/sonotrack.toml, then: systemctl start sonotrack"
    fi
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
    rm -f /etc/sonotrack/board.toml
fi
POSTRM
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort \
    | xargs md5sum > DEBIAN/md5sums)
dpkg-deb --root-owner-group --build "$root" "target/deb/sonotrack_${version}_${arch}.deb"
