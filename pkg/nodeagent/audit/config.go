// Package audit is the node agent's proof that no meshed pod runs
// unredirected: it checks every started pod on its node that the plugin's
// decision says must be redirected against the same rule model ADD and
// CHECK use, read from the pod's own network namespace, and acts on a pod
// found without its rules: it programs them in place (the default), deletes
// the pod so it restarts through the chain, labels it, or only reports it.
// Every finding and action is logged, counted and recorded as an Event on
// the pod.
package audit

import (
	"fmt"
	"time"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
)

// Action is what the audit does with a pod found running unredirected.
type Action string

const (
	// Repair programs the pod's rules in its namespace, as ADD would have.
	Repair Action = "repair"
	// Delete deletes the pod (UID precondition) so its controller
	// recreates it through the chain.
	Delete Action = "delete"
	// Label sets Config.LabelKey=LabelValue on the pod for an operator or a
	// controller to act on.
	Label Action = "label"
	// Report only logs, counts and records the Event.
	Report Action = "report"
	// Off disables the audit.
	Off Action = "off"
)

// Actions lists the valid values, for error messages.
const Actions = "repair, delete, label, report or off"

// ParseAction validates a configured action.
func ParseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case Repair, Delete, Label, Report, Off:
		return a, nil
	}
	return "", fmt.Errorf("unknown audit action %q: want %s", s, Actions)
}

// The label the Label action sets by default, as upstream's repair
// controller does.
const (
	DefaultLabelKey   = "cni.istio.io/uninitialized"
	DefaultLabelValue = "true"
)

// Config is the audit's configuration.
type Config struct {
	Node   string
	Action Action
	// Interval is the period of the full pass over the node's pods; pod
	// updates and the plugin's reports trigger checks in between.
	Interval time.Duration
	// Confirm is how long a pod must stay without its rules, in the same
	// network namespace, before the audit acts. Runtimes start no process
	// in a new sandbox's namespace before its ADD completes, so a namespace
	// found through a pod's process is past its ADD; the delay covers what
	// is left: a repeated ADD reconciling the same namespace, a flush and
	// reprogram by someone else, a sandbox being torn down.
	Confirm time.Duration
	// ExcludeNamespaces are the plugin's: the audit decides exactly as ADD
	// does.
	ExcludeNamespaces []string
	Settings          decision.NodeSettings
	// LabelKey=LabelValue is what the Label action sets.
	LabelKey, LabelValue string
	// Writer is how the node's plugin writes rules (its iptables
	// backend, or native nftables), for sandboxes whose record does not
	// say how ADD wrote them.
	Writer applied.Writer
	// ValidationContainer names the injector's validation init container
	// (empty: DefaultValidationContainer).
	ValidationContainer string
}
