package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// fleetOverlay adapts deployments/ to a fleet less than overlay does: every
// node has the standard host paths, and its own network namespace for the
// agent's ports, so only the API server's address (no kube-proxy, so no
// Service IP) changes, and for tests the audit's period (%[4]s).
const fleetOverlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %[1]s
patches:
- target:
    kind: DaemonSet
    name: istio-cni-node
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: KUBERNETES_SERVICE_HOST, value: "%[2]s"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: KUBERNETES_SERVICE_PORT, value: "%[3]d"}
%[4]s`

// testAudit has the audit pass every 2 s and act after 1 s, so tests see
// repairs within seconds.
const testAudit = `    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: AUDIT_INTERVAL, value: "2s"}
    - op: add
      path: /spec/template/spec/containers/0/env/-
      value: {name: AUDIT_CONFIRM, value: "1s"}
`

// Install installs istio-cni on every node of the fleet as a user does,
// `kubectl apply -k` of an overlay written into dir, and waits for the
// rollout. fastAudit shortens the audit's period for tests; without it the
// agents run with deployments/' settings, as the bench measures them. It
// returns kubectl's output.
func (f *Fleet) Install(ctx context.Context, dir string, fastAudit bool) (string, error) {
	out, err := f.Apply(ctx, dir, fastAudit)
	if err != nil {
		return out, err
	}
	return out, f.WaitInstalled(ctx)
}

// WaitInstalled waits for istio-cni's DaemonSet to roll out: an agent
// Ready on every node.
func (f *Fleet) WaitInstalled(ctx context.Context) error {
	_, err := f.Kubectl(ctx, "-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout=5m")
	return err
}

// Apply is Install without the wait: on a node with no primary CNI yet,
// istio-cni's agent runs but is not Ready until one writes its config.
func (f *Fleet) Apply(ctx context.Context, dir string, fastAudit bool) (string, error) {
	base, err := DeploymentsDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		return "", err
	}
	api := f.APIAddr()
	audit := ""
	if fastAudit {
		audit = testAudit
	}
	data := fmt.Sprintf(fleetOverlay, rel, api.Addr(), api.Port(), audit)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(data), 0o600); err != nil {
		return "", err
	}
	return f.Kubectl(ctx, "apply", "-k", dir)
}

// Kubectl runs kubectl against the fleet as admin.
func (f *Fleet) Kubectl(ctx context.Context, args ...string) (string, error) {
	return f.control.Kubectl(ctx, args...)
}
