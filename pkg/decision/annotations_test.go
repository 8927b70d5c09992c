package decision

import (
	"errors"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
)

// normalize makes a spec comparable with reflect.DeepEqual: an empty list and
// a nil one select the same thing.
func normalize(s iptables.Spec) iptables.Spec {
	if len(s.InboundPorts.List) == 0 {
		s.InboundPorts.List = nil
	}
	if len(s.InboundExclude) == 0 {
		s.InboundExclude = nil
	}
	if len(s.OutboundPorts) == 0 {
		s.OutboundPorts = nil
	}
	if len(s.OutboundExclude) == 0 {
		s.OutboundExclude = nil
	}
	if len(s.OutboundIPs.List) == 0 {
		s.OutboundIPs.List = nil
	}
	if len(s.OutboundIPExclude) == 0 {
		s.OutboundIPExclude = nil
	}
	return s
}

func specEqual(a, b iptables.Spec) bool { return reflect.DeepEqual(normalize(a), normalize(b)) }

func pfx(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s))
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// spec is the default spec changed by f.
func spec(f func(*iptables.Spec)) iptables.Spec {
	s := iptables.DefaultSpec()
	f(&s)
	return s
}

type specCase struct {
	name string
	opts []podOpt
	want iptables.Spec
}

func ann(k, v string) []podOpt { return []podOpt{withAnn(k, v)} }

func portSpecCases() []specCase {
	return []specCase{
		{"no annotations", nil, iptables.DefaultSpec()},
		{"includeInboundPorts list", ann(IncludeInboundPorts, "80,8080"), spec(func(s *iptables.Spec) { s.InboundPorts = iptables.Ports{List: []uint16{80, 8080}} })},
		{"includeInboundPorts spaces", ann(IncludeInboundPorts, " 80 , 8080 "), spec(func(s *iptables.Spec) { s.InboundPorts = iptables.Ports{List: []uint16{80, 8080}} })},
		{"includeInboundPorts duplicates", ann(IncludeInboundPorts, "80,8080,80"), spec(func(s *iptables.Spec) { s.InboundPorts = iptables.Ports{List: []uint16{80, 8080}} })},
		{"includeInboundPorts bounds", ann(IncludeInboundPorts, "1,65535"), spec(func(s *iptables.Spec) { s.InboundPorts = iptables.Ports{List: []uint16{1, 65535}} })},
		{"includeInboundPorts star", ann(IncludeInboundPorts, "*"), iptables.DefaultSpec()},
		{"includeInboundPorts spaced star", ann(IncludeInboundPorts, " * "), iptables.DefaultSpec()},
		{"includeInboundPorts empty", ann(IncludeInboundPorts, ""), spec(func(s *iptables.Spec) { s.InboundPorts = iptables.Ports{} })},
		{"includeInboundPorts blank", ann(IncludeInboundPorts, "  "), spec(func(s *iptables.Spec) { s.InboundPorts = iptables.Ports{} })},
		{"excludeInboundPorts", ann(ExcludeInboundPorts, "22"), spec(func(s *iptables.Spec) { s.InboundExclude = []uint16{22, 15020, 15021, 15090} })},
		{"excludeInboundPorts overlaps the fixed ones", ann(ExcludeInboundPorts, "15021, 22"), spec(func(s *iptables.Spec) { s.InboundExclude = []uint16{15021, 22, 15020, 15090} })},
		{"excludeInboundPorts empty", ann(ExcludeInboundPorts, ""), iptables.DefaultSpec()},
		{"includeOutboundPorts", ann(IncludeOutboundPorts, "3306,5432"), spec(func(s *iptables.Spec) { s.OutboundPorts = []uint16{3306, 5432} })},
		{"includeOutboundPorts empty", ann(IncludeOutboundPorts, ""), iptables.DefaultSpec()},
		// Once set, the annotation is the whole list, as upstream takes
		// it: the status port is excluded outbound by default only.
		{"excludeOutboundPorts", ann(ExcludeOutboundPorts, "5432"), spec(func(s *iptables.Spec) { s.OutboundExclude = []uint16{5432} })},
		{"excludeOutboundPorts with 15020", ann(ExcludeOutboundPorts, "15020,5432"), spec(func(s *iptables.Spec) { s.OutboundExclude = []uint16{15020, 5432} })},
		{"excludeOutboundPorts empty", ann(ExcludeOutboundPorts, ""), spec(func(s *iptables.Spec) { s.OutboundExclude = []uint16{} })},
	}
}

