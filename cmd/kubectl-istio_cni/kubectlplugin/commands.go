package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Exit statuses: inspect's (0 consistent, 3 not, 1 error), which why
// passes through; check's 3 when a node is wrong.
const (
	exitOK    = 0
	exitError = 1
	exitWrong = 3
)

// Output formats of -o.
const (
	outputText = "text"
	outputJSON = "json"
)

// WhyDocument is why -o json: where the answer came from and the agent's
// inspect -o json document, as it printed it.
type WhyDocument struct {
	Node  string `json:"node"`
	Agent string `json:"agent"`
	// AgentNotReady says why the agent asked is not Ready; absent when it
	// is.
	AgentNotReady string          `json:"agentNotReady,omitempty"`
	Report        json.RawMessage `json:"report"`
}

// why runs inspect for namespace/name in the agent's pod on the pod's
// node, and returns inspect's exit status.
func why(ctx context.Context, c Cluster, namespace, name, output string, stdout, stderr io.Writer) (int, error) {
	p, err := c.pod(ctx, namespace, name)
	if err != nil {
		return exitError, err
	}
	node := p.Spec.NodeName
	if node == "" {
		return exitError, fmt.Errorf("pod %s/%s is not scheduled yet (no node): nothing has run it; kubectl describe pod -n %s %s says why", namespace, name, namespace, name)
	}
	agent, err := c.agentOn(ctx, node)
	if err != nil {
		return exitError, err
	}
	cmd := []string{agentBinary, "inspect"}
	if output == outputJSON {
		cmd = append(cmd, "-o", outputJSON)
	}
	cmd = append(cmd, namespace+"/"+name)
	var out, errOut bytes.Buffer
	code, err := c.Exec.Exec(ctx, agent.Namespace, agent.Name, agentContainer, cmd, &out, &errOut)
	if err != nil {
		return exitError, fmt.Errorf("running inspect in the agent on node %s (pod %s/%s): %w", node, agent.Namespace, agent.Name, err)
	}
	if code != exitOK && code != exitWrong {
		return code, fmt.Errorf("inspect in the agent on node %s (pod %s/%s) failed (exit %d): %s", node, agent.Namespace, agent.Name, code, strings.TrimSpace(errOut.String()))
	}
	if output == outputJSON {
		if !json.Valid(out.Bytes()) {
			return exitError, fmt.Errorf("inspect in the agent on node %s (pod %s/%s) printed no JSON (an agent older than -o json?): %s",
				node, agent.Namespace, agent.Name, strings.TrimSpace(out.String()+errOut.String()))
		}
		return code, writeJSON(stdout, WhyDocument{Node: node, Agent: agent.Namespace + "/" + agent.Name, AgentNotReady: notReady(agent), Report: bytes.TrimSpace(out.Bytes())})
	}
	if _, err := fmt.Fprintf(stdout, "node:      %s (asked its agent, pod %s/%s)\n", node, agent.Namespace, agent.Name); err != nil {
		return exitError, err
	}
	if why := notReady(agent); why != "" {
		// Still asked: a not-Ready agent is the one that says why.
		if _, err := fmt.Fprintf(stdout, "agent:     %s: its node's install is not complete (kubectl istio-cni check)\n", why); err != nil {
			return exitError, err
		}
	}
	_, _ = io.Copy(stderr, &errOut)
	if _, err := io.Copy(stdout, &out); err != nil {
		return exitError, err
	}
	return code, nil
}

// checkWorkers bounds the agents asked at once.
const checkWorkers = 8

// check judges every node; it returns exitWrong when one is wrong.
func check(ctx context.Context, c Cluster, taintKey, output string, stdout io.Writer) (int, error) {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return exitError, fmt.Errorf("listing nodes: %w", err)
	}
	ds, err := c.daemonSet(ctx)
	if err != nil {
		return exitError, err
	}
	agents, err := c.agents(ctx)
	if err != nil {
		return exitError, err
	}
	if taintKey == "" {
		taintKey = c.taintKey(ctx, ds)
	}
	items := nodes.Items
	slices.SortFunc(items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	rows := make([]NodeRow, len(items))
	var wg sync.WaitGroup
	sem := make(chan struct{}, checkWorkers)
	for i := range items {
		f := nodeFacts{Node: &items[i], Agent: agents[items[i].Name], TaintKey: taintKey}
		if f.Agent == nil {
			f.Excluded = excludedBy(ds.Spec.Template.Spec, f.Node)
			rows[i] = judge(f)
			continue
		}
		if why := notAnswering(f.Node); why != "" {
			f.StatusErr = why // an exec would wait on a kubelet that is not there
			rows[i] = judge(f)
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f.Status, f.StatusErr = askNode(ctx, c, f.Agent)
			rows[i] = judge(f)
		})
	}
	wg.Wait()
	d := checkDocument(rows)
	if output == outputJSON {
		err = writeJSON(stdout, d)
	} else {
		err = printCheck(stdout, d)
	}
	if err != nil {
		return exitError, err
	}
	if !d.OK {
		return exitWrong, nil
	}
	return exitOK, nil
}

// execTimeout bounds one agent's answer: a node whose kubelet is
// unreachable holds the exec until the API server gives up dialling it.
const execTimeout = 20 * time.Second

// notAnswering says why a node's kubelet cannot run an exec (its Ready
// condition not True), or "".
func notAnswering(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return fmt.Sprintf("the node is not Ready (%s: %s), so its agent cannot be asked", c.Reason, c.Message)
		}
	}
	return "" // not reported (yet): ask, within execTimeout
}

// askNode runs `install-cni inspect --node -o json` in the agent's pod.
func askNode(ctx context.Context, c Cluster, agent *corev1.Pod) (*nodeStatus, string) {
	if agent.Status.Phase != corev1.PodRunning {
		return nil, "" // not running: judge says so; nothing to ask
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code, err := c.Exec.Exec(ctx, agent.Namespace, agent.Name, agentContainer, []string{agentBinary, "inspect", "--node", "-o", outputJSON}, &out, &errOut)
	if err != nil {
		return nil, err.Error()
	}
	if code != exitOK && code != exitWrong {
		return nil, fmt.Sprintf("inspect --node exited %d: %s", code, strings.TrimSpace(errOut.String()+" "+out.String()))
	}
	var s nodeStatus
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		return nil, fmt.Sprintf("inspect --node printed no JSON document (an agent older than inspect --node?): %v", err)
	}
	return &s, ""
}

// LogOptions are logs' flags.
type LogOptions struct {
	Follow, Previous bool
	// Tail is the number of lines from the end; negative: all.
	Tail int64
}

// logs copies the agent's log on node to w.
func logs(ctx context.Context, c Cluster, node string, o LogOptions, w io.Writer) error {
	agents, err := c.agents(ctx)
	if err != nil {
		return err
	}
	p, ok := agents[node]
	if !ok {
		_, err := c.agentOn(ctx, node) // says why there is none
		if err == nil {
			err = fmt.Errorf("%w on node %s", errNoAgent, node)
		}
		return err
	}
	opts := &corev1.PodLogOptions{Container: agentContainer, Follow: o.Follow, Previous: o.Previous}
	if o.Tail >= 0 {
		opts.TailLines = &o.Tail
	}
	rc, err := c.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("the logs of the agent on node %s (pod %s/%s): %w", node, p.Namespace, p.Name, err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.Copy(w, rc); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("the logs of the agent on node %s (pod %s/%s): %w", node, p.Namespace, p.Name, err)
	}
	return nil
}
