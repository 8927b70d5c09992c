package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// A paused API server refuses connections while etcd, kubelet, the
// controllers and the scheduler keep running; resumed, it serves on the
// same port and every component is back in touch; Stop ends the new
// process.
func TestPauseResume(t *testing.T) {
	n, stop := startNode(t, "icnipause0", "10.93.0.0/24")
	ctx := t.Context()
	components := pidsMentioning(t, "--kubeconfig="+n.Kubeconfig) // kubelet, controllers, scheduler
	if len(components) != 3 {
		t.Fatalf("processes using the node's kubeconfig: %v, want kubelet, controller manager and scheduler", components)
	}
	kubeletLog := filepath.Join(n.Dir, "kubelet.log")
	offset := fileSize(t, kubeletLog)
	oldAPI, etcd := n.PIDs()

	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(oldAPI, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kube-apiserver (pid %d) after Pause: kill -0 = %v, want ESRCH", oldAPI, err)
	}
	if _, _, err := n.Do(ctx, http.MethodGet, "/readyz", nil); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("GET /readyz while paused: %v, want connection refused", err)
	}
	// Every client's watches broke when the server went; the outage lasts
	// until kubelet has also failed a request of its own (a node status
	// update, every 5s). The others retry at client-go's verbosity 4,
	// silently here.
	poll.Until(t, 30*time.Second, "kubelet failing to reach the API server", func() (bool, string) {
		b, _ := os.ReadFile(kubeletLog)
		return strings.Contains(string(b[offset:]), "connection refused"), "no \"connection refused\" in kubelet.log yet"
	})
	if err := syscall.Kill(etcd, 0); err != nil {
		t.Errorf("etcd (pid %d) while paused: %v", etcd, err)
	}

	resumed := time.Now()
	if err := n.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	newAPI, etcdNow := n.PIDs()
	if newAPI == oldAPI || etcdNow != etcd {
		t.Errorf("PIDs after Resume: kube-apiserver %d (was %d), etcd %d (was %d); want a new kube-apiserver, the same etcd", newAPI, oldAPI, etcdNow, etcd)
	}
	if err := n.Resume(ctx); err == nil {
		t.Error("Resume of a running API server succeeded")
	}
	out, err := n.Kubectl(ctx, "get", "nodes", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "node/"+n.Name {
		t.Fatalf("kubectl get nodes after Resume: %q %v", out, err)
	}
	if now := pidsMentioning(t, "--kubeconfig="+n.Kubeconfig); !maps.Equal(now, components) {
		t.Fatalf("components after the outage: %v, want the same processes %v", now, components)
	}
	// Each is in touch again: kubelet reports, the service-account
	// controller fills a new namespace, the scheduler judges a pod (one no
	// node fits, so nothing runs).
	poll.Until(t, 30*time.Second, "a node heartbeat after Resume", func() (bool, string) {
		hb, err := readyHeartbeat(n)
		return err == nil && hb.After(resumed), hb.String()
	})
	ns := []byte(`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "resumed"}}`)
	if status, body, err := n.Do(ctx, http.MethodPost, "/api/v1/namespaces", ns); err != nil || status != http.StatusCreated {
		t.Fatalf("creating a namespace: %d %s %v", status, body, err)
	}
	poll.Until(t, 30*time.Second, "the default ServiceAccount in a new namespace", func() (bool, string) {
		status, body, err := n.Do(ctx, http.MethodGet, "/api/v1/namespaces/resumed/serviceaccounts/default", nil)
		return err == nil && status == http.StatusOK, string(body)
	})
	pod := `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nowhere", "namespace": "resumed"},
	  "spec": {"nodeSelector": {"no-such-label": "x"}, "containers": [{"name": "c", "image": "` + cluster.TestImage + `"}]}}`
	if err := n.CreatePod(ctx, []byte(pod)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the scheduler's verdict on a new pod", func() (bool, string) {
		status, body, err := n.Do(ctx, http.MethodGet, "/api/v1/namespaces/resumed/pods/nowhere", nil)
		return err == nil && status == http.StatusOK && strings.Contains(string(body), `"reason":"Unschedulable"`), string(body)
	})

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for pid, name := range map[int]string{newAPI: "kube-apiserver", etcd: "etcd"} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) after Stop: kill -0 = %v, want ESRCH", name, pid, err)
		}
	}
	if left := pidsMentioning(t, n.Dir); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	if err := n.Resume(ctx); err == nil {
		t.Error("Resume after Stop succeeded")
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// readyHeartbeat is the node's last heartbeat of its Ready condition.
func readyHeartbeat(n *cluster.Node) (time.Time, error) {
	status, body, err := n.Do(context.Background(), http.MethodGet, "/api/v1/nodes/"+n.Name, nil)
	if err != nil || status != http.StatusOK {
		return time.Time{}, fmt.Errorf("GET node: %d %s %v", status, body, err)
	}
	var node struct {
		Status struct {
			Conditions []struct {
				Type              string
				LastHeartbeatTime time.Time
			}
		}
	}
	if err := json.Unmarshal(body, &node); err != nil {
		return time.Time{}, err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" {
			return c.LastHeartbeatTime, nil
		}
	}
	return time.Time{}, errors.New("no Ready condition")
}

// Stop ends a paused API server's etcd; Resume cannot bring it back.
func TestStopWhilePaused(t *testing.T) {
	a := cluster.StartForTest(t)
	apiPID, etcdPID := a.PIDs()
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := a.Pause(); err != nil {
		t.Errorf("second Pause: %v", err)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range map[string]int{"kube-apiserver": apiPID, "etcd": etcdPID} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) after Stop: kill -0 = %v, want ESRCH", name, pid, err)
		}
	}
	if err := a.Resume(t.Context()); err == nil {
		t.Error("Resume after Stop succeeded")
	}
}
