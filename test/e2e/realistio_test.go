package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// The tests in this file run against Istio's own control plane: istiod
// and its injector from the pinned istio.io/istio module, installed with
// its istio-discovery chart (cluster.Node.InstallIstio). Their pods are
// created plainly in a namespace labelled istio-injection=enabled: the
// injector adds istio-validation (upstream's pilot-agent) and istio-proxy
// (the test proxy in Envoy's place), as it does for any Istio user with
// pilot.cni.enabled.

// istioBuild is `make istio-binaries` in the background: a cold build
// takes minutes, which the first tests cover.
type istioBuild struct {
	done  chan struct{}
	err   error
	took  time.Duration
	start time.Time
}

// realIstioTests are the tests that install Istio; -test.run naming none
// of them builds nothing.
var realIstioTests = []string{"TestIstioInjectedPod", "TestSwitchFromUpstreamAndBack", "TestSwitchFromIstioInit"}

// startIstioBuild starts the build unless -test.run leaves out every test
// that installs Istio (make chaos).
func startIstioBuild(ctx context.Context) *istioBuild {
	b := &istioBuild{done: make(chan struct{}), start: time.Now()}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		if re, err := regexp.Compile(f.Value.String()); err == nil && !slices.ContainsFunc(realIstioTests, re.MatchString) {
			b.err = errors.New("not built: -test.run leaves out the real-Istio tests")
			close(b.done)
			return b
		}
	}
	go func() {
		defer close(b.done)
		b.err = cluster.MakeIstioBinaries(ctx)
		b.took = time.Since(b.start)
	}()
	return b
}

var realIstio struct {
	once  sync.Once
	istio *cluster.Istio
	err   error
}

// requireIstio installs Istio on the node once, after the background
// build, and returns it; every caller fails with the first one's error.
func requireIstio(t *testing.T) *cluster.Istio {
	t.Helper()
	realIstio.once.Do(func() {
		waited := time.Now()
		<-env.istioBuild.done
		if realIstio.err = env.istioBuild.err; realIstio.err != nil {
			return
		}
		t.Logf("istiod and pilot-agent built in %s (waited %s for them)", env.istioBuild.took.Round(time.Second), time.Since(waited).Round(time.Second))
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		realIstio.istio, realIstio.err = installIstio(ctx)
		t.Logf("Istio installed and istiod ready in %s", time.Since(start).Round(time.Millisecond))
	})
	if realIstio.err != nil {
		t.Fatal("real Istio:", realIstio.err)
	}
	return realIstio.istio
}

func installIstio(ctx context.Context) (*cluster.Istio, error) {
	dir, err := os.MkdirTemp(env.dir, "proxyv2-")
	if err != nil {
		return nil, err
	}
	tarball, err := cluster.ProxyImageArchive(ctx, dir)
	if err != nil {
		return nil, err
	}
	if err := env.node.ImportImages(ctx, tarball); err != nil {
		return nil, err
	}
	return env.node.InstallIstio(ctx)
}

// injectionNamespace creates namespace ns labelled istio-injection=enabled
// and waits for istiod's root certificate in it (injected pods mount it).
func injectionNamespace(t *testing.T, ns string) {
	t.Helper()
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		_, _ = env.node.Kubectl(context.Background(), "delete", "namespace", ns, "--wait=false")
	})
	kubectl(t, "label", "namespace", ns, "istio-injection=enabled")
	if err := env.node.IstioNamespaceReady(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
}

// injected: the injector gave the pod istio-validation first and
// istio-proxy, both from the proxy image, and validation passed at its
// first attempt when firstTry.
func assertInjected(t *testing.T, p cluster.Pod, firstTry bool) {
	t.Helper()
	name := p.Metadata.Namespace + "/" + p.Metadata.Name
	inits, ctrs := p.Spec.InitContainers, p.Spec.Containers
	if len(inits) == 0 || inits[0].Name != "istio-validation" || inits[0].Image != cluster.ProxyImage {
		t.Fatalf("%s: want istio-validation (%s) as first init container, have %+v", name, cluster.ProxyImage, inits)
	}
	// On Kubernetes ≥1.33 the injector makes istio-proxy a native
	// sidecar (its ENABLE_NATIVE_SIDECARS "auto"): an init container
	// that keeps running, after istio-validation.
	proxy := false
	for _, c := range inits[1:] {
		proxy = proxy || (c.Name == "istio-proxy" && c.Image == cluster.ProxyImage && c.RestartPolicy == "Always")
	}
	if !proxy {
		t.Errorf("%s: no istio-proxy native sidecar (%s, restartPolicy Always) after istio-validation: inits %+v, containers %+v", name, cluster.ProxyImage, inits, ctrs)
	}
	if p.Metadata.Annotations["sidecar.istio.io/status"] == "" {
		t.Errorf("%s: no sidecar.istio.io/status annotation", name)
	}
	v := validationStatus(p)
	if v.ExitCode() != 0 || (firstTry && v.RestartCount != 0) {
		t.Errorf("%s: istio-validation exit %d after %d restarts, want 0%s", name, v.ExitCode(), v.RestartCount,
			map[bool]string{true: " at the first attempt"}[firstTry])
	}
}

