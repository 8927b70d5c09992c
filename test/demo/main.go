// Command demo shows the plugin doing its job on a simulated node: a real
// kube-apiserver, the bridge + host-local primary CNI, istio-cni chained
// after it, a meshed and an unmeshed pod, and real connections. `make demo`
// runs it; everything it starts is stopped at the end.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/podsim"
)

const proxyUID = 1337

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// node is the demo's simulated node and what must be undone.
type node struct {
	dir           string
	img           string // the built binaries, as the image ships them
	bin, netd     string // the node's /opt/cni/bin and /etc/cni/net.d
	kubeconfigDir string // the node's /var/run/istio-cni
	api           *cluster.APIServer
	net           *podsim.Network
	undo          []func() error
}

func (n *node) defer_(f func() error) { n.undo = append(n.undo, f) }

func (n *node) close() error {
	var errs []error
	for i := len(n.undo) - 1; i >= 0; i-- {
		errs = append(errs, n.undo[i]())
	}
	return errors.Join(errs...)
}

func run() (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, iptables)")
	}
	n := &node{}
	defer func() { err = errors.Join(err, n.close()) }()
	if n.dir, err = os.MkdirTemp("", "istio-cni-demo-"); err != nil {
		return err
	}
	n.defer_(func() error { return os.RemoveAll(n.dir) })
	if err := os.Chmod(n.dir, 0o755); err != nil { // the proxy's uid reads its binary
		return err
	}
	step("building the plugin, the installer, the reference bridge/host-local plugins and the test proxy")
	n.img, n.bin, n.netd = filepath.Join(n.dir, "image"), filepath.Join(n.dir, "opt-cni-bin"), filepath.Join(n.dir, "etc-cni-net.d")
	if err := podsim.Build(n.img); err != nil {
		return err
	}
	// The node has its primary CNI installed: its binaries and, below, its
	// conflist.
	for _, d := range []string{n.bin, n.netd} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	for _, b := range []string{"bridge", "host-local"} {
		if err := copyFile(filepath.Join(n.img, b), filepath.Join(n.bin, b)); err != nil {
			return err
		}
	}
	step("starting etcd and kube-apiserver")
	apiDir := filepath.Join(n.dir, "api")
	if err := os.Mkdir(apiDir, 0o700); err != nil {
		return err
	}
	if n.api, err = cluster.StartAPIServer(context.Background(), cluster.Options{Dir: apiDir}); err != nil {
		return err
	}
	n.defer_(n.api.Stop)
	fmt.Printf("   API server %s\n", n.api.URL)
	n.net = podsim.NewNetwork(n.bin, filepath.Join(n.dir, "cni"))
	n.defer_(n.net.Close)
	return n.demo()
}

func step(s string) { fmt.Printf("\n== %s\n", s) }

func (n *node) demo() error {
	ctx := context.Background()
	plain, list, err := n.install()
	if err != nil {
		return err
	}
	step("creating pods: demo/productpage (istio-proxy sidecar), demo/legacy (no sidecar), demo/server")
	for _, p := range []string{meshedPod, legacyPod} {
		if err := n.api.CreatePod(ctx, []byte(p)); err != nil {
			return err
		}
	}
	step("the runtime creates the sandboxes: ADD through bridge + host-local + istio-cni (plugin log on stderr)")
	server, err := n.sandbox(ctx, "server", plain)
	if err != nil {
		return err
	}
	web, err := n.sandbox(ctx, "productpage", list)
	if err != nil {
		return err
	}
	legacy, err := n.sandbox(ctx, "legacy", list)
	if err != nil {
		return err
	}
	if err := n.start(server.Path(), 0, "server", "--port", "8080", "--name", "server"); err != nil {
		return err
	}
	if err := n.start(web.Path(), proxyUID, "proxy"); err != nil {
		return err
	}
	if err := n.show(ctx, server, web, legacy); err != nil {
		return err
	}
	step("DEL for every sandbox, then stopping everything this demo started (install-cni sees no DaemonSet deletion: a restart, so it leaves the plugin installed)")
	return nil
}

