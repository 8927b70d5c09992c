package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Workload containers run testproxy from TestImage; the ports match
// Istio's sidecar.
const (
	ServerPort = 8080
	proxyUID   = 1337
	appUID     = 1000
)

// PodSpec describes a test pod.
type PodSpec struct {
	Namespace, Name string
	// Server: the pod runs `testproxy server` on ServerPort (and nothing
	// else). Otherwise an "app" container dials Target every second.
	Server bool
	Target string // host:port the app dials
	// Sidecar adds an istio-proxy container (testproxy proxy as uid 1337)
	// and the injector's status annotation; NativeSidecar makes it an init
	// container with restartPolicy Always.
	Sidecar, NativeSidecar bool
	// Forward: the sidecar's outbound listener passes each connection on
	// to its original destination (testproxy proxy --forward), so a
	// meshed client calling a meshed server reads both proxies' lines.
	Forward bool
	// OptedOut labels the pod sidecar.istio.io/inject=false: with Sidecar,
	// a pod with the same containers that istio-cni leaves alone.
	OptedOut bool
	// NodeName binds the pod to a node (a fleet's); empty lets the
	// scheduler choose.
	NodeName string
}

// JSON renders the pod.
func (s PodSpec) JSON() []byte {
	ctr := func(name string, uid int, args ...string) map[string]any {
		return map[string]any{
			"name": name, "image": TestImage, "imagePullPolicy": "Never",
			"command": append([]string{"/testproxy"}, args...),
			"securityContext": map[string]any{
				"runAsUser": uid, "runAsGroup": uid, "allowPrivilegeEscalation": false,
				"capabilities": map[string]any{"drop": []string{"ALL"}},
			},
		}
	}
	labels := map[string]string{"app": s.Name}
	if s.OptedOut {
		labels["sidecar.istio.io/inject"] = "false"
	}
	meta := map[string]any{"name": s.Name, "namespace": s.Namespace, "labels": labels}
	spec := map[string]any{"terminationGracePeriodSeconds": 1, "enableServiceLinks": false}
	if s.NodeName != "" {
		spec["nodeName"] = s.NodeName
	}
	var containers, inits []any
	if s.Server {
		containers = append(containers, ctr("server", appUID, "server", "--port", fmt.Sprint(ServerPort), "--name", s.Name))
	} else {
		containers = append(containers, ctr("app", appUID, "client", "--addr", s.Target, "--every", "1s", "--timeout", "2s"))
	}
	if s.Sidecar || s.NativeSidecar {
		meta["annotations"] = map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}
		args := []string{"proxy"}
		if s.Forward {
			args = append(args, "--forward")
		}
		proxy := ctr("istio-proxy", proxyUID, args...)
		if s.NativeSidecar {
			proxy["restartPolicy"] = "Always"
			inits = append(inits, proxy)
		} else {
			containers = append(containers, proxy)
		}
	}
	spec["containers"] = containers
	if inits != nil {
		spec["initContainers"] = inits
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
	return b
}

// Pod is what the tests read of a pod's state.
type Pod struct {
	Metadata struct {
		Name, Namespace, UID string
		Labels, Annotations  map[string]string
		DeletionTimestamp    *time.Time
	}
	Spec struct {
		// RestartPolicy "Always" on an init container makes it a
		// native sidecar.
		InitContainers, Containers []struct{ Name, Image, RestartPolicy string }
		NodeName                   string
	}
	Status struct {
		Phase, PodIP, Reason, Message string
		Conditions                    []struct{ Type, Status, Reason, Message string }
		InitContainerStatuses         []ContainerStatus
		ContainerStatuses             []ContainerStatus
	}
}

// ContainerStatus is one container's status.
type ContainerStatus struct {
	Name         string
	Ready        bool
	RestartCount int
	State        map[string]json.RawMessage
	LastState    map[string]json.RawMessage `json:"lastState"`
}

// ExitCode is the exit code of the container's current run if it ended,
// else of its last; -1 if it never ended.
func (c ContainerStatus) ExitCode() int {
	for _, s := range []map[string]json.RawMessage{c.State, c.LastState} {
		var t struct{ ExitCode *int }
		if raw, ok := s["terminated"]; ok && json.Unmarshal(raw, &t) == nil && t.ExitCode != nil {
			return *t.ExitCode
		}
	}
	return -1
}

// GetPod reads a pod; found is false on 404.
func (n *Node) GetPod(ctx context.Context, ns, name string) (p Pod, found bool, err error) {
	status, body, err := n.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name), nil)
	if err != nil || status == http.StatusNotFound {
		return p, false, err
	}
	if status != http.StatusOK {
		return p, false, fmt.Errorf("GET pod %s/%s: %d %s", ns, name, status, body)
	}
	return p, true, json.Unmarshal(body, &p)
}

