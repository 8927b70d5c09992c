// Package inspect answers "why is my pod (not) in the mesh?" for one pod:
// the plugin's decision and its reason, whether the node's CNI config
// chains the plugin, the rules the pod should have, the rules it has (read
// from its network namespace) and the difference.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
)

// Pod is what inspect reads of a pod: the decision's subset plus where it
// runs.
type Pod struct {
	*kube.Pod
	Node  string
	Phase string
	IPs   []netip.Addr
}

// Deps are inspect's seams.
type Deps struct {
	// GetPod reads the pod from the API.
	GetPod func(ctx context.Context, namespace, name string) (*Pod, error)
	// Namespaces finds the pod's network namespace on this node, by its
	// addresses (netnsdir.Finder).
	Namespaces interface {
		Find(pods map[string][]netip.Addr) (netnsdir.Result, error)
	}
	// Observe reads a family's tables in a namespace with backend's
	// iptables-save.
	Observe func(ctx context.Context, netns string, backend release.Backend, f iptables.Family) (*iptables.Observed, error)
	// ObserveNative lists our native nftables tables in a namespace, each
	// rule named as the model m names it; nil: not read.
	ObserveNative func(ctx context.Context, netns string, m iptables.Model) ([]string, error)
	// Check is the plugin's CHECK: the differences from the model, read
	// as w wrote them.
	Check func(ctx context.Context, netns string, m iptables.Model, w applied.Writer) ([]string, error)
	// Holding is the iptables backend holding the model's rules in a
	// namespace, for a sandbox no record names a writer for
	// (podnet.Network.Holding); nil: the node's is read.
	Holding func(ctx context.Context, netns string, m iptables.Model) (applied.Writer, error)
	// HasIPv6 reads whether the namespace has a global IPv6 address.
	HasIPv6 func(netns string) (bool, error)
	// NamespaceLabels reads a namespace's labels: whether Istio's
	// injector should have given the pod its sidecar. Nil: not judged.
	NamespaceLabels func(ctx context.Context, name string) (map[string]string, error)
	// Injectors reads the cluster's sidecar injectors (with
	// NamespaceLabels).
	Injectors func(ctx context.Context) injection.View
	// Records are what ADD applied to each sandbox (applied.Store); nil:
	// none.
	Records interface {
		ForPod(uid string) ([]applied.Record, error)
	}
}

// Options are the node's settings, as the plugin has them.
type Options struct {
	Namespace, Name   string
	ExcludeNamespaces []string
	AgentNamespace    string
	Settings          decision.NodeSettings
	// CNINetDir is the node's CNI config directory: whether the config the
	// runtime uses chains istio-cni decides whether new pods reach the
	// plugin at all.
	CNINetDir string
	// Writer is how the node's plugin writes rules now (its iptables
	// backend, or native nftables), for a sandbox without a record saying
	// how ADD wrote it.
	Writer applied.Writer
	// Build names the inspecting binary's build (version.Line): in the
	// agent's pod, the agent's. The report's first line; "" prints none.
	Build string
}

// Report is inspect's answer.
type Report struct {
	Pod, UID, Node, Phase string
	// Build is Options.Build.
	Build string
	// Config is the config file the runtime uses; Chained whether it
	// holds the istio-cni entry.
	Config  string
	Chained bool
	// ConfigErr explains a config directory that could not be read.
	ConfigErr string
	Redirect  bool
	Reason    string
	// Invalid is set when the pod must be redirected but its settings are
	// refused (the plugin fails its ADD).
	Invalid  string
	Netns    string
	Families string
	// Recorded: the rules wanted are the ones ADD recorded for this
	// sandbox; SettingsChanged says how the pod's settings now differ.
	Recorded        bool
	SettingsChanged string
	// NewerRecord is the version of the sandbox's record when a later
	// build wrote it: what ADD applied is unknown to this one.
	NewerRecord int
	// Notes are things to know about the pod (decision.IPv6ProxyNote).
	Notes []string
	// Native: the rules are native nftables, not iptables; else Backend
	// is the iptables they were read with: what ADD recorded for the
	// sandbox, else the node's ("" if unknown); BackendIPv6 IPv6's when
	// ADD recorded another for it.
	Native      bool
	Backend     release.Backend
	BackendIPv6 release.Backend
	// guessed: no record names Backend; it is the node's until
	// Deps.Holding finds the rules in the other.
	guessed bool
	// Want and Have are the tables in iptables-save form, or, Native, as
	// the nftables model lists them: Have only the rules istio-cni owns.
	Want, Have []string
	Diffs      []string
	// NetnsErr explains why the namespace was not read.
	NetnsErr string
	// Injection is the injector's verdict on the pod (pkg/nodeagent/injection);
	// InjectionErr why there is none.
	Injection    *injection.Verdict
	InjectionErr string
}

