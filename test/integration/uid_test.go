package integration

import (
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/plugin"
)

// TestPodUID: with K8S_POD_UID the first read comes from the API server's
// cache, and a pod of the same name with another uid (the sandbox belongs to
// a pod that was deleted and recreated) is not taken for it.
func TestPodUID(t *testing.T) {
	name := "uid-check"
	ann, ctrs := meshed(nil)
	createPod(t, "team-a", name, ann, ctrs, nil)
	uid := podUID(t, "team-a", name)
	stdin := pluginStdin(t, "1.0.0", istioConf(nil), prevV4)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + name + ";K8S_POD_UID="

	s := newSandbox(t, "team-a", name)
	if r := execPlugin(t, "ADD", stdin, s.Path(), args+uid); r.code != 0 {
		t.Fatalf("ADD with the pod's uid: %d %s", r.code, r.msg)
	}
	assertRules(t, s.Path(), autoWriter, iptables.DefaultSpec(), false)

	other := newSandbox(t, "team-a", name)
	r := execPlugin(t, "ADD", stdin, other.Path(), args+"00000000-0000-0000-0000-000000000000")
	if r.code != plugin.ErrPodNotFound {
		t.Fatalf("ADD for another uid: %d %s, want code %d", r.code, r.msg, plugin.ErrPodNotFound)
	}
	assertNoRules(t, other.Path(), autoWriter)
}