func validationStatus(p cluster.Pod) cluster.ContainerStatus {
	for _, c := range p.Status.InitContainerStatuses {
		if c.Name == audit.DefaultValidationContainer {
			return c
		}
	}
	return cluster.ContainerStatus{}
}

// 13a. A pod the injector wrote: it starts, validation passes at once,
// its app's traffic goes through its proxy, and inspect finds it in the
// mesh.
func TestIstioInjectedPod(t *testing.T) {
	requireInstalled(t)
	requireIstio(t)
	const ns = "istio-app"
	injectionNamespace(t, ns)
	p := startPod(t, cluster.PodSpec{Namespace: ns, Name: "injected", Target: server(t)})
	assertInjected(t, p, true)
	assertThroughProxy(t, p)
	if out, code := inspectPod(t, ns+"/injected"); code != 0 {
		t.Errorf("inspect %s/injected: exit %d, want 0:\n%s", ns, code, out)
	}
}

// validationDepth is how deep in kubelet's backoff the pods of
// TestIstioValidationRepaired are when the agent comes back: restarts of
// istio-validation (the next attempt then comes 40 s after the last).
const validationDepth = 2

// 13b. With the plugin absent (the agent moved off the node uninstalls
// it, as on a node whose runtime ran without it), validation fails with
// upstream's exit code and the pods crash-loop: the control. The agent
// back, it repairs them in place between attempts, and they run, their
// traffic through the proxy. The time from the agent ready to every pod
// Running is logged (docs/node-agent.md).
func TestIstioValidationRepaired(t *testing.T) {
	requireInstalled(t)
	requireIstio(t)
	const ns, pods = "istio-crashloop", 3
	injectionNamespace(t, ns)
	agentAway(t)
	back := false
	t.Cleanup(func() {
		if !back {
			agentBack(t)
		}
	})
	// Moved off the node, the agent uninstalled: no conflist of ours.
	if exists(ownedPath()) {
		t.Fatalf("%s is still there with the agent moved off the node", ownedPath())
	}
	names := make([]string, pods)
	for i := range names {
		names[i] = fmt.Sprintf("crashloop-%d", i)
		createPod(t, cluster.PodSpec{Namespace: ns, Name: names[i], Target: server(t)})
	}
	poll.Until(t, 3*time.Minute, fmt.Sprintf("every pod's istio-validation failed %d times with exit 126", validationDepth+1), func() (bool, string) {
		var state []string
		deep := 0
		for _, name := range names {
			p, _, err := env.node.GetPod(t.Context(), ns, name)
			v := validationStatus(p)
			if err == nil && v.ExitCode() == audit.ValidationExitCode && v.RestartCount >= validationDepth {
				deep++
			}
			if p.Status.Phase == "Running" {
				t.Fatalf("%s ran without the plugin: the control failed", name)
			}
			state = append(state, fmt.Sprintf("%s: exit %d, %d restarts", name, v.ExitCode(), v.RestartCount))
		}
		return deep == pods, strings.Join(state, "; ")
	})
	if rules, err := env.node.IptablesSave(t.Context(), ns, names[0]); err != nil || strings.Contains(rules, "ISTIO_") {
		t.Fatalf("%s has ISTIO rules without the plugin (%v):\n%s", names[0], err, rules)
	}

	agentBack(t)
	back = true
	ready := readyAt(t.Context())
	// The agent's part: every pod's rules back, read as an operator would.
	poll.Until(t, time.Minute, "every pod's rules repaired", func() (bool, string) {
		for _, name := range names {
			if rules, err := env.node.IptablesSave(t.Context(), ns, name); err != nil || !strings.Contains(rules, ":ISTIO_OUTPUT ") {
				return false, fmt.Sprintf("%s: %v", name, err)
			}
		}
		return true, ""
	})
	repaired := time.Since(ready)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var slowest time.Duration
	for _, name := range names {
		p, err := env.node.WaitRunning(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(ready))
		assertInjected(t, p, false)
		if out := podEvents(t, ns, name); !strings.Contains(out, audit.ReasonRepaired) {
			t.Errorf("%s: no %s Event:\n%s", name, audit.ReasonRepaired, out)
		}
	}
	t.Logf("%d pods %d restarts deep in istio-validation's backoff: rules repaired %s and all Running %s after the agent was ready (the rest is kubelet's backoff)",
		pods, validationDepth, repaired.Round(10*time.Millisecond), slowest.Round(100*time.Millisecond))
	p, _, err := env.node.GetPod(t.Context(), ns, names[0])
	if err != nil {
		t.Fatal(err)
	}
	assertThroughProxy(t, p)
}

