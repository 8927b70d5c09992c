package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// opBudget bounds the work in the pod's namespace after the pod lookup. With
// the API budget (at most pluginconf.MaxAPITimeout) it stays below the kubelet's
// two-minute runtime request timeout, which the primary CNI shares.
const opBudget = 30 * time.Second

// Add redirects the pod's traffic if it must be, then passes the previous
// result through. It fails, and programs nothing, whenever it cannot be sure
// a pod that must be redirected is.
func (p *Plugin) Add(args *skel.CmdArgs) error { return p.add(args, inPlugin{}) }

// add is ADD on host h. redirect's steps, in order: plan (the pod's
// decision and spec), what an earlier ADD of the sandbox left
// (earlierADD), its families, a repeated ADD's recorded spec
// (keepRecorded), how h writes them (the
// xtables.Write), whether it may, the model written in the pod's
// namespace, the record, and a repeated ADD's removal of what an earlier
// one wrote elsewhere (removeCopy).
func (p *Plugin) add(args *skel.CmdArgs, h host) error {
	return p.verb("ADD", args, h, func(conf *Config, out *outcome) error {
		result, err := resultFor(conf)
		if err != nil {
			return err
		}
		if err := p.redirect(args, conf, h, out); err != nil {
			return err
		}
		return result.PrintTo(p.deps.stdout())
	})
}

func (p *Plugin) redirect(args *skel.CmdArgs, conf *Config, h host, out *outcome) error {
	pl, ok, planErr := p.plan(args, conf, out)
	repeated, earlier, unread := p.earlierADD(conf, args, out)
	// The spec an earlier ADD recorded, where this build reads it, is
	// what this one writes (keepRecorded).
	recordedSpec := earlier != nil && !earlier.Newer()
	switch {
	case planErr != nil && !recordedSpec:
		return planErr
	case planErr != nil:
		// An edit since the pod started that does not parse, or a
		// lookup that failed: the record already says what to write.
		// A dual-stack proxy's record holds IPv6 (decision.Families),
		// and a container's env never changes: the record says what
		// the unread pod would.
		out.decision = decision.Decision{Redirect: true, Reason: decision.Recorded, DualStack: earlier.IPv6}
		out.warnings = append(out.warnings, "an earlier ADD of this sandbox redirected it, and its recorded rules are written: "+planErr.Error())
		pl.spec = earlier.Spec
	// Istio reads annotations when a pod starts: an edit since (or a
	// namespace excluded since) must not weaken what the sandbox holds,
	// and its record says what that is.
	case !ok && earlier != nil:
		out.decision = decision.Decision{Redirect: true, Reason: decision.Recorded}
		out.families = decision.FamilyNames(earlier.IPv4, earlier.IPv6)
		out.warnings = append(out.warnings, "an earlier ADD of this sandbox redirected it: its rules and record stay")
		return nil
	case !ok && unread:
		out.warnings = append(out.warnings, "an earlier ADD of this sandbox left a record that does not read: it, and any rules, stay")
		return nil
	case !ok:
		p.recordPassed(conf, args, out)
		return nil
	}
	network := p.deps.NewPodNetwork(conf.writer())
	start := p.deps.Now()
	defer func() { out.netnsTime = p.deps.Now().Sub(start) }()
	if err := p.stack(conf, out, &pl, func() (bool, error) { return network.HasIPv6(args.Netns) }); err != nil {
		return err
	}
	if recordedSpec {
		keepRecorded(&pl, *earlier, out)
	}
	// A write is trusted without its read-back only when the agent's
	// audit reads it back instead, and only into a sandbox ADD never
	// programmed: a repeated ADD reads back, which reconciles what an
	// earlier ADD wrote in the same place.
	// An ADD the agent handed back may have left rules (it ran out of
	// time, or nf_tables refused a batch): read back.
	trusted := out.agentReadsBack && p.deps.HandedBack == "" && !repeated
	w, err := h.write(conf, pl, trusted)
	if err != nil {
		return err
	}
	if err := h.mayWrite(pl); err != nil {
		return err
	}
	// The record is staged while the rules go in, and put in place once
	// they are.
	rec := p.stageRecord(conf, args, out, pl)
	committed := false
	defer func() {
		if !committed {
			rec.discard() // a failure or a panic: no record
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), opBudget)
	defer cancel()
	written, err := network.Program(ctx, args.Netns, pl.model(), w)
	out.warnings = append(out.warnings, writeWarnings(written)...)
	if err != nil {
		return netnsError(out.pod, "programming the redirect", err)
	}
	out.rulesBy = rulesBy(written)
	if conf.parsed.Native {
		out.rulesBy = "nftables"
	}
	committed = true
	if rec.commit(out) && recordedSpec {
		p.removeCopy(ctx, conf, args, out, *earlier, pl.model())
	}
	return nil
}

