package plugin

import (
	"errors"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// host is where a verb runs, chosen once by its entry point and passed
// down: the plugin's own process (inPlugin: Plugin.Add, Del, Check) or the
// node agent, running an ADD for the plugin's shim (*agentRun:
// AgentSide.RunAdd). Every way the two differ is one of its methods;
// nothing below the entry point asks where it runs.
type host interface {
	// admit fits a parsed config to the host, or refuses the verb.
	admit(conf *Config) error
	// handBack is what a failure returns, unlogged and unreported, when
	// the host hands it back to the plugin; nil where it is the verb's
	// own to log and report.
	handBack(err error) error
	// write is how an ADD writes the planned rules into a fresh sandbox;
	// trusted: the agent's audit reads them back, so the ADD need not.
	write(conf *Config, pl plan, trusted bool) (xtables.Write, error)
	// mayWrite refuses, before anything is written, an ADD the host
	// cannot finish.
	mayWrite(pl plan) error
	// deliver runs send, the verb's report: at once, or once the shim has
	// its answer.
	deliver(send func())
	// sendReport sends a report to the entry's reports_socket.
	sendReport(conf *Config, ev reports.Report) error
	// netns is the sandbox's namespace as the node names it.
	netns(args *skel.CmdArgs) string
	// name is the host in the log line; empty for the plugin.
	name() string
}

// inPlugin is the plugin's own process: it logs and reports every verb,
// and writes over netlink where the node's iptables lets it.
type inPlugin struct{}

func (inPlugin) admit(*Config) error             { return nil }
func (inPlugin) handBack(error) error            { return nil }
func (inPlugin) mayWrite(plan) error             { return nil }
func (inPlugin) deliver(send func())             { send() }
func (inPlugin) name() string                    { return "" }
func (inPlugin) netns(args *skel.CmdArgs) string { return args.Netns }

func (inPlugin) write(conf *Config, pl plan, trusted bool) (xtables.Write, error) {
	if conf.parsed.Native {
		// Native nftables always goes over netlink (podnet): no
		// iptables release to look up.
		return xtables.Write{Trusted: trusted}, nil
	}
	return xtables.Write{Netlink: netlinkFamilies(conf, pl), Trusted: trusted}, nil
}

// sendReport: an absent agent (the DaemonSet not yet or no longer
// running) is no error.
func (inPlugin) sendReport(conf *Config, ev reports.Report) error {
	if err := reports.Send(conf.ReportsSocket, ev); !errors.Is(err, reports.ErrNoAgent) {
		return err
	}
	return nil
}
