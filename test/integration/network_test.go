package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/test/podsim"
)

// newNetwork is the node's primary CNI for one test; its bridge goes at
// cleanup.
func newNetwork(t *testing.T) *podsim.Network {
	t.Helper()
	n := podsim.NewNetwork(env.binDir, t.TempDir())
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// istioConf is the plugin's conflist entry for a test; extra fields override.
func istioConf(extra map[string]any) map[string]any {
	c := map[string]any{
		"type":                chain.PluginType,
		"kubeconfig":          env.kubeconfig,
		"exclude_namespaces":  []string{"kube-system"},
		"log_level":           "debug",
		"api_timeout":         "3s",
		"api_attempt_timeout": "1s",
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// conflist chains bridge + host-local and, if istio is non-nil, the plugin.
func conflist(t *testing.T, n *podsim.Network, version string, istio map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	var chained []map[string]any
	if istio != nil {
		chained = append(chained, istio)
	}
	list, err := n.ConfList(version, chained...)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// newSandbox makes a sandbox for pod podNS/podName, removed at cleanup.
func newSandbox(t *testing.T, podNS, podName string) *podsim.Sandbox {
	t.Helper()
	s, err := podsim.NewSandbox(podNS, podName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// add runs the chain's ADD; on success the sandbox's DEL runs at cleanup.
func add(t *testing.T, n *podsim.Network, s *podsim.Sandbox, list *libcni.NetworkConfigList) error {
	t.Helper()
	err := n.Add(context.Background(), s, list)
	if err == nil {
		t.Cleanup(func() { _ = n.Del(context.Background(), s) })
	}
	return err
}

// mustAdd is add that fails the test.
func mustAdd(t *testing.T, n *podsim.Network, s *podsim.Sandbox, list *libcni.NetworkConfigList) {
	t.Helper()
	if err := add(t, n, s, list); err != nil {
		t.Fatalf("ADD: %v", err)
	}
}

// cniCode returns the CNI error code of err, or 0.
func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// podJSON renders a pod for the API.
func podJSON(ns, name string, annotations map[string]string, containers []map[string]any, initContainers []map[string]any) []byte {
	meta := map[string]any{"name": name, "namespace": ns, "annotations": annotations}
	spec := map[string]any{"containers": containers}
	if initContainers != nil {
		spec["initContainers"] = initContainers
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
	return b
}

func container(name string) map[string]any {
	return map[string]any{"name": name, "image": "test/" + name + ":v1"}
}

// createPod stores a pod in the API and deletes it at cleanup.
func createPod(t *testing.T, ns, name string, annotations map[string]string, containers, initContainers []map[string]any) {
	t.Helper()
	ctx := context.Background()
	if err := env.api.CreatePod(ctx, podJSON(ns, name, annotations, containers, initContainers)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.DeletePod(ctx, ns, name) })
}

// meshed returns the annotations and containers of an injected sidecar pod.
func meshed(extra map[string]string) (map[string]string, []map[string]any) {
	ann := map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}
	for k, v := range extra {
		ann[k] = v
	}
	return ann, []map[string]any{container("app"), container("istio-proxy")}
}

// podName makes a unique DNS-1123 name from the test name.
func podName(t *testing.T) string {
	sum := sha256.Sum256([]byte(t.Name()))
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > 40 {
		s = s[len(s)-40:]
	}
	return strings.Trim(s, "-") + "-" + hex.EncodeToString(sum[:3])
}
