package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// Upstream istio-cni as its users run it: its own chart (istio/cni) with
// its default values, in istio-system, from its image built here. Its run
// directory is the host's /var/run/istio-cni (the chart does not take
// another: the plugin finds its kubeconfig there); so is this project's
// when the test installs it as docs/migration.md does, with Helm and the
// chart's default run directory.
const (
	upstreamNamespace = "istio-system"
	upstreamRelease   = "istio-cni"
	hostRunDir        = install.NodeRunDir
)

// upstreamKubeconfigPath is where upstream's installer writes its plugin's
// kubeconfig, and its binary.
func upstreamKubeconfigPath() string { return filepath.Join(hostRunDir, "istio-cni-kubeconfig") }
func upstreamBinary() string         { return filepath.Join(env.node.CNIBinDir, "istio-cni") }

var upstreamImage struct {
	once sync.Once
	err  error
}

// installUpstream is `helm install istio-cni <istio/cni> -n istio-system`
// with the chart's default values but for the image (built here), the
// node's CNI directories and the API's address (the node has no Service
// network); set adds values (--set's form). It waits until upstream's
// installer is ready on the node.
func installUpstream(t *testing.T, set ...string) {
	t.Helper()
	upstreamImage.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		tarball, err := cluster.MakeUpstreamCNIImage(ctx)
		if err == nil {
			err = env.node.ImportImages(ctx, tarball)
		}
		upstreamImage.err = err
	})
	if upstreamImage.err != nil {
		t.Fatal("upstream's istio-cni image:", upstreamImage.err)
	}
	manifests, err := cluster.IstioManifests()
	if err != nil {
		t.Fatal(err)
	}
	// Upstream's installer runs in the pod network (sidecar mode is not on
	// the host's): it reaches the API through a proxy on the pods'
	// gateway, which the serving certificate names.
	podProxy := apiForPods(t)
	args := []string{"install", upstreamRelease, filepath.Join(manifests, "charts", "istio-cni"),
		"--namespace", upstreamNamespace, "--wait", "--timeout", "3m"}
	for _, s := range append([]string{
		"global.hub=" + cluster.IstioHub, "global.tag=" + cluster.IstioTag,
		"cniBinDir=" + env.node.CNIBinDir, "cniConfDir=" + env.node.CNINetDir,
		"env.KUBERNETES_SERVICE_HOST=" + env.node.NodeIP.String(), fmt.Sprintf("env.KUBERNETES_SERVICE_PORT=%d", podProxy.port()),
	}, set...) {
		args = append(args, "--set", s)
	}
	runHelm(t, args...)
	if err := upstreamHealthy(t.Context()); err != nil {
		t.Fatal("upstream's istio-cni after helm install:", err)
	}
}

var podAPI struct {
	once  sync.Once
	proxy *apiProxy
	err   error
}

// apiForPods is a proxy to the API server on the pods' gateway (the
// node's address), for the suite's life.
func apiForPods(t *testing.T) *apiProxy {
	t.Helper()
	podAPI.once.Do(func() {
		podAPI.proxy, podAPI.err = newAPIProxy(env.node.NodeIP.String()+":0", fmt.Sprintf("127.0.0.1:%d", env.node.APIPort()))
	})
	if podAPI.err != nil {
		t.Fatal(podAPI.err)
	}
	return podAPI.proxy
}

// upstreamPodIP is the address of upstream's installer pod on the node.
func upstreamPodIP(ctx context.Context) (string, error) {
	status, body, err := env.node.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+upstreamNamespace+"/pods?labelSelector=k8s-app%3Distio-cni-node", nil)
	if err != nil || status != http.StatusOK {
		return "", fmt.Errorf("listing upstream's pods: %d %v", status, err)
	}
	var list struct {
		Items []struct {
			Metadata struct{ DeletionTimestamp *time.Time }
			Status   struct{ PodIP string }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", err
	}
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp == nil && p.Status.PodIP != "" {
			return p.Status.PodIP, nil
		}
	}
	return "", fmt.Errorf("no running pod of upstream's istio-cni: %s", body)
}

