package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Sandbox is a ready pod sandbox as the runtime sees it, with or without
// the API server.
type Sandbox struct {
	ID, Namespace, Name, UID string
	// Netns is the sandbox's network namespace path.
	Netns string
	// Running lists the names of its containers that run now.
	Running []string
	// Created is when the runtime began making it (before its CNI ADD).
	Created time.Time
}

// ReadySandboxes lists the ready sandboxes of pods in namespace, straight
// from the runtime: a chaos test's view of what runs, which holds while
// the API server is down.
func (n *Node) ReadySandboxes(ctx context.Context, namespace string) ([]Sandbox, error) {
	rt, closeConn, err := n.cri()
	if err != nil {
		return nil, err
	}
	defer func() { _ = closeConn() }()
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.namespace": namespace},
	}})
	if err != nil {
		return nil, err
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, err
	}
	running := map[string][]string{}
	for _, c := range cs.Containers {
		running[c.PodSandboxId] = append(running[c.PodSandboxId], c.Metadata.Name)
	}
	var out []Sandbox
	for _, sb := range sbs.Items {
		path, err := n.sandboxNetNS(ctx, rt, sb.Id)
		if err != nil {
			continue // gone meanwhile, or host network
		}
		out = append(out, Sandbox{ID: sb.Id, Namespace: sb.Metadata.Namespace, Name: sb.Metadata.Name,
			UID: sb.Metadata.Uid, Netns: path, Running: running[sb.Id], Created: time.Unix(0, sb.CreatedAt)})
	}
	return out, nil
}

// ContainerPID is the host PID of a running container's first process,
// named by the container's pod namespace and container name (the only
// running one: a DaemonSet has one pod per node), from the runtime.
func (n *Node) ContainerPID(ctx context.Context, namespace, container string) (int, error) {
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
	if len(cs.Containers) != 1 {
		return 0, fmt.Errorf("%s/%s: %d running containers, want 1", namespace, container, len(cs.Containers))
	}
	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cs.Containers[0].Id, Verbose: true})
	if err != nil {
		return 0, err
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("%s/%s: no pid in the container's status (%v)", namespace, container, err)
	}
	return info.Pid, nil
}
