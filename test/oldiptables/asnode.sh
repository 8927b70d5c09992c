#!/usr/bin/env bash
# asnode.sh DIR CMD...: run CMD as on a node whose iptables is the release
# fetch.sh unpacked into DIR. In a mount namespace of CMD's own, that
# release's xtables multi-binaries, extensions and shared libraries are
# bind-mounted over the machine's, so every process CMD starts (the bench,
# the installer and its agent, both plugins, the floor's bare restore)
# finds that release as `iptables-restore`, as on such a node. A release
# that brings its own glibc (trixie's: its programs need a newer one than
# the machine's) brings it for every program in the namespace, which the
# machine's older-glibc programs run on as they would after an upgrade; one
# that does not (bullseye's) runs on the machine's. Nothing outside the
# namespace changes. `make bench IPTABLES=1.8.7` (or 1.8.11) runs it. The
# machine's own nft then runs on the release's libnftnl: not a native
# nftables node (make refuses NATIVE with IPTABLES).
set -euo pipefail

if [ $# -lt 2 ] || [ ! -x "$1/usr/sbin/xtables-nft-multi" ]; then
	echo "asnode.sh: usage: asnode.sh DIR CMD...; DIR an iptables release unpacked by fetch.sh (make old-iptables, make newer-iptables)" >&2
	exit 2
fi
dir=$(realpath "$1")
shift
exec unshare --mount --propagation private bash -euo pipefail -c '
dir=$1
shift
lib=/usr/lib/x86_64-linux-gnu
# Every pair is resolved before the first mount: from the loader'"'"'s on, a
# program that starts with the release'"'"'s loader and the machine'"'"'s
# glibc (or the reverse) aborts.
pairs=()
for m in xtables-nft-multi xtables-legacy-multi; do
	[ -e "$dir/usr/sbin/$m" ] && [ -e "/usr/sbin/$m" ] && pairs+=("$(realpath "$dir/usr/sbin/$m")" "$(realpath "/usr/sbin/$m")")
done
pairs+=("$dir$lib/xtables" "$(realpath "$lib/xtables")")
# Each soname the machine has too (ld-linux-x86-64.so.2 sorts first,
# then libc.so.6, libnftnl.so.11, ...): the release'"'"'s file over the
# machine'"'"'s.
for f in "$dir$lib"/*.so.[0-9]*; do
	name=${f##*/}
	case $name in *.so.[0-9]*.*) continue ;; esac
	[ -e "$lib/$name" ] && pairs+=("$(realpath "$f")" "$(realpath "$lib/$name")")
done
callers=${LD_LIBRARY_PATH-}
for ((i = 0; i < ${#pairs[@]}; i += 2)); do
	mount --bind "${pairs[i]}" "${pairs[i+1]}"
	# Once its loader is in place, the mounts that follow run on the
	# release'"'"'s glibc.
	case ${pairs[i]} in */ld-linux*) export LD_LIBRARY_PATH=$dir$lib ;; esac
done
if [ -n "$callers" ]; then export LD_LIBRARY_PATH=$callers; else unset LD_LIBRARY_PATH; fi
exec "$@"
' asnode "$dir" "$@"
