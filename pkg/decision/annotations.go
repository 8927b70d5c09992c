package decision

import (
	"fmt"
	"math"
	"strconv"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
)

// The traffic annotations Istio's injector and users set on a pod.
const (
	IncludeInboundPorts     = "traffic.sidecar.istio.io/includeInboundPorts"
	ExcludeInboundPorts     = "traffic.sidecar.istio.io/excludeInboundPorts"
	IncludeOutboundIPRanges = "traffic.sidecar.istio.io/includeOutboundIPRanges"
	ExcludeOutboundIPRanges = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
	IncludeOutboundPorts    = "traffic.sidecar.istio.io/includeOutboundPorts"
	ExcludeOutboundPorts    = "traffic.sidecar.istio.io/excludeOutboundPorts"
	ExcludeInterfaces       = "traffic.sidecar.istio.io/excludeInterfaces"
	// RerouteVirtualInterfaces wins over the deprecated KubevirtInterfaces,
	// which is read only when it is absent (as upstream does).
	RerouteVirtualInterfaces = "istio.io/reroute-virtual-interfaces"
	KubevirtInterfaces       = "traffic.sidecar.istio.io/kubevirtInterfaces"
)

// InvalidError is a pod setting that cannot be honoured: it names the
// annotation (or variable), the value and what is allowed.
type InvalidError struct {
	Field   string
	Value   string
	Problem string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Problem)
}

// redirect builds the spec of a pod that must be redirected.
func redirect(pod *kube.Pod, proxy *kube.Container, env map[string]string) (Decision, error) {
	ann := pod.Metadata.Annotations
	tproxy := false
	switch mode := ann[InterceptionMode]; mode {
	case "", interceptRedirect:
	case interceptNone:
		return skip(InterceptNone), nil
	case interceptTProxy:
		tproxy = true
	default:
		return Decision{}, &InvalidError{InterceptionMode, mode, "want " + allowedIntercepts}
	}
	// A setting set by reference (valueFrom: a ConfigMap, a Secret, a
	// field) is the kubelet's to resolve at container start, after ADD.
	// Upstream reads it as unset, and so does the plugin, so that the
	// same pods start with the same rules; Unread says so. As for the
	// kubelet, a name's last entry is its value.
	last := make(map[string]kube.EnvVar, len(proxy.Env))
	for _, e := range proxy.Env {
		last[e.Name] = e
	}
	// DISABLE_ENVOY was read before (Pod): by reference it is unset,
	// and the pod redirected to a proxy that may never listen. A value
	// that is not true or false is false to the proxy (its pilot-agent
	// falls back to the default) and to upstream istio-cni: the pod
	// starts with the rules of false, and NotBool says so.
	var unread, notBool []string
	for _, name := range []string{envDisableEnvoy, envDNSCapture, envDualStack, envInvalidDrop} {
		if len(last[name].ValueFrom) > 0 {
			unread = append(unread, name)
		}
		if _, ok := envBool(env, name); !ok {
			notBool = append(notBool, name)
		}
	}
	invalidDrop, _ := envBool(env, envInvalidDrop)
	dns, _ := envBool(env, envDNSCapture)
	dual, _ := envBool(env, envDualStack)
	spec := iptables.DefaultSpec()
	if err := applyAnnotations(&spec, ann); err != nil {
		return Decision{}, err
	}
	if err := applyProxyIDs(&spec, proxy); err != nil {
		return Decision{}, err
	}
	spec.DNSCapture, spec.TProxy, spec.InvalidDrop = dns, tproxy, invalidDrop
	return Decision{Redirect: true, Reason: Redirected, Spec: spec, DualStack: dual, Unread: unread, NotBool: notBool}, nil
}

// applyAnnotations overrides the default spec with the traffic annotations.
// The always-excluded inbound ports stay excluded whatever the pod says.
func applyAnnotations(spec *iptables.Spec, ann map[string]string) error {
	var err error
	if v, ok := ann[IncludeInboundPorts]; ok {
		if spec.InboundPorts, err = parsePortsOrAll(IncludeInboundPorts, v); err != nil {
			return err
		}
	}
	if spec.InboundExclude, err = parsePortsAnn(ann, ExcludeInboundPorts); err != nil {
		return err
	}
	spec.InboundExclude = dedup(append(spec.InboundExclude,
		iptables.ProxyStatusPort, iptables.ProxyHealthPort, iptables.ProxyMetricsPort))
	if v, ok := ann[IncludeOutboundIPRanges]; ok {
		if spec.OutboundIPs, err = parsePrefixesOrAll(IncludeOutboundIPRanges, v); err != nil {
			return err
		}
	}
	if v, ok := ann[ExcludeOutboundIPRanges]; ok {
		if spec.OutboundIPExclude, err = ParsePrefixes(ExcludeOutboundIPRanges, v); err != nil {
			return err
		}
	}
	if spec.OutboundPorts, err = parsePortsAnn(ann, IncludeOutboundPorts); err != nil {
		return err
	}
	// The status port is excluded outbound only by default: upstream
	// takes the annotation, once set, as the whole list.
	if _, ok := ann[ExcludeOutboundPorts]; ok {
		ports, err := parsePortsAnn(ann, ExcludeOutboundPorts)
		if err != nil {
			return err
		}
		spec.OutboundExclude = dedup(ports)
	}
	if spec.ExcludeInterfaces, err = ParseInterfaces(ExcludeInterfaces, ann[ExcludeInterfaces]); err != nil {
		return err
	}
	reroute := RerouteVirtualInterfaces
	if _, ok := ann[reroute]; !ok {
		reroute = KubevirtInterfaces
	}
	spec.RerouteInterfaces, err = ParseInterfaces(reroute, ann[reroute])
	return err
}

// applyProxyIDs takes the proxy's uid and gid from its security context; 0
// or unset keeps Istio's 1337, as upstream does.
func applyProxyIDs(spec *iptables.Spec, proxy *kube.Container) error {
	sc := proxy.SecurityContext
	if sc == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    *int64
		dst  *uint32
	}{
		{"istio-proxy securityContext.runAsUser", sc.RunAsUser, &spec.ProxyUID},
		{"istio-proxy securityContext.runAsGroup", sc.RunAsGroup, &spec.ProxyGID},
	} {
		if f.v == nil || *f.v == 0 {
			continue
		}
		// 4294967295 is (uid_t)-1, "no id", not an owner a socket can have.
		if *f.v < 0 || *f.v >= math.MaxUint32 {
			return &InvalidError{f.name, strconv.FormatInt(*f.v, 10), "want an id from 1 to 4294967294"}
		}
		*f.dst = uint32(*f.v)
	}
	return nil
}

// envBool reads a boolean setting of istio-proxy's as its pilot-agent
// does (strconv.ParseBool; false when unset or empty); ok is false when
// the value is set but not a boolean, and then reads as false.
func envBool(env map[string]string, name string) (b, ok bool) {
	v := env[name]
	if v == "" {
		return false, true
	}
	b, err := strconv.ParseBool(v)
	return b, err == nil
}

func dedup(ports []uint16) []uint16 {
	seen := make(map[uint16]bool, len(ports))
	out := ports[:0:0]
	for _, p := range ports {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
