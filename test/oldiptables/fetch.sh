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
# build/debian/fetch.sh does the fetching (as for the image), for this
# machine's architecture. DIR/VERSIONS lists the packages unpacked.
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

exec "$(dirname "$0")/../../build/debian/fetch.sh" "$dir" "$suite" "$(dpkg --print-architecture)" "${packages[@]}"
