package shim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
)

// execCall is what the shim asked to exec.
type execCall struct {
	path  string
	argv  []string
	env   []string
	stdin []byte
}

type harness struct {
	env     map[string]string
	procs   int // the shim's GOMAXPROCS (Env.Procs)
	stdin   string
	in      io.Reader // stdin read this way, if set
	execs   []execCall
	execErr error
	hands   []handoff.Request
	answer  handoff.Response
	handErr error
	stdout  bytes.Buffer
	stderr  bytes.Buffer
}

func (h *harness) run(t *testing.T) int {
	t.Helper()
	environ := []string{"PATH=/usr/bin"}
	for k, v := range h.env {
		environ = append(environ, k+"="+v)
	}
	in := h.in
	if in == nil {
		in = strings.NewReader(h.stdin)
	}
	return Run(Env{
		Getenv:  func(k string) string { return h.env[k] },
		Environ: environ,
		Stdin:   in,
		Stdout:  &h.stdout,
		Stderr:  &h.stderr,
		Exe:     "/opt/cni/bin/istio-cni",
		Args:    func() []string { return []string{"/opt/cni/bin/istio-cni"} },
		Procs:   h.procs,
		Exec: func(path string, argv, envv []string, stdin []byte) error {
			h.execs = append(h.execs, execCall{path, argv, envv, stdin})
			if h.execErr != nil {
				return h.execErr
			}
			return errors.New("exec'd") // a real exec does not return
		},
		HandOff: func(_ string, req handoff.Request, _ int) (handoff.Response, error) {
			h.hands = append(h.hands, req)
			return h.answer, h.handErr
		},
	})
}

// machineRelease is the release the fake node's iptables-nft prints: one
// the agent lays rules out as (release.Layouts).
const machineRelease = "1.8.9"

// nodeWithNFT makes the node's iptables-nft the release given, remembered
// in a cache dir, and returns an entry naming it.
func nodeWithNFT(t *testing.T, version string) string {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'iptables-nft-restore v" + version + " (nf_tables)'\n"
	for _, name := range []string{"iptables-nft-restore", "ip6tables-nft-restore"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	cache := t.TempDir()
	for _, name := range []string{"iptables-nft-restore", "ip6tables-nft-restore"} {
		if _, err := xtables.CachedNFTVersion(filepath.Join(cache, name+".version"), name); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "k8s", "type": "istio-cni", "iptables_backend": "nft",
		"pod_socket": "/var/run/istio-cni/pods.sock", "cache_dir": cache})
	return string(b)
}

// withRelease is entry with a cache dir remembering the node's iptables
// as another release: the programs named (iptables-nft-restore,
// ip6tables-nft-restore), or all.
func withRelease(t *testing.T, entry, version string, programs ...string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(entry), &m); err != nil {
		t.Fatal(err)
	}
	from, to := m["cache_dir"].(string), t.TempDir()
	files, _ := filepath.Glob(filepath.Join(from, "*.version"))
	if len(files) != 2 {
		t.Fatalf("%d remembered releases in %s, want the two families'", len(files), from)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(programs) == 0 || slices.Contains(programs, strings.TrimSuffix(filepath.Base(f), ".version")) {
			key, _, ok := strings.Cut(string(b), "\n")
			if !ok {
				t.Fatalf("%s holds %q, want a key and a release", f, b)
			}
			b = release.File(key, version)
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m["cache_dir"] = to
	out, _ := json.Marshal(m)
	return string(out)
}

func addEnv(netns string) map[string]string {
	return map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": netns, "CNI_IFNAME": "eth0",
		"CNI_ARGS": "K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;K8S_POD_UID=u", "CNI_PATH": "/opt/cni/bin"}
}

// Every verb but ADD and VERSION goes to the full plugin untouched: same
// arguments, environment and stdin (fd 0 not read).
func TestOtherVerbsExecTheFullPlugin(t *testing.T) {
	for _, verb := range []string{"DEL", "CHECK", "STATUS", "GC", ""} {
		h := &harness{env: map[string]string{"CNI_COMMAND": verb}, stdin: "{}"}
		h.run(t)
		if len(h.execs) != 1 || len(h.hands) != 0 {
			t.Fatalf("%q: execs %v, hand-offs %d; want one exec", verb, h.execs, len(h.hands))
		}
		c := h.execs[0]
		if c.path != "/opt/cni/bin/"+FullBinary || c.stdin != nil || slices.ContainsFunc(c.env, func(e string) bool { return strings.HasPrefix(e, "ISTIO_CNI_") }) {
			t.Errorf("%q: exec %+v, want %s with the runtime's stdin and environment", verb, c, FullBinary)
		}
	}
}

