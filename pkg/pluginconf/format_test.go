package pluginconf

import (
	"fmt"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/test/formats"
)

// entryFormat is the conflist entry's format: 2 added native_nftables,
// whose default (false) is what version 1 plugins do.
const entryFormat = 2

// TestEntryKeysAreTheirVersion: the conflist entry the agent writes and the
// plugin of either build reads while binaries and config are swapped. It
// carries no version of its own, and must not: the runtime passes it for
// every pod, and a plugin that refused it would fail plain pods' ADD and
// STATUS, and with STATUS the node. So its keys only grow, each new key
// one that an older plugin may ignore and still write what it wrote
// before (its default is the older behaviour), and no key changes its
// meaning or its values' types. A change here is to be read against that
// rule before this golden's version is bumped.
func TestEntryKeysAreTheirVersion(t *testing.T) {
	formats.Check(t, "conflist-entry", entryFormat, formats.JSON(Entry{}))
	// What each key accepts, as its refusal of a value out of range says:
	// a value an older plugin refuses is a conflist it refuses whole.
	var refusals []string
	for _, probe := range []Entry{
		{LogLevel: "loud"}, {IPv6Redirect: "sometimes"}, {IptablesBackend: "ebpf"},
		{APITimeout: "61s"}, {APITimeout: "1s", APIAttemptTimeout: "2s"},
		{TProxyMark: iptables.OutboundMark}, {TProxyRouteTable: 254},
		{ExcludeNamespaces: []string{"Not_A_Namespace"}}, {LogFile: "relative"},
		{NativeNftables: true, IptablesBackend: "legacy"}, {NativeNftables: true, IPv6Redirect: "dual-stack-only"},
	} {
		_, err := probe.Normalize()
		refusals = append(refusals, fmt.Sprint(err))
	}
	formats.Check(t, "conflist-entry-values", entryFormat, strings.Join(refusals, "\n")+"\n")
}
