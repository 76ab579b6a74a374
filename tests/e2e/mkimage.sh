#!/bin/sh
# Build the e2e test images from Debian's busybox-static without root:
#   mkimage.sh rootfs OUT.ext4     a tiny root: busybox and its applet links
#   mkimage.sh workspace OUT.ext4  a small /workspace lower layer
# (a directory turned into ext4 with mkfs.ext4 -d).
set -eu
kind=$1 out=$2
busybox=${BUSYBOX:-/bin/busybox}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case "$kind" in
rootfs)
	if ! "$busybox" true >/dev/null 2>&1; then
		echo "mkimage.sh: $busybox missing: apt-get install busybox-static" >&2
		exit 1
	fi
	mkdir -p "$work/bin" "$work/sbin" "$work/usr/bin" "$work/usr/sbin" "$work/etc" "$work/root" \
		"$work/proc" "$work/sys" "$work/dev" "$work/tmp" "$work/run" "$work/workspace" "$work/var/tmp"
	cp "$busybox" "$work/bin/busybox"
	for applet in $("$busybox" --list-full); do
		[ "$applet" = bin/busybox ] && continue
		mkdir -p "$work/$(dirname "$applet")"
		ln -sf /bin/busybox "$work/$applet"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$work/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/etc/group"
	printf '127.0.0.1 localhost box\n' >"$work/etc/hosts"
	size=64M
	;;
workspace)
	printf 'hello from the workspace\n' >"$work/README"
	mkdir -p "$work/src"
	printf 'print(1+1)\n' >"$work/src/app.py"
	size=16M
	;;
*)
	echo "usage: mkimage.sh rootfs|workspace OUT.ext4" >&2
	exit 2
	;;
esac
rm -f "$out.tmp"
mkfs.ext4 -q -F -E root_owner=0:0 -O ^has_journal -d "$work" "$out.tmp" "$size"
mv "$out.tmp" "$out"