// Go's runtime sizes itself by the node's CPUs at every start (4.6-5
// page faults a CPU past two, BENCHMARKS.md): the full plugin runs with
// GOMAXPROCS at most 2, the shim's own when smaller, whatever the
// runtime's environment held, for every verb it runs, an ADD handed back
// too.
func TestFullPluginRunsOnTwoProcsAtMost(t *testing.T) {
	for _, c := range []struct {
		procs     int
		env, want string
	}{
		{procs: 64, want: "2"},
		{procs: 64, env: "64", want: "2"},
		{procs: 2, want: "2"},
		{procs: 1, want: "1"},
		{procs: 1, env: "1", want: "1"},
		{procs: 3, env: "not-a-number", want: "2"},
		{procs: 0, env: "8", want: "8"}, // the shim's own unknown: as the runtime passed it
		{procs: 0},
	} {
		for _, env := range []map[string]string{{"CNI_COMMAND": "DEL"}, {"CNI_COMMAND": "STATUS"}, addEnv("")} {
			if c.env != "" {
				env["GOMAXPROCS"] = c.env
			}
			h := &harness{env: env, procs: c.procs, stdin: "{}"}
			h.run(t)
			if len(h.execs) != 1 {
				t.Fatalf("%+v, %s: %d execs, want one", c, env["CNI_COMMAND"], len(h.execs))
			}
			var got []string
			for _, e := range h.execs[0].env {
				if v, ok := strings.CutPrefix(e, "GOMAXPROCS="); ok {
					got = append(got, v)
				}
			}
			if want := []string{c.want}; c.want == "" && len(got) != 0 || c.want != "" && !slices.Equal(got, want) {
				t.Errorf("shim's GOMAXPROCS %d, the runtime's %q, %s: the full plugin's %q, want %q", c.procs, c.env, env["CNI_COMMAND"], got, c.want)
			}
			if !slices.Contains(h.execs[0].env, "PATH=/usr/bin") {
				t.Errorf("%+v: the full plugin's environment %q lost the runtime's", c, h.execs[0].env)
			}
			if why := slices.ContainsFunc(h.execs[0].env, func(e string) bool { return strings.HasPrefix(e, handoff.EnvNotHandedOff+"=") }); why != (env["CNI_COMMAND"] == "ADD") {
				t.Errorf("%+v, %s: %s in the full plugin's environment: %v", c, env["CNI_COMMAND"], handoff.EnvNotHandedOff, why)
			}
		}
	}
}

// fullEnv keeps the runtime's environment in order, drops every
// GOMAXPROCS it held (Go's runtime would read the first), and ends with
// the reason the ADD came back, when there is one.
func TestFullEnv(t *testing.T) {
	for _, c := range []struct {
		environ []string
		procs   int
		why     string
		want    []string
	}{
		{[]string{"A=1", "GOMAXPROCS=64", "B=2", "GOMAXPROCS=1"}, 64, "", []string{"A=1", "B=2", "GOMAXPROCS=2"}},
		{[]string{"GOMAXPROCS=0", "A=1"}, 1, handoff.EnvHandedBack + "=why", []string{"A=1", "GOMAXPROCS=1", handoff.EnvHandedBack + "=why"}},
		{[]string{"A=1"}, 8, handoff.EnvNotHandedOff + "=why", []string{"A=1", "GOMAXPROCS=2", handoff.EnvNotHandedOff + "=why"}},
		{[]string{"GOMAXPROCS=64", "A=1"}, 0, "", []string{"GOMAXPROCS=64", "A=1"}},
	} {
		environ := slices.Clone(c.environ)
		if got := fullEnv(environ, c.procs, c.why); !slices.Equal(got, c.want) {
			t.Errorf("fullEnv(%q, %d, %q) = %q, want %q", c.environ, c.procs, c.why, got, c.want)
		}
		if !slices.Equal(environ, c.environ) {
			t.Errorf("fullEnv changed the runtime's environment to %q", environ)
		}
	}
}

