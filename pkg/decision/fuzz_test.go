package decision

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// seeds are inputs every fuzzer starts from: good lists, the edges of the
// ranges, and attempts to smuggle text into a rule.
func seeds() []string {
	return []string{
		"", " ", "*", " * ", "**", ",", "80", "80,8080", " 80 , 443 ", "80,80", "1", "65535",
		"0", "65536", "-1", "+80", "0x50", "1e3", "080", "99999999999999999999999999",
		"18446744073709551616", "80,,90", "80,", ",80", "80 90", "80 -j ACCEPT", "80\t-j ACCEPT",
		"80\n-A OUTPUT -j ACCEPT", "80\r\n*filter", "1;rm -rf /", "$(reboot)", "`id`", "'80'", `"80"`,
		"80\x00", "80#", "٨٠", "８０", "80\u00a0", "\u200b80", "\u2028", "80\u0085,443", "ü", "\xff\xfe",
		"10.0.0.0/8", "10.1.2.3/8", "10.0.0.1", "10.0.0.0/33", "0.0.0.0/0", "::/0", "fd00::/8",
		"fd00::1/8", "10.0.0.0/8,fd00::/8", "10.0.0.0/8 -j ACCEPT", "10.0.0.0/8\n-A OUTPUT -j ACCEPT",
		"*,10.0.0.0/8", "10.0.0.0/08", "010.0.0.0/8", "fe80::1%eth0/64", "::ffff:10.0.0.0/104",
		"::ffff:1.2.3.4/128", "127.0.0.1/8", "1.2.3.4/32,*", "[::1]/128", "10.0.0.0/8!", "! 10.0.0.0/8",
	}
}

// safeText is what the renderer itself writes; anything else in the fuzzed
// value must never reach the rules.
func safeText(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("_.:/,! \n[]*-", r)
}

// checkInvalid asserts err is an *InvalidError that names field and value.
func checkInvalid(t *testing.T, err error, field, value string) {
	t.Helper()
	var inv *InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("error = %v (%T), want *InvalidError", err, err)
	}
	if inv.Field != field || inv.Value != value {
		t.Fatalf("InvalidError{%q, %q}, want %q, %q", inv.Field, inv.Value, field, value)
	}
	if msg := err.Error(); !strings.Contains(msg, field) || !strings.Contains(msg, strconv.Quote(value)) {
		t.Fatalf("error %q does not name %s and %q", msg, field, value)
	}
}

// onlyChars asserts every rune of an accepted value is white space or in set.
func onlyChars(t *testing.T, v, set string) {
	t.Helper()
	for _, r := range v {
		if !unicode.IsSpace(r) && !strings.ContainsRune(set, r) {
			t.Fatalf("accepted %q holds %q", v, r)
		}
	}
}

func FuzzParsePorts(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ports, err := ParsePorts(ExcludeInboundPorts, v)
		if err != nil {
			if ports != nil {
				t.Fatalf("ports %v returned with error %v", ports, err)
			}
			checkInvalid(t, err, ExcludeInboundPorts, v)
			return
		}
		onlyChars(t, v, "0123456789,")
		seen := map[uint16]bool{}
		for _, p := range ports {
			if p == 0 {
				t.Fatalf("%q gave port 0", v)
			}
			if seen[p] {
				t.Fatalf("%q gave %d twice: %v", v, p, ports)
			}
			seen[p] = true
		}
		// Every item of the value is one of the ports, and back.
		parts, _ := items(v)
		for _, it := range parts {
			n, err := strconv.ParseUint(it, 10, 16)
			if err != nil || !seen[uint16(n)] {
				t.Fatalf("%q: item %q is not among %v", v, it, ports)
			}
		}
		if all, err := parsePortsOrAll(IncludeInboundPorts, v); err != nil || all.All {
			t.Fatalf("%q: ParsePorts accepts it, parsePortsOrAll gives %+v, %v", v, all, err)
		}
	})
}

func FuzzParsePrefixes(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		list, err := ParsePrefixes(ExcludeOutboundIPRanges, v)
		if err != nil {
			if list != nil {
				t.Fatalf("prefixes %v returned with error %v", list, err)
			}
			checkInvalid(t, err, ExcludeOutboundIPRanges, v)
			return
		}
		onlyChars(t, v, "0123456789abcdefABCDEF.:/,")
		for _, p := range list {
			if !p.IsValid() || p != p.Masked() || p.Addr().Zone() != "" {
				t.Fatalf("%q gave %v: want a valid, masked prefix with no zone", v, p)
			}
			if p.Bits() < 0 || p.Bits() > p.Addr().BitLen() {
				t.Fatalf("%q gave %v: bits out of range", v, p)
			}
		}
		if all, err := parsePrefixesOrAll(IncludeOutboundIPRanges, v); err != nil || all.All || len(all.List) != len(list) {
			t.Fatalf("%q: ParsePrefixes gives %v, parsePrefixesOrAll %+v, %v", v, list, all, err)
		}
	})
}

