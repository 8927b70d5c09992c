// Package lifecycle tells, when the node agent stops, whether istio-cni is
// being removed from the cluster or only this agent pod stops.
//
// It matters both ways. Removed: the node's files must go, first the
// config that chains the plugin, or every pod start on the node fails once
// the plugin's credentials are revoked (they go with its ServiceAccount).
// Only stopping (restart, rolling update, drain, reboot, delete and
// recreate): the files must stay, so pods keep starting, meshed ones
// redirected, while no agent runs.
//
// What the API says changes as an uninstall proceeds, and the agent's own
// credentials may be revoked before its pod gets SIGTERM (kubectl deletes
// the namespace and the ServiceAccounts before the DaemonSet). So the agent
// watches its namespace, DaemonSet and ServiceAccount from the start, over
// connections authorized while it still could, and decides at shutdown
// from what it saw and what a fresh read says:
//
//  1. its namespace is terminating or gone: uninstall;
//  2. its ServiceAccount is deleted and the API now refuses the agent:
//     uninstall, whatever a watch last said of the DaemonSet (a watch that
//     lapsed when the credentials went says nothing any more), unless the
//     watch shows a ServiceAccount of that name again within ReplaceWait
//     (a delete and recreate: the agent's token stays refused until kubelet
//     renews it, so a refusal alone proves nothing then);
//  3. its DaemonSet exists, but no longer runs a pod on this node (a
//     nodeSelector, affinity or tolerations change): uninstall, or the
//     node keeps a config whose plugin's credentials nobody renews;
//  4. its DaemonSet exists and is not being deleted: stop only;
//  5. its DaemonSet is gone or being deleted: uninstall, unless a DaemonSet
//     of that name (a replacement) appears within ReplaceWait;
//  6. anything else (the API unreachable): stop only, and say so:
//     `install-cni uninstall` cleans a node left that way.
//
// Rules 1 and 2 also hold while the agent runs (CheckRunning): an agent
// orphaned by `helm uninstall --cascade=orphan` never gets SIGTERM, and its
// node would keep the config for good.
package lifecycle

import (
	"fmt"
	"time"
)

// object is what the agent knows of one of its objects.
type object struct {
	known    bool // seen by a watch or a read
	gone     bool // deleted, or a read said it does not exist
	deleting bool // it has a deletion timestamp
	uid      string
}

func (o object) present() bool { return o.known && !o.gone && !o.deleting }
func (o object) leaving() bool { return o.known && (o.gone || o.deleting) }

// refusal is how the API answered the agent's fresh reads at shutdown.
type refusal int

const (
	answered     refusal = iota
	unauthorized         // 401: the token is no longer accepted
	forbidden            // 403: the rights are gone
	unreachable          // no answer
)

// facts is everything decide looks at.
type facts struct {
	namespace, daemonSet, serviceAccount object
	fresh                                refusal // the fresh reads' outcome
	// readOK: this agent read its DaemonSet at least once, so a refusal
	// now is a change, not a misconfiguration from the start.
	readOK bool
	// placement: whether the DaemonSet keeps a pod on this node, and why
	// not.
	placement    placement
	placementWhy string
}

// verdict is decide's answer before any wait for a replacement.
type verdict int

const (
	keep verdict = iota
	remove
	awaitReplacement
	// awaitServiceAccount: rule 2 holds; remove unless the ServiceAccount
	// is recreated within ReplaceWait.
	awaitServiceAccount
	unknown
)

// decide applies the rules in the package comment, except the wait.
func decide(f facts, ns, ds, sa, node string) (verdict, string) {
	if v, why, ok := decideRunning(f, ns, sa); ok {
		return v, why
	}
	switch {
	case f.daemonSet.present() && f.placement == notHere:
		return remove, fmt.Sprintf("DaemonSet %s/%s no longer runs on node %s: %s", ns, ds, node, f.placementWhy)
	case f.daemonSet.present():
		return keep, fmt.Sprintf("DaemonSet %s/%s is in place: a restart, an update or a node shutdown", ns, ds)
	case f.daemonSet.leaving():
		return awaitReplacement, fmt.Sprintf("DaemonSet %s/%s is deleted", ns, ds)
	}
	return unknown, fmt.Sprintf("nothing known of DaemonSet %s/%s (API %s)", ns, ds, f.fresh)
}

// decideRunning applies rules 1 and 2, which no restart or update can
// explain; ok=false when neither holds.
func decideRunning(f facts, ns, sa string) (verdict, string, bool) {
	switch {
	case f.namespace.leaving():
		return remove, fmt.Sprintf("namespace %s is being deleted", ns), true
	case f.serviceAccount.leaving() && f.readOK && f.fresh.refused():
		return awaitServiceAccount, fmt.Sprintf("ServiceAccount %s/%s is deleted and the API now refuses the agent", ns, sa), true
	}
	return keep, "", false
}

// refused: the API answered, and said no to the agent's credentials or
// rights.
func (r refusal) refused() bool { return r == unauthorized || r == forbidden }

func (r refusal) String() string {
	switch r {
	case unauthorized:
		return "refuses the agent's credentials"
	case forbidden:
		return "forbids the read"
	case unreachable:
		return "unreachable"
	}
	return "answered"
}

// Defaults.
const (
	// DefaultReplaceWait covers a delete-and-recreate (Argo CD's Replace,
	// kubectl replace --force): the new DaemonSet exists milliseconds
	// after the old one is deleted, well before the garbage collector
	// stops the old pods.
	DefaultReplaceWait = 5 * time.Second
	// freshReadTimeout bounds the reads at shutdown.
	freshReadTimeout = 3 * time.Second
)
