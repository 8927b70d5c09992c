package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
)

// writerOf is how the recorded sandbox's rules are read and removed: as
// its ADD wrote them, native nftables or iptables in the backend of each
// family it names, whatever the entry's iptables_backend says now or the
// node's alternatives lead to, as the audit and inspect read them
// (applied.Record.Writer; a record before version 3 names one backend,
// both families'). A record naming no backend, an older build's, is
// guessed: the node's backend (nodeWriter), and where the rules are found.
func writerOf(conf *Config, r applied.Record) applied.Writer {
	w := r.Writer(conf.writer())
	if w.Guessed {
		w = r.Writer(conf.nodeWriter())
	}
	return w
}

// Check verifies that a pod that must be redirected holds exactly the rules
// its model says, reading them from its namespace. Pods that are not ours to
// redirect pass.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	return p.verb("CHECK", args, inPlugin{}, func(conf *Config, out *outcome) error {
		return p.check(args, conf, out)
	})
}

func (p *Plugin) check(args *skel.CmdArgs, conf *Config, out *outcome) error {
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, errPrefix+": field \"prevResult\": required for CHECK", "")
	}
	// The rules ADD recorded are the expectation; the pod's annotations
	// may have changed since (they take effect only at ADD).
	// A sandbox ADD passed through passes, with no lookup: a plain pod's
	// CHECK never depends on the API or the agent. One whose record a later
	// build wrote (this plugin was rolled back) is not held to what this
	// build would apply: it passes, saying it was not checked.
	var m iptables.Model
	var w applied.Writer
	if ref, isPod, _ := podID(args.Args); isPod {
		if r, ok := recorded(conf, args, ref.uid); ok {
			out.pod, out.podUID = ref.String(), ref.uid
			out.decision = decision.Decision{Redirect: !r.Passed, Reason: decision.Recorded}
			var known bool
			if m, known = r.Model(); !known {
				out.warnings = append(out.warnings, fmt.Sprintf("not checked: a newer istio-cni recorded this sandbox (record version %d; this plugin reads up to %d)", r.Version, applied.Version))
				return nil
			}
			if r.Passed {
				return nil
			}
			out.families = decision.FamilyNames(r.IPv4, r.IPv6)
			// Read as ADD wrote them, whatever the node writes now.
			w = writerOf(conf, r)
		}
	}
	var unrecorded bool
	if m.V4 == nil && m.V6 == nil {
		pl, ok, err := p.plan(args, conf, out)
		if err != nil || !ok {
			return err
		}
		// No record: the rules are read where they are found, as the
		// audit and inspect read them: an earlier build's for the same
		// settings pass too (decision.EarlierSpec), and so do the other
		// kind of writer's (native nftables or iptables).
		unrecorded, w = true, conf.nodeWriter().Guess()
		if err := p.stack(conf, out, &pl, func() (bool, error) { return p.deps.NewPodNetwork(w).HasIPv6(args.Netns) }); err != nil {
			return err
		}
		m = pl.model()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opBudget)
	defer cancel()
	check := func(by applied.Writer, want iptables.Model) ([]string, error) {
		return p.deps.NewPodNetwork(by).Check(ctx, args.Netns, want)
	}
	var diffs []string
	var err error
	var unread string // the other kind's read failed: why
	if unrecorded {
		var held applied.Held
		held, err = applied.ReadUnrecorded(check, w, out.decision, conf.parsed.Node(), m, false)
		diffs = held.Diffs
		if held.OtherErr != nil {
			unread = fmt.Sprintf(" (reading them as %s failed: %v)", w.OtherKind().Kind(), held.OtherErr)
		}
	} else {
		diffs, err = check(w, m)
	}
	if err != nil {
		return netnsError(out.pod, "reading the rules", err)
	}
	if len(diffs) > 0 {
		return types.NewError(ErrRulesMismatch,
			fmt.Sprintf("pod %s: redirect rules missing or different: %s%s", out.pod, strings.Join(diffs, "; "), unread), "")
	}
	return nil
}