// 13c. The seed scenario: istiod down (its webhooks set to
// failurePolicy Ignore: the chart's Fail would refuse the pods instead)
// while a Deployment's pods are created in an injection-enabled
// namespace; they run without sidecars and are reported. istiod back and
// restart mode on, each is evicted once and comes back injected, its
// validation passing and its traffic through the proxy.
func TestIstioSeededWhileIstiodAway(t *testing.T) {
	requireInstalled(t)
	istio := requireIstio(t)
	const ns, replicas = "istio-seed", 2
	injectionNamespace(t, ns)
	if err := setInjectorFailurePolicy(t.Context(), "Ignore"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setInjectorFailurePolicy(context.Background(), "Fail"); err != nil {
			t.Error(err)
		}
	})
	if err := istio.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := istio.Start(context.Background()); err != nil {
			t.Error(err)
		}
	})
	createDeployment(t, ns, "seeded", replicas, cluster.PodSpec{Namespace: ns, Name: "seeded", Target: server(t)})
	var seeded []string
	poll.Until(t, 2*time.Minute, "the Deployment's pods running, uninjected, and reported", func() (bool, string) {
		seeded = seeded[:0]
		for _, p := range podsOf(t, ns, "app=seeded") {
			f := strings.Fields(p)
			if f[2] != "Running" || !strings.Contains(podEvents(t, ns, f[0]), missed.ReasonMissed) {
				return false, p
			}
			seeded = append(seeded, f[0])
		}
		return len(seeded) == replicas, fmt.Sprint(seeded)
	})
	for _, name := range seeded {
		p, _, err := env.node.GetPod(t.Context(), ns, name)
		if err != nil || len(p.Spec.InitContainers) != 0 || len(p.Spec.Containers) != 1 {
			t.Fatalf("%s: want created without a sidecar, have %+v %+v (%v)", name, p.Spec.InitContainers, p.Spec.Containers, err)
		}
	}

	if err := istio.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The agent restarts with the setting: its counters begin at 0.
	restartMode(t)
	poll.Until(t, 3*time.Minute, "each seeded pod evicted once, its replacement injected and running", func() (bool, string) {
		restarted := strings.Fields(kubectl(t, "get", "events", "-n", ns, "--field-selector", "reason="+missed.ReasonRestarted,
			"-o", "jsonpath={.items[*].involvedObject.name}"))
		pods := podsOf(t, ns, "app=seeded")
		if len(restarted) != replicas || len(pods) != replicas {
			return false, fmt.Sprintf("restarted %q; pods %q", restarted, pods)
		}
		for _, p := range pods {
			f := strings.Fields(p)
			if f[2] != "Running" || strings.Contains(" "+strings.Join(seeded, " ")+" ", " "+f[0]+" ") {
				return false, fmt.Sprintf("restarted %q; pods %q", restarted, pods)
			}
		}
		return true, ""
	})
	for _, p := range podsOf(t, ns, "app=seeded") {
		name := strings.Fields(p)[0]
		ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
		pod, err := env.node.WaitRunning(ctx, ns, name)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		assertInjected(t, pod, true)
		assertThroughProxy(t, pod)
		if out, code := inspectPod(t, ns+"/"+name); code != 0 {
			t.Errorf("inspect %s/%s: exit %d, want 0:\n%s", ns, name, code, out)
		}
	}
	if got := metric(t, `istio_cni_missed_injection_restarts_total{result="evicted"}`); got != replicas {
		t.Errorf("evictions counted %v, want %d", got, replicas)
	}
}

// restartMode turns MISSED_INJECTION=restart on with the optional pod
// writes it needs, until the test ends.
func restartMode(t *testing.T) {
	t.Helper()
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	writes := base + "/optional/audit-pod-writes.yaml"
	kubectl(t, "apply", "-f", writes)
	t.Cleanup(func() {
		if err := setAgentSetting(context.Background(), "MISSED_INJECTION", "report"); err != nil {
			t.Error(err)
		}
		_, _ = env.node.Kubectl(context.Background(), "delete", "-f", writes, "--ignore-not-found")
	})
	if err := setAgentSetting(t.Context(), "MISSED_INJECTION", "restart"); err != nil {
		t.Fatal(err)
	}
	requireInstalled(t)
}

// setInjectorFailurePolicy sets every webhook of the injector's
// configuration to policy (istiod's caBundle patcher leaves it alone).
func setInjectorFailurePolicy(ctx context.Context, policy string) error {
	out, err := env.node.Kubectl(ctx, "get", "mutatingwebhookconfiguration", "istio-sidecar-injector", "-o", "jsonpath={.webhooks[*].name}")
	if err != nil {
		return err
	}
	var ops []map[string]any
	for i := range strings.Fields(out) {
		ops = append(ops, map[string]any{"op": "replace", "path": fmt.Sprintf("/webhooks/%d/failurePolicy", i), "value": policy})
	}
	patch, _ := json.Marshal(ops)
	_, err = env.node.Kubectl(ctx, "patch", "mutatingwebhookconfiguration", "istio-sidecar-injector", "--type=json", "-p", string(patch))
	return err
}

// 13d. Istio uninstalled as its users do (helm uninstall), istiod
// stopped: later tests run on a node without it.
func TestIstioUninstalled(t *testing.T) {
	if realIstio.istio == nil {
		t.Skip("Istio was not installed")
	}
	if err := realIstio.istio.Uninstall(t.Context()); err != nil {
		t.Fatal(err)
	}
}
