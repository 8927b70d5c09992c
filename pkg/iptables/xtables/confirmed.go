package xtables

import (
	"crypto/sha256"
	"strings"
	"sync"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
)

// Confirmed remembers which kernel states (nfnl.Fingerprint) iptables-save
// was seen to print as exactly a ruleset's rules, so that a check of
// another namespace in the same state reads it over netlink, one socket,
// instead of running iptables-save, a process as heavy as an ADD. The node
// agent's audit reads back every pod the node starts; most share a few
// models and one writer's layout.
//
// A state is confirmed only by iptables-save itself, with the namespace
// unchanged across the read: the same ruleset generation after it (every
// commit advances it, so a change undone during the read shows) and the
// same fingerprint (a table flagged as owned by a socket goes when the
// socket closes, with no commit). So nothing is taken on trust from the
// writer: a netlink write whose encoding iptables-save would print as
// other rules is never confirmed.
//
// Legacy tables have no generation: there a state is one that holds
// exactly the ruleset as legacy.Write lays it out (legacy.Holds, every
// other table fresh), confirmed once per ruleset by iptables-legacy-save,
// so a layout of ours that save would print as other rules is never
// confirmed either, and a change undone during the read cannot confirm a
// state that is not the ruleset's.
type Confirmed struct {
	read  func(iptables.Family) (nfnl.Fingerprint, uint32, error)
	holds func(*iptables.Ruleset) ([sha256.Size]byte, bool, error)

	mu     sync.Mutex
	states map[string]map[nfnl.Fingerprint]bool // by confirmKey
}

// Bounds on what is remembered: models are few on a node (one per set of
// traffic annotations), and each has one state per writer's layout.
const (
	maxConfirmedModels = 256
	maxStatesPerModel  = 4
)

// NewConfirmed returns an empty memory whose nf_tables fingerprints, with
// the generation each is of, come from read (nfnl.ReadFingerprint, or a
// test's), and whose legacy states from holds (legacy.Holds; nil: legacy
// tables are always read with iptables-legacy-save).
func NewConfirmed(read func(iptables.Family) (nfnl.Fingerprint, uint32, error), holds func(*iptables.Ruleset) ([sha256.Size]byte, bool, error)) *Confirmed {
	if read == nil {
		panic("xtables.NewConfirmed: nil read")
	}
	return &Confirmed{read: read, holds: holds, states: map[string]map[nfnl.Fingerprint]bool{}}
}

func (c *Confirmed) known(key string, fp nfnl.Fingerprint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.states[key][fp]
}

func (c *Confirmed) add(key string, fp nfnl.Fingerprint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.states[key]
	if s == nil {
		if len(c.states) >= maxConfirmedModels {
			clear(c.states)
		}
		s = map[nfnl.Fingerprint]bool{}
		c.states[key] = s
	}
	if len(s) >= maxStatesPerModel {
		clear(s)
	}
	s[fp] = true
}

// confirmKey names what a check compares: the program that prints the
// state, and the ruleset as Diff reads it (its chains, and each rule's
// table, chain and text).
func confirmKey(save string, rs *iptables.Ruleset) string {
	var b strings.Builder
	b.WriteString(save)
	b.WriteString("\x00")
	b.WriteString(rs.Family.String())
	for _, c := range rs.Chains {
		b.WriteString("\x00:" + c.Table + " " + c.Name)
	}
	for _, r := range rs.Rules {
		b.WriteString("\x00" + r.Table + " " + r.Chain + " " + r.Args())
	}
	return b.String()
}