// upstreamHealthy: upstream's installer says it is ready, on its
// readiness endpoint and in its own istio_cni_install_ready gauge.
func upstreamHealthy(ctx context.Context) error {
	return poll.Wait(2*time.Minute, "upstream's istio-cni ready", func() (bool, string) {
		ip, err := upstreamPodIP(ctx)
		if err != nil {
			return false, err.Error()
		}
		return cluster.UpstreamCNIReady(ctx, ip)
	})
}

// uninstallUpstream removes upstream's as docs/migration.md says: its
// DaemonSet first, then, once its installer's shutdown has taken its files
// off the node (its kubeconfig, its binary, its entry) while its
// credentials still worked, the rest with Helm.
func uninstallUpstream(t *testing.T) {
	t.Helper()
	kubectl(t, "-n", upstreamNamespace, "delete", "daemonset", "istio-cni-node", "--wait=false")
	poll.Until(t, 2*time.Minute, "upstream's files gone", func() (bool, string) {
		left := upstreamFiles(t)
		return len(left) == 0, strings.Join(left, ", ")
	})
	runHelm(t, "uninstall", upstreamRelease, "--namespace", upstreamNamespace, "--wait")
}

// upstreamFiles lists what of upstream's install is on the node.
func upstreamFiles(t *testing.T) []string {
	t.Helper()
	var left []string
	for _, f := range []string{upstreamKubeconfigPath(), upstreamBinary()} {
		if exists(f) {
			left = append(left, f)
		}
	}
	entries, err := os.ReadDir(env.node.CNINetDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if data, err := os.ReadFile(filepath.Join(env.node.CNINetDir, e.Name())); err == nil && chain.UpstreamEntry(data) {
			left = append(left, "upstream's entry in "+e.Name())
		}
	}
	return left
}

// ourFiles lists what of this project's install is on the node, with its
// run directory at the host's.
func ourFiles(t *testing.T) []string {
	t.Helper()
	var left []string
	for _, b := range install.PluginBinaries {
		if p := filepath.Join(env.node.CNIBinDir, b); exists(p) && !sameFile(p, upstreamBinary()) {
			left = append(left, p)
		}
	}
	if p := filepath.Join(hostRunDir, install.KubeconfigName); exists(p) && p != upstreamKubeconfigPath() {
		left = append(left, p)
	}
	entries, err := os.ReadDir(env.node.CNINetDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(env.node.CNINetDir, e.Name()))
		if err == nil && chain.HasEntry(data) && !chain.UpstreamEntry(data) {
			left = append(left, "our entry in "+e.Name())
		}
	}
	return left
}

func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// helmInstallOurs installs this project as docs/migration.md says: from
// upstream's values file, with istioOwnedCNIConfig back to true (its own
// conflist, sorting first, without upstream's entry: from then on the
// runtime runs only this project's plugin), and the chart's own run
// directory (the host's /var/run/istio-cni, as upstream's) rather than the
// test node's; it waits for the agent to be ready.
func helmInstallOurs(t *testing.T) {
	t.Helper()
	reinstallReady(t)
	helmNamespace(t)
	runHelm(t, append(helmInstallArgs(t, nil), "--set", "cniRunDir="+hostRunDir, "--set", "istioOwnedCNIConfig=true")...)
	requireInstalled(t)
}

// uninstallOurs removes this project as docs/migration.md says on the way
// back: its DaemonSet first, whose agents then take their files off their
// nodes while their credentials still work (a meshed pod started then
// runs this project's plugin to the end), then the rest with Helm.
func uninstallOurs(t *testing.T) {
	t.Helper()
	kubectl(t, "-n", "istio-cni", "delete", "daemonset", "istio-cni-node", "--wait=false")
	poll.Until(t, 2*time.Minute, "this project's files gone", func() (bool, string) {
		left := ourFiles(t)
		return len(left) == 0, strings.Join(left, ", ")
	})
	runHelm(t, "uninstall", "istio-cni", "--namespace", "istio-cni", "--wait")
}