// trafficAnns are the annotations whose value becomes part of the rules.
func trafficAnns() []string {
	return []string{
		IncludeInboundPorts, ExcludeInboundPorts, IncludeOutboundIPRanges,
		ExcludeOutboundIPRanges, IncludeOutboundPorts, ExcludeOutboundPorts,
	}
}

// FuzzPodAnnotations puts the fuzzed value into each traffic annotation of
// a meshed pod, then into all of them at once, and renders what is decided.
func FuzzPodAnnotations(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, a := range trafficAnns() {
			d, err := Pod(meshedPod(withAnn(a, v)))
			if err != nil {
				if d.Redirect {
					t.Fatalf("%s=%q: redirect with error %v", a, v, err)
				}
				checkInvalid(t, err, a, v)
				continue
			}
			checkDecision(t, d, v)
			// The status port is excluded outbound by default only:
			// once set, the annotation is the whole list, as upstream
			// takes it.
			listed, _ := ParsePorts(a, v)
			if want := a != ExcludeOutboundPorts || slices.Contains(listed, iptables.ProxyStatusPort); slices.Contains(d.Spec.OutboundExclude, iptables.ProxyStatusPort) != want {
				t.Fatalf("%s=%q: outbound exclude %v, want %d in it: %v", a, v, d.Spec.OutboundExclude, iptables.ProxyStatusPort, want)
			}
		}
		opts := []podOpt{}
		for _, a := range trafficAnns() {
			opts = append(opts, withAnn(a, v))
		}
		if d, err := Pod(meshedPod(opts...)); err == nil {
			checkDecision(t, d, v)
		} else if d.Redirect {
			t.Fatalf("all annotations %q: redirect with error %v", v, err)
		}
		// Interface names are taken as typed names or refused with an
		// error naming the annotation, never dropped or passed raw.
		for _, a := range []string{ExcludeInterfaces, RerouteVirtualInterfaces, KubevirtInterfaces} {
			d, err := Pod(meshedPod(withAnn(a, v)))
			if err != nil {
				checkInvalid(t, err, a, v)
				continue
			}
			names := append(d.Spec.ExcludeInterfaces, d.Spec.RerouteInterfaces...)
			if len(names) == 0 && strings.TrimSpace(v) != "" {
				t.Fatalf("%s=%q: no interface taken from a non-blank value", a, v)
			}
			for _, n := range names {
				if len(n) == 0 || len(n) > 15 || n[0] == '-' || n[0] == '.' || strings.Trim(string(n), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" ||
					!strings.Contains(v, string(n)) {
					t.Fatalf("%s=%q: interface %q", a, v, n)
				}
			}
			checkDecision(t, d, v)
		}
	})
}

// checkDecision asserts a redirect's spec is sound and that rendering it
// for both families lets none of the value's unsafe characters through.
func checkDecision(t *testing.T, d Decision, v string) {
	t.Helper()
	if !d.Redirect {
		t.Fatalf("%q: meshed pod not redirected: %+v", v, d)
	}
	s := d.Spec
	for _, ports := range [][]uint16{s.InboundPorts.List, s.InboundExclude, s.OutboundPorts, s.OutboundExclude} {
		for _, p := range ports {
			if p == 0 {
				t.Fatalf("%q: port 0 in %+v", v, s)
			}
		}
	}
	for _, p := range slices.Concat(s.OutboundIPs.List, s.OutboundIPExclude) {
		if !p.IsValid() || p != p.Masked() {
			t.Fatalf("%q: prefix %v is not valid and masked", v, p)
		}
	}
	for _, fixed := range []uint16{iptables.ProxyStatusPort, iptables.ProxyHealthPort, iptables.ProxyMetricsPort} {
		if !slices.Contains(s.InboundExclude, fixed) {
			t.Fatalf("%q: inbound exclude %v lacks %d", v, s.InboundExclude, fixed)
		}
	}
	for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		rs := iptables.BuildFamily(s, fam)
		out, err := iptables.Plan(&rs, nil)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		for _, r := range v {
			if !safeText(r) && strings.ContainsRune(string(out), r) {
				t.Fatalf("%q: %s rules hold %q:\n%s", v, fam, r, out)
			}
		}
	}
}