func ipSpecCases() []specCase {
	return []specCase{
		{"includeOutboundIPRanges", ann(IncludeOutboundIPRanges, "10.0.0.0/8,fd00::/8"), spec(func(s *iptables.Spec) { s.OutboundIPs = iptables.Prefixes{List: pfx("10.0.0.0/8", "fd00::/8")} })},
		{"includeOutboundIPRanges masked", ann(IncludeOutboundIPRanges, "10.1.2.3/8, fd00::1/8"), spec(func(s *iptables.Spec) { s.OutboundIPs = iptables.Prefixes{List: pfx("10.0.0.0/8", "fd00::/8")} })},
		{"includeOutboundIPRanges host", ann(IncludeOutboundIPRanges, "10.1.2.3/32"), spec(func(s *iptables.Spec) { s.OutboundIPs = iptables.Prefixes{List: pfx("10.1.2.3/32")} })},
		{"includeOutboundIPRanges star", ann(IncludeOutboundIPRanges, "*"), iptables.DefaultSpec()},
		{"includeOutboundIPRanges empty", ann(IncludeOutboundIPRanges, ""), spec(func(s *iptables.Spec) { s.OutboundIPs = iptables.Prefixes{} })},
		{"excludeOutboundIPRanges", ann(ExcludeOutboundIPRanges, "169.254.169.254/32, 10.1.2.3/16"), spec(func(s *iptables.Spec) { s.OutboundIPExclude = pfx("169.254.169.254/32", "10.1.0.0/16") })},
		{"excludeOutboundIPRanges v6", ann(ExcludeOutboundIPRanges, "fd00:1::5/64"), spec(func(s *iptables.Spec) { s.OutboundIPExclude = pfx("fd00:1::/64") })},
		{"excludeOutboundIPRanges empty", ann(ExcludeOutboundIPRanges, ""), iptables.DefaultSpec()},
	}
}

func idSpecCases() []specCase {
	return []specCase{
		{"uid and gid", []podOpt{proxyIDs(i64(1000), i64(2000))}, spec(func(s *iptables.Spec) { s.ProxyUID, s.ProxyGID = 1000, 2000 })},
		{"uid only", []podOpt{proxyIDs(i64(1000), nil)}, spec(func(s *iptables.Spec) { s.ProxyUID = 1000 })},
		{"gid only", []podOpt{proxyIDs(nil, i64(2000))}, spec(func(s *iptables.Spec) { s.ProxyGID = 2000 })},
		{"zero keeps 1337", []podOpt{proxyIDs(i64(0), i64(0))}, iptables.DefaultSpec()},
		{"empty security context", []podOpt{proxyIDs(nil, nil)}, iptables.DefaultSpec()},
		{"max id", []podOpt{proxyIDs(i64(math.MaxUint32-1), i64(1))}, spec(func(s *iptables.Spec) { s.ProxyUID, s.ProxyGID = math.MaxUint32-1, 1 })},
		{"everything at once", []podOpt{
			withAnn(IncludeInboundPorts, "80"), withAnn(ExcludeInboundPorts, "22"),
			withAnn(IncludeOutboundIPRanges, "10.0.0.0/8"), withAnn(ExcludeOutboundIPRanges, "10.96.0.1/32"),
			withAnn(IncludeOutboundPorts, "3306"), withAnn(ExcludeOutboundPorts, "5432"),
			withAnn(InterceptionMode, "REDIRECT"), proxyIDs(i64(101), i64(102)),
		}, spec(func(s *iptables.Spec) {
			s.ProxyUID, s.ProxyGID = 101, 102
			s.InboundPorts = iptables.Ports{List: []uint16{80}}
			s.InboundExclude = []uint16{22, 15020, 15021, 15090}
			s.OutboundIPs = iptables.Prefixes{List: pfx("10.0.0.0/8")}
			s.OutboundIPExclude = pfx("10.96.0.1/32")
			s.OutboundPorts = []uint16{3306}
			s.OutboundExclude = []uint16{5432}
		})},
	}
}

