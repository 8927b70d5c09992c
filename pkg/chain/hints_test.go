package chain

import (
	"strings"
	"testing"
)

func TestFightHint(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		cilium     bool
	}{
		{"05-cilium.conflist", `{"cniVersion":"0.3.1","name":"cilium","plugins":[{"type":"cilium-cni","enable-debug":false}]}`, true},
		{"05-cilium.conf", `{"cniVersion":"0.3.1","name":"cilium","type":"cilium-cni"}`, true},
		// A chained Cilium (generic-veth) after another primary.
		{"10-calico.conflist", `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"cilium-cni"}]}`, true},
		{"05-cilium.conflist", `{half-written`, true},
		{"10-bridge.conflist", `{"cniVersion":"1.0.0","name":"bridge","plugins":[{"type":"bridge"},{"type":"portmap"}]}`, false},
		{"10-flannel.conflist", `not json`, false},
	} {
		got := FightHint(tc.name, []byte(tc.data))
		if tc.cilium != strings.Contains(got, "cni.exclusive=false") {
			t.Errorf("%s %s: hint %q, want Cilium's %v", tc.name, tc.data, got, tc.cilium)
		}
	}
}