// The agent's answer is the result: no exec.
func TestAddTheAgentRan(t *testing.T) {
	netns := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &harness{env: addEnv(netns), stdin: nodeWithNFT(t, machineRelease),
		answer: handoff.Response{Done: true, Stdout: []byte(`{"cniVersion":"1.0.0"}`), Stderr: []byte("log line\n")}}
	if code := h.run(t); code != 0 || len(h.execs) != 0 {
		t.Fatalf("exit %d, execs %v; want 0 and none", code, h.execs)
	}
	if h.stdout.String() != `{"cniVersion":"1.0.0"}` || h.stderr.String() != "log line\n" {
		t.Errorf("stdout %q, stderr %q: want the agent's", h.stdout.String(), h.stderr.String())
	}
	req := h.hands[0]
	if req.ContainerID != "c1" || req.Netns != netns || req.IfName != "eth0" || req.Args != addEnv("")["CNI_ARGS"] ||
		req.Path != "/opt/cni/bin" || string(req.Stdin) != h.stdin || !slices.Equal(req.Netlink, []string{"ipv4", "ipv6"}) || req.Release != machineRelease {
		t.Errorf("request %+v: want the runtime's call and both families over netlink, as iptables %s", req, machineRelease)
	}
}

// The node's release goes to the agent, which lays the rules out as it
// writes them: each release the agent lays out is handed off, another is
// the full plugin's. One family at another release than the other stays
// off netlink: the request carries one release.
func TestAddHandsOffTheNodesRelease(t *testing.T) {
	netns := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	nft := nodeWithNFT(t, machineRelease)
	for name, c := range map[string]struct {
		stdin   string
		netlink []string // nil: not handed off
		release string
	}{
		"1.8.7":                {withRelease(t, nft, "1.8.7"), []string{"ipv4", "ipv6"}, "1.8.7"},
		"1.8.9":                {nft, []string{"ipv4", "ipv6"}, "1.8.9"},
		"1.8.11":               {withRelease(t, nft, "1.8.11"), []string{"ipv4", "ipv6"}, "1.8.11"},
		"1.8.8":                {withRelease(t, nft, "1.8.8"), []string{"ipv4", "ipv6"}, "1.8.8"},
		"1.8.10":               {withRelease(t, nft, "1.8.10"), []string{"ipv4", "ipv6"}, "1.8.10"},
		"1.8.12":               {withRelease(t, nft, "1.8.12"), []string{"ipv4", "ipv6"}, "1.8.12"},
		"1.8.13":               {withRelease(t, nft, "1.8.13"), []string{"ipv4", "ipv6"}, "1.8.13"},
		"1.8.99":               {withRelease(t, nft, "1.8.99"), nil, ""},
		"1.8.6":                {withRelease(t, nft, "1.8.6"), nil, ""},
		"ipv6 at 1.8.99":       {withRelease(t, nft, "1.8.99", "ip6tables-nft-restore"), []string{"ipv4"}, "1.8.9"},
		"ipv6 at 1.8.7":        {withRelease(t, nft, "1.8.7", "ip6tables-nft-restore"), []string{"ipv4"}, "1.8.9"},
		"ipv4 at 1.8.11":       {withRelease(t, nft, "1.8.11", "iptables-nft-restore"), []string{"ipv4"}, "1.8.11"},
		"ipv4 at 1.8.99 alone": {withRelease(t, nft, "1.8.99", "iptables-nft-restore"), []string{"ipv6"}, "1.8.9"},
	} {
		h := &harness{env: addEnv(netns), stdin: c.stdin, answer: handoff.Response{Done: true}}
		h.run(t)
		switch {
		case c.netlink == nil && (len(h.hands) != 0 || len(h.execs) != 1):
			t.Errorf("%s: hand-offs %+v, execs %d; want the full plugin", name, h.hands, len(h.execs))
		case c.netlink != nil && (len(h.hands) != 1 || len(h.execs) != 0):
			t.Errorf("%s: hand-offs %+v, execs %d; want one hand-off", name, h.hands, len(h.execs))
		case c.netlink != nil && (!slices.Equal(h.hands[0].Netlink, c.netlink) || h.hands[0].Release != c.release):
			t.Errorf("%s: netlink %v as iptables %q, want %v as %s", name, h.hands[0].Netlink, h.hands[0].Release, c.netlink, c.release)
		}
	}
}

