package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopKubelet stops the node's kubelet and nothing else: its containers
// keep running, as on a node whose kubelet crashed or was stopped for
// maintenance. StartKubelet brings it back.
func (n *Node) StopKubelet() error {
	k := n.component("kubelet")
	if k == nil || k.exited() {
		return errors.New("cluster: kubelet is not running")
	}
	return k.stop(n.grace)
}

// StartKubelet starts the kubelet StopKubelet stopped, as it was, and
// returns once the node is Ready by a heartbeat after now, and untainted.
// A kubelet started again registers the node again if it was deleted,
// tainted not-ready (see untaint).
func (n *Node) StartKubelet(ctx context.Context) error {
	old := n.component("kubelet")
	if old == nil || !old.exited() {
		return errors.New("cluster: kubelet is not stopped")
	}
	since := time.Now()
	k, err := n.launcher.restart(old)
	if err != nil {
		return err
	}
	n.replaceComponent(old, k)
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	if err := poll(ctx, k, func(ctx context.Context) error { return n.readyAfter(ctx, since) }); err != nil {
		return err
	}
	return poll(ctx, k, n.untaint)
}

// StopContainers stops every running container named container of the
// pods in namespace, through the node's CRI, as an OOM kill or a crash
// would end them; kubelet, if it runs, starts them again.
func (n *Node) StopContainers(ctx context.Context, namespace, container string) (int, error) {
	rt, closeConn, err := n.cri()
	if err != nil {
		return 0, err
	}
	defer func() { _ = closeConn() }()
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.namespace":  namespace,
			"io.kubernetes.container.name": container,
		},
	}})
	if err != nil {
		return 0, err
	}
	for _, c := range cs.Containers {
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 0}); err != nil {
			return 0, fmt.Errorf("stopping container %s: %w", c.Id, err)
		}
	}
	return len(cs.Containers), nil
}
