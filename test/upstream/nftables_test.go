package upstream_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"istio.io/istio/tools/common/config"
	"istio.io/istio/tools/istio-nftables/pkg/builder"
	"istio.io/istio/tools/istio-nftables/pkg/capture"
	"sigs.k8s.io/knftables"
)

var update = flag.Bool("update", false, "rewrite pkg/iptables/nftables/testdata's cni-*.golden from upstream's code")

// cniCases are the sidecar configs upstream's istio-cni hands
// istio-nftables (cni/pkg/plugin/sidecar_nftables_linux.go: a pod with no
// traffic annotations, then DNS capture, TPROXY, INVALID_DROP and an IPv6
// address), which upstream's own goldens do not cover. pkg/iptables/nftables's
// TestCNIGoldens holds its ruleset for the same specs to these files, so
// the two together hold it to upstream's code.
var cniCases = []struct {
	name string
	set  func(*config.Config)
}{
	{"cni-default", func(*config.Config) {}},
	{"cni-default-ipv6", func(c *config.Config) { c.EnableIPv6 = true }},
	{"cni-dns", func(c *config.Config) { c.RedirectDNS, c.CaptureAllDNS = true, true }},
	{"cni-dns-ipv6", func(c *config.Config) { c.RedirectDNS, c.CaptureAllDNS, c.EnableIPv6 = true, true, true }},
	{"cni-tproxy", func(c *config.Config) { c.InboundInterceptionMode = "TPROXY" }},
	{"cni-tproxy-ipv6", func(c *config.Config) { c.InboundInterceptionMode, c.EnableIPv6 = "TPROXY", true }},
	{"cni-invalid-drop", func(c *config.Config) { c.DropInvalid = true }},
	{"cni-tproxy-dns-invalid-drop", func(c *config.Config) {
		c.InboundInterceptionMode, c.RedirectDNS, c.CaptureAllDNS, c.DropInvalid = "TPROXY", true, true, true
	}},
}

// cniConfig is what upstream's plugin sets for a pod without traffic
// annotations (sidecar_redirect.go's defaults).
func cniConfig() *config.Config {
	c := config.DefaultConfig()
	c.ProxyUID, c.ProxyGID = "1337", "1337"
	c.InboundInterceptionMode = "REDIRECT"
	c.OutboundIPRangesInclude = "*"
	c.InboundPortsInclude = "*"
	c.InboundPortsExclude = "15020,15021,15090"
	c.OutboundPortsExclude = "15020"
	return c
}

func TestCNIGoldens(t *testing.T) {
	for _, tc := range cniCases {
		t.Run(tc.name, func(t *testing.T) {
			c := cniConfig()
			tc.set(c)
			mock := builder.NewMockNftables("", "")
			cfg, err := capture.NewNftablesConfigurator(c, func(knftables.Family, string) (builder.NftablesAPI, error) { return mock, nil })
			if err != nil {
				t.Fatal(err)
			}
			tx, err := cfg.Run()
			if err != nil {
				t.Fatal(err)
			}
			got := mock.Dump(tx)
			path := filepath.Join("..", "..", "pkg", "iptables", "nftables", "testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(want) != got {
				t.Errorf("%s differs from what upstream's istio-nftables writes:\n%s", path, got)
			}
		})
	}
}
