package plugin

import (
	"errors"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// finish ends a verb: its one log line, then the same outcome to the agent.
func (p *Plugin) finish(log *slog.Logger, conf *Config, verb string, args *skel.CmdArgs, out outcome, start time.Time, err error) {
	end := p.deps.Now()
	logOutcome(log, verb, args, out, end.Sub(start), err)
	if p.deps.agent != nil {
		// The report wakes the audit: in the agent, it goes after the
		// shim has its answer, so that the audit's read-back does not
		// compete with the pod's start.
		p.deps.agent.afterReply = func() { p.report(log, conf, verb, args, out, start, end, err) }
		return
	}
	p.report(log, conf, verb, args, out, start, end, err)
}

// report sends the outcome to the agent's socket when the config names one.
// It cannot change the verb's result: an absent agent (the DaemonSet not yet
// or no longer running) is silent, and any other failure, a full queue
// included, is a debug line. It costs at most reports.SendTimeout.
func (p *Plugin) report(log *slog.Logger, conf *Config, verb string, args *skel.CmdArgs, out outcome, start, end time.Time, err error) {
	if conf == nil || conf.ReportsSocket == "" {
		return
	}
	netns := args.Netns
	if p.deps.agent != nil {
		netns = p.deps.agent.req.Netns // args.Netns is the agent's descriptor
	}
	ev := reports.Report{
		Time:       end,
		Verb:       verb,
		Pod:        out.pod,
		PodUID:     out.podUID,
		Container:  args.ContainerID,
		Netns:      netns,
		Redirect:   out.decision.Redirect,
		Reason:     string(out.decision.Reason),
		Families:   out.families,
		Note:       out.note,
		DurationMS: millis(end.Sub(start)),
		APIMS:      millis(out.apiTime),
		NetnsMS:    millis(out.netnsTime),
	}
	if err != nil {
		ev.Error = err.Error()
		if cniErr := (*types.Error)(nil); errors.As(err, &cniErr) && cniErr.Code == ErrAPIDenied {
			ev.Note = reports.NoteCredentialsRefused
		}
	}
	if a := p.deps.agent; a != nil && a.side.Report != nil && conf.ReportsSocket == a.side.ReportsSocket {
		a.side.Report(ev)
		return
	}
	if sendErr := reports.Send(conf.ReportsSocket, ev); sendErr != nil && !errors.Is(sendErr, reports.ErrNoAgent) {
		log.Debug("cannot report to the agent", "verb", verb, "container", args.ContainerID, "error", sendErr.Error())
	}
}

// millis is a duration in milliseconds, to the microsecond, as logged.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