// On a legacy node the agent writes with its own iptables-legacy-restore
// (the x_tables ABI is every release's): the shim hands the ADD off naming
// the legacy families, pinned so or the node's own iptables leading
// there; a node whose families are on two backends is the plugin's.
func TestAddHandsOffLegacy(t *testing.T) {
	netns := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	nft := nodeWithNFT(t, machineRelease)
	bin := os.Getenv("PATH") // nodeWithNFT's fake programs
	for p, script := range map[string]string{
		"xtables-legacy-multi": "#!/bin/sh\necho 'iptables-restore v1.8.9 (legacy)'\n",
		"xtables-nft-multi":    "#!/bin/sh\necho 'iptables-restore v" + machineRelease + " (nf_tables)'\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, p), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(nft), &m); err != nil {
		t.Fatal(err)
	}
	// node is the entry (iptables_backend b) on a node whose
	// iptables-restore and ip6tables-restore lead to v4 and v6, the
	// nf_tables ones remembered as the plugin remembers them.
	node := func(b, v4, v6 string) string {
		cache := t.TempDir()
		for name, to := range map[string]string{"iptables-restore": v4, "ip6tables-restore": v6} {
			_ = os.Remove(filepath.Join(bin, name))
			if err := os.Symlink(to, filepath.Join(bin, name)); err != nil {
				t.Fatal(err)
			}
			if to == "xtables-nft-multi" {
				if _, err := xtables.CachedNFTVersion(filepath.Join(cache, name+".version"), name); err != nil {
					t.Fatal(err)
				}
			}
		}
		m["iptables_backend"], m["cache_dir"] = b, cache
		out, _ := json.Marshal(m)
		return string(out)
	}
	for _, c := range []struct {
		name            string
		backend, v4, v6 string
		legacy, netlink []string // both nil: not handed off
	}{
		{"pinned legacy", "legacy", "xtables-nft-multi", "xtables-nft-multi", []string{"ipv4", "ipv6"}, nil},
		{"auto, legacy", "auto", "xtables-legacy-multi", "xtables-legacy-multi", []string{"ipv4", "ipv6"}, nil},
		{"the default, legacy", "", "xtables-legacy-multi", "xtables-legacy-multi", []string{"ipv4", "ipv6"}, nil},
		{"auto, nft", "auto", "xtables-nft-multi", "xtables-nft-multi", nil, []string{"ipv4", "ipv6"}},
		{"auto, two backends", "auto", "xtables-nft-multi", "xtables-legacy-multi", nil, nil},
	} {
		h := &harness{env: addEnv(netns), stdin: node(c.backend, c.v4, c.v6), answer: handoff.Response{Done: true}}
		h.run(t)
		if c.legacy == nil && c.netlink == nil {
			if len(h.hands) != 0 || len(h.execs) != 1 || !slices.ContainsFunc(h.execs[0].env, func(kv string) bool {
				return strings.HasPrefix(kv, handoff.EnvNotHandedOff+"=") && strings.Contains(kv, "two backends")
			}) {
				t.Errorf("%s: hand-offs %+v, execs %v; want the full plugin, told the families are on two backends", c.name, h.hands, h.execs)
			}
			continue
		}
		if len(h.hands) != 1 || len(h.execs) != 0 || !slices.Equal(h.hands[0].Legacy, c.legacy) || !slices.Equal(h.hands[0].Netlink, c.netlink) {
			t.Errorf("%s: hand-offs %+v, execs %v; want one naming legacy %v, netlink %v", c.name, h.hands, h.execs, c.legacy, c.netlink)
		}
	}
}

