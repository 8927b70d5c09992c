package cluster_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/test/cluster"
)

const podJSON = `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "app", "namespace": "default"},
  "spec": {"containers": [{"name": "app", "image": "busybox"}]}
}`

func TestAPIServer(t *testing.T) {
	a := cluster.StartForTest(t)
	ctx := t.Context()
	if err := a.CreatePod(ctx, []byte(podJSON)); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"plugin", cluster.PluginToken, http.StatusOK},
		{"nobody", cluster.NobodyToken, http.StatusForbidden},
		{"bogus", "not-a-token", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := getViaKubeconfig(t, a, tc.token, "/api/v1/namespaces/default/pods/app")
			if status != tc.want {
				t.Fatalf("GET pod: status %d, want %d: %s", status, tc.want, body)
			}
			if tc.want != http.StatusOK {
				return
			}
			var pod struct {
				Metadata struct{ Name, Namespace string }
			}
			if err := json.Unmarshal(body, &pod); err != nil {
				t.Fatal(err)
			}
			if pod.Metadata.Name != "app" || pod.Metadata.Namespace != "default" {
				t.Fatalf("GET pod: got %+v", pod.Metadata)
			}
		})
	}

	if err := a.DeletePod(ctx, "default", "app"); err != nil {
		t.Fatal(err)
	}
	if status, body, err := a.Do(ctx, http.MethodGet, "/api/v1/namespaces/default/pods/app", nil); err != nil || status != http.StatusNotFound {
		t.Fatalf("GET deleted pod: %d %s %v, want 404", status, body, err)
	}

	apiPID, etcdPID := a.PIDs()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range map[string]int{"kube-apiserver": apiPID, "etcd": etcdPID} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) after Stop: kill -0 = %v, want ESRCH", name, pid, err)
		}
	}
	if err := a.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// getViaKubeconfig GETs path the way the plugin will: a kubeconfig file
// loaded by clientcmd, and the rest package's HTTP client.
func getViaKubeconfig(t *testing.T, a *cluster.APIServer, token, path string) (int, []byte) {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := a.Kubeconfig(kc, token); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func TestMissingAPIServerBinary(t *testing.T) {
	t.Setenv("KUBE_APISERVER", filepath.Join(t.TempDir(), "kube-apiserver"))
	_, err := cluster.StartAPIServer(t.Context(), cluster.Options{Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "make kube-binaries") {
		t.Fatalf("StartAPIServer without the binary: %v, want an error naming `make kube-binaries`", err)
	}
}
