#!/usr/bin/env bash
# Make a local Debian bookworm base image with python3 and venv, with no registry:
# debootstrap a minimal root filesystem from Debian's repositories and `docker import` it.
# Usage: deploy/backends/make-base-image.sh [IMAGE]   (default protofed-base:bookworm)
set -euo pipefail
IMAGE="${1:-protofed-base:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE already exists"
    exit 0
fi
for tool in debootstrap docker; do
    command -v "$tool" >/dev/null || { echo "error: $tool is not installed (apt-get install $tool)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "error: debootstrap needs root" >&2; exit 1; }

ROOTFS="$(mktemp -d /tmp/protofed-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
echo "debootstrap bookworm into $ROOTFS (about a minute)"
debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >/dev/null
echo "installing python3 and python3-venv into the root filesystem"
chroot "$ROOTFS" apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null 2>&1 \
    || { echo "error: apt-get install in the chroot failed" >&2; exit 1; }
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/*
echo "importing as $IMAGE"
tar -C "$ROOTFS" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$IMAGE" >/dev/null
echo "base image $IMAGE ready"