// 21. The switch from upstream istio-cni and back, as docs/migration.md
// has an operator run it: upstream installed by its own chart with its
// default values, injected pods running; this project installed beside it
// (ready at once), then upstream uninstalled; and back: upstream installed
// beside this one, then this one uninstalled. Injected pods are created
// throughout each switch: each starts at its first sandbox, its
// istio-validation passing at its first attempt, its namespace holding the
// rule model. Pods running before keep their rules untouched, read every
// 200 ms, and their traffic through their proxy. After the switch to this
// project nothing of upstream's is left; after the switch back upstream's
// installer is ready (its readiness and its own gauge) and nothing of this
// project's is left.
func TestSwitchFromUpstreamAndBack(t *testing.T) {
	requireInstalled(t)
	requireIstio(t)
	const ns = "switch"
	injectionNamespace(t, ns)
	// Whatever fails, the suite gets its own install back, each release
	// removed DaemonSet first.
	restored := false
	t.Cleanup(func() {
		if !restored {
			removeRelease(upstreamNamespace)
			removeRelease("istio-cni")
			restorePrimary(t)
			ensureInstalled(t)
		}
	})
	// Start as upstream's users are: upstream's istio-cni alone.
	kubectl(t, "delete", "-k", env.overlay, "--wait=false")
	waitUninstalled(t)
	installUpstream(t)
	w := startSwitchWatch(t, ns, 2, validationInit)

	w.phase("to this project")
	injectedDuring(t, ns, "to-ours", validationInit, func() {
		start := time.Now()
		helmInstallOurs(t)
		t.Logf("this project installed and ready beside upstream's in %s", time.Since(start).Round(100*time.Millisecond))
		// The runbook's check before the next step: both installed, said
		// on the Node.
		poll.Until(t, time.Minute, "an "+nodeagent.ReasonOtherInstaller+" Event on the node", func() (bool, string) {
			for key := range istioEvents(t) {
				if strings.Contains(key, " "+nodeagent.ReasonOtherInstaller+": ") {
					return true, key
				}
			}
			return false, "none"
		})
		start = time.Now()
		uninstallUpstream(t)
		t.Logf("upstream's uninstalled, its files gone, in %s", time.Since(start).Round(100*time.Millisecond))
	})
	if left := upstreamFiles(t); len(left) > 0 {
		t.Errorf("upstream's files left after the switch: %v", left)
	}
	if left := ourFiles(t); len(left) < len(install.PluginBinaries)+2 {
		t.Errorf("this project's install after the switch: only %v", left)
	}
	// This project alone now.
	startedAs(t, ns, "after-to-ours", validationInit)
	w.check(t)

	w.phase("back to upstream")
	injectedDuring(t, ns, "to-upstream", validationInit, func() {
		// Upstream's entry into the primary's own file, which the runtime
		// reads once this project's is gone (by default upstream's
		// installer chains into the config that sorts first, this
		// project's, and would stay on that copy of the primary).
		start := time.Now()
		installUpstream(t, "cniConfFileName="+filepath.Base(env.node.PrimaryConfig))
		t.Logf("upstream's installed and ready beside this project in %s", time.Since(start).Round(100*time.Millisecond))
		start = time.Now()
		uninstallOurs(t)
		t.Logf("this project uninstalled, its files gone, in %s", time.Since(start).Round(100*time.Millisecond))
	})
	if err := upstreamHealthy(t.Context()); err != nil {
		t.Error("upstream's istio-cni after the switch back:", err)
	}
	// No copy of the primary left sorting first, upstream's entry in it
	// or not: upstream chains into the primary itself.
	if exists(filepath.Join(env.node.CNINetDir, install.DefaultOwnedName)) {
		t.Errorf("%s is left after the switch back", install.DefaultOwnedName)
	}
	// Upstream alone now.
	startedAs(t, ns, "after-to-upstream", validationInit)
	w.check(t)
	w.stop()
	for _, p := range w.pods {
		assertThroughProxy(t, p.pod)
	}

	// Back to the suite's own install (Helm left the namespace).
	uninstallUpstream(t)
	restorePrimary(t)
	reinstall(t)
	restored = true
}