func TestAnnotationSpec(t *testing.T) {
	for _, group := range [][]specCase{portSpecCases(), ipSpecCases(), idSpecCases()} {
		for _, tc := range group {
			t.Run(tc.name, func(t *testing.T) {
				for kind, newPod := range sidecarKinds() {
					d, err := Pod(newPod(tc.opts...))
					if err != nil {
						t.Fatalf("%s: %v", kind, err)
					}
					if !d.Redirect {
						t.Fatalf("%s: not a redirect: %+v", kind, d)
					}
					if !specEqual(d.Spec, tc.want) {
						t.Errorf("%s: spec\n got %+v\nwant %+v", kind, d.Spec, tc.want)
					}
				}
			})
		}
	}
}

// sidecarKinds are the two ways a pod carries istio-proxy; every annotation
// behaves the same with either.
func sidecarKinds() map[string]func(...podOpt) *kube.Pod {
	return map[string]func(...podOpt) *kube.Pod{"container": meshedPod, "native": nativeSidecarPod}
}

// badPorts are invalid in every port annotation.
func badPorts() []string {
	return []string{
		"http", "0", "65536", "-1", "99999999999999999999", "0x50", "+80", "1e3", "80.0",
		"80,,90", "80,", ",80", ",", "80 90", "80 -j ACCEPT", "80;90", "1;rm -rf /",
		"$(reboot)", "80\n-A OUTPUT -j ACCEPT", "８０", "*,80", "80,*", "**",
	}
}

// badPrefixes are invalid in every CIDR annotation.
func badPrefixes() []string {
	return []string{
		"10.0.0.1", "fd00::1", "10.0.0.0/33", "::/129", "300.0.0.0/8", "10.0.0.0/-1", "10.0.0.0/",
		"10.0.0.0/8,,10.1.0.0/16", "10.0.0.0/8,", "10.0.0.0/8 -j ACCEPT", "10.0.0.0/8;reboot",
		"fe80::1%eth0/64", "010.0.0.0/8", "10.0.0.0/08", "localhost/8", "*,10.0.0.0/8", "**",
	}
}

type errCase struct {
	field, value string
	kind         errKind
}

func annotationErrCases() []errCase {
	var out []errCase
	for _, a := range []string{IncludeInboundPorts, ExcludeInboundPorts, IncludeOutboundPorts, ExcludeOutboundPorts} {
		for _, v := range badPorts() {
			out = append(out, errCase{a, v, invalid})
		}
	}
	for _, a := range []string{IncludeOutboundIPRanges, ExcludeOutboundIPRanges} {
		for _, v := range badPrefixes() {
			out = append(out, errCase{a, v, invalid})
		}
	}
	// * is allowed only where Istio allows it.
	for _, a := range []string{ExcludeInboundPorts, IncludeOutboundPorts, ExcludeOutboundPorts, ExcludeOutboundIPRanges} {
		out = append(out, errCase{a, "*", invalid})
	}
	out = append(out,
		errCase{InterceptionMode, "tproxy", invalid},
	)
	for _, a := range []string{ExcludeInterfaces, RerouteVirtualInterfaces, KubevirtInterfaces} {
		for _, v := range []string{"*", "net1,", "-net1", ".hidden", "eth0;ls", "a-name-longer-than15", "net 1", "eth0/1"} {
			out = append(out, errCase{a, v, invalid})
		}
	}
	return out
}

func TestAnnotationErrors(t *testing.T) {
	for _, tc := range annotationErrCases() {
		t.Run(tc.field+"="+strconv.Quote(tc.value), func(t *testing.T) {
			for _, newPod := range sidecarKinds() {
				d, err := Pod(newPod(withAnn(tc.field, tc.value)))
				checkErrKind(t, err, tc.kind)
				if d.Redirect {
					t.Errorf("decision on error is a redirect: %+v", d)
				}
				checkNames(t, err, tc.field, tc.value)
			}
		})
	}
}

// checkNames asserts the error names the field and the value, and carries
// them in its typed fields.
func checkNames(t *testing.T, err error, field, value string) {
	t.Helper()
	msg := err.Error()
	if !strings.Contains(msg, field) || !strings.Contains(msg, strconv.Quote(value)) {
		t.Errorf("error %q does not name %s and %q", msg, field, value)
	}
	var inv *InvalidError
	if errors.As(err, &inv) && (inv.Field != field || inv.Value != value) {
		t.Errorf("InvalidError{Field: %q, Value: %q}, want %q, %q", inv.Field, inv.Value, field, value)
	}
}

func TestProxyIDErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		uid, gid *int64
		field    string
		value    string
	}{
		{"negative uid", i64(-1), nil, "runAsUser", "-1"},
		{"negative gid", nil, i64(-5), "runAsGroup", "-5"},
		{"uid too large", i64(math.MaxUint32 + 1), nil, "runAsUser", "4294967296"},
		{"uid (uid_t)-1", i64(math.MaxUint32), nil, "runAsUser", "4294967295"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Pod(meshedPod(proxyIDs(tc.uid, tc.gid)))
			checkErrKind(t, err, invalid)
			if d.Redirect {
				t.Errorf("decision on error is a redirect: %+v", d)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.value) {
				t.Errorf("error %q does not name %s and %s", msg, tc.field, tc.value)
			}
		})
	}
}

// The interface annotations become typed names; the reroute annotation wins
// over the deprecated kubevirt one, which counts only when it is absent.
func TestInterfaceAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name             string
		opts             []podOpt
		exclude, reroute []iptables.IfName
	}{
		{"exclude", []podOpt{withAnn(ExcludeInterfaces, " eth1 , net_2.3,eth1")}, []iptables.IfName{"eth1", "net_2.3"}, nil},
		{"reroute", []podOpt{withAnn(RerouteVirtualInterfaces, "net1,net2")}, nil, []iptables.IfName{"net1", "net2"}},
		{"kubevirt", []podOpt{withAnn(KubevirtInterfaces, "net1")}, nil, []iptables.IfName{"net1"}},
		{"reroute wins", []podOpt{withAnn(RerouteVirtualInterfaces, "net2"), withAnn(KubevirtInterfaces, "net1")}, nil, []iptables.IfName{"net2"}},
		{"empty reroute wins", []podOpt{withAnn(RerouteVirtualInterfaces, ""), withAnn(KubevirtInterfaces, "net1")}, nil, nil},
		{"15 characters", []podOpt{withAnn(ExcludeInterfaces, "abcdefghijklmno")}, []iptables.IfName{"abcdefghijklmno"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Pod(meshedPod(tc.opts...))
			if err != nil || !d.Redirect {
				t.Fatalf("got %+v, %v", d, err)
			}
			if !slices.Equal(d.Spec.ExcludeInterfaces, tc.exclude) || !slices.Equal(d.Spec.RerouteInterfaces, tc.reroute) {
				t.Errorf("exclude %v reroute %v, want %v %v", d.Spec.ExcludeInterfaces, d.Spec.RerouteInterfaces, tc.exclude, tc.reroute)
			}
		})
	}
}

// ISTIO_META_DNS_CAPTURE on the proxy turns DNS capture on, for either kind
// of sidecar; false or absent leaves it off.
func TestDNSCapture(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{{"true", true}, {"1", true}, {"True", true}, {"false", false}, {"", false}} {
		for _, newPod := range sidecarKinds() {
			opts := []podOpt{}
			if tc.value != "" {
				opts = append(opts, proxyEnv("ISTIO_META_DNS_CAPTURE", tc.value))
			}
			d, err := Pod(newPod(opts...))
			if err != nil || !d.Redirect || d.Spec.DNSCapture != tc.want {
				t.Errorf("ISTIO_META_DNS_CAPTURE=%q: %+v, %v; want DNSCapture %v", tc.value, d.Spec, err, tc.want)
			}
		}
	}
}

