package plugin

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// finish ends a verb: its one log line, then the same outcome to the agent.
// The report wakes the audit: in the agent, it goes after the shim has
// its answer (host.deliver), so that the audit's read-back does not
// compete with the pod's start.
func (p *Plugin) finish(log *slog.Logger, conf *Config, verb string, args *skel.CmdArgs, h host, out outcome, start time.Time, err error) {
	end := p.deps.Now()
	logOutcome(log, verb, args, out, end.Sub(start), err)
	h.deliver(func() { p.report(log, conf, verb, args, h, out, start, end, err) })
}

// report sends the outcome to the agent's socket when the config names one.
// It cannot change the verb's result: an absent agent (the DaemonSet not yet
// or no longer running) is silent, and any other failure, a full queue
// included, is a debug line. It costs at most reports.SendTimeout.
func (p *Plugin) report(log *slog.Logger, conf *Config, verb string, args *skel.CmdArgs, h host, out outcome, start, end time.Time, err error) {
	if conf == nil || conf.ReportsSocket == "" {
		return
	}
	rep := reports.Report{
		Time:       end,
		Verb:       verb,
		Pod:        out.pod,
		PodUID:     out.podUID,
		Container:  args.ContainerID,
		Netns:      h.netns(args),
		Redirect:   out.decision.Redirect,
		Reason:     string(out.decision.Reason),
		Families:   out.families,
		Note:       strings.Join(out.notes, ","),
		DurationMS: millis(end.Sub(start)),
		APIMS:      millis(out.apiTime),
		NetnsMS:    millis(out.netnsTime),
	}
	if err != nil {
		rep.Error = err.Error()
		if cniErr := (*types.Error)(nil); errors.As(err, &cniErr) && cniErr.Code == ErrAPIDenied {
			rep.Note = reports.NoteCredentialsRefused
		}
	}
	if sendErr := h.sendReport(conf, rep); sendErr != nil {
		log.Debug("cannot report to the agent", "verb", verb, "container", args.ContainerID, "error", sendErr.Error())
	}
}

// millis is a duration in milliseconds, to the microsecond, as logged.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
