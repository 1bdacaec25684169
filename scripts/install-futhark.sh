#!/usr/bin/env bash
# Obtain the Futhark compiler for this project, with no system-wide change.
#
#   scripts/install-futhark.sh [--log FILE] [--find-only | --force]
#
# Prints the path of a usable `futhark` on its last line (stdout); messages go to stderr (and are
# appended to FILE with --log). --find-only looks but never downloads (exit 1 if nothing is found);
# --force skips the look and installs (`pybridge install-futhark` looks first, in Python, the same
# way). Before downloading it says what and how big. It installs into $PYBRIDGE_TOOLS, else the
# per-user folder of `pybridge install-futhark` (platformdirs' user data folder on Linux,
# ${XDG_DATA_HOME:-~/.local/share}/pybridge/tools), so `make` in a checkout and every installed
# pybridge of this user share one compiler.
#
# Order: $FUTHARK, then `futhark` on PATH (its absolute folders: an empty or relative PATH entry
# would look in the current directory, so this script drops them from PATH first), then the
# checkout's own .tools/ (when this script is a checkout's), then the install folder (made there if
# missing). The install takes Debian's `futhark` package and the runtime libraries it links
# (apt-get download + dpkg -x into $TOOLS/futhark/root). Debian's binary is built against a newer C
# library than bookworm's, so $TOOLS/bin/futhark runs it through the package set's own ld-linux with
# --library-path: only futhark itself sees those libraries, and the children it spawns (cc, nvcc)
# keep the host's. Elsewhere it says how to get the official release.
set -euo pipefail

MIN_VERSION=${FUTHARK_MIN_VERSION:-0.25.0}   # the oldest compiler whose manifests pybridge reads
SUITE=${FUTHARK_DEBIAN_SUITE:-sid}           # the Debian suite carrying futhark 0.25.32
absolute=  # PATH's absolute folders only (bash builtins: nothing here is looked up on PATH yet)
IFS=: read -r -a entries <<<"${PATH:-}"
for d in "${entries[@]}"; do case "$d" in /*) absolute=${absolute:+$absolute:}$d ;; esac; done
export PATH=$absolute
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The per-user install of `pybridge install-futhark` (platformdirs.user_data_dir("pybridge") on Linux).
TOOLS=${PYBRIDGE_TOOLS:-${XDG_DATA_HOME:-${HOME:-/nonexistent}/.local/share}/pybridge/tools}
WRAPPER=$TOOLS/bin/futhark

LOG=
FIND_ONLY=
FORCE=
while [ $# -gt 0 ]; do
  case "$1" in
    --log) LOG=$2; shift 2 ;;
    --find-only) FIND_ONLY=1; shift ;;
    --force) FORCE=1; shift ;;
    *) echo "install-futhark: unknown argument '$1' (expected --log FILE, --find-only or --force)" >&2; exit 2 ;;
  esac
done
if [ -n "$FIND_ONLY" ] && [ -n "$FORCE" ]; then echo "install-futhark: --find-only and --force exclude each other" >&2; exit 2; fi
[ -n "$LOG" ] && : >"$LOG"

say() {
  echo "install-futhark: $*" >&2
  [ -z "$LOG" ] || echo "install-futhark: $*" >>"$LOG"
}

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

if [ -z "$FORCE" ]; then
  if [ -n "${FUTHARK:-}" ] && [ "${FUTHARK}" != futhark ]; then
    exe=$(command -v "$FUTHARK" || true)
    [ -n "$exe" ] || { say "FUTHARK=$FUTHARK does not exist"; exit 1; }
    accept "$exe"
    say "FUTHARK=$FUTHARK is not a usable Futhark >= $MIN_VERSION"; exit 1
  fi
  if exe=$(command -v futhark 2>/dev/null); then accept "$exe"; fi
  [ -f "$ROOT/Makefile" ] && [ -x "$ROOT/.tools/bin/futhark" ] && accept "$ROOT/.tools/bin/futhark"
  [ -x "$WRAPPER" ] && accept "$WRAPPER"
  if [ -n "$FIND_ONLY" ]; then say "no Futhark compiler found (FUTHARK, PATH, $WRAPPER)"; exit 1; fi
fi

release_hint() {
  say "get the official release from https://futhark-lang.org/releases/ (futhark-<version>-linux-x86_64.tar.xz),"
  say "unpack it and put its bin/ on PATH, or pass FUTHARK=/path/to/futhark."
}

if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ] || ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  say "no project-local install on this system (it needs Debian/Ubuntu x86-64 with apt-get and dpkg)."
  release_hint; exit 1
fi

why="no Futhark compiler found"; [ -z "$FORCE" ] || why="installing as asked (--force)"
say "$why: downloading Debian's futhark package ($SUITE) into $TOOLS (no system-wide change)"
say "downloads: Debian's package index (about 10 MB), then futhark and the libraries it runs with (about 14 MB; 80 MB unpacked)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb http://deb.debian.org/debian $SUITE main" >"$work/sources.list"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
apt_opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1"
          -o "APT::Architecture=amd64" -o "APT::Architectures=amd64" -o "Acquire::Languages=none")
# Ubuntu hosts lack Debian's archive key: trust the index only there, still over Debian's mirror.
[ -f "$keyring" ] && apt_opts+=(-o "Dir::Etc::trusted=$keyring") || {
  echo "deb [trusted=yes] http://deb.debian.org/debian $SUITE main" >"$work/sources.list"; }
apt-get "${apt_opts[@]}" -qq update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; say "apt-get update failed"; release_hint; exit 1; }

# futhark plus its runtime libraries and the C library (with its loader) they need.
pkgs=(futhark libc6 libgcc-s1 libgmp10 libffi8 libnuma1 libtinfo6 zlib1g)
pkgs+=($(apt-cache "${apt_opts[@]}" depends futhark 2>/dev/null | sed -n 's/^ *Depends: \(libcmark[^ ]*\)$/\1/p'))
bytes=$(apt-cache "${apt_opts[@]}" show --no-all-versions "${pkgs[@]}" 2>/dev/null | sed -n 's/^Size: //p' | awk '{s += $1} END {print s + 0}')
say "downloading ${#pkgs[@]} packages, $(awk -v b="$bytes" 'BEGIN {printf "%.1f MB", b / 1e6}'): ${pkgs[*]}"
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