// Consistent is true when the pod is as the plugin would leave it:
// redirected with exactly its rules, or not redirected and free of ours.
func (r Report) Consistent() bool {
	if r.Invalid != "" || r.NetnsErr != "" || r.NewerRecord != 0 || (r.Injection != nil && r.Injection.Missed()) {
		return false
	}
	if r.Redirect {
		return len(r.Diffs) == 0
	}
	return len(r.Have) == 0
}

// Run builds the report.
func Run(ctx context.Context, o Options, d Deps) (Report, error) {
	pod, err := d.GetPod(ctx, o.Namespace, o.Name)
	if err != nil {
		return Report{}, err
	}
	r := Report{Build: o.Build, Pod: o.Namespace + "/" + o.Name, UID: pod.Metadata.UID, Node: pod.Node, Phase: pod.Phase}
	r.Config, r.Chained, err = runtimeConfig(o.CNINetDir)
	if err != nil {
		r.ConfigErr = err.Error()
	}
	dec, decided := decision.Namespace(o.Namespace, o.ExcludeNamespaces)
	if !decided {
		if dec, err = decision.Pod(pod.Pod); err != nil {
			r.Invalid = err.Error()
			dec = decision.Decision{Redirect: true, Reason: decision.Redirected}
		}
	}
	r.Redirect, r.Reason = dec.Redirect, string(dec.Reason)
	if len(dec.Unread) > 0 {
		r.Notes = append(r.Notes, decision.UnreadNote(dec.Unread))
	}
	if len(dec.NotBool) > 0 {
		r.Notes = append(r.Notes, decision.NotBoolNote(dec.NotBool))
	}
	if d.NamespaceLabels != nil && d.Injectors != nil {
		if labels, err := d.NamespaceLabels(ctx, o.Namespace); err != nil {
			r.InjectionErr = err.Error()
		} else {
			v := injection.Of(pod.Pod, labels, append([]string{o.AgentNamespace}, o.ExcludeNamespaces...), d.Injectors(ctx))
			r.Injection = &v
		}
	}
	if dec.Reason == decision.HostNetwork {
		return r, nil
	}
	found, err := d.Namespaces.Find(map[string][]netip.Addr{pod.Metadata.UID: pod.IPs})
	if err != nil {
		r.NetnsErr = err.Error()
		return r, nil
	}
	ns, ok := found.Found[pod.Metadata.UID]
	switch {
	case found.Ambiguous[pod.Metadata.UID] != "":
		r.NetnsErr = "which network namespace is the pod's cannot be proven: " + found.Ambiguous[pod.Metadata.UID]
		return r, nil
	case !ok:
		r.NetnsErr = "no network namespace on this node holds the pod's addresses " + fmt.Sprint(pod.IPs) +
			" (not started, finished, or on another node: run inspect on " + nodeOr(pod.Node) + ")"
		return r, nil
	}
	r.Netns = ns.Path
	m, ok, err := want(&r, o, d, pod, dec, ns)
	if err != nil {
		r.NetnsErr = err.Error()
		return r, nil
	}
	// check is the audit's reading of the sandbox: for one no record
	// names a writer for, the node's guess, then where the rules are.
	check := applied.Writer{Native: r.Native, Backend: r.Backend, BackendIPv6: r.BackendIPv6, Guessed: r.guessed}
	if ok && r.guessed && d.Holding != nil {
		found, err := d.Holding(ctx, ns.Path, m)
		if err != nil {
			r.NetnsErr = err.Error()
			return r, nil
		}
		r.Backend, r.BackendIPv6 = found.Backend, found.BackendIPv6
	}
	w := applied.Writer{Native: r.Native, Backend: r.Backend, BackendIPv6: r.BackendIPv6}
	if !ok && r.guessed && !r.Native {
		// Not to be redirected, and no record says where ADD wrote:
		// stray rules of ours may be in either backend, family by family.
		err = strays(ctx, d, ns.Path, &r, w)
	} else {
		r.Have, err = observe(ctx, d, ns.Path, m, w)
	}
	if err != nil {
		r.NetnsErr = err.Error()
		return r, nil
	}
	if !ok {
		return r, nil
	}
	if r.Recorded {
		r.Diffs, err = d.Check(ctx, ns.Path, m, check)
	} else {
		// No record: read as the audit reads such a sandbox.
		var held applied.Held
		held, err = applied.ReadUnrecorded(func(by applied.Writer, want iptables.Model) ([]string, error) {
			return d.Check(ctx, ns.Path, want, by)
		}, check, dec, o.Settings, m, false)
		r.Diffs, m = held.Diffs, held.Model
		if held.Earlier {
			r.Notes = append(r.Notes, EarlierBuildNote)
		}
		if held.OtherErr != nil {
			r.Notes = append(r.Notes, "no record of this sandbox, and reading its rules as "+check.OtherKind().Kind()+" failed: "+held.OtherErr.Error())
		}
		if err == nil && held.By != check {
			err = otherKind(ctx, d, ns.Path, &r, m, held.By)
		}
	}
	if err != nil {
		r.NetnsErr = err.Error()
	}
	if r.Native {
		r.Want = nativeListing(m)
	} else {
		for _, rs := range m.Rulesets() {
			r.Want = append(r.Want, prefixed(rs.Family, rs.Listing())...)
		}
	}
	return r, nil
}

