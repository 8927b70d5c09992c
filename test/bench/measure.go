package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/test/podsim"
)

type bench struct {
	plugin     string
	kubeconfig string
	// agentSocket is where a listening agent takes the plugin's reports,
	// for the ADD rows that report.
	agentSocket string
	uids        map[string]string // bench pod name -> uid
	// records is the agent's records directory, when the bench runs the
	// agent: each sample's sandbox is torn down there (tornDown).
	records string
	n       int
	// cpus, when set, runs each plugin as on a node with that many CPUs:
	// Go's runtime sizes its scheduler by the CPU count at every start.
	cpus int
}

// sample is one timed run, and the peak RSS of the process in KiB and its
// minor page faults when measured (see peakRSS).
type sample struct {
	d      time.Duration
	maxRSS int64
	faults int64
	// total, api and netns are the plugin's own account of an ADD (its log
	// line): from its verb's start to its log line, and the lookup and
	// namespace work within. d - total is the exec and the runtime's start.
	total, api, netns time.Duration
	// from is who answered the pod lookup: "agent" or "api".
	from string
	// miss is why the agent did not answer, when it was asked.
	miss string
	// rulesBy is what wrote the rules ("netlink", "iptables-restore").
	rulesBy string
	// sandbox is the CNI_CONTAINERID the plugin ran with.
	sandbox string
}

// The primary CNI's results for an IPv4 and a dual-stack pod.
const (
	prevV4   = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"198.51.100.10/24","interface":0}]}`
	prevDual = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"198.51.100.10/24","interface":0},{"address":"2001:db8:100::10/64","interface":0}]}`
)

