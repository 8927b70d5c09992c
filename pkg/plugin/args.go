package plugin

import (
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"istio-cni.local/istio-cni/pkg/decision"
)

// k8sArgs are the pod identity the runtime passes in CNI_ARGS.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString // CNI_ARGS key
	K8S_POD_NAME      types.UnmarshallableString // CNI_ARGS key
	K8S_POD_UID       types.UnmarshallableString // CNI_ARGS key
}

// podRef names the pod a sandbox belongs to.
type podRef struct {
	namespace, name, uid string
}

func (r podRef) String() string { return r.namespace + "/" + r.name }

// podID reads the pod from CNI_ARGS; ok=false when the runtime is not
// Kubernetes. Unknown keys are always ignored.
func podID(cniArgs string) (ref podRef, ok bool, err error) {
	a := k8sArgs{}
	a.IgnoreUnknown = true
	if err := types.LoadArgs(cniArgs, &a); err != nil {
		return podRef{}, false, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %v", err), "")
	}
	ref = podRef{string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME), string(a.K8S_POD_UID)}
	return ref, ref.namespace != "" && ref.name != "", nil
}

// resultFor is what ADD prints: the previous plugin's result unchanged, or
// an empty result of the requested version when there is none.
func resultFor(conf *Config) (types.Result, error) {
	var res types.Result = &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if conf.PrevResult != nil {
		res = conf.PrevResult
	}
	out, err := res.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("converting result to %s: %v", conf.CNIVersion, err), "")
	}
	return out, nil
}

// families says which address families the pod uses (decision.Families),
// its addresses taken from the previous result.
func families(conf *Config, dualStack bool, hasIPv6 func() (bool, error)) (decision.Stack, error) {
	var addrs []netip.Addr
	if conf.PrevResult != nil && !dualStack {
		res, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return decision.Stack{}, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
		}
		for _, ip := range res.IPs {
			if a, ok := netip.AddrFromSlice(ip.Address.IP); ok {
				addrs = append(addrs, a)
			}
		}
	}
	return decision.Families(conf.parsed.IPv6, dualStack, addrs, hasIPv6)
}
