// Package kube holds what the plugin knows of a pod, in small local types:
// only the fields the redirect decision reads, and why a lookup failed.
// The plugin is exec'd for every pod sandbox, and the full API types would
// cost every pod their start-up time. apiclient reads a pod from the API;
// apilookup runs that read in a helper binary.
package kube

import "encoding/json"

// Pod is the subset of a core/v1 Pod the decision reads.
type Pod struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     PodSpec    `json:"spec"`
}

// ObjectMeta is the subset of metadata the decision reads.
type ObjectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	UID         string            `json:"uid"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodSpec is the subset of the pod spec the decision reads.
type PodSpec struct {
	HostNetwork    bool        `json:"hostNetwork,omitempty"`
	Containers     []Container `json:"containers"`
	InitContainers []Container `json:"initContainers,omitempty"`
}

// Container is the subset of a container the decision reads.
type Container struct {
	Name            string           `json:"name"`
	Args            []string         `json:"args,omitempty"`
	Env             []EnvVar         `json:"env,omitempty"`
	SecurityContext *SecurityContext `json:"securityContext,omitempty"`
	// RestartPolicy "Always" on an init container makes it a native sidecar.
	RestartPolicy *string `json:"restartPolicy,omitempty"`
}

// EnvVar is a container's environment variable: a literal Value, or a
// reference (ValueFrom: a ConfigMap, Secret or field) that only the kubelet
// resolves.
type EnvVar struct {
	Name      string          `json:"name"`
	Value     string          `json:"value,omitempty"`
	ValueFrom json.RawMessage `json:"valueFrom,omitempty"`
}

// SecurityContext is the subset of a container's security context the
// decision reads.
type SecurityContext struct {
	RunAsUser  *int64 `json:"runAsUser,omitempty"`
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`
}