// restorePrimary puts the primary's own bytes back: upstream's installer,
// taking its entry out, rewrites the file in its own format (sorted keys,
// its indent), and the suite's later tests compare bytes. Anything but a
// reformat is an error.
func restorePrimary(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(env.node.PrimaryConfig)
	if err != nil {
		t.Error(err)
		return
	}
	if !sameJSON(b, env.primary) {
		t.Errorf("the primary after the switches:\n%s\nwant (as JSON):\n%s", b, env.primary)
	}
	tmp := env.node.PrimaryConfig + ".e2e-tmp"
	if err := os.WriteFile(tmp, env.primary, 0o644); err == nil {
		err = os.Rename(tmp, env.node.PrimaryConfig)
		if err != nil {
			t.Error(err)
		}
	}
}

// removeRelease removes the release named istio-cni in ns, if any, as
// docs/migration.md says: its DaemonSet first, then (its pods gone, their
// shutdown done) the rest with Helm. For a cleanup: errors are ignored.
func removeRelease(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, _ = env.node.Kubectl(ctx, "-n", ns, "delete", "daemonset", "istio-cni-node", "--ignore-not-found", "--wait=true")
	_ = poll.Wait(time.Minute, "the DaemonSet's pods gone", func() (bool, string) {
		// Both charts label their agents so.
		out, err := env.node.Kubectl(ctx, "-n", ns, "get", "pods", "-l", "k8s-app=istio-cni-node", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out
	})
	helm, err := cluster.Helm()
	if err != nil {
		return
	}
	_ = exec.CommandContext(ctx, helm, "--kubeconfig", env.node.Kubeconfig, "uninstall", "istio-cni", "--namespace", ns, "--wait", "--ignore-not-found").Run() // #nosec G204 -- test harness
}

// The injector's first init container: istio-validation in CNI mode,
// istio-init (which writes the pod's rules itself) without it; "" takes
// either.
const (
	validationInit = audit.DefaultValidationContainer
	istioInit      = decision.InitContainer
	eitherInit     = ""
)

// startSwitchWatch starts n injected pods in ns, waits for each to run
// redirected (its first init container, init, passed at once, its rules
// in place, its traffic through its proxy), and reads their namespaces
// every 200 ms from then on (skewWatch's rounds).
func startSwitchWatch(t *testing.T, ns string, n int, init string) *skewWatch {
	t.Helper()
	// Both installed, each agent says so on its Node (docs/migration.md).
	w := &skewWatch{events: istioEvents(t), seen: map[string]bool{}, label: "before the switch", namespace: ns,
		expected: []string{nodeagent.ReasonOtherInstaller}}
	target := server(t)
	for i := range n {
		name := fmt.Sprintf("before-%d", i)
		p := startPod(t, cluster.PodSpec{Namespace: ns, Name: name, Target: target})
		if err := firstInitPassed(p, init); err != nil {
			t.Fatal(err)
		}
		netns, err := env.node.PodNetNS(t.Context(), ns, name)
		if err != nil {
			t.Fatal(err)
		}
		st, err := checkInjectedRules(t.Context(), ns, name, netns)
		if err != nil {
			t.Fatal(err)
		}
		assertThroughProxy(t, p)
		w.pods = append(w.pods, watchedPod{variant: skewVariant{name: name, meshed: true}, pod: p, netns: netns, state: st})
	}
	w.stop = poll.Paced(200*time.Millisecond, w.round)
	t.Cleanup(w.stop)
	return w
}

// firstInitPassed: the injector's first init container is init (or,
// with eitherInit, istio-validation or istio-init), and it exited 0 at its
// first attempt.
func firstInitPassed(p cluster.Pod, init string) error {
	name := p.Metadata.Namespace + "/" + p.Metadata.Name
	inits := p.Spec.InitContainers
	ok := len(inits) > 0 && (inits[0].Name == init || (init == eitherInit && (inits[0].Name == validationInit || inits[0].Name == istioInit)))
	if !ok {
		return fmt.Errorf("%s: want %q as first init container (\"\": istio-validation or istio-init), have %+v", name, init, inits)
	}
	for _, c := range p.Status.InitContainerStatuses {
		if c.Name == inits[0].Name && (c.ExitCode() != 0 || c.RestartCount != 0) {
			return fmt.Errorf("%s: %s exit %d after %d restarts, want 0 at its first attempt", name, c.Name, c.ExitCode(), c.RestartCount)
		}
	}
	return nil
}

// checkInjectedRules: the pod's namespace holds the rule model the
// decision gives for the pod as the API has it (the injector's
// annotations), or, for a pod whose istio-init wrote its rules (which
// this project leaves alone), Istio's chains; it returns the state read.
func checkInjectedRules(ctx context.Context, ns, name, netns string) (netState, error) {
	status, body, err := env.node.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, nil)
	if err != nil || status != http.StatusOK {
		return netState{}, fmt.Errorf("%s/%s: %d %v", ns, name, status, err)
	}
	var pod kube.Pod
	if err := json.Unmarshal(body, &pod); err != nil {
		return netState{}, err
	}
	d, err := decision.Pod(&pod)
	st, rerr := readNetState(ctx, netns)
	if rerr != nil {
		return netState{}, rerr
	}
	if err == nil && d.Reason == decision.IstioInitPresent {
		for _, c := range []string{":ISTIO_INBOUND ", ":ISTIO_OUTPUT ", ":ISTIO_REDIRECT ", ":ISTIO_IN_REDIRECT "} {
			if !strings.Contains(st.v4, c) {
				return netState{}, fmt.Errorf("%s/%s: istio-init ran, but its namespace has no %s chain:\n%s", ns, name, strings.TrimSpace(c), st.v4)
			}
		}
		return st, nil
	}
	if err != nil || !d.Redirect {
		return netState{}, fmt.Errorf("%s/%s: the decision %+v, %v; want redirect", ns, name, d, err)
	}
	if err := st.matchesModel(decision.Rules(d, decision.DefaultNodeSettings(), true, d.DualStack)); err != nil {
		return netState{}, fmt.Errorf("%s/%s: %w", ns, name, err)
	}
	return st, nil
}

