package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"istio-cni.local/istio-cni/cmd/mkimage/image"
)

// Istio is Istio's control plane beside a node, as an Istio user runs it:
// the istio-discovery chart of the pinned istio.io/istio module
// (test/upstream), installed with Helm into istio-system with its CNI
// enabled, and istiod (pilot-discovery, built from that module) as a
// process of the host rather than a Deployment. The node has no Service
// network, so the injection webhook reaches istiod at a loopback URL
// (istiodRemote.injectionURL): istiod's own certificate names 127.0.0.1
// (ISTIOD_CUSTOM_HOST) and its webhook patcher fills in the caBundle, as
// it does for the chart's Service.
type Istio struct {
	n   *Node
	dir string
	bin string
	// ports: HTTP (/ready), plaintext and secure XDS, the webhooks,
	// monitoring, ctrlz; all on 127.0.0.1.
	http, grpc, xds, webhook, monitoring, ctrlz int
	proc                                        *proc
}

// The injected containers' image: hub/proxyv2:tag, as the chart composes
// it (ProxyImageArchive builds it).
const (
	IstioHub   = "localhost/istio-cni-test"
	IstioTag   = "istio-test"
	ProxyImage = IstioHub + "/proxyv2:" + IstioTag
	// UpstreamCNIImage is upstream's istio-cni installer as its chart
	// composes the name from the same hub and tag (MakeUpstreamCNIImage).
	UpstreamCNIImage = IstioHub + "/install-cni:" + IstioTag
	IstioNamespace   = "istio-system"
)

// IstioBinaries are pilot-discovery and pilot-agent, which `make
// istio-binaries` builds from the pinned module.
func IstioBinaries() (discovery, agent string, err error) {
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	discovery, agent = filepath.Join(root, "_output", "tools", "pilot-discovery"), filepath.Join(root, "_output", "tools", "pilot-agent")
	for _, b := range []string{discovery, agent} {
		if err := checkExecutable(b); err != nil {
			return "", "", fmt.Errorf("%s: %w; run `make istio-binaries`", filepath.Base(b), err)
		}
	}
	return discovery, agent, nil
}

// MakeIstioBinaries runs `make istio-binaries` in the repository: they
// build from source (minutes when the build cache is cold), so a test
// binary may start this early and wait for it late. `make test` has built
// them already, and then this is a no-op; a cancelled ctx ends it and
// every compiler it started.
func MakeIstioBinaries(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	// The lock keeps two test binaries (two `go test` runs) from writing
	// the same outputs at once.
	cmd := exec.CommandContext(ctx, "flock", filepath.Join("_output", "istio-binaries.lock"),
		"make", "--no-print-directory", "istio-binaries")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make istio-binaries: %w\n%s", err, out)
	}
	return nil
}

// IstioChart is the istio-discovery chart of the pinned module, in the
// module cache.
func IstioChart() (string, error) {
	manifests, err := IstioManifests()
	if err != nil {
		return "", err
	}
	chart := filepath.Join(manifests, "charts", "istio-control", "istio-discovery")
	if _, err := os.Stat(filepath.Join(chart, "Chart.yaml")); err != nil {
		return "", fmt.Errorf("the istio-discovery chart: %w", err)
	}
	return chart, nil
}

// IstioManifests is the manifests directory (charts, helm-profiles) of the
// istio.io/istio module test/upstream pins, in the module cache.
func IstioManifests() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	// download, not list: on a fresh machine the module may not be in the
	// cache yet (the chart tests can run before the Istio build fetched it).
	cmd := exec.Command("go", "mod", "download", "-json", "istio.io/istio")
	cmd.Dir = filepath.Join(root, "test", "upstream")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fetching the istio.io/istio module: %w", err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("fetching the istio.io/istio module: %v %s", err, mod.Error)
	}
	return filepath.Join(mod.Dir, "manifests"), nil
}

// ProxyImageArchive builds the injected containers' image into dir: the
// real pilot-agent for istio-validation and istio-init and the test proxy
// in Envoy's place for istio-proxy, behind test/pilotagent, the
// entrypoint; and this machine's iptables (nft), which istio-init runs,
// as proxyv2 holds its own.
func ProxyImageArchive(ctx context.Context, dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	_, agent, err := IstioBinaries()
	if err != nil {
		return "", err
	}
	files := []image.File{{Path: "/usr/local/bin/pilot-agent-upstream", Source: agent, Mode: 0o755}}
	for name, pkg := range map[string]string{"/usr/local/bin/pilot-agent": "./test/pilotagent", "/testproxy": "./test/testproxy"} {
		out := filepath.Join(dir, filepath.Base(name))
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg) // #nosec G204 -- fixed packages
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s: %w\n%s", pkg, err, b)
		}
		files = append(files, image.File{Path: name, Source: out, Mode: 0o755})
	}
	files = append(files, image.File{Path: "/usr/sbin/xtables-nft-multi", Source: "/usr/sbin/xtables-nft-multi", Mode: 0o755})
	var links []image.Link
	for _, l := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore"} {
		links = append(links, image.Link{Path: "/usr/sbin/" + l, Target: "xtables-nft-multi"})
	}
	modules, err := filepath.Glob("/usr/lib/*/xtables/*.so")
	if err != nil {
		return "", err
	}
	for _, m := range modules {
		files = append(files, image.File{Path: m, Source: m, Mode: 0o644})
	}
	if files, err = image.WithLibraries(files, "", image.LibraryDirs(multiarchTriplet())); err != nil {
		return "", err
	}
	img, err := image.Build(image.Spec{Files: files, Links: links, Entrypoint: []string{"/usr/local/bin/pilot-agent"}})
	if err != nil {
		return "", err
	}
	tarball := filepath.Join(dir, "proxyv2.tar")
	return tarball, image.WriteArchive(tarball, img, ProxyImage)
}

