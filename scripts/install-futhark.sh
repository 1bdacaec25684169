#!/usr/bin/env bash
# Obtain the Futhark compiler for this project, with no system-wide change.
#
#   scripts/install-futhark.sh            # prints the path of a usable `futhark` on its last line
#
# Order: $FUTHARK, then `futhark` on PATH, then the project-local install in .tools/ (made here if
# missing). The local install takes Debian's `futhark` package and the runtime libraries it links
# (apt-get download + dpkg -x into .tools/futhark/root). Debian's binary is built against a newer C
# library than bookworm's, so .tools/bin/futhark runs it through the package set's own ld-linux with
# --library-path: only futhark itself sees those libraries, and the children it spawns (cc, nvcc)
# keep the host's. Elsewhere it says how to get the official release.
set -euo pipefail

MIN_VERSION=${FUTHARK_MIN_VERSION:-0.25.0}   # the oldest compiler whose manifests pybridge reads
SUITE=${FUTHARK_DEBIAN_SUITE:-sid}           # the Debian suite carrying futhark 0.25.32
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${PYBRIDGE_TOOLS:-$ROOT/.tools}
WRAPPER=$TOOLS/bin/futhark

say() { echo "install-futhark: $*" >&2; }

version_of() {  # "0.25.32" from `futhark --version`, or nothing
  "$1" --version 2>/dev/null | sed -n 's/^Futhark \([0-9][0-9.]*\).*/\1/p' | head -n1 | sed 's/\.$//'
}

new_enough() {  # version >= MIN_VERSION
  [ -n "$1" ] && [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$1" | sort -V | head -n1)" = "$MIN_VERSION" ]
}

accept() {  # use $1 if it runs and is new enough
  local v
  v=$(version_of "$1")
  if new_enough "$v"; then
    say "using Futhark $v at $1 (minimum $MIN_VERSION)"
    echo "$1"
    exit 0
  fi
  [ -n "$v" ] && say "$1 is Futhark $v, older than the minimum $MIN_VERSION; ignoring it"
  return 0
}

if [ -n "${FUTHARK:-}" ] && [ "${FUTHARK}" != futhark ]; then
  exe=$(command -v "$FUTHARK" || true)
  [ -n "$exe" ] || { say "FUTHARK=$FUTHARK does not exist"; exit 1; }
  accept "$exe"
  say "FUTHARK=$FUTHARK is not a usable Futhark >= $MIN_VERSION"; exit 1
fi
if exe=$(command -v futhark 2>/dev/null); then accept "$exe"; fi
[ -x "$WRAPPER" ] && accept "$WRAPPER"

release_hint() {
  say "get the official release from https://futhark-lang.org/releases/ (futhark-<version>-linux-x86_64.tar.xz),"
  say "unpack it and put its bin/ on PATH, or pass FUTHARK=/path/to/futhark."
}

if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ] || ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  say "no project-local install on this system (it needs Debian/Ubuntu x86-64 with apt-get and dpkg)."
  release_hint; exit 1
fi

say "installing Debian's futhark package ($SUITE) into $TOOLS (no system-wide change)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb http://deb.debian.org/debian $SUITE main" >"$work/sources.list"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
apt_opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1"
          -o "APT::Architecture=amd64" -o "APT::Architectures=amd64")
# Ubuntu hosts lack Debian's archive key: trust the index only there, still over Debian's mirror.
[ -f "$keyring" ] && apt_opts+=(-o "Dir::Etc::trusted=$keyring") || {
  echo "deb [trusted=yes] http://deb.debian.org/debian $SUITE main" >"$work/sources.list"; }
apt-get "${apt_opts[@]}" -qq update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; say "apt-get update failed"; release_hint; exit 1; }

# futhark plus its runtime libraries and the C library (with its loader) they need.
pkgs=(futhark libc6 libgcc-s1 libgmp10 libffi8 libnuma1 libtinfo6 zlib1g)
pkgs+=($(apt-cache "${apt_opts[@]}" depends futhark 2>/dev/null | sed -n 's/^ *Depends: \(libcmark[^ ]*\)$/\1/p'))
(cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "${pkgs[@]}") >"$work/download.log" 2>&1 \
  || { cat "$work/download.log" >&2; say "apt-get download failed"; release_hint; exit 1; }

rm -rf "$TOOLS/futhark.new"
mkdir -p "$TOOLS/futhark.new/root" "$TOOLS/bin"
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$TOOLS/futhark.new/root"; done
ls "$work"/debs/ >"$TOOLS/futhark.new/PACKAGES"
rm -rf "$TOOLS/futhark" && mv "$TOOLS/futhark.new" "$TOOLS/futhark"

cat >"$WRAPPER" <<'EOF'
#!/bin/sh
# Debian's futhark through its own C library (see scripts/install-futhark.sh); children keep the host's.
here=$(cd "$(dirname "$0")/../futhark/root" && pwd)
lib=$here/usr/lib/x86_64-linux-gnu
[ -e "$lib/ld-linux-x86-64.so.2" ] || lib=$here/lib/x86_64-linux-gnu   # before the merged /usr
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:$here/lib/x86_64-linux-gnu" \
  "$here/usr/bin/futhark" "$@"
EOF
chmod +x "$WRAPPER"
v=$(version_of "$WRAPPER")
if ! new_enough "$v"; then
  say "the installed compiler does not run or is too old (got '${v:-nothing}', need >= $MIN_VERSION)"
  "$WRAPPER" --version >&2 || true
  release_hint; exit 1
fi
say "installed Futhark $v ($(grep -m1 '^futhark_' "$TOOLS/futhark/PACKAGES")) at $WRAPPER"
echo "$WRAPPER"
