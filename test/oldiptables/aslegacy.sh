#!/usr/bin/env bash
# aslegacy.sh CMD...: run CMD as on a node whose iptables is legacy only
# (RHEL 7, Amazon Linux 2, a Debian or Ubuntu node without iptables-nft):
# the machine's xtables-legacy-multi, under the names such a node has
# (iptables, iptables-save, iptables-restore, their -legacy names and
# ip6tables'), in a directory first on PATH, and no directory holding an
# iptables-nft name on it. Every process CMD starts (the bench, the
# installer and its agent, both plugins, the floor's bare restore) resolves
# `iptables-restore` to legacy there. So does upstream istio-cni, which
# takes iptables-nft whenever it finds it on PATH and a pod's namespace
# holds no legacy rules: on this node it writes legacy, as on such a node,
# and its ADD can be timed beside ours. Nothing outside CMD's environment
# changes. `make bench IPTABLES=legacy` runs it.
set -euo pipefail

if [ $# -lt 1 ]; then
	echo "aslegacy.sh: usage: aslegacy.sh CMD..." >&2
	exit 2
fi
multi=/usr/sbin/xtables-legacy-multi
if [ ! -x "$multi" ]; then
	echo "aslegacy.sh: no $multi (apt-get install -y iptables)" >&2
	exit 2
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for family in iptables ip6tables; do
	for backend in "" -legacy; do
		for tool in "" -save -restore; do
			ln -s "$multi" "$dir/$family$backend$tool"
		done
	done
done
# The caller's PATH, less the directories with a restore program of their
# own (Debian's /usr/sbin and /sbin): go and the rest stay found.
path=$dir
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
	[ -n "$d" ] || continue
	for p in iptables-restore ip6tables-restore iptables-nft-restore ip6tables-nft-restore; do
		[ -e "$d/$p" ] && continue 2
	done
	path=$path:$d
done
PATH=$path "$@"