// multiarchTriplet is this machine's Debian multiarch directory name.
func multiarchTriplet() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// SetCNIMode upgrades the istio-discovery release with pilot.cni.enabled
// on or off (istio-validation, or istio-init as without a CNI) and waits
// until the injector, asked in a dry run, injects that way into a pod in
// namespace, an injection-enabled one.
func (i *Istio) SetCNIMode(ctx context.Context, on bool, namespace string) error {
	chart, err := IstioChart()
	if err != nil {
		return err
	}
	helm, err := Helm()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, helm, "--kubeconfig", i.n.Kubeconfig, "upgrade", "istiod", chart, // #nosec G204 -- test harness
		"-n", IstioNamespace, "--reuse-values", "--set", fmt.Sprintf("cni.enabled=%v", on), "--wait=false").CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm upgrade istiod: %w\n%s", err, out)
	}
	want := "istio-init"
	if on {
		want = "istio-validation"
	}
	probe := PodSpec{Namespace: namespace, Name: "cni-mode-probe", Target: "127.0.0.1:1"}.JSON()
	var last string
	for {
		status, body, err := i.n.Do(ctx, http.MethodPost, "/api/v1/namespaces/"+namespace+"/pods?dryRun=All", probe)
		var p Pod
		if err == nil && status == http.StatusCreated && json.Unmarshal(body, &p) == nil && len(p.Spec.InitContainers) > 0 {
			if last = p.Spec.InitContainers[0].Name; last == want {
				return nil
			}
		} else {
			last = fmt.Sprintf("%d %v", status, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the injector still injects %s, want %s: %w", last, want, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// InstallIstio installs the istio-discovery chart and starts istiod; it
// returns once istiod is ready and the injection webhook has its
// caBundle. The proxy image must be imported first (ProxyImageArchive).
func (n *Node) InstallIstio(ctx context.Context) (*Istio, error) {
	bin, _, err := IstioBinaries()
	if err != nil {
		return nil, err
	}
	chart, err := IstioChart()
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	i := &Istio{n: n, dir: filepath.Join(n.dir, "istiod"), bin: bin,
		http: ports[0], grpc: ports[1], xds: ports[2], webhook: ports[3], monitoring: ports[4], ctrlz: ports[5]}
	if err := os.MkdirAll(filepath.Join(i.dir, "cwd"), 0o755); err != nil {
		return nil, err
	}
	values, err := json.Marshal(map[string]any{
		"cni":          map[string]any{"enabled": true},
		"istiodRemote": map[string]any{"enabled": true, "injectionURL": fmt.Sprintf("https://127.0.0.1:%d/inject", i.webhook)},
		"global": map[string]any{
			"configCluster": true, "configValidation": false,
			"hub": IstioHub, "tag": IstioTag, "imagePullPolicy": "Never",
			"proxy": map[string]any{
				"readinessPeriodSeconds": 1,
				"resources":              map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "32Mi"}},
			},
		},
		// The test proxy serves no pilot-agent status port.
		"sidecarInjectorWebhook": map[string]any{"rewriteAppHTTPProbe": false},
	})
	if err != nil {
		return nil, err
	}
	valuesFile := filepath.Join(i.dir, "values.json")
	if err := os.WriteFile(valuesFile, values, 0o600); err != nil {
		return nil, err
	}
	helm, err := Helm()
	if err != nil {
		return nil, err
	}
	// The chart first: istiod reads its injector ConfigMap at start, and
	// without it injects nothing for its whole life.
	out, err := exec.CommandContext(ctx, helm, "--kubeconfig", n.Kubeconfig, "install", "istiod", chart, // #nosec G204 -- test harness
		"-n", IstioNamespace, "--create-namespace", "-f", valuesFile, "--wait=false").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("helm install istiod: %w\n%s", err, out)
	}
	if err := i.Start(ctx); err != nil {
		// Not left half-done: the chart's webhooks (failurePolicy Fail)
		// would refuse pods in injection-enabled namespaces.
		return nil, errors.Join(err, i.Uninstall(context.WithoutCancel(ctx)))
	}
	return i, nil
}

