package nodeagent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
)

// Command is install-cni's command line (cmd/install-cni): a subcommand
// named by its first argument (version, or --version; inspect;
// uninstall), else the agent with its flags. executable is the binary's
// own path (os.Executable): the agent and uninstall take the plugin's
// files from beside it. It returns the exit status.
func Command(args []string, getenv func(string) string, executable func() (string, error), stdout, stderr io.Writer) int {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "version", "--version", "-version":
		return Version(args[1:], stdout, stderr)
	case "inspect":
		return Inspect(args[1:], getenv, stdout, stderr)
	}
	self, err := executable()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "install-cni:", err)
		return 1
	}
	if sub == "uninstall" {
		return Uninstall(args[1:], getenv, filepath.Dir(self), stdout, stderr)
	}
	return Main(args, getenv, filepath.Dir(self), stderr)
}

// Main runs the agent: the DaemonSet's container command. It returns the
// exit status.
func Main(args []string, getenv func(string) string, selfDir string, stderr io.Writer) int {
	cfg, err := ParseFlags(args, getenv, selfDir)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "install-cni:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.Install.LogLevel}))
	agent, err := New(cfg, apiConfig(cfg.Install), log)
	if err != nil {
		log.Error("starting", "error", err.Error())
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agent.Run(ctx); err != nil {
		log.Error("stopped", "error", err.Error())
		return 1
	}
	return 0
}

// apiConfig is the agent's API access: the server the plugin's kubeconfig
// names (KUBERNETES_SERVICE_HOST and _PORT) with the agent's own projected
// token and CA from --service-account-dir, re-read as the kubelet rotates
// them. nil without a server or a token: the installer then runs alone.
func apiConfig(c install.Config) *rest.Config {
	token := filepath.Join(c.ServiceAccountDir, "token")
	if c.APIHost == "" || c.APIPort == "" {
		return nil
	}
	if _, err := os.Stat(token); err != nil {
		return nil
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(c.APIHost, c.APIPort),
		BearerTokenFile: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(c.ServiceAccountDir, "ca.crt")},
	}
}
