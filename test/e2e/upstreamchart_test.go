package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// helmInstallArgs is `helm install` of deployments/helm/istio-cni as a user
// switching from upstream's chart runs it: upstream's values file, then
// files (upstream's platform profiles), the image pointed at istio-cni's,
// and the node's paths and ports as values, except the paths the files
// set under cni: (they name the platform's, which the test provides).
func helmInstallArgs(t *testing.T, files []string) []string {
	t.Helper()
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := cluster.IstioManifests()
	if err != nil {
		t.Fatal(err)
	}
	profileSets := map[string]bool{}
	for _, f := range files {
		var p struct{ CNI map[string]any }
		readValues(t, f, &p)
		for k := range p.CNI {
			profileSets[k] = true
		}
	}
	args := []string{"install", "istio-cni", filepath.Join(base, "helm", "istio-cni"),
		"--namespace", "istio-cni", "--wait", "--timeout", "3m",
		"-f", filepath.Join(manifests, "charts", "istio-cni", "values.yaml")}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	for k, v := range map[string]string{"cniBinDir": env.node.CNIBinDir, "cniConfDir": env.node.CNINetDir, "cniNetnsDir": env.node.NetnsDir} {
		if !profileSets[k] {
			args = append(args, "--set", k+"="+v)
		}
	}
	for _, s := range []string{
		"global.hub=localhost/istio-cni", "global.tag=0.1.0", "cniRunDir=" + env.node.IstioRunDir,
		fmt.Sprintf("healthPort=%d", env.agent.HealthPort), fmt.Sprintf("metricsPort=%d", env.agent.MetricsPort),
		fmt.Sprintf("env.HEALTH_ADDR=%s:%d", env.agent.Host, env.agent.HealthPort), fmt.Sprintf("env.METRICS_ADDR=%s:%d", env.agent.Host, env.agent.MetricsPort),
		"env.KUBERNETES_SERVICE_HOST=127.0.0.1", fmt.Sprintf("env.KUBERNETES_SERVICE_PORT=%d", env.proxy.port()),
		"env.AUDIT_INTERVAL=2s", "env.AUDIT_CONFIRM=1s",
	} {
		args = append(args, "--set", s)
	}
	return args
}

// helmNamespace makes the release's namespace as docs/platforms.md says:
// first, admitting host networking and hostPath (a Helm uninstall leaves
// it).
func helmNamespace(t *testing.T) {
	t.Helper()
	if out, err := env.node.Kubectl(t.Context(), "create", "namespace", "istio-cni"); err != nil && !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	kubectl(t, "label", "--overwrite", "namespace", "istio-cni", "pod-security.kubernetes.io/enforce=privileged")
}

// runHelm runs the helm binary against the node and returns its output.
func runHelm(t *testing.T, args ...string) string {
	t.Helper()
	helm, err := cluster.Helm()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), helm, append([]string{"--kubeconfig", env.node.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", args[0], err, out)
	}
	return string(out)
}

