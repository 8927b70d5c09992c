package plugin

import (
	"log/slog"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// The plumbing every verb shares: its config, its one log line, its report.

// outcome is what one verb decided, for its log line.
type outcome struct {
	pod      string
	podUID   string
	decision decision.Decision
	families string
	// apiTime and netnsTime split the duration: the pod lookup (client set-up
	// included) and the work in the pod's namespace.
	apiTime, netnsTime time.Duration
	// rulesBy is what wrote the rules into the pod's namespace
	// ("netlink", "iptables-restore").
	rulesBy string
	// warnings are problems that did not change the verb's result.
	warnings []string
	// notes are what the agent tells people of the pod (reports.Note*).
	notes []string
	// podFrom is what the decision read: "runtime" (the annotations the
	// runtime passed settled it), "agent" or "api" (who answered the pod
	// lookup); empty when there was none.
	podFrom string
	// agentMiss is why the agent, when asked, did not answer.
	agentMiss string
	// agentReadsBack: the agent answered, and its audit reads this pod's
	// rules back and repairs them.
	agentReadsBack bool
	// ranIn is "agent" when the node agent ran the verb for the shim;
	// handedBack why the agent handed this ADD back to the plugin, and
	// notHandedOff why the shim did not ask it.
	ranIn, handedBack, notHandedOff string
}

// verb runs one verb on host h with its config, logs its one line (pod,
// decision, duration, error) and reports the same to the agent. A failure
// h hands back is neither logged nor reported: the plugin runs the verb
// again and does both.
func (p *Plugin) verb(name string, args *skel.CmdArgs, h host, run func(*Config, *outcome) error) error {
	start := p.deps.Now()
	out := outcome{handedBack: p.deps.HandedBack, notHandedOff: p.deps.NotHandedOff, ranIn: h.name()}
	conf, err := parseConfig(args.StdinData)
	if err == nil {
		err = h.admit(conf)
	}
	if back := h.handBack(err); back != nil {
		return back
	}
	log, closeLog := newLogger(conf, p.deps.Stderr)
	defer closeLog()
	if err == nil {
		err = run(conf, &out)
	}
	if back := h.handBack(err); back != nil {
		return back
	}
	p.finish(log, conf, name, args, h, out, start, err)
	return err
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
	if out.podFrom != "" {
		attrs = append(attrs, "pod_from", out.podFrom)
	}
	if out.apiTime > 0 {
		attrs = append(attrs, "api_ms", millis(out.apiTime))
		if out.agentMiss != "" {
			attrs = append(attrs, "agent_miss", out.agentMiss)
		}
	}
	if out.netnsTime > 0 {
		attrs = append(attrs, "netns_ms", millis(out.netnsTime))
	}
	if out.rulesBy != "" {
		attrs = append(attrs, "rules_by", out.rulesBy)
	}
	if out.ranIn != "" {
		attrs = append(attrs, "ran_in", out.ranIn)
	}
	if out.handedBack != "" {
		attrs = append(attrs, "handed_back", out.handedBack)
	}
	if out.notHandedOff != "" {
		attrs = append(attrs, "not_handed_off", out.notHandedOff)
	}
	if len(out.warnings) > 0 {
		attrs = append(attrs, "warnings", out.warnings)
	}
	if slices.Contains(out.notes, reports.NoteIPv4OnlyProxy) {
		attrs = append(attrs, "note", decision.IPv6ProxyNote)
	}
	switch {
	case err != nil:
		log.Error(verb+" failed", append(attrs, "error", err.Error())...)
	case len(out.warnings) > 0:
		log.Warn(verb, attrs...)
	default:
		log.Info(verb, attrs...)
	}
}