// otherKind reports a sandbox with no record whose rules w, the other kind
// of writer than the node's, holds whole: read as w wrote them, no
// differences, and said so, whether or not the iptables backend holding
// them can be told.
func otherKind(ctx context.Context, d Deps, netns string, r *Report, m iptables.Model, w applied.Writer) error {
	r.setWriter(w)
	r.Notes = append(r.Notes, OtherKindNote)
	if !w.Native && d.Holding != nil {
		found, err := d.Holding(ctx, netns, m)
		if err != nil {
			return err
		}
		w.Backend, w.BackendIPv6 = found.Backend, found.BackendIPv6
		r.setWriter(w)
	}
	var err error
	r.Have, err = observe(ctx, d, netns, m, w)
	return err
}

// OtherKindNote says a sandbox with no record holds its rules as the
// other kind of writer writes them.
const OtherKindNote = "no record of this sandbox; its rules are of the other kind than this node's plugin writes " +
	"(native nftables against iptables: native_nftables differs from the plugin that started it, as after a switch from upstream's istio-cni " +
	"with another global.nativeNftables): the audit takes them for the pod's; a restart gives it this node's"

// EarlierBuildNote says a sandbox with no record holds the rules an
// earlier build wrote for the pod's settings (decision.EarlierRules).
const EarlierBuildNote = "no record of this sandbox; it holds the rules an earlier istio-cni wrote for these settings " +
	"(the status port 15020 excluded outbound beside excludeOutboundPorts): the audit takes them for the pod's; a restart gives it upstream's"

// observe lists the rules of ours the namespace holds, as w wrote them:
// iptables' in each family, or our native nftables tables.
func observe(ctx context.Context, d Deps, netns string, m iptables.Model, w applied.Writer) ([]string, error) {
	if w.Native {
		if d.ObserveNative == nil {
			return nil, nil
		}
		return d.ObserveNative(ctx, netns, m)
	}
	var have []string
	for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		obs, err := d.Observe(ctx, netns, w.For(f), f)
		if err != nil {
			if f == iptables.IPv6 {
				continue // a node without ip6tables: IPv4 is what there is
			}
			return nil, err
		}
		have = append(have, prefixed(f, obs.OursListing())...)
	}
	return have, nil
}

// strays lists the rules of ours in an unrecorded sandbox, each family
// read in the backend w guesses for it and, when none are there or IPv6's
// cannot be read there, in the other one (a node's alternatives can lead
// each family elsewhere, an older writer may have used either, and a node
// may have one backend's ip6tables only); r says where each was read.
func strays(ctx context.Context, d Deps, netns string, r *Report, w applied.Writer) error {
	at := map[iptables.Family]release.Backend{}
	for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		b := w.For(f)
		obs, err := d.Observe(ctx, netns, b, f)
		if other := b.Other(); err != nil && f == iptables.IPv6 && other != "" {
			if o, oErr := d.Observe(ctx, netns, other, f); oErr == nil {
				obs, b, err = o, other, nil
			}
		}
		if err != nil {
			if f == iptables.IPv6 {
				continue // a node without ip6tables: IPv4 is what there is
			}
			return err
		}
		lines := obs.OursListing()
		if other := b.Other(); len(lines) == 0 && other != "" {
			if o, err := d.Observe(ctx, netns, other, f); err == nil && len(o.OursListing()) > 0 {
				lines, b = o.OursListing(), other
			}
		}
		at[f] = b
		r.Have = append(r.Have, prefixed(f, lines)...)
	}
	r.Backend, r.BackendIPv6 = at[iptables.IPv4], ""
	if b, ok := at[iptables.IPv6]; ok && b != r.Backend {
		r.BackendIPv6 = b
	}
	return nil
}

