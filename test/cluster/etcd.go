package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
)

// startEtcd runs a single-member etcd on two free loopback ports with its
// data under dir, and returns once /health reports healthy.
func startEtcd(ctx context.Context, l *launcher, bin, dir string) (*proc, string, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, "", err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	args := []string{
		"--name=default",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--initial-cluster-state=new",
		// A single member has no peer to lose: campaign after 100ms
		// instead of the default 1s election timeout.
		"--heartbeat-interval=10",
		"--election-timeout=100",
		"--logger=zap",
		"--log-outputs=stderr",
	}
	p, err := startProc(l, "etcd", bin, args, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, "", err
	}
	client := &http.Client{}
	err = poll(ctx, p, func(ctx context.Context) error {
		return etcdHealthy(ctx, client, clientURL)
	})
	return p, clientURL, err
}

func etcdHealthy(ctx context.Context, client *http.Client, clientURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Health != "true" {
		return fmt.Errorf("etcd /health: %d %s", resp.StatusCode, body)
	}
	return nil
}
