#!/usr/bin/env bash
# fetch.sh DIR [SUITE]: unpack another Debian release's iptables 1.8 into DIR,
# nothing installed, for the tests that run it beside the machine's own
# (bookworm's 1.8.9). SUITE is
#   bullseye (the default): 1.8.7, the oldest 1.8 Debian still serves, with
#     the libraries whose sonames bookworm's newer ones share; it runs on the
#     machine's glibc (LD_LIBRARY_PATH). For the netlink writer's reader test
#     (pkg/iptables/nfnl). Run it as `make old-iptables`.
#   trixie: 1.8.11 with its own glibc (libc6: trixie's binaries need a newer
#     one than bookworm's), run through that glibc's loader (ld-linux
#     --library-path). For the audit's cross-release test
#     (pkg/iptables/xtables). Run it as `make newer-iptables`.
# apt runs on a state directory of its own, from the mirror the machine's
# own sources name, and checks the suite's signature with the machine's
# Debian keyring. DIR/VERSIONS lists the packages unpacked.
set -euo pipefail

dir=$1
suite=${2:-bullseye}
# iptables and libnftnl (which encodes the rules iptables-nft writes) are
# pinned: the tests name the release they ran, and a change of release is a
# change of test. libc6 and libmnl0 are not: they only carry the program,
# and a live suite's security and point releases replace their versions,
# the old ones gone from the mirror (a pin would break the fetch, not
# guard the test).
case $suite in
bullseye)
	packages=(iptables=1.8.7-1 libxtables12=1.8.7-1 libip4tc2=1.8.7-1 libip6tc2=1.8.7-1 libnftnl11=1.1.9-1)
	;;
trixie)
	packages=(iptables=1.8.11-2 libxtables12=1.8.11-2 libip4tc2=1.8.11-2 libip6tc2=1.8.11-2 libnftnl11=1.2.9-1
		libmnl0 libc6)
	;;
*)
	echo "fetch.sh: unknown suite $suite: want bullseye (iptables 1.8.7) or trixie (1.8.11)" >&2
	exit 1
	;;
esac

# The machine's Debian mirror: the URI of the source that serves its own
# release's main suite (deb822 stanzas not disabled, or one-line entries),
# whatever the URI looks like; a mirror+file: list gives its first mirror.
. /etc/os-release
codename=${VERSION_CODENAME:-}
if [ "${ID:-}" != debian ] || [ -z "$codename" ]; then
	echo "fetch.sh: needs a Debian machine (its archive keyring and mirror); this is ${PRETTY_NAME:-unknown}" >&2
	exit 1
fi
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
	[ -r "$f" ] || continue
	mirror=$(awk -v suite="$codename" '
		function flush() { if (uris != "" && enabled && index(" " suites " ", " " suite " ")) { split(uris, u, " "); print u[1]; found = 1; exit } }
		BEGIN { enabled = 1 }
		/^[[:space:]]*$/ { flush(); uris = ""; suites = ""; enabled = 1; next }
		/^#/ { next }
		tolower($1) == "uris:" { $1 = ""; uris = $0 }
		tolower($1) == "suites:" { $1 = ""; suites = $0 }
		tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
		END { if (!found) flush() }' "$f")
	[ -n "$mirror" ] && break
done
if [ -z "$mirror" ]; then
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		mirror=$(awk -v suite="$codename" '
			$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }' "$f")
		[ -n "$mirror" ] && break
	done
fi
case "$mirror" in
mirror+file:*) mirror=$(grep -m1 -v '^[[:space:]]*\(#\|$\)' "${mirror#mirror+file:}" | awk '{print $1}') ;;
esac
if [ -z "$mirror" ]; then
	echo "fetch.sh: no source in /etc/apt/sources.list{,.d} serves $codename's main suite" >&2
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
	basename "$deb" >>"$dir.tmp/VERSIONS"
done
rm -rf "$dir"
mv "$dir.tmp" "$dir"