// WaitRunning waits until every container of the pod is ready and returns
// the pod. A pod that can never start (the scheduler cannot place it, as
// on a node that holds kubelet's 110 pods, or kubelet rejected it) fails at
// once, not at ctx's end; either error carries the pod's Events, which say
// why.
func (n *Node) WaitRunning(ctx context.Context, ns, name string) (Pod, error) {
	var last string
	for {
		p, found, err := n.GetPod(ctx, ns, name)
		switch {
		case err != nil:
			last = err.Error()
		case !found:
			last = "not found"
		case p.Status.Phase == "Running" && allReady(p):
			return p, nil
		case neverStarts(p) != "":
			return p, fmt.Errorf("pod %s/%s cannot start: %s\n%s", ns, name, neverStarts(p), n.PodEvents(context.Background(), ns, name))
		default:
			last = fmt.Sprintf("phase %s, containers %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("pod %s/%s not running: %w; last: %s\n%s", ns, name, ctx.Err(), last, n.PodEvents(context.Background(), ns, name))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// neverStarts says why the pod will not run whatever one waits: the node
// is full, or kubelet rejected it; "" otherwise.
func neverStarts(p Pod) string {
	if p.Status.Phase == "Failed" {
		return fmt.Sprintf("phase Failed: %s %s", p.Status.Reason, p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		// Only a full node is final here: a taint (the startup taint
		// while the agent restarts) lifts by itself.
		if c.Type == "PodScheduled" && c.Status == "False" && c.Reason == "Unschedulable" && strings.Contains(c.Message, "Too many pods") {
			return "unschedulable: " + c.Message
		}
	}
	return ""
}

// Event is one of a pod's Events.
type Event struct {
	Type, Reason, Message string
	Count                 int
}

// PodEventList is the pod's Events, oldest first.
func (n *Node) PodEventList(ctx context.Context, ns, name string) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	path := "/api/v1/namespaces/" + url.PathEscape(ns) + "/events?fieldSelector=" +
		url.QueryEscape("involvedObject.kind=Pod,involvedObject.name="+name)
	status, body, err := n.Do(ctx, http.MethodGet, path, nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("GET %s: %d", path, status)
	}
	if err != nil {
		return nil, err
	}
	var list struct{ Items []Event }
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PodEvents lists the pod's Events, oldest first, one "reason: message"
// line each (a failed sandbox, a full node), for an error message.
func (n *Node) PodEvents(ctx context.Context, ns, name string) string {
	events, err := n.PodEventList(ctx, ns, name)
	switch {
	case err != nil:
		return fmt.Sprintf("(its events: %v)", err)
	case len(events) == 0:
		return "(no events)"
	}
	var b strings.Builder
	b.WriteString("its events:")
	for _, e := range events {
		fmt.Fprintf(&b, "\n  %s %s (x%d): %s", e.Type, e.Reason, max(e.Count, 1), e.Message)
	}
	return b.String()
}

func allReady(p Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

// ContainerLog returns a container's log as kubelet wrote it (CRI format:
// "<time> <stream> <tag> <line>" per line), "" if there is none yet.
func (n *Node) ContainerLog(p Pod, container string) string {
	dir := filepath.Join(n.PodLogDir, p.Metadata.Namespace+"_"+p.Metadata.Name+"_"+p.Metadata.UID, container)
	entries, _ := os.ReadDir(dir)
	var out strings.Builder
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name())) // #nosec G304 -- kubelet's log files
		out.Write(b)
	}
	return out.String()
}

// IptablesSave returns iptables-save run in the pod's network namespace,
// entered with nsenter as an operator on the node would: the node's own
// iptables (its alternatives, on a fleet's) prints it.
func (n *Node) IptablesSave(ctx context.Context, ns, name string) (string, error) {
	return n.SaveIn(ctx, ns, name, "iptables-save")
}

// SaveIn is IptablesSave with another program of the node's, such as
// iptables-nft-save or iptables-legacy-save.
func (n *Node) SaveIn(ctx context.Context, ns, name, program string) (string, error) {
	netns, err := n.PodNetNS(ctx, ns, name)
	if err != nil {
		return "", err
	}
	out, err := n.Command(ctx, "nsenter", "--net="+netns, program).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nsenter --net=%s %s on %s: %w: %s", netns, program, n.Name, err, out)
	}
	return string(out), nil
}

// Kubectl runs kubectl against the node as admin.
func (n *Node) Kubectl(ctx context.Context, args ...string) (string, error) {
	kubectl, err := Kubectl()
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", n.Kubeconfig}, args...)...).CombinedOutput() // #nosec G204 -- test harness
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// DeploymentJSON renders a Deployment of replicas pods, each the pod s
// describes (s.Name names the Deployment; its labels select the pods).
func (s PodSpec) DeploymentJSON(replicas int) []byte {
	var pod struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	_ = json.Unmarshal(s.JSON(), &pod) // our own rendering
	d, _ := json.Marshal(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": pod.Metadata.Labels},
			"template": map[string]any{"metadata": map[string]any{"labels": pod.Metadata.Labels}, "spec": pod.Spec},
		},
	})
	return d
}
