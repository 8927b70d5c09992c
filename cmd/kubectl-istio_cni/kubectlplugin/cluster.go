package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// How the plugin finds the node agent: the labels deployments/base and
// the Helm chart put on the DaemonSet and its pods, its container and its
// binary there.
const (
	agentSelector  = "app.kubernetes.io/name=istio-cni,app.kubernetes.io/component=node-agent"
	agentContainer = "install-cni"
	agentBinary    = "/install-cni"
)

// Execer runs a command in a pod's container, its output to stdout and
// stderr, and returns the command's exit status. err is for a command that
// did not run or whose status is unknown.
type Execer interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string, stdout, stderr io.Writer) (int, error)
}

// Cluster is the plugin's one seam: the API and exec in the agent's pods.
type Cluster struct {
	Client kubernetes.Interface
	Exec   Execer
	// Namespace is the agent's (-n).
	Namespace string
}

// agents are the agent pods by node. Where a node has several (one
// terminating, its replacement starting), the one not being deleted, else
// the newest.
func (c Cluster) agents(ctx context.Context) (map[string]*corev1.Pod, error) {
	list, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if err != nil {
		return nil, fmt.Errorf("listing the agent's pods in namespace %s: %w", c.Namespace, err)
	}
	byNode := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == "" {
			continue
		}
		if have, ok := byNode[p.Spec.NodeName]; ok && !better(p, have) {
			continue
		}
		byNode[p.Spec.NodeName] = p
	}
	return byNode, nil
}

func better(p, than *corev1.Pod) bool {
	if (p.DeletionTimestamp == nil) != (than.DeletionTimestamp == nil) {
		return p.DeletionTimestamp == nil
	}
	return than.CreationTimestamp.Before(&p.CreationTimestamp)
}

// daemonSet is the agent's DaemonSet: exactly one in the namespace.
// taintKey is the startup taint's key the agents run with: TAINT_KEY in
// the agent container's env or its settings' ConfigMap (envFrom), else the
// default.
func (c Cluster) taintKey(ctx context.Context, ds *appsv1.DaemonSet) string {
	for _, ct := range ds.Spec.Template.Spec.Containers {
		if ct.Name != agentContainer {
			continue
		}
		for _, e := range ct.Env {
			if e.Name == "TAINT_KEY" && e.Value != "" {
				return e.Value
			}
		}
		for _, from := range ct.EnvFrom {
			if from.ConfigMapRef == nil {
				continue
			}
			cm, err := c.Client.CoreV1().ConfigMaps(ds.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err == nil && cm.Data["TAINT_KEY"] != "" {
				return cm.Data["TAINT_KEY"]
			}
		}
	}
	return defaultTaintKey
}

func (c Cluster) daemonSet(ctx context.Context) (*appsv1.DaemonSet, error) {
	list, err := c.Client.AppsV1().DaemonSets(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if err != nil {
		return nil, fmt.Errorf("listing DaemonSets in namespace %s: %w", c.Namespace, err)
	}
	switch len(list.Items) {
	case 0:
		return nil, fmt.Errorf("no istio-cni DaemonSet (labels %s) in namespace %s: is istio-cni installed there? (-n names its namespace)", agentSelector, c.Namespace)
	case 1:
		return &list.Items[0], nil
	}
	var names []string
	for _, ds := range list.Items {
		names = append(names, ds.Name)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("%d istio-cni DaemonSets in namespace %s (%v): want one", len(names), c.Namespace, names)
}

// errNoAgent: no agent pod to ask on the node.
var errNoAgent = errors.New("no agent pod")

// agentOn is the agent pod on node, running (Ready or not: a not-Ready
// agent is the one to ask why); the error says why there is none: the
// DaemonSet keeps off the node, or its pod there is missing, not running
// or being deleted.
func (c Cluster) agentOn(ctx context.Context, node string) (*corev1.Pod, error) {
	agents, err := c.agents(ctx)
	if err != nil {
		return nil, err
	}
	if p, ok := agents[node]; ok {
		if why := cannotAnswer(p); why != "" {
			return nil, fmt.Errorf("the agent on node %s, pod %s/%s, cannot answer: %s", node, p.Namespace, p.Name, why)
		}
		return p, nil
	}
	ds, err := c.daemonSet(ctx)
	if err != nil {
		return nil, fmt.Errorf("no agent pod on node %s: %w", node, err)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("no agent pod on node %s, and the node cannot be read: %w", node, err)
	}
	if why := excludedBy(ds.Spec.Template.Spec, n); why != "" {
		return nil, fmt.Errorf("%w on node %s: DaemonSet %s/%s keeps off it (%s)", errNoAgent, node, ds.Namespace, ds.Name, why)
	}
	return nil, fmt.Errorf("%w on node %s: DaemonSet %s/%s should run one there, but none exists (not created yet, or deleted: kubectl -n %s describe daemonset %s)",
		errNoAgent, node, ds.Namespace, ds.Name, ds.Namespace, ds.Name)
}

// pod reads a pod; the error says whether it exists.
func (c Cluster) pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %s/%s not found", namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	return p, nil
}

// cannotAnswer says why an agent pod cannot run a command ("" when it
// can): being deleted, or not running.
func cannotAnswer(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "being deleted"
	case p.Status.Phase != corev1.PodRunning:
		return fmt.Sprintf("phase %s", or(string(p.Status.Phase), "unknown"))
	}
	return ""
}

// notReady says why an agent pod is not Ready ("" when it is): it cannot
// answer, or its /readyz fails (the installer not done on its node).
func notReady(p *corev1.Pod) string {
	if why := cannotAnswer(p); why != "" {
		return why
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return "not Ready" + detail(c.Reason, c.Message)
		}
	}
	return "no Ready condition yet"
}

func detail(reason, message string) string {
	switch {
	case reason != "" && message != "":
		return " (" + reason + ": " + message + ")"
	case reason+message != "":
		return " (" + reason + message + ")"
	}
	return ""
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
