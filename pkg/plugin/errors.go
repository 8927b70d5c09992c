package plugin

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/podnet"
)

// Plugin-specific CNI error codes (the spec reserves 100 and up for
// plugins). Well-known codes are used where they fit: 4 for missing
// environment, 6 for undecodable input, 7 for a bad config, 8 for a netns
// that does not exist or cannot be opened, 11 when the API cannot answer now.
const (
	ErrPodNotFound   uint = 100 // the API has no such pod
	ErrAPIDenied     uint = 101 // 401 or 403: the plugin's kubeconfig is wrong or lacks rights
	ErrPodSettings   uint = 102 // a traffic annotation or proxy setting is invalid
	ErrRules         uint = 104 // iptables failed or read back differently; rolled back
	ErrRulesMismatch uint = 105 // CHECK: the pod's rules are missing or differ
)

// podError maps a pod lookup failure to its CNI error.
func podError(err error) error {
	var apiErr *kube.APIError
	if !errors.As(err, &apiErr) {
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	}
	code := types.ErrTryAgainLater
	switch apiErr.Kind {
	case kube.NotFound:
		code = ErrPodNotFound
	case kube.Denied:
		code = ErrAPIDenied
	}
	return types.NewError(code, apiErr.Error(), "")
}

// decisionError maps an invalid pod setting.
func decisionError(pod string, err error) error {
	return types.NewError(ErrPodSettings, fmt.Sprintf("pod %s: %v", pod, err), "")
}

// netnsError maps a failure in the pod's namespace; doing says what failed.
// A CNI error from deeper down keeps its code.
func netnsError(pod, doing string, err error) error {
	var cniErr *types.Error
	switch {
	case errors.As(err, &cniErr):
		return cniErr
	case errors.Is(err, podnet.ErrNoNetns), errors.Is(err, podnet.ErrOpenNetns):
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("pod %s: %s: %v", pod, doing, err), "")
	}
	return types.NewError(ErrRules, fmt.Sprintf("pod %s: %s: %v", pod, doing, err), "")
}
