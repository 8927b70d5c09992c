package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// 1. The DaemonSet is Ready; the plugin, its kubeconfig and the owned
// conflist are on the node's host paths; /readyz answers OK.
func TestInstalled(t *testing.T) {
	requireInstalled(t)
	for _, p := range []string{pluginPath(), fullPath(), helperPath(), kubeconfigPath(), ownedPath()} {
		if !exists(p) {
			t.Errorf("%s missing", p)
		}
	}
	owned, _ := os.ReadFile(ownedPath())
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(owned, &list); err != nil || len(list.Plugins) != 3 || list.Plugins[2]["type"] != chain.PluginType {
		t.Errorf("owned conflist should chain istio-cni after bridge and portmap (%v):\n%s", err, owned)
	}
	// The plugin's kubeconfig holds its own minted token, not the
	// installer's: it is the plugin's ServiceAccount, and may read pods
	// but not the installer's DaemonSet.
	kc, err := clientcmd.LoadFromFile(kubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	token := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token
	review := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	status, body, err := env.node.DoAs(t.Context(), token, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("SelfSubjectReview with the plugin's token: %d %s %v", status, body, err)
	}
	if want := "system:serviceaccount:istio-cni:istio-cni-plugin"; !bytes.Contains(body, []byte(`"username":"`+want+`"`)) {
		t.Errorf("the plugin's kubeconfig is not %s:\n%s", want, body)
	}
	for path, want := range map[string]int{
		"/api/v1/namespaces/istio-cni/pods/none":                       http.StatusNotFound,
		"/apis/apps/v1/namespaces/istio-cni/daemonsets/istio-cni-node": http.StatusForbidden,
	} {
		if status, _, err := env.node.DoAs(t.Context(), token, http.MethodGet, path, nil); err != nil || status != want {
			t.Errorf("GET %s with the plugin's token: %d %v, want %d", path, status, err, want)
		}
	}
	resp, err := http.Get(env.agent.HealthURL("/readyz"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d", resp.StatusCode)
	}
}

// 2. A meshed pod runs with the ISTIO chains in its netns, and the app's
// requests reach the sidecar with the server's original destination; on a
// node whose iptables the agent writes, the agent runs the ADD itself.
func TestMeshedPod(t *testing.T) {
	requireInstalled(t)
	p := startPod(t, meshedPod(t, "meshed"))
	assertRedirected(t, p)
	t.Run("run by the agent", func(t *testing.T) {
		// As nodeWritesNetlink, saying why not.
		if v, err := xtables.NFTVersion("iptables-restore"); err != nil || !release.HasLayout(v) {
			t.Skipf("the agent writes rules only with iptables nf_tables %s; this node's iptables-restore: %q %v: every ADD runs in istio-cni-full (docs/plugin.md)",
				strings.Join(release.Layouts, ", "), v, err)
		}
		// With the agent running, the shim hands the next ADD to it (the
		// first of a node may have gone to istio-cni-full, which learns
		// the node's iptables release): the agent writes the rules over
		// netlink from the pod's descriptor, in its container, and they
		// read back as a plugin's would.
		again := startPod(t, meshedPod(t, "meshed-again"))
		assertRedirected(t, again)
		if last, ok := lastADD(again); !ok || last.RanIn != "agent" {
			t.Errorf("the ADD of %s/%s: %+v (found %v), want it run by the agent", again.Metadata.Namespace, again.Metadata.Name, last, ok)
		}
	})
}

// 3. An unmeshed pod and a sidecar pod in an excluded namespace get no
// ISTIO chains; their traffic goes straight to the server.
func TestUnmeshedAndExcludedPods(t *testing.T) {
	requireInstalled(t)
	addr := server(t)
	for _, s := range []cluster.PodSpec{
		{Namespace: "default", Name: "plain", Target: addr},
		{Namespace: "kube-system", Name: "excluded", Target: addr, Sidecar: true},
	} {
		t.Run(s.Namespace+"/"+s.Name, func(t *testing.T) {
			assertDirect(t, startPod(t, s))
		})
	}
}

// 4. istio-proxy as a native sidecar (an init container with
// restartPolicy Always) is redirected too.
func TestNativeSidecar(t *testing.T) {
	requireInstalled(t)
	s := meshedPod(t, "native")
	s.Sidecar, s.NativeSidecar = false, true
	assertRedirected(t, startPod(t, s))
}

// 5. The primary CNI rewrites its conflist: the owned copy follows, and a
// new meshed pod is still redirected. The owned conflist is deleted: it is
// back before the next pod starts.
func TestPrimaryRewriteAndOwnedDeleted(t *testing.T) {
	requireInstalled(t)
	rewritten := bytes.Replace(env.primary, []byte(`"hairpinMode": true`), []byte(`"hairpinMode": false`), 1)
	if bytes.Equal(rewritten, env.primary) {
		t.Fatal("test bug: the primary conflist has no hairpinMode to rewrite")
	}
	if err := os.WriteFile(env.node.PrimaryConfig, rewritten, 0o644); err != nil { // #nosec G306 -- as the primary CNI writes it
		t.Fatal(err)
	}
	env.primary = rewritten
	poll.Until(t, 10*time.Second, "owned conflist follows the primary", func() (bool, string) {
		b, _ := os.ReadFile(ownedPath())
		return bytes.Contains(b, []byte(`"hairpinMode": false`)), string(b)
	})
	assertRedirected(t, startPod(t, meshedPod(t, "after-rewrite")))

	if err := os.Remove(ownedPath()); err != nil {
		t.Fatal(err)
	}
	// Polled every millisecond, so the log line is a measurement.
	start := time.Now()
	for !exists(ownedPath()) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("owned conflist not restored within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("owned conflist restored %v after its deletion", time.Since(start).Round(100*time.Microsecond))
	assertRedirected(t, startPod(t, meshedPod(t, "after-delete")))
}

// 6. The API server is unreachable for the plugin: a new meshed pod does
// not start unredirected; its sandbox fails and kubelet retries. Once the
// API is back, it runs, redirected.
func TestAPIUnreachable(t *testing.T) {
	requireInstalled(t)
	s := meshedPod(t, "api-down")
	env.proxy.down()
	restored := false
	defer func() {
		if !restored {
			_ = env.proxy.up()
		}
	}()
	createPod(t, s)
	poll.Until(t, 2*time.Minute, "a failed sandbox for "+s.Name, func() (bool, string) {
		return sandboxFailed(t.Context(), s.Namespace, s.Name)
	})
	p, found, err := env.node.GetPod(t.Context(), s.Namespace, s.Name)
	if err != nil || !found {
		t.Fatalf("pod: %v found=%v", err, found)
	}
	for _, c := range p.Status.ContainerStatuses {
		if _, running := c.State["running"]; running {
			t.Fatalf("container %s runs while the plugin cannot reach the API", c.Name)
		}
	}
	if err := env.proxy.up(); err != nil {
		t.Fatal(err)
	}
	restored = true
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	p, err = env.node.WaitRunning(ctx, s.Namespace, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	assertRedirected(t, p)
}

// sandboxFailed reports whether kubelet recorded a FailedCreatePodSandBox
// event for the pod, with the plugin's message.
func sandboxFailed(ctx context.Context, ns, name string) (bool, string) {
	path := "/api/v1/namespaces/" + ns + "/events?fieldSelector=involvedObject.name%3D" + name
	status, body, err := env.node.Do(ctx, http.MethodGet, path, nil)
	if err != nil || status != http.StatusOK {
		return false, fmt.Sprintf("%d %v", status, err)
	}
	var list struct {
		Items []struct{ Reason, Message string }
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return false, err.Error()
	}
	for _, e := range list.Items {
		if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "istio-cni") {
			return true, e.Message
		}
	}
	return false, string(body)
}

func assertFilesStay(t *testing.T, after string) {
	t.Helper()
	for _, p := range []string{pluginPath(), kubeconfigPath(), ownedPath()} {
		if !exists(p) {
			t.Errorf("%s removed by %s", p, after)
		}
	}
}

func installerPod(t *testing.T) string {
	t.Helper()
	p, ok := installerPodOrEmpty(t)
	if !ok {
		t.Fatal("no installer pod")
	}
	return p.Metadata.Name
}
