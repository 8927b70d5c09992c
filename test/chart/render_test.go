// Package chart checks deployments/helm/istio-cni against deployments/:
// helm lint, the default render against `kubectl kustomize deployments`
// object by object, each platform profile against its kustomize overlay,
// and the values schema. It needs the helm and kubectl binaries (make
// helm, make kube-binaries), no cluster.
package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"istio-cni.local/istio-cni/test/cluster"
)

func tool(t *testing.T, find func() (string, error)) string {
	t.Helper()
	path, err := find()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func deployments(t *testing.T) string {
	t.Helper()
	dir, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func chartDir(t *testing.T) string { return filepath.Join(deployments(t), "helm", "istio-cni") }

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String() + errOut.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// helmTemplateOut runs helm template for the node tests' Kubernetes. Without
// --kube-version (or a server, --validate), helm renders for the version
// its build was linked with (`make helm` stamps its client-go's; an
// unstamped build's 1.20 the chart's kubeVersion refuses): the tests name
// the one they mean.
func helmTemplateOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if !slices.Contains(args, "--validate") {
		args = append(args, "--kube-version", nodeTestsKubernetes(t))
	}
	return run(t, tool(t, cluster.Helm), append([]string{"template"}, args...)...)
}

// helmTemplate renders the chart as `helm install -n istio-cni` would.
func helmTemplate(t *testing.T, set ...string) map[string]map[string]any {
	t.Helper()
	out, err := helmTemplateOut(t, append([]string{"istio-cni", chartDir(t), "--namespace", "istio-cni"}, setArgs(set...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	return unrolled(t, objects(t, out))
}

func kustomize(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	out, err := run(t, tool(t, cluster.Kubectl), "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return unrolled(t, objects(t, out))
}

// settingsName is the agent's ConfigMap as the chart names it; kustomize
// adds a hash of its data.
const settingsName = "istio-cni-config"

// unrolled takes out of a rendering what makes a change of the agent's
// settings roll its DaemonSet, which the chart and kustomize do each their
// own way (TestSettingsRollTheAgents checks both): kustomize's hash in the
// ConfigMap's name, the chart's checksum annotation.
func unrolled(t *testing.T, objs map[string]map[string]any) map[string]map[string]any {
	t.Helper()
	for key, o := range objs {
		if o["kind"] == "ConfigMap" && settingsHash.MatchString(key) {
			delete(objs, key)
			o["metadata"].(map[string]any)["name"] = settingsName
			objs[settingsHash.ReplaceAllString(key, "$1")] = o
		}
		if o["kind"] != "DaemonSet" {
			continue
		}
		tmpl := o["spec"].(map[string]any)["template"].(map[string]any)
		if a, ok := tmpl["metadata"].(map[string]any)["annotations"].(map[string]any); ok {
			delete(a, checksumAnnotation)
		}
		ref, err := settingsRef(o)
		if err != nil {
			t.Fatal(err)
		}
		ref["name"] = settingsHash.ReplaceAllString(ref["name"].(string), "$1")
	}
	return objs
}

var settingsHash = regexp.MustCompile(`^(.*\b` + settingsName + `)-[a-z0-9]{10}$`)

// checksumAnnotation is the chart's pod-template annotation of the
// settings' checksum.
const checksumAnnotation = "checksum/config"

// settingsRef is the agent container's envFrom reference to the settings'
// ConfigMap.
func settingsRef(ds map[string]any) (map[string]any, error) {
	containers, _ := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	for _, c := range containers {
		envFrom, _ := c.(map[string]any)["envFrom"].([]any)
		for _, e := range envFrom {
			if ref, ok := e.(map[string]any)["configMapRef"].(map[string]any); ok {
				return ref, nil
			}
		}
	}
	return nil, fmt.Errorf("no envFrom configMapRef in the DaemonSet")
}

// helmLabels are the labels Helm's conventions add, which a kustomize
// install does not carry.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// objects parses a multi-document rendering into objects by
// kind/namespace/name, without Helm's own labels.
func objects(t *testing.T, rendered string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(rendered, "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("parsing %q: %v", doc, err)
		}
		if len(o) == 0 {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		if labels, ok := meta["labels"].(map[string]any); ok {
			for _, l := range helmLabels {
				delete(labels, l)
			}
		}
		key := fmt.Sprintf("%s %v/%v", o["kind"], meta["namespace"], meta["name"])
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = o
	}
	return out
}

// sameObjects compares two renderings object by object, as the API server
// stores them (apiDefaults); the Namespace is Helm's to create (helm
// install --create-namespace), not the chart's.
func sameObjects(t errorer, what string, chart, kust map[string]map[string]any) {
	t.Helper()
	delete(kust, "Namespace <nil>/istio-cni")
	apiDefaults(chart)
	apiDefaults(kust)
	var keys []string
	for k := range kust {
		keys = append(keys, k)
	}
	for k := range chart {
		if _, ok := kust[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		c, inChart := chart[k]
		o, inKust := kust[k]
		switch {
		case !inChart:
			t.Errorf("%s: %s is in kustomize's rendering, not the chart's", what, k)
		case !inKust:
			t.Errorf("%s: %s is in the chart's rendering, not kustomize's", what, k)
		case !reflect.DeepEqual(c, o):
			cj, _ := json.MarshalIndent(c, "", " ")
			oj, _ := json.MarshalIndent(o, "", " ")
			t.Errorf("%s: %s differs:\nchart:\n%s\nkustomize:\n%s", what, k, cj, oj)
		}
	}
}

// apiDefaults sets what the API server defaults in objs' pod templates:
// a container's imagePullPolicy, which the chart leaves to Kubernetes as
// upstream's does (pullPolicy empty) and deployments/ names.
func apiDefaults(objs map[string]map[string]any) {
	for _, o := range objs {
		spec, _ := o["spec"].(map[string]any)
		template, _ := spec["template"].(map[string]any)
		pod, _ := template["spec"].(map[string]any)
		for _, list := range []string{"initContainers", "containers"} {
			containers, _ := pod[list].([]any)
			for _, c := range containers {
				c, _ := c.(map[string]any)
				if _, set := c["imagePullPolicy"]; !set && c != nil {
					c["imagePullPolicy"] = defaultPullPolicy(fmt.Sprint(c["image"]))
				}
			}
		}
	}
}

// defaultPullPolicy is Kubernetes' default for image (SetDefaults_Container):
// Always for :latest or an image with neither tag nor digest, else
// IfNotPresent.
func defaultPullPolicy(image string) string {
	name, _, digested := strings.Cut(image, "@")
	_, tag, tagged := strings.Cut(name[strings.LastIndex(name, "/")+1:], ":")
	if tag == "latest" || (!tagged && !digested) {
		return "Always"
	}
	return "IfNotPresent"
}

type errorer interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder counts the differences sameObjects reports.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestComparisonSeesDifferences: the comparison is not blind: one changed
// setting, one extra object, one missing object are each reported.
func TestComparisonSeesDifferences(t *testing.T) {
	r := &recorder{}
	sameObjects(r, "changed", helmTemplate(t, "resources.requests.cpu=20m", "repair.deletePods=true", "repair.repairPods=false"),
		kustomize(t, deployments(t)))
	joined := strings.Join(r.errs, "\n")
	for _, want := range []string{"DaemonSet istio-cni/istio-cni-node differs", "ConfigMap istio-cni/istio-cni-config differs",
		"ClusterRole <nil>/istio-cni-node-pod-writes is in the chart's rendering"} {
		if !strings.Contains(joined, want) {
			t.Errorf("not reported: %s\n%s", want, joined)
		}
	}
	r = &recorder{}
	sameObjects(r, "missing", helmTemplate(t, "resourceQuotas.enabled=false"), kustomize(t, deployments(t)))
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "ResourceQuota istio-cni/istio-cni-node-critical is in kustomize's rendering") {
		t.Errorf("a missing object: %v", r.errs)
	}
}

func TestLint(t *testing.T) {
	for _, platform := range []string{"", "gke", "k3s", "k3d", "microk8s", "minikube", "openshift"} {
		args := []string{"lint", "--strict", chartDir(t)}
		if platform != "" {
			args = append(args, "--set", "global.platform="+platform)
		}
		if out, err := run(t, tool(t, cluster.Helm), args...); err != nil {
			t.Errorf("platform %q: %v\n%s", platform, err, out)
		}
	}
}

// TestDefaultRenderMatchesKustomize: `helm install` with no values makes
// the same objects as `kubectl apply -k deployments/`.
func TestDefaultRenderMatchesKustomize(t *testing.T) {
	sameObjects(t, "default", helmTemplate(t), kustomize(t, deployments(t)))
}

// TestPlatformsMatchOverlays: each global.platform makes the same objects
// as its kustomize overlay: the same hostPaths and settings.
func TestPlatformsMatchOverlays(t *testing.T) {
	for _, p := range []string{"gke", "k3s", "k3d", "microk8s", "minikube", "openshift"} {
		t.Run(p, func(t *testing.T) {
			sameObjects(t, p, helmTemplate(t, "global.platform="+p), kustomize(t, filepath.Join(deployments(t), "overlays", p)))
		})
	}
}
