package nodeagent

import (
	"fmt"
	"io"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"istio-cni.local/istio-cni/pkg/version"
)

// Version is the version subcommand (install-cni version, or --version):
// one line, version.Line, on stdout. It reads no flag and no environment,
// so that it answers wherever the binary is. It returns the exit status.
func Version(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		_, _ = fmt.Fprintf(stderr, "install-cni version: unexpected arguments %q\n", args)
		return 2
	}
	if _, err := fmt.Fprintln(stdout, version.Line("install-cni")); err != nil {
		return 1
	}
	return 0
}

// registerBuildInfo exports istio_cni_build_info: 1, labelled with the
// agent's version and Go release, so that a dashboard tells which nodes
// run which build (a rollout's progress, a node left behind).
func registerBuildInfo(reg prometheus.Registerer) {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "istio_cni_build_info",
		Help:        "1, labelled with the node agent's build: its version (the release tag or commit) and the Go release it was built with.",
		ConstLabels: prometheus.Labels{"version": version.Get(), "go_version": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(info)
}
