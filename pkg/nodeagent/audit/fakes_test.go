package audit

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
)

type fakePods struct{ pods []*corev1.Pod }

func (f *fakePods) List() []*corev1.Pod { return f.pods }

type fakeNamespaces map[string]netnsdir.NSFile

func (f fakeNamespaces) Find(pods map[string][]netip.Addr) (netnsdir.Result, error) {
	res := netnsdir.Result{Found: map[string]netnsdir.NSFile{}, Ambiguous: netnsdir.ClaimedTwice(pods)}
	for u := range pods {
		if n, ok := f[u]; ok && res.Ambiguous[u] == "" {
			res.Found[u] = n
		}
	}
	return res, nil
}

// fakeNetwork holds, per namespace (a file standing for it, by inode),
// whether the rules are in place. The audit hands it a /proc/self/fd path.
type fakeNetwork struct {
	mu         sync.Mutex
	redirected map[uint64]bool
	// holds, where set, is the model a namespace holds: a check of any
	// other finds it differs.
	holds map[uint64]iptables.Model
	// errFor, where set, is a model whose check fails to read.
	errFor     *iptables.Model
	readErr    error // where set, every check fails to read
	programmed []iptables.Model
	programErr error
	checked    int // namespaces read
	cleared    int // ClearRules calls
}

func inodeOf(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

func (f *fakeNetwork) Check(_ context.Context, path string, m iptables.Model) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked++
	if f.readErr != nil {
		return nil, f.readErr
	}
	if f.errFor != nil && reflect.DeepEqual(*f.errFor, m) {
		return nil, errors.New("iptables-save: the xtables lock is held")
	}
	if held, ok := f.holds[inodeOf(path)]; ok {
		if reflect.DeepEqual(held, m) {
			return nil, nil
		}
		return []string{"nat ISTIO_OUTPUT: the rules differ"}, nil
	}
	if f.redirected[inodeOf(path)] {
		return nil, nil
	}
	return []string{"nat ISTIO_OUTPUT: chain missing", "nat OUTPUT: missing rule 1: -j ISTIO_OUTPUT"}, nil
}

func (f *fakeNetwork) Reconcile(_ context.Context, path string, m iptables.Model) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.programmed = append(f.programmed, m)
	if f.programErr != nil {
		return f.programErr
	}
	f.redirected[inodeOf(path)] = true
	return nil
}

func (f *fakeNetwork) ClearRules(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleared++
	return nil
}

func (f *fakeNetwork) HasIPv6(string) (bool, error) { return false, nil }

type fakeActions struct{ deleted, labelled []string }

func (f *fakeActions) Delete(_ context.Context, p *corev1.Pod) error {
	f.deleted = append(f.deleted, p.Name)
	return nil
}

func (f *fakeActions) Label(_ context.Context, p *corev1.Pod, _, _ string) error {
	f.labelled = append(f.labelled, p.Name)
	return nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

type harness struct {
	dir     string // files standing for namespaces
	a       *Auditor
	pods    *fakePods
	ns      fakeNamespaces
	net     *fakeNetwork
	actions *fakeActions
	events  *record.FakeRecorder
	metrics *Metrics
	clock   *clock
	records applied.Store
}

func newHarness(t testing.TB, action Action) *harness {
	h := &harness{
		dir:     t.TempDir(),
		pods:    &fakePods{},
		ns:      fakeNamespaces{},
		net:     &fakeNetwork{redirected: map[uint64]bool{}},
		actions: &fakeActions{},
		events:  record.NewFakeRecorder(100),
		metrics: NewMetrics(prometheus.NewRegistry()),
		clock:   &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)},
		records: applied.Store{Dir: t.TempDir()},
	}
	h.a = New(Config{
		Node: "node-a", Action: action, Interval: time.Minute, Confirm: 2 * time.Second,
		ExcludeNamespaces: []string{"kube-system"},
		Settings:          decision.DefaultNodeSettings(), LabelKey: DefaultLabelKey, LabelValue: DefaultLabelValue,
	}, Deps{
		Pods: h.pods, Namespaces: h.ns, Network: func(applied.Writer) Network { return h.net }, Actions: h.actions, Events: h.events,
		Records: h.records,
		Metrics: h.metrics, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: h.clock.now,
	})
	return h
}

// add puts a started pod on the node with its namespace.
func (h *harness) add(p *corev1.Pod, redirected bool) {
	h.pods.pods = append(h.pods.pods, p)
	h.ns[string(p.UID)] = h.netns(string(p.UID))
	h.net.redirected[h.ns[string(p.UID)].Inode] = redirected
}

// netns makes a file that stands for a new namespace.
func (h *harness) netns(name string) netnsdir.NSFile {
	f, err := os.CreateTemp(h.dir, name)
	if err != nil {
		panic(err)
	}
	path := f.Name()
	_ = f.Close()
	return netnsdir.NSFile{Path: path, Inode: inodeOf(path)}
}

func (h *harness) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// eventsOf drains the recorded Events and keeps those of reason.
func (h *harness) eventsOf(reason string) []string {
	var out []string
	for _, e := range h.drainEvents() {
		if strings.Contains(e, reason) {
			out = append(out, e)
		}
	}
	return out
}

var errBoom = errors.New("iptables-restore: exit status 4")

// meshed is a running pod with an injected sidecar.
func meshed(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Annotations: map[string]string{decision.StatusAnnotation: `{"containers":["istio-proxy"]}`},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app"},
			{Name: decision.ProxyContainer, Args: []string{"proxy", "sidecar"}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: addrOf(name)}}},
	}
}

// addrOf gives each test pod its own address: two pods claiming one are
// never matched to a namespace.
func addrOf(name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	sum := h.Sum32()
	return fmt.Sprintf("10.99.%d.%d", sum>>8%250, sum%250+1)
}

// passesPastConfirm runs three full passes three seconds apart: past a
// suspect's confirmation, so that whatever a pass would do is done.
func (h *harness) passesPastConfirm() {
	for range 3 {
		h.a.fullPass(context.Background())
		h.clock.advance(3 * time.Second)
	}
}
