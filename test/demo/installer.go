package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// startInstaller runs install-cni as the DaemonSet would, on the demo
// node's directories, and waits for /readyz. Its service-account volume
// holds the plugin user's token, so the kubeconfig it writes is one the
// plugin can use.
func (n *node) startInstaller() error {
	sa, err := n.serviceAccount()
	if err != nil {
		return err
	}
	u, err := url.Parse(n.api.URL)
	if err != nil {
		return err
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	health, metrics := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
	n.kubeconfigDir = filepath.Join(n.dir, "var-run-istio-cni")
	cmd := exec.Command(filepath.Join(n.img, "install-cni"),
		"--cni-bin-dir="+n.bin, "--cni-net-dir="+n.netd, "--kubeconfig-dir="+n.kubeconfigDir,
		"--host-kubeconfig-path="+filepath.Join(n.kubeconfigDir, "istio-cni-kubeconfig"),
		"--service-account-dir="+sa, "--pod-namespace=istio-cni",
		"--health-addr=127.0.0.1:"+health, "--metrics-addr=127.0.0.1:"+metrics)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port())
	// No Pdeathsig: it fires when the starting OS thread exits, and the
	// namespace code ends locked threads. The demo stops it by PID below.
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return err
	}
	n.defer_(func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		fmt.Printf("   install-cni stopped; its last words: %s", lastLine(logs.Bytes()))
		return nil
	})
	readyz := "http://127.0.0.1:" + health + "/readyz"
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(readyz) //nolint:noctx // local, bounded by the loop
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Printf("   GET %s: %d %s", readyz, resp.StatusCode, body)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("install-cni not ready after 30s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serviceAccount is the installer's service-account volume: the plugin
// user's token and the API's CA.
func (n *node) serviceAccount() (string, error) {
	sa := filepath.Join(n.dir, "serviceaccount")
	if err := os.Mkdir(sa, 0o755); err != nil {
		return "", err
	}
	ca, err := os.ReadFile(n.api.CAFile)
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"token": []byte(cluster.PluginToken), "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(sa, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return sa, nil
}

func lastLine(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(lines[len(lines)-1]) + "\n"
}

// copyFile copies a built binary into the node's bin directory.
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}
