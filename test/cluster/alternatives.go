package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Iptables is which iptables a fleet node's programs lead to, as Debian's
// and Ubuntu's alternatives choose it (`update-alternatives --set
// iptables`): everything on the node that runs `iptables` (kubelet, the
// CNI plugins, istio-cni's plugin, an operator's shell) follows it.
type Iptables string

const (
	// MachineIptables: the node's alternatives are this machine's.
	MachineIptables Iptables = ""
	// LegacyIptables: iptables and ip6tables, with their -save and
	// -restore, lead to iptables-legacy, as on an older node pool's
	// image joined to a fleet of nf_tables nodes.
	LegacyIptables Iptables = "legacy"
)

// etcAlternatives is where the node's alternatives live, on this machine
// and, bound over it, on a node of its own (nodeAlternatives).
const etcAlternatives = "/etc/alternatives"

// iptablesAlternatives are the links Debian switches together: the
// iptables and ip6tables groups, each its program and its two slaves.
var iptablesAlternatives = []string{"iptables", "iptables-restore", "iptables-save", "ip6tables", "ip6tables-restore", "ip6tables-save"}

// nodeAlternatives writes dir as a copy of this machine's
// /etc/alternatives whose iptables links lead to ipt's programs, for the
// node to bind over its own; it returns the bind, or none for
// MachineIptables.
func nodeAlternatives(dir string, ipt Iptables) ([]hostBind, error) {
	switch ipt {
	case MachineIptables:
		return nil, nil
	case LegacyIptables:
	default:
		return nil, fmt.Errorf("node iptables %q; allowed: %q (this machine's) or %q", ipt, MachineIptables, LegacyIptables)
	}
	entries, err := os.ReadDir(etcAlternatives)
	if err != nil {
		return nil, fmt.Errorf("a %s node needs this machine's Debian alternatives: %w", ipt, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var missing []string
	for _, name := range iptablesAlternatives {
		if !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == name }) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("a %s node needs this machine's iptables alternatives: %s has no %s", ipt, etcAlternatives, strings.Join(missing, ", "))
	}
	// The node's programs must lead through its alternatives for the
	// bind to choose them.
	for _, name := range iptablesAlternatives {
		if to, err := os.Readlink(filepath.Join("/usr/sbin", name)); err != nil || to != filepath.Join(etcAlternatives, name) {
			return nil, fmt.Errorf("a %s node needs /usr/sbin/%s to lead to %s/%[2]s (Debian's alternatives): it leads to %q (%v)", ipt, name, etcAlternatives, to, err)
		}
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(etcAlternatives, e.Name()))
		if err != nil && slices.Contains(iptablesAlternatives, e.Name()) {
			return nil, fmt.Errorf("a %s node: %w", ipt, err)
		}
		if err != nil {
			continue // not a link: no alternative the node needs
		}
		if slices.Contains(iptablesAlternatives, e.Name()) {
			// iptables-save leads to /usr/sbin/iptables-legacy-save.
			family, verb, _ := strings.Cut(e.Name(), "-")
			target = "/usr/sbin/" + family + "-" + string(ipt)
			if verb != "" {
				target += "-" + verb
			}
			if _, err := os.Stat(target); err != nil {
				return nil, fmt.Errorf("a %s node: %w", ipt, err)
			}
		}
		if err := os.Symlink(target, filepath.Join(dir, e.Name())); err != nil {
			return nil, err
		}
	}
	return []hostBind{{src: dir, dst: etcAlternatives}}, nil
}