func (b *bench) stdin(backend, prevResult string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"istio-cni-sidecar",
 "kubeconfig":%q,"exclude_namespaces":["kube-system"],"log_level":"info","iptables_backend":%q,
 "prevResult":%s}`, b.kubeconfig, backend, prevResult))
}

// reporting is stdin with reports_socket set, as the installer writes it.
func (b *bench) reporting(stdin []byte) []byte {
	return []byte(strings.Replace(string(stdin), `"log_level":"info",`, fmt.Sprintf(`"log_level":"info","reports_socket":%q,`, b.agentSocket), 1))
}

// sandboxes numbers the bench's sandboxes.
var sandboxes atomic.Int64

// execPlugin runs the plugin once as a runtime would and times it. With
// rss it runs under GNU time, which fork()s: the rusage of a child that Go
// started (vfork, shared memory) would count the bench's own memory.
func (b *bench) execPlugin(command, pod, netns string, stdin []byte, rss bool) (sample, error) {
	cmd := podsim.PluginCommand(b.plugin, command, netns, "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME="+pod+";K8S_POD_UID="+b.uids[pod], stdin)
	// Each sample is a new sandbox, as a runtime's would be: a container
	// ID ADD has recorded before is a repeated ADD, which reads its rules
	// back.
	sandbox := fmt.Sprintf("bench-%d", sandboxes.Add(1))
	for i, kv := range cmd.Env {
		if strings.HasPrefix(kv, "CNI_CONTAINERID=") {
			cmd.Env[i] = "CNI_CONTAINERID=" + sandbox
		}
	}
	if b.cpus > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(b.cpus))
	}
	var rssFile string
	if rss {
		f, err := os.CreateTemp("", "rss-")
		if err != nil {
			return sample{}, err
		}
		rssFile = f.Name()
		_ = f.Close()
		defer os.Remove(rssFile)
		// Same environment and stdin, under GNU time.
		cmd.Args = append(timeArgs(rssFile), cmd.Args...)
		cmd.Path = "/usr/bin/time"
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w\n%s%s", command, err, out.Bytes(), errb.Bytes())
	}
	s := sample{d: d, sandbox: sandbox}
	if rss {
		kib, err := os.ReadFile(rssFile)
		if err != nil {
			return sample{}, err
		}
		if err := s.readTime(kib); err != nil {
			return sample{}, err
		}
	}
	var line struct {
		Total float64 `json:"duration_ms"`
		API   float64 `json:"api_ms"`
		Netns float64 `json:"netns_ms"`
		From  string  `json:"pod_from"`
		Miss  string  `json:"agent_miss"`
		By    string  `json:"rules_by"`
	}
	if json.Unmarshal(errb.Bytes(), &line) == nil {
		s.total = time.Duration(line.Total * float64(time.Millisecond))
		s.api = time.Duration(line.API * float64(time.Millisecond))
		s.netns = time.Duration(line.Netns * float64(time.Millisecond))
		s.from, s.miss, s.rulesBy = line.From, line.Miss, line.By
	}
	return s, nil
}

// withNetns runs f with a fresh namespace, removed afterwards (not timed).
func withNetns(f func(netns ns.NetNS) (sample, error)) (sample, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return sample{}, err
	}
	defer removeNS(n)
	return f(n)
}

// removeNS closes and removes a namespace testutils.NewNS made. The
// unmount is lazy: the node agent's audit may have the file open, reading
// the namespace, and a plain unmount would then fail and leave it behind.
func removeNS(n ns.NetNS) {
	path := n.Path()
	_ = n.Close()
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
}

// floorOnce is the floor: one iptables-restore of the same rules, started
// in a fresh namespace.
func floorOnce(backend release.Backend, text []byte) (sample, error) {
	return floorRun(backend, text, false)
}

// floorRun is floorOnce, under GNU time with rss (for its page faults).
func floorRun(backend release.Backend, text []byte, rss bool) (sample, error) {
	restore, err := release.LookPath(xtables.CommandsFor(backend, iptables.IPv4).Restore)
	if err != nil {
		return sample{}, err
	}
	return runFloor(text, rss, restore, "--noflush", "--wait=10")
}

// nftFloorRun is native nftables' floor: one `nft -f -` of upstream's
// commands for the same pod, in a fresh namespace.
func nftFloorRun(text []byte, rss bool) (sample, error) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		return sample{}, fmt.Errorf("nft, native nftables' floor (make deps installs it): %w", err)
	}
	return runFloor(text, rss, nft, "-f", "-")
}

// runFloor runs a program on text in a fresh namespace, timed; with rss
// under GNU time, for its page faults.
func runFloor(text []byte, rss bool, prog string, args ...string) (sample, error) {
	return withNetns(func(n ns.NetNS) (sample, error) {
		var s sample
		err := n.Do(func(ns.NetNS) error {
			cmd := exec.Command(prog, args...) // #nosec G204 -- the bench's floor
			var timeFile string
			if rss {
				f, err := os.CreateTemp("", "rss-")
				if err != nil {
					return err
				}
				timeFile = f.Name()
				_ = f.Close()
				defer os.Remove(timeFile)
				cmd = exec.Command("/usr/bin/time", append(append(timeArgs(timeFile), prog), args...)...) // #nosec G204 -- the bench's floor
			}
			cmd.Stdin = bytes.NewReader(text)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			s = sample{d: time.Since(start)}
			if err != nil {
				return fmt.Errorf("%s: %w: %s", prog, err, out)
			}
			if rss {
				data, err := os.ReadFile(timeFile) // #nosec G304 -- the bench's own temp file
				if err != nil {
					return err
				}
				return s.readTime(data)
			}
			return nil
		})
		return s, err
	})
}

// timeArgs runs a command under GNU time, writing its peak RSS (KiB) and
// minor page faults to file.
func timeArgs(file string) []string {
	return []string{"/usr/bin/time", "-f", "%M %R", "-o", file}
}

// readTime reads what timeArgs wrote.
func (s *sample) readTime(data []byte) error {
	if _, err := fmt.Sscan(string(data), &s.maxRSS, &s.faults); err != nil {
		return fmt.Errorf("GNU time output %q: %w", data, err)
	}
	return nil
}

// collect runs one() n times, conc at once.
func collect(n, conc int, one func() (sample, error)) ([]sample, error) {
	samples := make([]sample, n)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s, err := one()
				if err != nil {
					errs <- err
					return
				}
				samples[i] = s
			}
		}()
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		select {
		case next <- i:
		case err = <-errs:
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	return samples, err
}

// add times ADDs. With check, each ADD's rules are read back afterwards (not
// timed); the concurrent runs rely on the plugin's own read-back instead, so
// the bench adds no CPU load of its own.
func (b *bench) add(backend release.Backend, pod, prevResult string, check, rss bool) func() (sample, error) {
	return b.addWith(backend, pod, b.stdin(string(backend), prevResult), check, rss)
}

// addWith is add with the runtime's stdin; backend "" checks the rules as
// native nftables.
func (b *bench) addWith(backend release.Backend, pod string, stdin []byte, check, rss bool) func() (sample, error) {
	want := "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001"
	switch pod {
	case "bench-dns":
		want = "-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -j REDIRECT --to-ports 15053"
	case "bench-tproxy":
		want = "-j TPROXY --on-port 15006"
	}
	return func() (sample, error) {
		return withNetns(func(n ns.NetNS) (sample, error) {
			s, err := b.execPlugin("ADD", pod, n.Path(), stdin, rss)
			switch {
			case err != nil || !check:
			case backend == "": // native nftables
				err = verifyNative(n)
			default:
				err = verify(n, backend, want)
			}
			if err == nil && b.records != "" {
				err = b.tornDown(pod, s.sandbox)
			}
			return s, err
		})
	}
}

// tornDown leaves the agent's records as a runtime's teardown of the
// sample's sandbox would (DEL removes its record; its namespace goes with
// withNetns). DEL itself is not run: its processes would add to the load
// the ADDs at once are measured under, which the floor does not bear. Not
// torn down, every sample would stay one more sandbox of the one bench
// pod, hundreds by the end, which the agent's audit reads for that pod on
// every pass, as no node's pod has them.
func (b *bench) tornDown(pod, sandbox string) error {
	return applied.Store{Dir: b.records}.Remove(b.uids[pod], sandbox)
}

// verify makes sure the timed ADD really programmed the rules.
func verify(n ns.NetNS, backend release.Backend, want string) error {
	save, err := release.LookPath(xtables.CommandsFor(backend, iptables.IPv4).Save)
	if err != nil {
		return err
	}
	return n.Do(func(ns.NetNS) error {
		out, err := exec.CommandContext(context.Background(), save).Output()
		if err == nil && !strings.Contains(string(out), want) {
			err = fmt.Errorf("ADD left no %q:\n%s", want, out)
		}
		return err
	})
}
