package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/poll"
)

// The test binary doubles as pause (helper "pause") and as a child that
// exits at once (helper "exit").
const helperEnv = "PAUSE_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "exit":
		os.Exit(0)
	case "pause":
		// Start a child that exits at once; only pause can reap it.
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), helperEnv+"=exit")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Println(c.Process.Pid)
		main()
	}
	os.Exit(m.Run())
}

func TestReapsChildrenAndExitsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), helperEnv+"=pause")
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			child, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil {
				t.Fatal(err)
			}
			// A reaped child leaves no /proc entry; a zombie keeps one.
			// Reaping needs the SIGCHLD handler, which comes with the
			// SIGTERM/SIGINT one.
			poll.UntilTrue(t, 10*time.Second, "the child to be reaped", func() bool {
				_, err := os.Stat(fmt.Sprintf("/proc/%d", child))
				return os.IsNotExist(err)
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause after %s: %v, want exit 0", sig, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("pause still running 10s after %s", sig)
			}
		})
	}
}
