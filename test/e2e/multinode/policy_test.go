package multinode

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// TestPodWritesOnlyOnItsNode: with deployments/optional/audit-pod-writes.yaml
// applied, a real agent's credential (the token kubelet projected into its
// pod on the first node) labels a pod on its own node and is refused on a
// pod on another node, whatever the cluster-wide RBAC allows.
func TestPodWritesOnlyOnItsNode(t *testing.T) {
	agents := requireAgentsReady(t, env.fleet.Nodes)
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	writes := filepath.Join(base, "optional", "audit-pod-writes.yaml")
	kubectl(t, "apply", "-f", writes)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := env.fleet.Kubectl(ctx, "delete", "-f", writes, "--ignore-not-found"); err != nil {
			t.Errorf("deleting %s: %v\n%s", writes, err, out)
		}
	})
	own, other := env.fleet.Nodes[0], env.fleet.Nodes[1]
	token, err := own.PodToken(agents[own.Name])
	if err != nil {
		t.Fatal(err)
	}
	target := serverAddr(t)
	onOwn := startPod(t, own, cluster.PodSpec{Namespace: "default", Name: "writes-own", Target: target, NodeName: own.Name})
	onOther := startPod(t, other, cluster.PodSpec{Namespace: "default", Name: "writes-other", Target: target, NodeName: other.Name})
	label := func(p cluster.Pod) (int, string) {
		patch := []byte(`[{"op":"add","path":"/metadata/labels/cni.istio.io~1uninitialized","value":"true"}]`)
		status, body, err := env.fleet.DoAs(t.Context(), token, http.MethodPatch, "/api/v1/namespaces/default/pods/"+p.Metadata.Name, patch)
		if err != nil {
			return 0, err.Error()
		}
		return status, string(body)
	}
	// The policy may lag the apply.
	poll.Until(t, 30*time.Second, "a pod on another node refused to "+own.Name+"'s agent", func() (bool, string) {
		status, body := label(onOther)
		return status/100 == 4 && strings.Contains(body, "only pods on the node its pod runs on"), fmt.Sprintf("%d %s", status, body)
	})
	if status, body := label(onOwn); status != http.StatusOK {
		t.Errorf("labelling a pod on its own node: %d %s", status, body)
	}
}
