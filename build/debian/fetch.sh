#!/usr/bin/env bash
# fetch.sh DIR SUITE ARCH PACKAGE[=VERSION]...: download Debian packages of
# SUITE for ARCH (amd64, arm64) and unpack them into DIR, nothing
# installed. For the image (make image: build/debian/image-packages) and for
# the tests that run another release's iptables (test/oldiptables). With
# FETCH_UPDATES=1 (the image's), SUITE-updates and SUITE-security too, from
# the sources the machine names for its own release's: the image gets the
# suite's fixes published since its last point release.
#
# apt runs on a state directory of its own, from the mirror the machine's
# own sources name, and checks the suite's signature with the machine's
# Debian keyring. In DIR:
#   - each package's files, absolute symbolic links made relative so that
#     they resolve inside DIR (libc6's /lib64/ld-linux-x86-64.so.2);
#   - var/lib/dpkg/status.d/NAME, each package's control paragraph as
#     distroless images keep them, which scanners read for what is inside;
#   - VERSIONS, the .deb files unpacked, one a line; REQUEST, what was asked.
# Two runs for one DIR at once (make image and make image-index) take turns;
# the second finds the first's result and keeps it.
set -euo pipefail

if [ $# -lt 4 ]; then
	echo "usage: fetch.sh DIR SUITE ARCH PACKAGE[=VERSION]..." >&2
	exit 2
fi
dir=$1 suite=$2 arch=$3
shift 3
case $arch in
amd64 | arm64) ;;
*)
	echo "fetch.sh: ARCH $arch: want amd64 or arm64" >&2
	exit 2
	;;
esac

. /etc/os-release
codename=${VERSION_CODENAME:-}
if [ "${ID:-}" != debian ] || [ -z "$codename" ]; then
	echo "fetch.sh: needs a Debian machine (its archive keyring and mirror); this is ${PRETTY_NAME:-unknown}" >&2
	exit 1
fi
# mirror_for SUITE: the URI of the machine's source that serves SUITE
# (deb822 stanzas not disabled, or one-line entries), whatever the URI
# looks like; a mirror+file: list gives its first mirror. Empty for none.
mirror_for() {
	local want=$1 mirror="" f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		mirror=$(awk -v suite="$want" '
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
			mirror=$(awk -v suite="$want" '
				$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }' "$f")
			[ -n "$mirror" ] && break
		done
	fi
	case "$mirror" in
	mirror+file:*) mirror=$(grep -m1 -v '^[[:space:]]*\(#\|$\)' "${mirror#mirror+file:}" | awk '{print $1}') ;;
	esac
	echo "$mirror"
}
mirror=$(mirror_for "$codename")
if [ -z "$mirror" ]; then
	echo "fetch.sh: no source in /etc/apt/sources.list{,.d} serves $codename's main suite" >&2
	exit 1
fi

request="$suite $arch ${FETCH_UPDATES:-0} $*"
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ -f "$dir/VERSIONS" ] && [ "$(cat "$dir/REQUEST" 2>/dev/null)" = "$request" ]; then
	exit 0 # another run fetched it while this one waited
fi

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state"/{lists/partial,cache/archives/partial,parts,prefs,debs}
add_source() { # URI SUITE
	cat >>"$state/parts/fetch.sources" <<SOURCES
Types: deb
URIs: $1
Suites: $2
Components: main
Architectures: $arch
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

SOURCES
}
add_source "$mirror" "$suite"
if [ "${FETCH_UPDATES:-0}" = 1 ]; then
	for extra in "$suite-updates" "$suite-security"; do
		uri=$(mirror_for "$extra")
		if [ -z "$uri" ]; then
			echo "fetch.sh: the machine's sources name no $extra; the image gets $suite's packages without its fixes since the last point release" >&2
			continue
		fi
		add_source "$uri" "$extra"
	done
fi
apt=(-q -o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$state/parts"
	-o "Dir::Etc::preferencesparts=$state/prefs" -o "Dir::State::Lists=$state/lists"
	-o "Dir::Cache=$state/cache" -o Dir::State::status=/dev/null
	-o APT::Architecture="$arch" -o APT::Architectures="$arch"
	-o APT::Sandbox::User=root)
apt-get "${apt[@]}" update >/dev/null
if ! (cd "$state/debs" && apt-get "${apt[@]}" download "$@" >"$state/download.log" 2>&1); then
	cat "$state/download.log" >&2
	echo "fetch.sh: downloading $* for $suite ($arch) failed (above): a mirror not answering, or a pinned version it no longer serves (a new pin)" >&2
	exit 1
fi

rm -rf "$dir.tmp"
mkdir -p "$dir.tmp/var/lib/dpkg/status.d"
for deb in "$state"/debs/*.deb; do
	dpkg-deb -x "$deb" "$dir.tmp"
	name=$(dpkg-deb -f "$deb" Package)
	{
		dpkg-deb -f "$deb"
	} >"$dir.tmp/var/lib/dpkg/status.d/$name"
	basename "$deb" >>"$dir.tmp/VERSIONS"
done
# Absolute links point into DIR, not at the machine's files.
find "$dir.tmp" -type l -lname '/*' -print0 | while IFS= read -r -d '' link; do
	# -s: by the path's text, never through the machine's own links.
	ln -sfn "$(realpath -m -s --relative-to="$(dirname "$link")" "$dir.tmp$(readlink "$link")")" "$link"
done
echo "$request" >"$dir.tmp/REQUEST"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
