package nodeagent

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/envflag"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

const uninstallUsage = `usage: install-cni uninstall [flags]

Removes istio-cni from a node whose agent is not running (the node was
down or the agent crash-looping when istio-cni was deleted): first every
CNI config that chains istio-cni, then the plugin and its API lookup
helper, its kubeconfig, the sandboxes' records and the agent's socket. The primary CNI's own config is
kept (only our entry is removed from it), and so is what upstream Istio's
installer wrote at the same paths (its entry, binary and kubeconfig). Run it on the node, as root:

  install-cni uninstall --cni-bin-dir=/opt/cni/bin --cni-net-dir=/etc/cni/net.d --run-dir=/var/run/istio-cni

or with deployments/optional/uninstall-node-job.yaml, which mounts the
node's directories where the defaults expect them. It refuses to run while
an agent is running on the node (it would reinstall at once): delete the
DaemonSet instead.

`

// Uninstall is the uninstall subcommand; it returns the exit status.
// selfDir holds this binary, and the plugin beside it in the image: a
// plugin binary on the node is removed only when it is that one, or
// another build of istio-cni.
func Uninstall(args []string, getenv func(string) string, selfDir string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { _, _ = fmt.Fprint(stderr, uninstallUsage); fs.PrintDefaults() }
	var cfg install.Config
	f := envflag.Set{FS: fs, Getenv: getenv}
	paths := install.BindPaths(f, install.HostRoot)
	own := install.BindOwnFiles(f, selfDir)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "install-cni uninstall: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := paths.Clean(); err != nil {
		_, _ = fmt.Fprintln(stderr, "install-cni uninstall:", err)
		return 2
	}
	cfg.Paths = *paths
	// Named as when chained, --chained's default: a standalone config
	// holds our entry alone, and goes whatever its name.
	cfg.OwnFiles = own(true)
	if sock := filepath.Join(cfg.RunDir, install.ReportsSocket); reports.Listening(sock) {
		_, _ = fmt.Fprintf(stderr, "install-cni uninstall: an istio-cni agent is running on this node (it listens at %s) and would reinstall at once: delete its DaemonSet instead\n", sock)
		return 1
	}
	cfg.Mode = install.Owned
	log := slog.New(slog.NewTextHandler(stdout, nil))
	if err := install.New(cfg, install.Deps{Log: log}).Uninstall(); err != nil {
		_, _ = fmt.Fprintln(stderr, "install-cni uninstall:", err)
		return 1
	}
	return 0
}
