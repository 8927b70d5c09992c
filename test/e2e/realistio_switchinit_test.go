package e2e

import (
	"context"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// 22. The switch from istio-init and back, docs/migration.md's istiod
// steps: istiod injecting istio-init (pilot.cni.enabled off; the pod
// writes its own rules, which this project leaves alone), pods running
// with it; istiod's CNI mode turned on, then off again. This project stays
// installed throughout (its install and removal are test 21's and the
// uninstall tests'). Injected pods are created throughout each switch, each
// injected one way or the other as the injector stands: each starts at its
// first sandbox, its first init container (istio-init or istio-validation)
// passing at its first attempt, its namespace holding Istio's rules (the
// rule model, for a pod this project redirects). The pods from before keep
// their rules untouched, read every 200 ms, and their traffic through
// their proxies.
func TestSwitchFromIstioInit(t *testing.T) {
	requireInstalled(t)
	istio := requireIstio(t)
	const ns = "switch-init"
	injectionNamespace(t, ns)
	setMode := func(on bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		if err := istio.SetCNIMode(ctx, on, ns); err != nil {
			t.Fatal(err)
		}
		t.Logf("istiod's CNI mode %v: the injector follows in %s", on, time.Since(start).Round(100*time.Millisecond))
	}
	t.Cleanup(func() {
		// The suite's other tests want the CNI mode.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := istio.SetCNIMode(ctx, true, ns); err != nil {
			t.Error(err)
		}
	})
	setMode(false)
	w := startSwitchWatch(t, ns, 2, istioInit)

	w.phase("to this project")
	injectedDuring(t, ns, "from-init", eitherInit, func() { setMode(true) })
	// The workloads restarted: a new pod is this project's to redirect.
	startedAs(t, ns, "after-to-cni", validationInit)
	w.check(t)

	w.phase("back to istio-init")
	injectedDuring(t, ns, "to-init", eitherInit, func() { setMode(false) })
	startedAs(t, ns, "after-to-init", istioInit)
	w.check(t)
	w.stop()
	for _, p := range w.pods {
		assertThroughProxy(t, p.pod)
	}
	setMode(true)
}

// startedAs creates an injected pod and checks it as the streams do, its
// first init container init.
func startedAs(t *testing.T, ns, name, init string) {
	t.Helper()
	if err := env.node.CreatePod(t.Context(), cluster.PodSpec{Namespace: ns, Name: name, Target: server(t)}.JSON()); err != nil {
		t.Fatal(err)
	}
	if err := checkInjectedStarted(t.Context(), ns, name, init); err != nil {
		t.Error(err)
	}
}
