package chain_test

import (
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

func TestVerify(t *testing.T) {
	p := loadPrimary(t, "10-calico.conflist")
	owned, err := chain.Owned(p, testEntry, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.Verify(owned, p, testEntry, true); err != nil {
		t.Fatalf("Verify(Owned output) = %v", err)
	}
	// Key order and spacing do not count.
	reordered := `{"plugins":[` +
		`{"capabilities":{"portMappings":true},"snat":true,"type":"portmap"},` +
		`{"type":"bandwidth","capabilities":{"bandwidth":true}}],` +
		`"cniVersion":"0.3.1","name":"k8s-pod-network"}`
	calicoOnly := &chain.Primary{Name: "10-calico.conflist", Data: []byte(reordered)}
	ownedReordered, err := chain.Owned(calicoOnly, testEntry, nil)
	if err != nil {
		t.Fatal(err)
	}
	compact := strings.Join(strings.Fields(string(ownedReordered)), "")
	if err := chain.Verify([]byte(compact), calicoOnly, testEntry, true); err != nil {
		t.Errorf("Verify(compacted) = %v", err)
	}

	withoutEntry, err := chain.WithoutOurEntry(owned)
	if err != nil {
		t.Fatal(err)
	}
	morePlugins := &chain.Primary{Name: p.Name, Data: []byte(strings.Replace(string(p.Data),
		`"plugins": [`, `"plugins": [{"type": "tuning"},`, 1))}
	otherMTU := &chain.Primary{Name: p.Name, Data: []byte(strings.Replace(string(p.Data), `"mtu": 0`, `"mtu": 1440`, 1))}
	otherTop := &chain.Primary{Name: p.Name, Data: []byte(strings.Replace(string(p.Data), `"cniVersion": "0.3.1"`, `"cniVersion": "1.0.0"`, 1))}
	otherEntry := testEntry
	otherEntry.ExcludeNamespaces = []string{"kube-system", "istio-system"}
	for _, tc := range []struct {
		name string
		data []byte
		p    *chain.Primary
		e    pluginconf.Entry
		want string
	}{
		{"entry missing", withoutEntry, p, testEntry, "istio-cni entry is missing; plugin types are [calico portmap bandwidth], want [calico portmap bandwidth istio-cni-sidecar]"},
		{"plugin added", owned, morePlugins, testEntry, "plugin types are [calico portmap bandwidth istio-cni-sidecar], want [tuning calico portmap bandwidth istio-cni-sidecar]"},
		{"plugin field", owned, otherMTU, testEntry, `plugins[0] (calico): field "mtu" = 0, want 1440`},
		{"top field", owned, otherTop, testEntry, `top level: field "cniVersion" = "0.3.1", want "1.0.0"`},
		{"entry field", owned, p, otherEntry, `plugins[3] (istio-cni-sidecar): field "exclude_namespaces" = ["kube-system"], want ["kube-system","istio-system"]`},
		{"garbage", []byte("{not json"), p, testEntry, "not a valid plugin list"},
		{"bad primary", owned, &chain.Primary{Name: "x.conf", Data: []byte("{}")}, testEntry, "cannot build the expected chain: x.conf"},
	} {
		err := chain.Verify(tc.data, tc.p, tc.e, true)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Verify = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
