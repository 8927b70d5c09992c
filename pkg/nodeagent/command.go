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