// injectedDuring is meshedDuring's stream with pods istiod's injector
// makes, in ns: each must start at its first sandbox, its first init
// container (istio-validation, or istio-init without the CNI mode)
// passing at its first attempt, and hold its rules (checkInjectedRules).
func injectedDuring(t *testing.T, ns, prefix, init string, op func()) {
	t.Helper()
	target := server(t)
	// A pod the API refuses (the injector's webhook away during istiod's
	// upgrade) is no pod that started well: the switch failed users.
	var refused sync.Map
	streamDuring(t, prefix, func(ctx context.Context, name string) error {
		err := env.node.CreatePod(ctx, cluster.PodSpec{Namespace: ns, Name: name, Target: target}.JSON())
		if err != nil {
			refused.Store(name, err)
		}
		return err
	}, func(ctx context.Context, name string) error {
		return checkInjectedStarted(ctx, ns, name, init)
	}, op)
	refused.Range(func(name, err any) bool {
		t.Errorf("creating %s/%s during the switch: %v", ns, name, err)
		return true
	})
}

// checkInjectedStarted waits for the injected pod to run, checks its
// first sandbox ran it, its validation passed at once and its rules are
// the model, and deletes it.
func checkInjectedStarted(ctx context.Context, ns, name, init string) error {
	defer func() { _ = env.node.DeletePod(context.Background(), ns, name) }()
	// Twice the suite's pod timeout: beside make test's package tests a
	// sandbox here once took 55 s (upstream's plugin alone 5 s) and the
	// pod was still starting after two minutes.
	wctx, cancel := context.WithTimeout(ctx, 2*podTimeout)
	p, err := env.node.WaitRunning(wctx, ns, name)
	cancel()
	if err != nil {
		return fmt.Errorf("%s/%s: %w\n%s", ns, name, err, env.node.PodEvents(ctx, ns, name))
	}
	if ev := env.node.PodEvents(ctx, ns, name); strings.Contains(ev, "FailedCreatePodSandBox") {
		return fmt.Errorf("%s/%s: a sandbox failed before it ran: %s", ns, name, ev)
	}
	if err := firstInitPassed(p, init); err != nil {
		return fmt.Errorf("%w\n%s", err, env.node.PodEvents(ctx, ns, name))
	}
	if err := firstSandbox(ctx, p); err != nil {
		return err
	}
	netns, err := env.node.PodNetNS(ctx, ns, name)
	if err != nil {
		return err
	}
	_, err = checkInjectedRules(ctx, ns, name, netns)
	return err
}
