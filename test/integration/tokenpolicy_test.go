package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// applyDeployments applies deployments/ to the test API server, and then
// each of extra (files such as deployments/optional/...), which are deleted
// again at the end of the test: the API server is shared.
func applyDeployments(t *testing.T, ctx context.Context, extra ...string) {
	t.Helper()
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := env.api.Kubeconfig(admin, cluster.AdminToken); err != nil {
		t.Fatal(err)
	}
	args := [][]string{{"apply", "-k", "../../deployments"}}
	for _, f := range extra {
		args = append(args, []string{"apply", "-f", f})
		t.Cleanup(func() {
			if out, err := exec.Command(kubectl(t), "--kubeconfig", admin, "delete", "-f", f).CombinedOutput(); err != nil { // #nosec G204 -- test
				t.Errorf("kubectl delete -f %s: %v\n%s", f, err, out)
			}
		})
	}
	for _, a := range args {
		if out, err := exec.CommandContext(ctx, kubectl(t), append([]string{"--kubeconfig", admin}, a...)...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", a, err, out)
		}
	}
}

// agentToken is the agent's own credential as kubelet projects it into its
// pod on node: a token of the istio-cni ServiceAccount bound to a pod
// scheduled there, so the API server puts the node and pod names in the
// request's userInfo.extra. The Node and the Pod are created (no kubelet
// runs them); the Node is deleted at the end of the test.
func agentToken(t *testing.T, ctx context.Context, node string) (token, pod string) {
	t.Helper()
	admin := clientFor(t, cluster.AdminToken)
	n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	pod = "istio-cni-node-" + node
	p, err := admin.CoreV1().Pods("istio-cni").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "istio-cni",
			Containers: []corev1.Container{{Name: "install-cni", Image: "localhost/istio-cni/install-cni:0.1.0"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = admin.CoreV1().Pods("istio-cni").Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	tr, err := admin.CoreV1().ServiceAccounts("istio-cni").CreateToken(ctx, "istio-cni", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod, UID: p.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token, pod
}

// claims decodes a JWT's payload (not verified: the API server did that).
type claims struct {
	Exp, Iat int64
	Aud      []string
	K8s      struct {
		Node *struct{ Name, UID string }
		Pod  *struct{ Name, UID string }
	} `json:"kubernetes.io"`
}

func decodeClaims(t *testing.T, token string) claims {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPluginTokenPolicy: with deployments/ applied, the agent mints the
// plugin's tokens bound to its node, a day at most; the 10-year, the
// unbound and another node's TokenRequests are
// refused with the policy's message. A node's tokens are revoked alone by
// deleting its Node object (kubelet registers it again, under a new UID).
func TestPluginTokenPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	applyDeployments(t, ctx)
	tokenA, podA := agentToken(t, ctx, "token-node-a")
	tokenB, _ := agentToken(t, ctx, "token-node-b")

	// The product's own minter, as the agent on node a runs it.
	if _, err := install.PluginTokenMinter(agentClient(t, tokenA), "istio-cni", "istio-cni-plugin", time.Hour, ""); err == nil {
		t.Fatal("a minter without a node to bind to was made")
	}
	mint, err := install.PluginTokenMinter(agentClient(t, tokenA), "istio-cni", "istio-cni-plugin", time.Hour, "token-node-a")
	if err != nil {
		t.Fatal(err)
	}
	pluginA, _, err := mint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := decodeClaims(t, pluginA)
	if c.K8s.Node == nil || c.K8s.Node.Name != "token-node-a" || c.Exp-c.Iat > 86400 || c.Exp-c.Iat < 3500 || len(c.Aud) == 0 {
		t.Errorf("the plugin's token claims %+v: want bound to node token-node-a, about an hour, the API server's audience", c)
	}

	// Raw TokenRequests with the agent's credential.
	agentA := clientFor(t, tokenA)
	request := func(seconds int64, ref *authenticationv1.BoundObjectReference) error {
		_, err := agentA.CoreV1().ServiceAccounts("istio-cni").CreateToken(ctx, "istio-cni-plugin", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds, BoundObjectRef: ref},
		}, metav1.CreateOptions{})
		return err
	}
	nodeRef := func(n string) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n}
	}
	// The policy may take a moment to be enforced after the apply.
	poll.Until(t, 20*time.Second, "the policy refuses a 10-year token", func() (bool, string) {
		err := request(315360000, nodeRef("token-node-a"))
		return err != nil && strings.Contains(err.Error(), "at most 24 hours"), errString(err)
	})
	for _, tc := range []struct {
		name    string
		seconds int64
		ref     *authenticationv1.BoundObjectReference
		want    string // "" accepted
	}{
		{"ten years", 315360000, nodeRef("token-node-a"), "at most 24 hours"},
		{"a day and a second", 86401, nodeRef("token-node-a"), "at most 24 hours"},
		{"unbound", 3600, nil, "only bound to its own node"},
		{"another node", 3600, nodeRef("token-node-b"), "only bound to its own node"},
		{"a day, its node", 86400, nodeRef("token-node-a"), ""},
		// Node only (the API server would refuse it anyway: that pod runs
		// as another ServiceAccount).
		{"its own pod", 3600, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: podA}, "only bound to its own node"},
	} {
		err := request(tc.seconds, tc.ref)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want refused saying %q", tc.name, err, tc.want)
		}
	}

	// Node b's plugin token, then node a revoked alone.
	mintB, err := install.PluginTokenMinter(agentClient(t, tokenB), "istio-cni", "istio-cni-plugin", time.Hour, "token-node-b")
	if err != nil {
		t.Fatal(err)
	}
	pluginB, _, err := mintB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	get := func(token string) int {
		status, _, err := env.api.DoAs(ctx, token, "GET", "/api/v1/namespaces/default/pods/any", nil)
		if err != nil {
			t.Fatal(err)
		}
		return status
	}
	if a, b := get(pluginA), get(pluginB); a != http.StatusNotFound || b != http.StatusNotFound {
		t.Fatalf("the plugin tokens reading a pod: %d, %d; want 404 (allowed, no such pod)", a, b)
	}
	if err := clientFor(t, cluster.AdminToken).CoreV1().Nodes().Delete(ctx, "token-node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "node a's token refused once its Node is gone", func() (bool, string) {
		return get(pluginA) == http.StatusUnauthorized, ""
	})
	if b := get(pluginB); b != http.StatusNotFound {
		t.Errorf("node b's plugin token after node a's revocation: %d, want it still working", b)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