// earlierADD reads what an earlier ADD of this sandbox left (a runtime's
// retry, Multus adding a network): repeated when there is a record (one
// stat: most ADDs are a sandbox's first), earlier when it redirected the
// sandbox, unread when it is there but does not read.
func (p *Plugin) earlierADD(conf *Config, args *skel.CmdArgs, out *outcome) (repeated bool, earlier *applied.Record, unread bool) {
	if out.podUID == "" || conf.RecordsDir == "" || !(applied.Store{Dir: conf.RecordsDir}).Has(out.podUID, args.ContainerID) {
		return false, nil, false
	}
	r, found := recorded(conf, args, out.podUID)
	switch {
	case !found:
		return true, nil, true
	case r.Passed:
		return true, nil, false
	}
	return true, &r, false
}

// keepRecorded makes a repeated ADD of a sandbox an earlier ADD
// redirected write the spec that ADD recorded, which is what the audit
// repairs to: an edit since to the pod's annotations (or to the node's
// TPROXY mark and table) must not change a running pod's rules through a
// runtime's retry or a network Multus adds. Its families are the
// recorded ones and any this ADD finds (stack): a network added since
// with IPv6 is redirected too, and a family redirected stays so.
func keepRecorded(pl *plan, r applied.Record, out *outcome) {
	if !applied.SameSettings(r.Spec, pl.spec) {
		out.warnings = append(out.warnings, "the pod's annotations or the node's settings changed since this sandbox's first ADD: it keeps the rules recorded then (recorded -> now: "+applied.SpecDiff(r.Spec, pl.spec)+")")
	}
	pl.spec = r.Spec
	pl.v4, pl.v6 = pl.v4 || r.IPv4, pl.v6 || r.IPv6
	out.families = decision.FamilyNames(pl.v4, pl.v6)
}

// removeCopy removes, once this ADD's iptables rules are in and recorded,
// those an earlier ADD of the sandbox wrote in the other backend, as its
// record r says: after the node's alternatives moved in between (a
// runtime's retry, Multus adding a network to the pod), that copy would
// stay beside the new one, and DEL, following the new record, would leave
// it. Only the families this ADD wrote whose backend the node's programs
// now lead to is not the recorded one, and each only where that backend,
// read just before, holds it whole (podnet.Network.RemoveCopy): the pod
// is never left without a whole copy. A copy left is a warning: the new
// rules are whole and verified.
func (p *Plugin) removeCopy(ctx context.Context, conf *Config, args *skel.CmdArgs, out *outcome, r applied.Record, m iptables.Model) {
	if r.Native || conf.parsed.Native || !r.Backend.Concrete() {
		return // native tables, or no backend named
	}
	// A record before version 3 names one backend, both families'.
	was, now := writerOf(conf, r), conf.nodeWriter()
	moved := func(f iptables.Family, recorded bool) bool {
		return recorded && was.For(f).Concrete() && now.For(f).Concrete() && was.For(f) != now.For(f)
	}
	copies := m
	if !moved(iptables.IPv4, r.IPv4) {
		copies.V4 = nil
	}
	if !moved(iptables.IPv6, r.IPv6) {
		copies.V6 = nil
	}
	if copies.V4 == nil && copies.V6 == nil {
		return // the node writes each family where the earlier ADD did
	}
	if err := p.deps.NewPodNetwork(was).RemoveCopy(ctx, args.Netns, copies); err != nil {
		out.warnings = append(out.warnings, "removing the rules an earlier ADD of this sandbox wrote in the other iptables backend: "+err.Error())
	}
}

// plan is what a redirected pod must hold: its spec, with the node's
// settings, and its families (stack).
type plan struct {
	spec   iptables.Spec
	v4, v6 bool
}

func (pl plan) model() iptables.Model { return iptables.Build(pl.spec, pl.v4, pl.v6) }

