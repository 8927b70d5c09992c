package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// modulePath is the module line that marks the repository root.
const modulePath = "istio-cni.local/istio-cni"

// apiserverBinary returns the kube-apiserver to run: $KUBE_APISERVER if set,
// else <repo root>/_output/bin/kube-apiserver.
func apiserverBinary() (string, error) {
	path := os.Getenv("KUBE_APISERVER")
	if path == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("locating kube-apiserver: %w (set KUBE_APISERVER)", err)
		}
		path = filepath.Join(root, "_output", "bin", "kube-apiserver")
	}
	if err := checkExecutable(path); err != nil {
		return "", fmt.Errorf("kube-apiserver: %w; run `make kube-binaries` (or set KUBE_APISERVER)", err)
	}
	return path, nil
}

// etcdBinary returns the etcd to run: $ETCD if set, else etcd from $PATH
// (Debian's etcd-server package installs /usr/bin/etcd).
func etcdBinary() (string, error) {
	if path := os.Getenv("ETCD"); path != "" {
		if err := checkExecutable(path); err != nil {
			return "", fmt.Errorf("etcd: %w", err)
		}
		return path, nil
	}
	path, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd: %w; install it with `apt-get install -y etcd-server` (or set ETCD)", err)
	}
	return path, nil
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// repoRoot walks up from the working directory to the directory whose go.mod
// declares modulePath. Nested modules (test/kube) are skipped.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := moduleOf(filepath.Join(dir, "go.mod"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if mod == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// moduleOf returns the module path declared in a go.mod file.
func moduleOf(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", s.Err()
}