// IPv6's iptables is checked only for a pod that may have IPv6.
func TestAddChecksTheFamiliesThePodMayHave(t *testing.T) {
	netns := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	entry := nodeWithNFT(t, machineRelease)
	withPrev := func(prev string) string { return strings.TrimSuffix(entry, "}") + `,"prevResult":` + prev + "}" }
	for prev, want := range map[string][]string{
		`{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"}]}`:                          {"ipv4"},
		`{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.5/24"},{"address":"fd00::5/64"}]}`: {"ipv4", "ipv6"},
		`{"cniVersion":"1.0.0","ips":[{"address":"fd00::5/64"}]}`:                           {"ipv4", "ipv6"},
		`{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.5/24"}}`:                                 {"ipv4", "ipv6"},
		`{"cniVersion":"1.0.0"}`: {"ipv4", "ipv6"},
	} {
		h := &harness{env: addEnv(netns), stdin: withPrev(prev), answer: handoff.Response{Done: true}}
		h.run(t)
		if len(h.hands) != 1 || !slices.Equal(h.hands[0].Netlink, want) || h.hands[0].Release != machineRelease {
			t.Errorf("prevResult %s: hand-offs %+v, want netlink %v as iptables %s", prev, h.hands, want, machineRelease)
		}
	}
}

// The families go on the wire by the names the agent reads
// (iptables.Family's), for the programs xtables names.
func TestFamiliesAreTheAgents(t *testing.T) {
	for f, want := range map[family]iptables.Family{ipv4: iptables.IPv4, ipv6: iptables.IPv6} {
		if f.name != want.String() || f.ipv6 != (want == iptables.IPv6) {
			t.Errorf("%+v, want %s", f, want)
		}
	}
}

// Whatever keeps the agent from running the ADD, the full plugin runs it
// with the same stdin, told why.
func TestAddHandedBackRunsTheFullPlugin(t *testing.T) {
	netns := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	nft := nodeWithNFT(t, machineRelease)
	other := withRelease(t, nft, "1.8.99")
	noSocket := strings.Replace(nft, `"pod_socket"`, `"other_socket"`, 1)
	for name, c := range map[string]struct {
		stdin   string
		env     map[string]string
		answer  handoff.Response
		err     error
		why     string
		handOff bool
	}{
		"the agent hands back":   {nft, addEnv(netns), handoff.Response{HandBack: "the agent does not hold the pod"}, nil, "the agent: the agent does not hold the pod", true},
		"no agent":               {nft, addEnv(netns), handoff.Response{}, errors.New("connecting: no such file"), "connecting: no such file", true},
		"no pod_socket":          {noSocket, addEnv(netns), handoff.Response{}, nil, "the entry names no pod_socket", false},
		"legacy, handed back":    {strings.Replace(nft, `"iptables_backend":"nft"`, `"iptables_backend":"legacy"`, 1), addEnv(netns), handoff.Response{HandBack: "no"}, nil, "the agent: no", true},
		"another iptables":       {other, addEnv(netns), handoff.Response{}, nil, "iptables 1.8.99, whose layout is not", false},
		"not JSON":               {"{", addEnv(netns), handoff.Response{}, nil, "does not decode", false},
		"no netns":               {nft, addEnv(""), handoff.Response{}, nil, "no CNI_NETNS", false},
		"a netns that is absent": {nft, addEnv(netns + ".gone"), handoff.Response{}, nil, "opening CNI_NETNS", false},
	} {
		h := &harness{env: c.env, stdin: c.stdin, answer: c.answer, handErr: c.err}
		h.run(t)
		if got := len(h.hands) > 0; got != c.handOff {
			t.Errorf("%s: handed off %v, want %v", name, got, c.handOff)
		}
		if len(h.execs) != 1 {
			t.Fatalf("%s: execs %v, want the full plugin", name, h.execs)
		}
		e := h.execs[0]
		// Asked, the agent may have written rules: the plugin must know.
		env, other := handoff.EnvNotHandedOff, handoff.EnvHandedBack
		if c.handOff {
			env, other = other, env
		}
		reason := ""
		for _, kv := range e.env {
			if v, ok := strings.CutPrefix(kv, env+"="); ok {
				reason = v
			}
			if strings.HasPrefix(kv, other+"=") {
				t.Errorf("%s: %s set, want %s", name, other, env)
			}
		}
		if e.path != "/opt/cni/bin/"+FullBinary || string(e.stdin) != c.stdin || !strings.Contains(reason, c.why) || !slices.Contains(e.env, "CNI_COMMAND=ADD") {
			t.Errorf("%s: exec %s stdin %q, %s %q; want %s with the runtime's stdin and environment, the reason %q", name, e.path, e.stdin, env, reason, FullBinary, c.why)
		}
	}
}

