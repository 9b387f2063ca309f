#!/usr/bin/env bash
# Builds the codemode container image (executor/deploy/Containerfile) FROM scratch from a release binary, reproducibly.
#
# usage: executor/deploy/build-image.sh [--binary PATH] [--tag TAG] [--oci-archive FILE]
#
# Without --binary it runs `cargo build --release --locked --bin codemode` first. It
# stages <target>/deploy/image/rootfs/ (the binary with its debug sections stripped, the
# shared libraries `ldd` lists at the paths the loader looks for them, Debian's
# tini-static, /etc/passwd and /etc/group with uid 65532), sets every mtime to the last
# commit's time, and builds with podman (or buildah) with --timestamp at that time and no
# identity label, so the same binary on the same Debian gives the same image id. With no
# podman or buildah it stops after staging and says so. It prints the image id.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
binary=""
tag="localhost/codemode:latest"
archive=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --oci-archive) archive="$2"; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--tag TAG] [--oci-archive FILE]" >&2; exit 2 ;;
  esac
done

if [ -z "$binary" ]; then
  echo "build-image: cargo build --release --locked --bin codemode" >&2
  (cd "$root" && cargo build --release --locked --bin codemode)
  binary="$target/release/codemode"
fi
[ -x "$binary" ] || { echo "build-image: no executable at $binary" >&2; exit 1; }

context="$target/deploy/image"
rootfs="$context/rootfs"
rm -rf "$context"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/bin" "$rootfs/etc"

# The binary, without its debug sections (line tables for backtraces stay in the
# release binary you keep; the image needs none).
objcopy --strip-debug "$binary" "$rootfs/usr/local/bin/codemode"

# Exactly the shared libraries the loader resolves for it, and the loader itself.
ldd "$binary" | awk '/=> \// { print $3 } /^[ \t]*\/[^ ]+ \(0x/ { print $1 }' | sort -u | while read -r lib; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
  package="$( (dpkg -S "$lib" || dpkg -S "$(readlink -f "$lib")") 2>/dev/null | head -1 | cut -d: -f1 || true)"
  echo "build-image: $lib (${package:-no Debian package}${package:+ $(dpkg-query -W -f '${Version}' "$package" 2>/dev/null || true)})" >&2
done

# PID 1: Debian's tini-static (0.7 MB, no libraries). From the installed package, or
# downloaded with apt into the staging directory when it is not installed.
tini="/usr/bin/tini-static"
if [ ! -x "$tini" ]; then
  echo "build-image: /usr/bin/tini-static is not installed; apt-get download tini" >&2
  (cd "$context" && apt-get download tini >&2 && dpkg-deb -x tini_*.deb tini-deb && rm -f tini_*.deb)
  tini="$context/tini-deb/usr/bin/tini-static"
fi
cp "$tini" "$rootfs/usr/bin/tini"
echo "build-image: tini $("$tini" --version 2>&1 | head -1)" >&2

printf '%s\n' 'root:x:0:0:root:/nonexistent:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >"$rootfs/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$rootfs/etc/group"
cp "$here/Containerfile" "$context/Containerfile"

# Same inputs, same bytes: fixed modes and times.
epoch="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct)}"
find "$rootfs" -type d -exec chmod 0755 {} +
find "$rootfs" -type f -exec chmod 0644 {} +
chmod 0755 "$rootfs/usr/local/bin/codemode" "$rootfs/usr/bin/tini" "$rootfs"/lib*/ld-linux* "$rootfs"/lib/*/ld-linux* 2>/dev/null || true
find "$context" -exec touch -h -d "@$epoch" {} +

if command -v podman >/dev/null; then builder=podman
elif command -v buildah >/dev/null; then builder=buildah
else
  echo "build-image: neither podman nor buildah is installed: staged $context but built NO image (apt-get install podman)" >&2
  exit 1
fi
echo "build-image: $builder build --timestamp $epoch -t $tag $context" >&2
"$builder" build --quiet --no-cache --timestamp "$epoch" --identity-label=false -f "$context/Containerfile" -t "$tag" "$context" >/dev/null
id="$("$builder" images --no-trunc --format '{{.ID}}' "$tag" | head -1)"
if [ -n "$archive" ]; then
  "$builder" save --format oci-archive -o "$archive" "$tag" >&2 2>/dev/null || "$builder" push "$tag" "oci-archive:$archive"
  echo "build-image: wrote $archive" >&2
fi
echo "build-image: $tag $id ($(du -sh "$rootfs" | cut -f1) staged)" >&2
echo "$id"
