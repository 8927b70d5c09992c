package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// overlay adapts deployments/ to a node whose "host" paths live under its
// directory, the way a user's overlay adapts it to their cluster: the
// hostPath volumes of the node's own directories (the node's netns
// directory and xtables lock are this machine's), where the plugin finds its
// kubeconfig, the API server address (no kube-proxy here, so no Service
// IP), health and metrics ports that cannot clash with this machine's, a
// short audit period so tests see repairs within seconds, and a 1 s
// runtime drain at uninstall (the suite uninstalls a dozen times; the
// switch test, with Helm and the chart's defaults, runs the 5 s one).
const overlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %[1]s
patches:
- target:
    kind: DaemonSet
    name: istio-cni-node
  patch: |-
    - op: test
      path: /spec/template/spec/volumes/0/name
      value: cni-bin-dir
    - op: replace
      path: /spec/template/spec/volumes/0/hostPath/path
      value: %[2]s
    - op: test
      path: /spec/template/spec/volumes/1/name
      value: cni-net-dir
    - op: replace
      path: /spec/template/spec/volumes/1/hostPath/path
      value: %[3]s
    - op: test
      path: /spec/template/spec/volumes/2/name
      value: cni-kubeconfig-dir
    - op: replace
      path: /spec/template/spec/volumes/2/hostPath/path
      value: %[4]s
    - op: test
      path: /spec/template/spec/volumes/3/name
      value: netns-dir
    - op: replace
      path: /spec/template/spec/volumes/3/hostPath/path
      value: %[8]s
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: AUDIT_INTERVAL, value: "2s"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: AUDIT_CONFIRM, value: "1s"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: RUNTIME_DRAIN, value: "1s"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: HOST_KUBECONFIG_PATH, value: %[4]s/istio-cni-kubeconfig}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: KUBERNETES_SERVICE_PORT, value: "%[5]d"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: HEALTH_ADDR, value: "%[9]s:%[6]d"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: METRICS_ADDR, value: "%[9]s:%[7]d"}
    - op: replace
      path: /spec/template/spec/containers/0/ports
      value:
      - {name: health, containerPort: %[6]d, protocol: TCP}
      - {name: metrics, containerPort: %[7]d, protocol: TCP}
    - op: replace
      path: /spec/template/spec/containers/0/readinessProbe/httpGet/port
      value: %[6]d
    - op: replace
      path: /spec/template/spec/containers/0/livenessProbe/httpGet/port
      value: %[6]d
`

// Overlay is where the node's DaemonSet listens and reaches the API.
type Overlay struct {
	APIPort int // the API server (or a proxy in front of it) on 127.0.0.1
	// The agent's /healthz and /readyz, and its /metrics, on the node's
	// IP: kubelet probes a host-network pod there.
	HealthPort, MetricsPort int
	Host                    netip.Addr
}

// HealthURL is the agent's path (/readyz, /healthz) on its health port.
func (o Overlay) HealthURL(path string) string {
	return "http://" + netip.AddrPortFrom(o.Host, uint16(o.HealthPort)).String() + path // #nosec G115 -- a port
}

// MetricsURL is the agent's /metrics.
func (o Overlay) MetricsURL() string {
	return "http://" + netip.AddrPortFrom(o.Host, uint16(o.MetricsPort)).String() + "/metrics" // #nosec G115 -- a port
}

// WriteOverlay writes a kustomization into dir that installs deployments/
// on this node. `kubectl apply -k dir` installs it.
func (n *Node) WriteOverlay(dir string, o Overlay) error {
	base, err := DeploymentsDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Kustomize takes a base only by a relative path.
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		return err
	}
	data := fmt.Sprintf(overlay, rel, n.CNIBinDir, n.CNINetDir, n.IstioRunDir, o.APIPort, o.HealthPort, o.MetricsPort, n.NetnsDir, n.NodeIP)
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(data), 0o600)
}

// APIPort is the API server's port (on 127.0.0.1 unless Options.Host).
func (a *APIServer) APIPort() int { return int(a.APIAddr().Port()) }

// APIAddr is the API server's address and port.
func (a *APIServer) APIAddr() netip.AddrPort {
	ap, _ := netip.ParseAddrPort(strings.TrimPrefix(a.URL, "https://"))
	return ap
}

// Install installs istio-cni on the node as a user does, `kubectl apply -k`
// of an overlay written into dir, with the agent reaching the API server
// at 127.0.0.1:apiPort, and waits for the rollout. It returns the overlay
// and kubectl's output.
func (n *Node) Install(ctx context.Context, dir string, apiPort int) (Overlay, string, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return Overlay{}, "", err
	}
	o := Overlay{APIPort: apiPort, HealthPort: ports[0], MetricsPort: ports[1], Host: n.NodeIP}
	if err := n.WriteOverlay(dir, o); err != nil {
		return o, "", err
	}
	out, err := n.Kubectl(ctx, "apply", "-k", dir)
	if err != nil {
		return o, out, err
	}
	_, err = n.Kubectl(ctx, "-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout=3m")
	return o, out, err
}

// settingsMark starts the block SetSettings writes at the end of an
// overlay's kustomization.
const settingsMark = "# The agent's settings, as a user's overlay changes them.\n"

// SetSettings makes the overlay in dir change the agent's settings as a
// user's overlay does, merging literals into the base's generated
// ConfigMap (values replace the previous call's; nil restores the base's),
// and applies it: the ConfigMap's name changes with its data, so the
// DaemonSet rolls by itself. It waits for the rollout.
func (n *Node) SetSettings(ctx context.Context, dir string, settings map[string]string) error {
	path := filepath.Join(dir, "kustomization.yaml")
	data, err := os.ReadFile(path) // #nosec G304 -- the test's own overlay
	if err != nil {
		return err
	}
	k, _, _ := strings.Cut(string(data), settingsMark)
	if len(settings) > 0 {
		keys := make([]string, 0, len(settings))
		for key := range settings {
			keys = append(keys, key)
		}
		slices.Sort(keys)
		var b strings.Builder
		b.WriteString(k + settingsMark + "configMapGenerator:\n- name: istio-cni-config\n  namespace: istio-cni\n  behavior: merge\n  literals:\n")
		for _, key := range keys {
			fmt.Fprintf(&b, "  - %s=%s\n", key, settings[key])
		}
		k = b.String()
	}
	if err := os.WriteFile(path, []byte(k), 0o600); err != nil {
		return err
	}
	if out, err := n.Kubectl(ctx, "apply", "-k", dir); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	if out, err := n.Kubectl(ctx, "-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout=4m"); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}