// A FIFO at CNI_NETNS does not hold the shim in open: the agent is
// handed its descriptor and refuses it (it is no namespace).
func TestAddFIFOAsNetnsDoesNotHang(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "netns")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &harness{env: addEnv(fifo), stdin: nodeWithNFT(t, machineRelease), answer: handoff.Response{HandBack: "not a namespace"}}
	done := make(chan struct{})
	go func() { defer close(done); h.run(t) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the shim is held opening a FIFO at CNI_NETNS")
	}
	if len(h.hands) != 1 || len(h.execs) != 1 {
		t.Errorf("handed off %d times, execs %v: want the agent asked, then the full plugin", len(h.hands), h.execs)
	}
}

// Without its own path (no /proc, a relative argv[0]) the shim finds the
// full plugin on CNI_PATH, never relative to the working directory, and
// fails with a CNI error if it is not there.
func TestNoProcFindsTheFullPluginOnCNIPath(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, FullBinary), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(bin) // a relative lookup would find it here
	for cniPath, want := range map[string]string{
		"relative:" + bin + ":/opt/cni/bin": filepath.Join(bin, FullBinary),
		".:relative":                        "",
	} {
		h := &harness{env: map[string]string{"CNI_COMMAND": "DEL", "CNI_PATH": cniPath}, stdin: `{"cniVersion":"0.4.0"}`}
		e := h.env
		code := Run(Env{
			Getenv: func(k string) string { return e[k] }, Stdin: strings.NewReader(h.stdin), Stdout: &h.stdout, Stderr: &h.stderr,
			Exe: "", Args: func() []string { return []string{"istio-cni"} }, // no /proc, a relative argv[0]
			Exec: func(path string, argv, envv []string, stdin []byte) error {
				h.execs = append(h.execs, execCall{path, argv, envv, stdin})
				return errors.New("exec'd")
			},
		})
		switch {
		case want == "" && (len(h.execs) != 0 || code != 1 || !strings.Contains(h.stdout.String(), "CNI_PATH")):
			t.Errorf("CNI_PATH %q: execs %+v, exit %d, %s; want a CNI error naming CNI_PATH", cniPath, h.execs, code, h.stdout.String())
		case want != "" && (len(h.execs) != 1 || h.execs[0].path != want || !slices.Equal(h.execs[0].argv, []string{want})):
			t.Errorf("CNI_PATH %q: execs %+v, want %s", cniPath, h.execs, want)
		}
	}
}

// A full plugin that cannot run fails the ADD with a CNI error naming it:
// the pod does not start unredirected.
func TestFullPluginMissingFailsWithACNIError(t *testing.T) {
	h := &harness{env: map[string]string{"CNI_COMMAND": "ADD"}, stdin: `{"cniVersion":"0.4.0","name":"k8s"}`, execErr: os.ErrNotExist}
	if code := h.run(t); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var cniErr struct {
		CNIVersion string `json:"cniVersion"`
		Code       uint   `json:"code"`
		Msg        string `json:"msg"`
	}
	if err := json.Unmarshal(h.stdout.Bytes(), &cniErr); err != nil || cniErr.Code != 999 || cniErr.CNIVersion != "0.4.0" || !strings.Contains(cniErr.Msg, FullBinary) {
		t.Errorf("stdout %q (%v): want a CNI error of the config's version naming %s", h.stdout.String(), err, FullBinary)
	}
}

// Exec really passes the read stdin on as fd 0: the test re-runs itself
// as the process that execs cat.
func TestExecPassesStdinOn(t *testing.T) {
	if os.Getenv("SHIM_TEST_EXEC") != "" {
		err := Exec("/bin/cat", []string{"cat"}, os.Environ(), []byte(os.Getenv("SHIM_TEST_EXEC")))
		t.Fatalf("exec: %v", err)
	}
	const stdin = `{"cniVersion":"1.0.0","prevResult":{"ips":[]}}`
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestExecPassesStdinOn$")
	cmd.Env = append(os.Environ(), "SHIM_TEST_EXEC="+stdin)
	cmd.Stdin = strings.NewReader("the runtime's pipe, already read")
	out, err := cmd.Output()
	if err != nil || string(out) != stdin {
		t.Errorf("the exec'd program read %q (%v), want %q", out, err, stdin)
	}
}

