#!/usr/bin/env bash
# aslegacy.sh DIR CMD...: run CMD as on a node whose iptables is legacy
# only: a distribution that ships no other, or a Debian or Ubuntu node
# without the iptables-nft programs. In a mount namespace of CMD's own, the
# machine's xtables-nft-multi is covered by an empty file nobody may
# execute, so no iptables-nft name (nor the node's iptables alternatives,
# which lead to them) runs; DIR, first on PATH, holds the machine's
# xtables-legacy-multi as iptables, iptables-save and iptables-restore,
# their -legacy names and ip6tables'. Every process CMD starts (the bench,
# the installer and its agent, both plugins, the floor's bare restore,
# upstream's plugin) finds legacy as `iptables-restore` and no nf_tables
# iptables that runs. Upstream's plugin takes iptables-nft whenever it runs
# and a pod's namespace holds no legacy rules: here it writes legacy, as on
# such a node, and is timed beside ours. Only as faithful as PATH: the
# machine's own iptables names, which its alternatives lead to nft, do not
# run at all, so a process that drops DIR from its PATH finds no iptables
# (every process the bench starts keeps it). Nothing outside the namespace
# changes. DIR holds the links only. `make bench IPTABLES=legacy` runs it.
set -euo pipefail

legacy=/usr/sbin/xtables-legacy-multi
if [ $# -lt 2 ]; then
	echo "aslegacy.sh: usage: aslegacy.sh DIR CMD...; DIR a directory for its links" >&2
	exit 2
fi
if [ ! -x "$legacy" ]; then
	echo "aslegacy.sh: no $legacy (apt-get install -y iptables)" >&2
	exit 2
fi
mkdir -p "$1"
dir=$(realpath "$1")
shift
for family in iptables ip6tables; do
	for backend in "" -legacy; do
		for tool in "" -save -restore; do
			link=$dir/$family$backend$tool
			# Another run may be using the link: replaced only if wrong.
			[ "$(readlink "$link" 2>/dev/null)" = "$legacy" ] || ln -sfn "$legacy" "$link"
		done
	done
done
[ -f "$dir/.not-installed" ] || : >"$dir/.not-installed"
chmod 0644 "$dir/.not-installed"
exec unshare --mount --propagation private bash -euo pipefail -c '
dir=$1
shift
nft=/usr/sbin/xtables-nft-multi
if [ -e "$nft" ]; then
	mount --bind "$dir/.not-installed" "$(realpath "$nft")"
fi
# Nothing on PATH, nor where the plugin looks after it
# (pkg/iptables/release, fallbackDirs), may still run an nft program.
IFS=: read -r -a dirs <<<"$PATH:/usr/sbin:/sbin:/usr/local/sbin:/usr/bin:/bin"
for d in "${dirs[@]}"; do
	for p in iptables-nft-restore ip6tables-nft-restore xtables-nft-multi; do
		if [ -n "$d" ] && [ -x "$d/$p" ]; then
			echo "aslegacy.sh: $d/$p still runs: not a legacy-only node" >&2
			exit 2
		fi
	done
done
PATH=$dir:$PATH exec "$@"
' aslegacy "$dir" "$@"
