// Command pause is the test cluster's pod sandbox ("pause") image
// entrypoint: it holds the pod's namespaces open until SIGTERM or SIGINT,
// then exits 0. As PID 1 of a pod sharing its PID namespace it also reaps
// orphaned children, which would otherwise stay zombies.
package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Two channels: signal.Notify drops a signal when the channel is full,
	// and a pending SIGCHLD must not crowd out SIGTERM.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	// Children that exited before the handler was installed sent their
	// SIGCHLD to nobody.
	reap()
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			reap()
		}
	}
}

// reap waits for every exited child; SIGCHLDs coalesce, so one signal may
// stand for several.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return // no exited child left (0), or no child at all (ECHILD)
		}
	}
}
