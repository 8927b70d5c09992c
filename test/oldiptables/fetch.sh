#!/usr/bin/env bash
# fetch.sh DIR: unpack the oldest iptables 1.8 Debian still serves (bullseye's
# 1.8.7, with the libraries whose sonames bookworm's newer ones share) into
# DIR, for the netlink writer's reader test (pkg/iptables/nfnl). Nothing is
# installed: apt runs on a state directory of its own, from the mirror the
# machine's own sources name, and checks the suite's signature with the
# machine's Debian keyring. Run it as `make old-iptables`.
set -euo pipefail

dir=$1
suite=bullseye
# Pinned: the reader test names what it ran, and a change of reader is a
# change of test.
packages=(iptables=1.8.7-1 libxtables12=1.8.7-1 libip4tc2=1.8.7-1 libip6tc2=1.8.7-1 libnftnl11=1.1.9-1)

# The machine's Debian mirror: the first main archive (not security) in
# its deb822 sources or its one-line sources.list.
mirror=$(
	{
		awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; break } }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true
	} | grep -E '/debian/?$' | head -n 1
)
if [ -z "$mirror" ]; then
	echo "fetch.sh: no Debian main archive in /etc/apt/sources.list{,.d}" >&2
	exit 1
fi

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state"/{lists/partial,cache/archives/partial,parts,prefs,debs}
cat >"$state/parts/$suite.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt=(-q -o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$state/parts"
	-o "Dir::Etc::preferencesparts=$state/prefs" -o "Dir::State::Lists=$state/lists"
	-o "Dir::Cache=$state/cache" -o Dir::State::status=/dev/null
	-o APT::Sandbox::User=root)
apt-get "${apt[@]}" update >/dev/null
(cd "$state/debs" && apt-get "${apt[@]}" download "${packages[@]}" >/dev/null)

rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
for deb in "$state"/debs/*.deb; do
	dpkg-deb -x "$deb" "$dir.tmp"
done
rm -rf "$dir"
mv "$dir.tmp" "$dir"
