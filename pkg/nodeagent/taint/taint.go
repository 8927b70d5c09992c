// Package taint keeps the node's startup taint in step with the agent's
// readiness: nodes join with Key:NoSchedule (kubelet's
// --register-with-taints), the agent removes it from its own node once the
// plugin is installed and watched, and puts it back when it loses that state
// for longer than a grace period, so no pod is scheduled onto a node that
// cannot redirect it.
package taint

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
)

// DefaultKey is the taint's key unless configured (istiod's taint.name
// names the same key for its untaint controller); its effect is always
// NoSchedule (NoExecute would evict every running pod when the agent
// restarts).
const DefaultKey = "cni.istio.io/not-ready"

// Readiness is the agent's state as the taint follows it.
type Readiness interface {
	// Ready reports readiness and, when not ready, why.
	Ready() (bool, string)
	// ReadyChanged is signalled after each change.
	ReadyChanged() <-chan struct{}
}

// Controller applies the taint.
type Controller struct {
	Client kubeclient.Interface
	Node   string
	// Key is the taint's key: DefaultKey when empty.
	Key string
	// Retired are keys the agent takes off the node once ready and never
	// puts back: the key nodes registered with before Key changed.
	Retired []string
	Ready   Readiness
	// Grace is how long the agent may be not ready before the taint goes
	// back: the installer repairs in milliseconds, so this is a failure it
	// could not repair.
	Grace time.Duration
	// Exempt are not-ready reasons (prefixes) that never taint: a
	// restarting agent leaves the plugin installed and pods keep starting;
	// another installer's istio-cni redirects the node's pods.
	Exempt []string
	Log    *slog.Logger
	// Tainted mirrors whether the node carries the taint (as last set or
	// seen by the controller).
	Tainted prometheus.Gauge
}

// retry bounds the backoff of a failed API write; resync is how often the
// node is read again while nothing changes (someone else may have put the
// taint back).
const (
	retryMin = 500 * time.Millisecond
	retryMax = 30 * time.Second
	resync   = 5 * time.Minute
)

// Run keeps the taint in step until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	var notReadySince time.Time
	retry := retryMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Ready.ReadyChanged():
		case <-timer.C:
		}
		ready, why := c.Ready.Ready()
		var want bool
		switch {
		case ready:
			notReadySince = time.Time{}
		case c.exempt(why):
			continue
		case notReadySince.IsZero():
			notReadySince = time.Now()
			resetTimer(timer, c.Grace)
			continue
		case time.Since(notReadySince) >= c.Grace:
			want = true
		default:
			resetTimer(timer, c.Grace-time.Since(notReadySince))
			continue
		}
		if err := c.set(ctx, want, why); err != nil {
			c.Log.Warn("node taint: update failed; retrying", "taint", c.key(), "want", want, "retry_in", retry.String(), "error", err.Error())
			resetTimer(timer, retry)
			retry = min(2*retry, retryMax)
			continue
		}
		retry = retryMin
		resetTimer(timer, resync)
	}
}

// resetTimer re-arms t; since Go 1.23 Reset discards a pending fire.
func resetTimer(t *time.Timer, d time.Duration) { t.Reset(max(d, time.Millisecond)) }

// set adds (want) or removes the taint with a JSON patch guarded by the
// node's resourceVersion: another writer's taints are never lost.
func (c *Controller) set(ctx context.Context, want bool, why string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	node, err := c.Client.Nodes().Get(ctx, c.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", c.Node, err)
	}
	taints, changed := With(node.Spec.Taints, c.key(), want)
	if !want {
		for _, k := range c.Retired {
			var gone bool
			if taints, gone = With(taints, k, false); gone {
				changed = true
				c.Log.Info("node taint removed: a key this agent no longer uses", "taint", k, "key", c.key())
			}
		}
	}
	if !changed {
		c.setGauge(want)
		return nil
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": node.ResourceVersion},
		{"op": "add", "path": "/spec/taints", "value": taints},
	})
	if err != nil {
		return err
	}
	if _, err := c.Client.Nodes().Patch(ctx, c.Node, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching node %s: %w", c.Node, err)
	}
	c.setGauge(want)
	if want {
		c.Log.Warn("node tainted: the plugin cannot be kept installed; no new pods are scheduled here", "taint", c.key()+":NoSchedule", "reason", why)
	} else {
		c.Log.Info("node taint removed: the plugin is installed and watched", "taint", c.key())
	}
	return nil
}

func (c *Controller) key() string {
	if c.Key == "" {
		return DefaultKey
	}
	return c.Key
}

func (c *Controller) setGauge(tainted bool) {
	if c.Tainted == nil {
		return
	}
	if tainted {
		c.Tainted.Set(1)
	} else {
		c.Tainted.Set(0)
	}
}

// With returns taints with ours, key:NoSchedule, present once (want) or
// absent, and whether that differs from the input. Other taints keep their
// order; entries of our key with another effect go (a duplicate key and
// effect would fail validation).
func With(taints []corev1.Taint, key string, want bool) ([]corev1.Taint, bool) {
	ours := Taint(key)
	out := make([]corev1.Taint, 0, len(taints)+1)
	for _, t := range taints {
		if t.Key != key {
			out = append(out, t)
		}
	}
	if want {
		out = append(out, ours)
	}
	changed := len(out) != len(taints)
	if !changed {
		for i := range out {
			if !out[i].MatchTaint(&taints[i]) || out[i].Value != taints[i].Value {
				changed = true
				break
			}
		}
	}
	if !changed {
		return taints, false
	}
	return out, true
}

// Retired are the keys an agent whose key is key removes once ready: the
// default, which nodes registered with before the key was changed, unless
// it is the key itself.
func Retired(key string) []string {
	if key == DefaultKey || key == "" {
		return nil
	}
	return []string{DefaultKey}
}

// Taint is the startup taint of that key.
func Taint(key string) corev1.Taint {
	return corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule}
}

func (c *Controller) exempt(why string) bool {
	for _, e := range c.Exempt {
		if strings.HasPrefix(why, e) {
			return true
		}
	}
	return false
}