// nativeListing is the native nftables ruleset a model stands for.
func nativeListing(m iptables.Model) []string {
	rs := nftables.Of(m)
	return rs.Listing()
}

// want is what the pod must hold, as the node agent holds it to: the
// record of what ADD applied to this sandbox, else the decision now.
func want(r *Report, o Options, d Deps, pod *Pod, dec decision.Decision, ns netnsdir.NSFile) (iptables.Model, bool, error) {
	stack, err := decision.Families(o.Settings.IPv6, dec.DualStack, pod.IPs, func() (bool, error) { return d.HasIPv6(ns.Path) })
	if d.Records != nil {
		recs, _ := d.Records.ForPod(pod.Metadata.UID)
		for _, rec := range recs {
			if rec.NetnsInode != ns.Inode {
				continue
			}
			m, known := rec.Model()
			r.setWriter(rec.Writer(o.Writer))
			if !known {
				r.Recorded, r.NewerRecord = true, rec.Version
				return iptables.Model{}, false, nil
			}
			if rec.Passed {
				// A sandbox passed through records no writer: the
				// node's says where ours would be.
				r.setWriter(o.Writer)
				r.Redirect, r.Recorded = false, true
				return iptables.Model{}, false, nil
			}
			invalid := r.Invalid
			r.Redirect, r.Recorded, r.Invalid = true, true, ""
			r.Families = decision.FamilyNames(rec.IPv4, rec.IPv6)
			switch {
			case invalid != "":
				r.SettingsChanged = "invalid now: " + invalid
			case !dec.Redirect:
				r.SettingsChanged = "no longer meshed: " + string(dec.Reason)
			case !applied.SameSettings(rec.Spec, decision.FinalSpec(dec, o.Settings)):
				r.SettingsChanged = applied.SpecDiff(rec.Spec, decision.FinalSpec(dec, o.Settings))
			}
			if err == nil && rec.IPv6 && stack.IPv4OnlyProxy {
				r.Notes = append(r.Notes, decision.IPv6ProxyNote)
			}
			return m, true, nil
		}
	}
	r.setWriter(o.Writer.Guess())
	if !dec.Redirect || r.Invalid != "" {
		return iptables.Model{}, false, nil
	}
	if err != nil {
		return iptables.Model{}, false, err
	}
	r.Families = decision.FamilyNames(stack.V4, stack.V6)
	if stack.IPv4OnlyProxy {
		r.Notes = append(r.Notes, decision.IPv6ProxyNote)
	}
	return decision.Rules(dec, o.Settings, stack.V4, stack.V6), true, nil
}

// setWriter says how the sandbox's rules are read.
func (r *Report) setWriter(w applied.Writer) {
	r.Native, r.Backend, r.BackendIPv6, r.guessed = w.Native, w.Backend, w.BackendIPv6, w.Guessed
}

// runtimeConfig names the config the runtime uses (the first in its
// order) and whether it chains istio-cni.
func runtimeConfig(dir string) (string, bool, error) {
	if dir == "" {
		return "", false, errors.New("no CNI config directory given")
	}
	cd, err := install.ReadConfDir(dir)
	if err != nil {
		return "", false, err
	}
	if len(cd.Files) == 0 {
		return "", false, fmt.Errorf("no CNI config in %s", dir)
	}
	first := cd.Files[0]
	if first.Data == nil {
		return first.Name, false, fmt.Errorf("%s: not a regular file of at most %d bytes", first.Name, chain.MaxConfigSize)
	}
	return first.Name, chain.HasEntry(first.Data), nil
}

func nodeOr(n string) string {
	if n == "" {
		return "the pod's node"
	}
	return "node " + n
}

func prefixed(f iptables.Family, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = f.String() + " " + l
	}
	return out
}
