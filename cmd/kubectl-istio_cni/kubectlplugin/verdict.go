package kubectlplugin

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// nodeStatus is what the agent's `install-cni inspect --node -o json`
// prints (pkg/nodeagent/inspect NodeDocument, its JSONVersion 1): the
// fields check reads. TestReadsInspectNodeDocuments holds this reading to
// that package's golden documents.
type nodeStatus struct {
	Version     int    `json:"version"`
	Build       string `json:"build"`
	Ready       bool   `json:"ready"`
	ReadyReason string `json:"readyReason"`
	CNI         struct {
		Config  string `json:"config"`
		Chained bool   `json:"chained"`
		Error   string `json:"error"`
	} `json:"cni"`
	Unredirected    *int   `json:"unredirected"`
	Checked         *int   `json:"checked"`
	Unchecked       *int   `json:"unchecked"`
	MissedInjection *int   `json:"missedInjection"`
	MetricsError    string `json:"metricsError"`
}

// nodeFacts are what check gathered about one node.
type nodeFacts struct {
	Node *corev1.Node
	// Excluded says why the DaemonSet keeps off the node; "" when it
	// should run there.
	Excluded string
	// Agent is the agent pod on the node; nil: none.
	Agent *corev1.Pod
	// Status is the agent's answer; StatusErr why there is none.
	Status    *nodeStatus
	StatusErr string
	// TaintKey is the startup taint's key.
	TaintKey string
}

// NodeRow is check's verdict on one node, as the table and the JSON
// document (its field names stay) show it.
type NodeRow struct {
	Node string `json:"node"`
	// Agent is the agent's pod, namespace/name; "" when there is none.
	Agent      string `json:"agent,omitempty"`
	AgentReady bool   `json:"agentReady"`
	// Excluded says why the DaemonSet keeps off the node.
	Excluded string `json:"excluded,omitempty"`
	// Config is the CNI config the runtime uses; Chained whether it
	// chains istio-cni (absent: not known).
	Config          string `json:"config,omitempty"`
	Chained         *bool  `json:"chained,omitempty"`
	Tainted         bool   `json:"tainted"`
	Unredirected    *int   `json:"unredirected,omitempty"`
	Unchecked       *int   `json:"unchecked,omitempty"`
	MissedInjection *int   `json:"missedInjection,omitempty"`
	Build           string `json:"build,omitempty"`
	// OK: nothing is wrong on the node (an excluded node is ok).
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
}

// judge turns what check gathered about a node into its row.
func judge(f nodeFacts) NodeRow {
	r := NodeRow{Node: f.Node.Name, Problems: []string{}}
	for _, t := range f.Node.Spec.Taints {
		if t.Key == f.TaintKey {
			r.Tainted = true
		}
	}
	problem := func(format string, a ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, a...)) }
	switch {
	case f.Agent == nil && f.Excluded != "":
		r.Excluded = f.Excluded
	case f.Agent == nil:
		problem("no agent pod: the DaemonSet should run one here (not created yet, or deleted)")
	default:
		r.Agent = f.Agent.Namespace + "/" + f.Agent.Name
		why := notReady(f.Agent)
		r.AgentReady = why == ""
		if !r.AgentReady {
			problem("agent not ready: %s", why)
		}
	}
	if r.Tainted {
		problem("has the startup taint %s: no new pods are scheduled here", f.TaintKey)
	}
	switch {
	case f.StatusErr != "":
		problem("the agent did not answer: %s", f.StatusErr)
	case f.Status != nil:
		status(&r, f.Status, problem)
	}
	r.OK = len(r.Problems) == 0
	return r
}

// status adds the agent's answer to the row.
func status(r *NodeRow, s *nodeStatus, problem func(string, ...any)) {
	r.Build, r.Config = s.Build, s.CNI.Config
	r.Unredirected, r.Unchecked, r.MissedInjection = s.Unredirected, s.Unchecked, s.MissedInjection
	if !s.Ready {
		problem("the agent's /readyz: %s", or(s.ReadyReason, "not ready"))
	}
	switch {
	case s.CNI.Error != "":
		problem("the node's CNI config cannot be read: %s", s.CNI.Error)
	default:
		chained := s.CNI.Chained
		r.Chained = &chained
		if !chained {
			problem("%s (the runtime's config) does not chain istio-cni: pods started now are not redirected", or(s.CNI.Config, "the runtime's config"))
		}
	}
	if s.MetricsError != "" {
		problem("the audit's counts not read: %s", s.MetricsError)
	}
	if n := s.Unredirected; n != nil && *n > 0 {
		problem("%d meshed pod(s) running without their redirect (kubectl istio-cni logs %s; why NS/POD)", *n, r.Node)
	}
	if n := s.MissedInjection; n != nil && *n > 0 {
		problem("%d pod(s) missed their sidecar injection: recreate them", *n)
	}
}
