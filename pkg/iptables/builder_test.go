package iptables_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestGolden(t *testing.T) {
	for name, spec := range iptablestest.Specs() {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			for _, rs := range iptables.Build(spec, true, true).Rulesets() {
				text, err := iptables.Plan(rs, nil)
				if err != nil {
					t.Fatal(err)
				}
				b.WriteString("# " + rs.Family.String() + "\n")
				b.Write(text)
			}
			checkGolden(t, filepath.Join("testdata", name+".golden"), b.String())
		})
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/iptables -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the rendered rules (run go test ./pkg/iptables -update if the change is intended)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// upstreamDefault is istio-cni's nat table for a default sidecar pod, as
// iptables-save prints it (quoted in the product's requirements).
const upstreamDefault = `-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15020 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15021 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15090 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A ISTIO_OUTPUT -p tcp -m tcp --dport 15020 -j RETURN
-A ISTIO_OUTPUT -p udp -m udp --dport 15020 -j RETURN
-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
`

// TestUpstreamParity reads the upstream listing as iptables-save output and
// checks that the default model matches it exactly.
func TestUpstreamParity(t *testing.T) {
	save := "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_INBOUND - [0:0]\n" +
		":ISTIO_IN_REDIRECT - [0:0]\n:ISTIO_OUTPUT - [0:0]\n:ISTIO_REDIRECT - [0:0]\n" + upstreamDefault + "COMMIT\n"
	obs, err := iptables.ParseSave([]byte(save))
	if err != nil {
		t.Fatal(err)
	}
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	if d := iptables.Diff(&rs, obs); len(d) != 0 {
		t.Errorf("default pod differs from upstream:\n%s", strings.Join(d, "\n"))
	}
}