// Start runs istiod, unless it runs, and waits until it is ready and its
// webhook has its caBundle.
func (i *Istio) Start(ctx context.Context) error {
	if i.proc != nil && !i.proc.exited() {
		return nil
	}
	args := []string{"discovery", "--kubeconfig=" + i.n.Kubeconfig, "--domain=cluster.local",
		fmt.Sprintf("--httpAddr=127.0.0.1:%d", i.http), fmt.Sprintf("--grpcAddr=127.0.0.1:%d", i.grpc),
		fmt.Sprintf("--secureGRPCAddr=127.0.0.1:%d", i.xds), fmt.Sprintf("--httpsAddr=127.0.0.1:%d", i.webhook),
		fmt.Sprintf("--monitoringAddr=127.0.0.1:%d", i.monitoring), fmt.Sprintf("--ctrlz_port=%d", i.ctrlz),
		"--log_output_level=default:info"}
	env := []string{"POD_NAME=istiod-local", "POD_NAMESPACE=" + IstioNamespace, "REVISION=default",
		"ISTIOD_CUSTOM_HOST=127.0.0.1", "ENABLE_LEADER_ELECTION=false", "GOMAXPROCS=2"}
	p, err := spawnIn(i.n.launcher, "istiod", i.bin, args, filepath.Join(i.n.dir, "istiod.log"), filepath.Join(i.dir, "cwd"), env)
	if err != nil {
		return err
	}
	i.proc = p
	i.n.components = append(i.n.components, p)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return poll(ctx, p, func(ctx context.Context) error {
		if err := i.ready(ctx); err != nil {
			return err
		}
		return i.webhookSigned(ctx)
	})
}

// Stop ends istiod: the injector is away. Its webhook stays registered.
func (i *Istio) Stop() error {
	if i.proc == nil || i.proc.exited() {
		return nil
	}
	return i.proc.stop(10 * time.Second)
}

// Uninstall removes Istio as its users do: helm uninstall (the webhooks
// go first: with istiod gone, the chart's failurePolicy Fail would refuse
// pods), then istiod and its namespace.
func (i *Istio) Uninstall(ctx context.Context) error {
	helm, err := Helm()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, helm, "--kubeconfig", i.n.Kubeconfig, "uninstall", "istiod", "-n", IstioNamespace).CombinedOutput() // #nosec G204 -- test harness
	if err != nil {
		return fmt.Errorf("helm uninstall istiod: %w\n%s", err, out)
	}
	if err := i.Stop(); err != nil {
		return err
	}
	_, err = i.n.Kubectl(ctx, "delete", "namespace", IstioNamespace, "--wait=false")
	return err
}

// ready asks istiod's /ready.
func (i *Istio) ready(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/ready", i.http), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("istiod /ready: %s", resp.Status)
	}
	return nil
}

// webhookSigned: every injection webhook has a caBundle, and istiod's
// webhook answers TLS at the URL the API server calls.
func (i *Istio) webhookSigned(ctx context.Context) error {
	status, body, err := i.n.Do(ctx, http.MethodGet, "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/istio-sidecar-injector", nil)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("the injector's webhook configuration: %d %v", status, err)
	}
	var mwc struct {
		Webhooks []struct {
			Name         string
			ClientConfig struct{ CABundle string } `json:"clientConfig"`
		}
	}
	if err := json.Unmarshal(body, &mwc); err != nil {
		return err
	}
	for _, wh := range mwc.Webhooks {
		if wh.ClientConfig.CABundle == "" {
			return fmt.Errorf("webhook %s has no caBundle yet", wh.Name)
		}
	}
	conn, err := (&tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", i.webhook)) // #nosec G402 -- a readiness probe; the API server verifies
	if err != nil {
		return err
	}
	return conn.Close()
}

// IstioNamespaceReady waits until istiod has put its root certificate
// (ConfigMap istio-ca-root-cert) in namespace: injected pods mount it.
func (n *Node) IstioNamespaceReady(ctx context.Context, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		status, _, err := n.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+namespace+"/configmaps/istio-ca-root-cert", nil)
		if err == nil && status == http.StatusOK {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("istio-ca-root-cert in namespace %s: %w", namespace, ctx.Err()), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// InstallIstio installs Istio's control plane for the fleet, as
// Node.InstallIstio does for a node: the chart into the fleet's API, and
// istiod a process of this machine beside the API server, which reaches
// its webhook on loopback. Injected pods need no XDS (the test proxy), so
// the nodes never dial istiod. Fleet.Stop ends it.
func (f *Fleet) InstallIstio(ctx context.Context) (*Istio, error) {
	return f.control.InstallIstio(ctx)
}

// IstioNamespaceReady is Node.IstioNamespaceReady on the fleet's API.
func (f *Fleet) IstioNamespaceReady(ctx context.Context, namespace string) error {
	return f.control.IstioNamespaceReady(ctx, namespace)
}