// A setting the plugin reads but that is set by reference is the
// kubelet's to resolve: as upstream, the pod is redirected as if it were
// unset, and the decision names it. DISABLE_ENVOY too: a reference that
// resolves to true leaves the redirect to a proxy that never listens,
// which the note (and the pod's Event) must explain.
func TestProxyEnvByReference(t *testing.T) {
	for _, name := range []string{"ISTIO_META_DNS_CAPTURE", "ISTIO_DUAL_STACK", "INVALID_DROP", "DISABLE_ENVOY"} {
		for _, newPod := range sidecarKinds() {
			ref := onProxy(func(c *kube.Container) {
				c.Env = append(c.Env, kube.EnvVar{Name: name, ValueFrom: []byte(`{"configMapKeyRef":{"name":"mesh","key":"dns"}}`)})
			})
			d, err := Pod(newPod(ref))
			checkErrKind(t, err, noErr)
			unset, _ := Pod(newPod())
			if !d.Redirect || !reflect.DeepEqual(d.Spec, unset.Spec) || d.DualStack || !slices.Equal(d.Unread, []string{name}) {
				t.Errorf("%s by reference: %+v; want the unset spec, Unread [%s]", name, d, name)
			}
			if note := UnreadNote(d.Unread); !strings.Contains(note, name) || !strings.Contains(note, "valueFrom") {
				t.Errorf("note %q", note)
			}
			// The last entry of a name is its value, for the kubelet
			// and the decision alike.
			byValue := onProxy(func(c *kube.Container) {
				c.Env = append(c.Env, kube.EnvVar{Name: name, ValueFrom: []byte(`{"configMapKeyRef":{"name":"mesh","key":"dns"}}`)},
					kube.EnvVar{Name: name, Value: "true"})
			})
			d, err = Pod(newPod(byValue))
			read := !reflect.DeepEqual(d.Spec, unset.Spec) || d.DualStack
			if name == "DISABLE_ENVOY" {
				read = d.Reason == EnvoyDisabled
			}
			if err != nil || len(d.Unread) != 0 || !read {
				t.Errorf("%s by reference, then by value: %+v, %v; want it read, true", name, d, err)
			}
		}
	}
}

// A boolean setting of istio-proxy's that is not true or false (as
// strconv.ParseBool reads them) is false to the proxy, whose pilot-agent
// falls back to the default, and to upstream istio-cni, which warns: the
// pod starts with the rules of the unset value, and the decision names
// it. An empty value is unset, and no note.
func TestProxyEnvNotABoolean(t *testing.T) {
	for _, name := range []string{"DISABLE_ENVOY", "ISTIO_META_DNS_CAPTURE", "ISTIO_DUAL_STACK", "INVALID_DROP"} {
		for kind, newPod := range sidecarKinds() {
			unset, err := Pod(newPod())
			checkErrKind(t, err, noErr)
			for _, v := range []string{"yes", "on", "TRUE ", "2"} {
				d, err := Pod(newPod(proxyEnv(name, v)))
				checkErrKind(t, err, noErr)
				if !d.Redirect || !reflect.DeepEqual(d.Spec, unset.Spec) || d.DualStack || !slices.Equal(d.NotBool, []string{name}) || len(d.Unread) != 0 {
					t.Errorf("%s %s=%q: %+v; want the unset spec, NotBool [%s]", kind, name, v, d, name)
				}
			}
			d, err := Pod(newPod(proxyEnv(name, "")))
			if err != nil || !reflect.DeepEqual(d, unset) {
				t.Errorf("%s %s empty: %+v, %v; want the unset decision", kind, name, d, err)
			}
		}
	}
	d, err := Pod(meshedPod(proxyEnv("INVALID_DROP", "yes"), proxyEnv("ISTIO_DUAL_STACK", "on"), proxyEnv("ISTIO_META_DNS_CAPTURE", "1")))
	checkErrKind(t, err, noErr)
	if !slices.Equal(d.NotBool, []string{"ISTIO_DUAL_STACK", "INVALID_DROP"}) || !d.Spec.DNSCapture {
		t.Errorf("%+v: want DNS capture read, NotBool [ISTIO_DUAL_STACK INVALID_DROP]", d)
	}
	note := NotBoolNote(d.NotBool)
	for _, want := range []string{"ISTIO_DUAL_STACK, INVALID_DROP", "true or false", "taken as false"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q does not say %q", note, want)
		}
	}
}

// interceptionMode TPROXY selects TPROXY capture, for either kind of
// sidecar; the value is case-sensitive, as Istio's.
func TestTProxyMode(t *testing.T) {
	for _, newPod := range sidecarKinds() {
		d, err := Pod(newPod(withAnn(InterceptionMode, "TPROXY")))
		if err != nil || !d.Redirect || !d.Spec.TProxy {
			t.Errorf("TPROXY: %+v, %v", d, err)
		}
		if d, err := Pod(newPod(withAnn(InterceptionMode, "REDIRECT"))); err != nil || d.Spec.TProxy {
			t.Errorf("REDIRECT: %+v, %v", d, err)
		}
	}
}