// plan decides for the pod named in CNI_ARGS and, when it must be
// redirected, returns its spec; its families are stack's. ok=false means
// pass through.
func (p *Plugin) plan(args *skel.CmdArgs, conf *Config, out *outcome) (plan, bool, error) {
	ref, isPod, err := podID(args.Args)
	if err != nil {
		return plan{}, false, err
	}
	if !isPod {
		out.decision.Reason = decision.NotKubernetes
		return plan{}, false, nil
	}
	out.pod, out.podUID = ref.String(), ref.uid
	if d, decided := decision.Namespace(ref.namespace, conf.ExcludeNamespaces); decided {
		out.decision = d
		return plan{}, false, nil
	}
	if d, decided := decision.Annotations(conf.RuntimeConfig.PodAnnotations); decided {
		out.decision, out.podFrom = d, "runtime"
		return plan{}, false, nil
	}
	pod, err := p.getPod(conf, ref, out)
	if err != nil {
		return plan{}, false, err
	}
	if out.decision, err = decision.Pod(pod); err != nil {
		return plan{}, false, decisionError(out.pod, err)
	}
	if !out.decision.Redirect {
		return plan{}, false, nil
	}
	if len(out.decision.Unread) > 0 {
		out.warnings = append(out.warnings, decision.UnreadNote(out.decision.Unread))
		out.notes = append(out.notes, reports.ProxyEnvNotRead(out.decision.Unread))
	}
	if len(out.decision.NotBool) > 0 {
		out.warnings = append(out.warnings, decision.NotBoolNote(out.decision.NotBool))
		out.notes = append(out.notes, reports.ProxyEnvNotBool(out.decision.NotBool))
	}
	return plan{spec: decision.FinalSpec(out.decision, conf.parsed.Node())}, true, nil
}

// stack sets the planned pod's families, hasIPv6 reading its namespace
// when its addresses do not tell.
func (p *Plugin) stack(conf *Config, out *outcome, pl *plan, hasIPv6 func() (bool, error)) error {
	stack, err := families(conf, out.decision.DualStack, hasIPv6)
	if err != nil {
		return netnsError(out.pod, "reading the pod's addresses", err)
	}
	out.families = decision.FamilyNames(stack.V4, stack.V6)
	if stack.IPv4OnlyProxy {
		out.notes = append(out.notes, reports.NoteIPv4OnlyProxy)
	}
	pl.v4, pl.v6 = stack.V4, stack.V6
	return nil
}

// getPod reads the pod: from the node agent's informer when it answers
// within its budget with this very sandbox's pod (its UID, which the
// runtime passes), else from the API, building the client only now: pods
// decided without the API never pay for it. Both give the same pkg/kube
// subset, so the decision cannot depend on who answered.
func (p *Plugin) getPod(conf *Config, ref podRef, out *outcome) (*kube.Pod, error) {
	start := p.deps.Now()
	defer func() { out.apiTime = p.deps.Now().Sub(start) }()
	if conf.PodSocket != "" && ref.uid != "" && p.deps.AskAgent != nil {
		ans, err := p.deps.AskAgent(conf.PodSocket, ref.namespace, ref.name)
		switch {
		case err != nil:
			out.agentMiss = err.Error()
		case ans.Pod.Metadata.UID != ref.uid || ans.Pod.Metadata.Namespace != ref.namespace || ans.Pod.Metadata.Name != ref.name:
			out.agentMiss = fmt.Sprintf("it holds %s/%s uid %s", ans.Pod.Metadata.Namespace, ans.Pod.Metadata.Name, ans.Pod.Metadata.UID)
		default:
			out.podFrom, out.agentReadsBack = "agent", ans.ReadsBack
			return ans.Pod, nil
		}
	}
	out.podFrom = "api"
	getter, err := p.deps.NewPodGetter(conf)
	if err != nil {
		return nil, podError(fmt.Errorf("reading pod %s: %w", ref, err))
	}
	pod, err := getter.GetPod(context.Background(), ref.namespace, ref.name, ref.uid)
	var apiErr *kube.APIError
	switch {
	case errors.As(err, &apiErr):
		return nil, podError(err)
	case err != nil: // the kubeconfig, or the helper
		return nil, podError(fmt.Errorf("reading pod %s: %w", ref, err))
	}
	return pod, nil
}
