// Command install-cni runs in the istio-cni DaemonSet on every node: it
// installs the plugin, its kubeconfig and the chained conflist, keeps them
// in place, and removes them when the DaemonSet is deleted; it audits the
// node's meshed pods and keeps the node's startup taint in step. Its
// inspect subcommand explains one pod (see inspect.go).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/install"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "inspect" {
		inspectMain(os.Args[2:])
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "install-cni:", err)
		os.Exit(1)
	}
}

func run() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg, err := install.ParseFlags(os.Args[1:], os.Getenv, filepath.Dir(self))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	api, rc, err := apiClients(cfg, log)
	if err != nil {
		return err
	}
	metrics := install.NewMetrics()
	in := install.New(cfg, log, metrics, api)
	duties := &nodeDuties{stop: func() {}}
	if rc != nil {
		if duties, err = newNodeDuties(cfg, rc, in, metrics.Registry, log); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	dutiesCtx, stopDuties := context.WithCancel(ctx)
	defer stopDuties()
	var wake func(string)
	if duties.audit != nil {
		wake = duties.audit.Wake
	}
	// The plugin's reports are best effort: without them the agent still
	// installs, repairs and audits.
	waitEvents, err := listenEvents(dutiesCtx, cfg, log, wake)
	if err != nil {
		log.Warn("not listening for the plugin's reports", "error", err.Error())
		waitEvents = func() {}
	}
	wait := duties.start(dutiesCtx, log)
	err = in.Run(ctx)
	stopDuties()
	wait()
	waitEvents()
	return err
}

// apiClients connects the installer's API uses with its in-cluster
// credentials. Outside a cluster it runs without them: the plugin then
// carries the installer's token and is never uninstalled at shutdown.
func apiClients(cfg install.Config, log *slog.Logger) (install.API, *rest.Config, error) {
	var api install.API
	rc, err := rest.InClusterConfig()
	if err != nil {
		if cfg.PluginServiceAccount != "" {
			return api, nil, fmt.Errorf("--plugin-service-account %q needs API access to mint its tokens: %w", cfg.PluginServiceAccount, err)
		}
		log.Warn("no API access: at shutdown the plugin is always left installed; no node audit, no taint", "error", err.Error())
		return api, nil, nil
	}
	if api.Uninstall, err = install.DaemonSetGone(rc, cfg.PodNamespace, cfg.DaemonSetName); err != nil {
		return api, nil, err
	}
	if cfg.PluginServiceAccount != "" {
		api.PluginToken, err = install.PluginTokenMinter(rc, cfg.PodNamespace, cfg.PluginServiceAccount, cfg.PluginTokenTTL)
	}
	return api, rc, err
}