func readValues(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// 19. Each of upstream's platform profiles, passed as a user switching
// charts passes it (helm install -f values.yaml -f platform-NAME.yaml,
// both read from the pinned module), on a node whose CNI directories are
// where that platform keeps them: the node's own directories bound at the
// platform's paths, so the container runtime reads what the agent writes
// there. Chained platforms redirect a meshed pod; OpenShift's Multus
// config is written where Multus reads it. Each uninstall leaves the
// platform's paths and the node as they were.
//
// Two are only rendered (test/chart compares them with upstream's):
// k3d's cniBinDir is /bin inside k3d's node container, here the host's
// own /bin; minikube's one change, cniNetnsDir /var/run/docker/netns, is
// mounted with HostToContainer propagation, which this containerd allows
// only from a shared or slave mount and looks up without resolving the
// /var/run symlink: on this machine, whose / is private, that is /, and
// making it shared would change the whole machine.
func TestHelmPlatformProfiles(t *testing.T) {
	manifests, err := cluster.IstioManifests()
	if err != nil {
		t.Fatal(err)
	}
	for _, platform := range []string{"gke", "k3s", "microk8s", "openshift"} {
		t.Run(platform, func(t *testing.T) {
			// The previous Helm uninstall left the namespace, as Helm does.
			namespaceUsable(t)
			profile := filepath.Join(manifests, "helm-profiles", "platform-"+platform+".yaml")
			helmNamespace(t)
			args := helmInstallArgs(t, []string{profile})
			if platform == "gke" {
				// Upstream's gke profile leaves cniBinDir to detection from
				// the server's version (test/chart proves it against a -gke
				// server); here the platform is named, as the docs say.
				args = append(args, "--set", "global.platform=gke")
			}
			dirs := platformDirs(t, append([]string{"template"}, args[1:]...))
			standalone := platform == "openshift"
			if standalone {
				// Multus's CRD, as OpenShift has it: the chart names
				// istio-cni's NetworkAttachmentDefinition with it.
				applyManifest(t, nadCRD)
			}
			dirs.provide(t, !standalone)
			out := runHelm(t, args...)
			if strings.Contains(out, "upstream's install-cni image does not run here") {
				t.Errorf("helm install's notes: istio-cni's own image taken for upstream's:\n%s", out)
			}
			requireInstalled(t)
			if standalone {
				conf, err := os.ReadFile(filepath.Join(dirs.conf, "istio-cni.conf"))
				if err != nil || !chain.HasEntry(conf) {
					t.Errorf("Multus's config %s/istio-cni.conf: %v\n%s", dirs.conf, err, conf)
				}
				if !exists(filepath.Join(dirs.bin, install.PluginBinary)) {
					t.Errorf("no plugin in %s", dirs.bin)
				}
			} else {
				assertRedirected(t, startPod(t, meshedPod(t, "helm-"+platform)))
			}
			runHelm(t, "uninstall", "istio-cni", "--namespace", "istio-cni", "--wait")
			waitUninstalledFrom(t, true)
			for _, d := range []string{dirs.bin, dirs.conf} {
				entries, _ := os.ReadDir(d)
				for _, e := range entries {
					if e.Name() == install.PluginBinary || chain.HasEntry(mustRead(t, filepath.Join(d, e.Name()))) {
						t.Errorf("%s/%s left by the uninstall", d, e.Name())
					}
				}
			}
			assertNodeStartsPlainPods(t, "after-helm-"+platform)
		})
	}
}

// namespaceUsable waits until the istio-cni namespace is gone or active,
// never terminating.
func namespaceUsable(t *testing.T) {
	t.Helper()
	poll.Until(t, 2*time.Minute, "namespace istio-cni gone or active", func() (bool, string) {
		status, body, err := env.node.Do(t.Context(), http.MethodGet, "/api/v1/namespaces/istio-cni", nil)
		return err == nil && (status == http.StatusNotFound || !bytes.Contains(body, []byte("Terminating"))), fmt.Sprint(status, err)
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
	return b
}

// hostDirs are a platform's node directories, as the chart renders them.
type hostDirs struct{ bin, conf string }

// platformDirs renders the chart with the install's arguments and reads
// the DaemonSet's host paths.
func platformDirs(t *testing.T, args []string) hostDirs {
	t.Helper()
	out := runHelm(t, append(args, "--show-only", "templates/daemonset.yaml")...)
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					Volumes []struct {
						Name     string
						HostPath struct{ Path string }
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal([]byte(out), &ds); err != nil {
		t.Fatalf("the DaemonSet: %v\n%s", err, out)
	}
	var d hostDirs
	for _, v := range ds.Spec.Template.Spec.Volumes {
		switch v.Name {
		case "cni-bin-dir":
			d.bin = v.HostPath.Path
		case "cni-net-dir":
			d.conf = v.HostPath.Path
		}
	}
	if d.bin == "" || d.conf == "" {
		t.Fatalf("the DaemonSet's host paths: %+v\n%s", d, out)
	}
	return d
}

// provide makes the platform's directories exist on this machine for the
// test's length, each a bind mount: of the node's own directory when the
// runtime is to read what is written there, else (a Multus config the
// runtime does not read) of a directory of the test's. A path that already
// exists here is not covered over: the platform is skipped. The undo
// detaches only its own bind and removes, with rmdir, only the
// directories the tests made that no other run needs (cluster.ClaimHostDirs);
// it also runs when the run is aborted (AtAbort).
func (d hostDirs) provide(t *testing.T, useNodeDirs bool) {
	t.Helper()
	// A killed run's directories first: they are not the machine's.
	if err := cluster.SweepHostDirs(); err != nil {
		t.Fatal(err)
	}
	var platformOwn []struct{ path, node string } // the paths that are not the node's
	for _, m := range []struct{ path, node string }{{d.bin, env.node.CNIBinDir}, {d.conf, env.node.CNINetDir}} {
		if m.path == m.node {
			continue
		}
		if _, err := os.Lstat(m.path); err == nil {
			t.Skipf("%s exists on this machine: binding over it would hide what it holds", m.path)
		}
		platformOwn = append(platformOwn, m)
	}
	for _, m := range platformOwn {
		src := m.node
		if !useNodeDirs {
			src = t.TempDir()
		}
		// Claimed, not just made: the fleet beside this test (make test)
		// may need the same parents (/etc/cni) at the same time.
		claim, err := cluster.ClaimHostDirs(m.path)
		if err != nil {
			t.Fatal(err)
		}
		var mounted atomic.Bool
		var once sync.Once
		var errs []error
		undo := func() {
			once.Do(func() {
				// Lazily: the bind is private (this machine's / is), so
				// the detach reaches nothing but it.
				if mounted.Load() {
					if err := unix.Unmount(m.path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
						errs = append(errs, fmt.Errorf("unmounting %s: %w", m.path, err))
					}
				}
				if err := claim.Release(); err != nil {
					errs = append(errs, fmt.Errorf("releasing %s, made for the platform's path: %w", m.path, err))
				}
			})
		}
		env.node.AtAbort(undo)
		t.Cleanup(func() {
			undo()
			for _, err := range errs {
				t.Error(err)
			}
		})
		if err := unix.Mount(src, m.path, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("binding %s at %s: %v", src, m.path, err)
		}
		mounted.Store(true)
	}
}

// nadCRD is Multus's NetworkAttachmentDefinition CRD, as Multus installs it.
const nadCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: network-attachment-definitions.k8s.cni.cncf.io
spec:
  group: k8s.cni.cncf.io
  scope: Namespaced
  names:
    plural: network-attachment-definitions
    singular: network-attachment-definition
    kind: NetworkAttachmentDefinition
    shortNames: [net-attach-def]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            properties:
              config: {type: string}
`