// install gives the node its primary conflist and runs install-cni; it
// returns the primary's list and the chained one the installer wrote.
func (n *node) install() (plain, chained *libcni.NetworkConfigList, err error) {
	if plain, err = n.net.ConfList("1.0.0"); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(n.netd, "10-bridge.conflist"), plain.Bytes, 0o644); err != nil {
		return nil, nil, err
	}
	step("install-cni installs the plugin on the node: binary, kubeconfig, chained conflist")
	if err := n.startInstaller(); err != nil {
		return nil, nil, err
	}
	for _, d := range []string{n.bin, n.netd, n.kubeconfigDir} {
		entries, _ := os.ReadDir(d)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		fmt.Printf("   %s: %s\n", filepath.Base(d), strings.Join(names, " "))
	}
	if chained, err = libcni.ConfListFromFile(filepath.Join(n.netd, "02-istio-cni.conflist")); err != nil {
		return nil, nil, err
	}
	fmt.Printf("   the runtime now picks 02-istio-cni.conflist: plugins %s\n", pluginTypes(chained))
	return plain, chained, nil
}

// show prints the meshed pod's rules and where each app's request went.
func (n *node) show(ctx context.Context, server, web, legacy *podsim.Sandbox) error {
	step("iptables-save -t nat in demo/productpage's network namespace (nsenter --net=" + web.Path() + ")")
	out, err := podsim.Command(web.Path(), 0, "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables-save: %w: %s", err, out)
	}
	fmt.Print(string(out))
	step("CHECK for demo/productpage: the plugin reads the rules back and compares them with its model")
	if err := n.net.Check(ctx, web); err != nil {
		return err
	}
	fmt.Println("   CHECK passed")
	step("requests from each app to demo/server")
	to := fmt.Sprintf("%s:8080", server.V4)
	for _, app := range []struct {
		name string
		sb   *podsim.Sandbox
	}{{"demo/productpage", web}, {"demo/legacy", legacy}} {
		line, err := podsim.Connect(app.sb.Path(), 0, filepath.Join(n.img, "testproxy"), to)
		if err != nil {
			return err
		}
		verdict := "went DIRECT to the server"
		if strings.HasPrefix(line, "proxy ") {
			verdict = "went THROUGH THE PROXY"
		}
		fmt.Printf("   %-17s -> %s: %s  [%s]\n", app.name, to, verdict, line)
	}
	return nil
}

// sandbox creates a pod sandbox and runs the chain's ADD; DEL and the
// namespace's removal are undone at the end.
func (n *node) sandbox(ctx context.Context, name string, list *libcni.NetworkConfigList) (*podsim.Sandbox, error) {
	s, err := podsim.NewSandbox("demo", name)
	if err != nil {
		return nil, err
	}
	n.defer_(s.Close)
	if err := n.net.Add(ctx, s, list); err != nil {
		return nil, fmt.Errorf("ADD demo/%s: %w", name, err)
	}
	n.defer_(func() error { return n.net.Del(context.Background(), s) })
	fmt.Printf("   demo/%s: %s %s\n", name, s.V4, s.V6)
	return s, nil
}

func pluginTypes(l *libcni.NetworkConfigList) string {
	var t []string
	for _, p := range l.Plugins {
		t = append(t, p.Network.Type)
	}
	return strings.Join(t, " -> ")
}

func (n *node) start(netns string, uid int, args ...string) error {
	p, err := podsim.Start(netns, uid, filepath.Join(n.img, "testproxy"), n.dir, args...)
	if err != nil {
		return err
	}
	n.defer_(p.Stop)
	return nil
}

const meshedPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"productpage","namespace":"demo",
 "annotations":{"sidecar.istio.io/status":"{\"containers\":[\"istio-proxy\"]}"}},
 "spec":{"containers":[{"name":"productpage","image":"demo/app:v1"},{"name":"istio-proxy","image":"demo/proxy:v1"}]}}`

const legacyPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"legacy","namespace":"demo"},
 "spec":{"containers":[{"name":"legacy","image":"demo/app:v1"}]}}`
