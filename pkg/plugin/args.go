package plugin

import (
	"fmt"
	"io"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// k8sArgs are the pod identity the runtime passes in CNI_ARGS.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString // CNI_ARGS key
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString // CNI_ARGS key
	K8S_POD_UID                types.UnmarshallableString // CNI_ARGS key
}

// podID returns namespace and name, or ok=false when the runtime is not
// Kubernetes. Unknown keys are always ignored.
func podID(cniArgs string) (ns, name string, ok bool, err error) {
	a := k8sArgs{}
	a.IgnoreUnknown = true
	if err := types.LoadArgs(cniArgs, &a); err != nil {
		return "", "", false, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %v", err), "")
	}
	ns, name = string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME)
	return ns, name, ns != "" && name != "", nil
}

// printResult passes the previous plugin's result through unchanged, or an
// empty result of the requested version when there is none.
func printResult(conf *Config, w io.Writer) error {
	var res types.Result = &current.Result{CNIVersion: current.ImplementedSpecVersion}
	if conf.PrevResult != nil {
		res = conf.PrevResult
	}
	out, err := res.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("converting result to %s: %v", conf.CNIVersion, err), "")
	}
	return out.PrintTo(w)
}

// families says which address families the pod uses: IPv4 always, IPv6 when
// the previous result has an IPv6 address or dual-stack is asked for. With no
// previous result it asks the namespace itself.
func families(conf *Config, dualStack bool, hasIPv6 func() (bool, error)) (v4, v6 bool, err error) {
	if dualStack {
		return true, true, nil
	}
	if conf.PrevResult == nil {
		v6, err = hasIPv6()
		return true, v6, err
	}
	res, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return false, false, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	for _, ip := range res.IPs {
		if ip.Address.IP.To4() == nil {
			return true, true, nil
		}
	}
	return true, false, nil
}