// An ADD's stdin is read whole, whatever its size and however the pipe
// delivers it, and passed on whole; a read error fails the ADD.
func TestAddReadsStdinWhole(t *testing.T) {
	big := `{"cniVersion":"0.4.0","pad":"` + strings.Repeat("x", 64<<10) + `"}`
	h := &harness{env: map[string]string{"CNI_COMMAND": "ADD"}, in: iotest.OneByteReader(strings.NewReader(big))}
	h.run(t)
	if len(h.execs) != 1 || string(h.execs[0].stdin) != big {
		t.Errorf("execs %d, want one with the %d bytes of stdin", len(h.execs), len(big))
	}
	h = &harness{env: map[string]string{"CNI_COMMAND": "ADD"}, in: iotest.TimeoutReader(strings.NewReader(big))}
	if code := h.run(t); code != 1 || len(h.execs) != 0 || !strings.Contains(h.stdout.String(), `"msg":"istio-cni: reading stdin: timeout"`) {
		t.Errorf("a read error: exit %d, execs %d, stdout %s; want a CNI error", code, len(h.execs), h.stdout.String())
	}
}

// VERSION is answered by the shim itself, exactly as the full plugin's
// skel answers it for version.All, whatever the config: no exec.
func TestVersionIsTheFullPlugins(t *testing.T) {
	var want bytes.Buffer
	if err := version.All.Encode(&want); err != nil {
		t.Fatal(err)
	}
	for _, stdin := range []string{`{"cniVersion":"1.0.0"}`, `{"cniVersion":"0.3.1"}`, ""} {
		h := &harness{env: map[string]string{"CNI_COMMAND": "VERSION"}, stdin: stdin}
		if code := h.run(t); code != 0 || len(h.execs) != 0 || len(h.hands) != 0 {
			t.Fatalf("VERSION: exit %d, execs %v, hand-offs %d; want the shim's own answer", code, h.execs, len(h.hands))
		}
		if got := h.stdout.String(); got != want.String() {
			t.Errorf("VERSION printed %q, want the full plugin's %q", got, want.String())
		}
	}
}

// VERSION, as skel answers it, never reads stdin: a terminal, a pipe left
// open or an unreadable descriptor gets the answer at once.
func TestVersionReadsNoStdin(t *testing.T) {
	var out bytes.Buffer
	e := Env{
		Getenv: func(k string) string { return map[string]string{"CNI_COMMAND": "VERSION"}[k] },
		Stdin:  iotest.ErrReader(errors.New("stdin read")),
		Stdout: &out, Stderr: &out, Exe: "/opt/cni/bin/istio-cni", Args: func() []string { return []string{"istio-cni"} },
		Exec: func(string, []string, []string, []byte) error { t.Fatal("VERSION exec'd"); return nil },
		HandOff: func(string, handoff.Request, int) (handoff.Response, error) {
			t.Fatal("VERSION handed off")
			return handoff.Response{}, nil
		},
	}
	if code := Run(e); code != 0 || out.String() != VersionInfo {
		t.Errorf("VERSION with an unreadable stdin: exit %d, %q; want 0 and the answer", code, out.String())
	}
}

// Native nftables goes to the agent whatever the node's iptables, even
// none at all (RHEL 10): the agent writes it over netlink, and the
// request names no iptables family or release.
func TestAddHandsOffNativeNftables(t *testing.T) {
	netns := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir()) // no iptables on the node
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "k8s", "type": "istio-cni", "native_nftables": true,
		"pod_socket": "/var/run/istio-cni/pods.sock", "cache_dir": t.TempDir()})
	h := &harness{env: addEnv(netns), stdin: string(b), answer: handoff.Response{Done: true}}
	h.run(t)
	if len(h.hands) != 1 || len(h.execs) != 0 {
		t.Fatalf("hand-offs %+v, execs %v; want one hand-off", h.hands, h.execs)
	}
	if r := h.hands[0]; len(r.Netlink) != 0 || len(r.Legacy) != 0 || r.Release != "" {
		t.Errorf("the request names netlink %v, legacy %v, release %q: want no iptables family", r.Netlink, r.Legacy, r.Release)
	}
}
