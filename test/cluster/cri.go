package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cri talks to containerd's CRI service, as kubelet does.
func (n *Node) cri() (runtimeapi.RuntimeServiceClient, func() error, error) {
	conn, err := grpc.NewClient("unix://"+n.ContainerdSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return runtimeapi.NewRuntimeServiceClient(conn), conn.Close, nil
}

// PodNetNS returns the network namespace path of a running pod's sandbox
// (for nsenter --net).
func (n *Node) PodNetNS(ctx context.Context, namespace, name string) (string, error) {
	rt, closeConn, err := n.cri()
	if err != nil {
		return "", err
	}
	defer func() { _ = closeConn() }()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.namespace": namespace,
			"io.kubernetes.pod.name":      name,
		},
	}})
	if err != nil {
		return "", err
	}
	if len(list.Items) != 1 {
		return "", fmt.Errorf("pod %s/%s: %d ready sandboxes, want 1", namespace, name, len(list.Items))
	}
	path, err := n.sandboxNetNS(ctx, rt, list.Items[0].Id)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	return n.HostPath(path)
}

// sandboxNetNS reads a sandbox's network namespace path from its verbose
// status (containerd's runtime spec).
func (n *Node) sandboxNetNS(ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) (string, error) {
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return "", err
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		return "", fmt.Errorf("sandbox info: %w", err)
	}
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			return ns.Path, nil
		}
	}
	return "", errNoNetNS
}

// errNoNetNS: the sandbox shares the host's network namespace.
var errNoNetNS = errors.New("the sandbox has no network namespace path")

// removeSandboxes stops every pod sandbox (containers killed, CNI DEL run,
// network namespace released) and removes it, as kubelet would: a few at
// once, as kubelet's pod workers do, so that a full node's 110 sandboxes
// fit the caller's budget on a loaded machine.
func (n *Node) removeSandboxes(ctx context.Context) error {
	rt, closeConn, err := n.cri()
	if err != nil {
		return err
	}
	defer func() { _ = closeConn() }()
	listCtx, cancelList := context.WithTimeout(ctx, 30*time.Second)
	list, err := rt.ListPodSandbox(listCtx, &runtimeapi.ListPodSandboxRequest{})
	cancelList()
	if err != nil {
		return err
	}
	// The budget grows with the sandboxes: after a full node's burst on
	// 2 cores, containerd 2 stopped 108 of them, four at a time, in more
	// than 90 s.
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second+time.Duration(len(list.Items))*4*time.Second)
	defer cancel()
	const workers = 4
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan *runtimeapi.PodSandbox)
	for range workers {
		wg.Go(func() {
			for sb := range next {
				err := n.removeSandbox(ctx, rt, sb)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	for _, sb := range list.Items {
		next <- sb
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func (n *Node) removeSandbox(ctx context.Context, rt runtimeapi.RuntimeServiceClient, sb *runtimeapi.PodSandbox) error {
	// Should the CRI fail to release it, the netns mount is removed by
	// hand (cleanHost).
	if path, err := n.sandboxNetNS(ctx, rt, sb.Id); err == nil {
		n.netnsMu.Lock()
		n.netnsPaths = append(n.netnsPaths, path)
		n.netnsMu.Unlock()
	}
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
		return fmt.Errorf("stopping sandbox of %s/%s: %w", sb.Metadata.Namespace, sb.Metadata.Name, err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
		return fmt.Errorf("removing sandbox of %s/%s: %w", sb.Metadata.Namespace, sb.Metadata.Name, err)
	}
	return nil
}
