package integration

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Addresses of the test bridge: documentation ranges, only ever inside
// namespaces the tests make.
const (
	subnetV4 = "198.51.100.0/24"
	subnetV6 = "2001:db8:100::/64"
)

// network is a node's primary CNI: a bridge with host-local IPAM, shared by
// the pods of one test.
type network struct {
	name    string
	bridge  string
	dataDir string
	cni     *libcni.CNIConfig
}

func newNetwork(t *testing.T) *network {
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	n := &network{
		name:    "itest",
		bridge:  "icni" + hex.EncodeToString(suffix),
		dataDir: t.TempDir(),
	}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{env.binDir}, t.TempDir(), nil)
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(n.bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	return n
}

// istioConf is the plugin's conflist entry for a test; extra fields override.
func istioConf(extra map[string]any) map[string]any {
	c := map[string]any{
		"type":                "istio-cni",
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
func (n *network) conflist(t *testing.T, version string, istio map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	plugins := []any{map[string]any{
		"type": "bridge", "bridge": n.bridge, "isGateway": true, "ipMasq": false,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": n.dataDir,
			"ranges": [][]map[string]string{{{"subnet": subnetV4}}, {{"subnet": subnetV6}}},
		},
	}}
	if istio != nil {
		plugins = append(plugins, istio)
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": version, "name": n.name, "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// sandbox is a pod sandbox: its namespace and what the chain returned.
type sandbox struct {
	netns ns.NetNS
	rt    *libcni.RuntimeConf
	list  *libcni.NetworkConfigList
	v4    netip.Addr
	v6    netip.Addr
}

func (s *sandbox) path() string { return s.netns.Path() }

// newSandbox makes a namespace for pod namespace/name (removed at cleanup).
func newSandbox(t *testing.T, podNS, podName string) *sandbox {
	t.Helper()
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Close(); _ = testutils.UnmountNS(netns) })
	// The runtime's loopback plugin brings lo up in every sandbox; REDIRECT
	// of local traffic needs it.
	if err := netns.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	return &sandbox{netns: netns, rt: &libcni.RuntimeConf{
		ContainerID: "ctr-" + filepath.Base(netns.Path()),
		NetNS:       netns.Path(),
		IfName:      "eth0",
		Args:        [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", podNS}, {"K8S_POD_NAME", podName}},
	}}
}

// add runs ADD for the chain, as the runtime does when it creates the
// sandbox; on success the sandbox's DEL runs at cleanup.
func (n *network) add(t *testing.T, s *sandbox, list *libcni.NetworkConfigList) error {
	t.Helper()
	s.list = list
	res, err := n.cni.AddNetworkList(context.Background(), list, s.rt)
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = n.cni.DelNetworkList(context.Background(), list, s.rt) })
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range cur.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		if a.Unmap().Is4() {
			s.v4 = a.Unmap()
		} else {
			s.v6 = a
		}
	}
	waitIPv6Ready(t, s.netns)
	return nil
}

// waitIPv6Ready waits until duplicate address detection has finished for
// every IPv6 address in the namespace, as a pod's traffic would.
func waitIPv6Ready(t *testing.T, netns ns.NetNS) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var tentative []string
		err := netns.Do(func(ns.NetNS) error {
			addrs, err := netlink.AddrList(nil, netlink.FAMILY_V6)
			for _, a := range addrs {
				if a.Flags&unix.IFA_F_TENTATIVE != 0 {
					tentative = append(tentative, a.IPNet.String())
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(tentative) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("IPv6 addresses still tentative after 10s: %v", tentative)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustAdd is add that fails the test.
func (n *network) mustAdd(t *testing.T, s *sandbox, list *libcni.NetworkConfigList) {
	t.Helper()
	if err := n.add(t, s, list); err != nil {
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
