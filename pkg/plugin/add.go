package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
)

// opBudget bounds the work in the pod's namespace after the pod lookup. With
// the API budget (at most maxAPITimeout) it stays below the kubelet's
// two-minute runtime request timeout, which the primary CNI shares.
const opBudget = 30 * time.Second

// outcome is what one verb decided, for its log line.
type outcome struct {
	pod      string
	podUID   string
	decision decision.Decision
	families string
	// apiTime and netnsTime split the duration: the pod lookup (client set-up
	// included) and the work in the pod's namespace.
	apiTime, netnsTime time.Duration
}

// Add redirects the pod's traffic if it must be, then passes the previous
// result through. It fails, and programs nothing, whenever it cannot be sure
// a pod that must be redirected is.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	return p.verb("ADD", args, func(conf *Config, out *outcome) error {
		result, err := resultFor(conf)
		if err != nil {
			return err
		}
		if err := p.add(args, conf, out); err != nil {
			return err
		}
		return result.PrintTo(p.deps.stdout())
	})
}

// verb runs one verb with its config, logs its one line (pod, decision,
// duration, error) and reports the same to the agent.
func (p *Plugin) verb(name string, args *skel.CmdArgs, run func(*Config, *outcome) error) error {
	start := p.deps.Now()
	var out outcome
	conf, err := parseConfig(args.StdinData)
	log, closeLog := newLogger(conf, p.deps.Stderr)
	defer closeLog()
	if err == nil {
		err = run(conf, &out)
	}
	p.finish(log, conf, name, args, out, start, err)
	return err
}

func (p *Plugin) add(args *skel.CmdArgs, conf *Config, out *outcome) error {
	m, ok, err := p.model(args, conf, out)
	if err != nil || !ok {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opBudget)
	defer cancel()
	start := p.deps.Now()
	err = p.deps.NewPodNetwork(conf).Program(ctx, args.Netns, m)
	out.netnsTime = p.deps.Now().Sub(start)
	if err != nil {
		return netnsError(out.pod, "programming the redirect", err)
	}
	return nil
}

// model decides for the pod named in CNI_ARGS and, when it must be
// redirected, returns its rule model. ok=false means pass through.
func (p *Plugin) model(args *skel.CmdArgs, conf *Config, out *outcome) (iptables.Model, bool, error) {
	ref, isPod, err := podID(args.Args)
	if err != nil {
		return iptables.Model{}, false, err
	}
	if !isPod {
		out.decision.Reason = decision.NotKubernetes
		return iptables.Model{}, false, nil
	}
	out.pod, out.podUID = ref.String(), ref.uid
	if d, decided := decision.Namespace(ref.namespace, conf.ExcludeNamespaces, conf.AgentNamespace); decided {
		out.decision = d
		return iptables.Model{}, false, nil
	}
	pod, err := p.getPod(conf, ref, out)
	if err != nil {
		return iptables.Model{}, false, err
	}
	if out.decision, err = decision.Pod(pod); err != nil {
		return iptables.Model{}, false, decisionError(out.pod, err)
	}
	if !out.decision.Redirect {
		return iptables.Model{}, false, nil
	}
	v4, v6, err := families(conf, out.decision.DualStack, func() (bool, error) {
		return p.deps.NewPodNetwork(conf).HasIPv6(args.Netns)
	})
	if err != nil {
		return iptables.Model{}, false, netnsError(out.pod, "reading the pod's addresses", err)
	}
	out.families = decision.FamilyNames(v4, v6)
	node := decision.NodeSettings{TProxyMark: conf.TProxyMark, TProxyTable: conf.TProxyRouteTable}
	return decision.Rules(out.decision, node, v4, v6), true, nil
}

// getPod reads the pod, building the client only now: pods decided without
// the API never pay for it.
func (p *Plugin) getPod(conf *Config, ref podRef, out *outcome) (*kube.Pod, error) {
	start := p.deps.Now()
	defer func() { out.apiTime = p.deps.Now().Sub(start) }()
	getter, err := p.deps.NewPodGetter(conf)
	if err != nil {
		return nil, podError(fmt.Errorf("reading pod %s: %w", ref, err))
	}
	pod, err := getter.GetPod(context.Background(), ref.namespace, ref.name, ref.uid)
	if err != nil {
		return nil, podError(err)
	}
	return pod, nil
}

// logOutcome writes the one line per verb.
func logOutcome(log *slog.Logger, verb string, args *skel.CmdArgs, out outcome, d time.Duration, err error) {
	attrs := []any{"verb", verb, "container", args.ContainerID, "pod", out.pod, "duration_ms", millis(d)}
	if out.decision.Reason != "" {
		attrs = append(attrs, "redirect", out.decision.Redirect, "reason", string(out.decision.Reason))
	}
	if out.families != "" {
		attrs = append(attrs, "families", out.families)
	}
	if out.apiTime > 0 {
		attrs = append(attrs, "api_ms", millis(out.apiTime))
	}
	if out.netnsTime > 0 {
		attrs = append(attrs, "netns_ms", millis(out.netnsTime))
	}
	if err != nil {
		log.Error(verb+" failed", append(attrs, "error", err.Error())...)
		return
	}
	log.Info(verb, attrs...)
}
