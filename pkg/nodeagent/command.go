package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"k8s.io/client-go/rest"
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
	rc, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		rc, err = nil, nil
	}
	if err != nil {
		log.Error("API credentials", "error", err.Error())
		return 1
	}
	agent, err := New(cfg, rc, log)
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
