package plugin

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/kube"
)

// fakeAPI answers pod lookups from a map, or with err.
type fakeAPI struct {
	pods  map[string]*kube.Pod
	err   error
	calls int
}

func (f *fakeAPI) GetPod(_ context.Context, ns, name, _ string) (*kube.Pod, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	if p, ok := f.pods[ns+"/"+name]; ok {
		return p, nil
	}
	return nil, &kube.APIError{Kind: kube.NotFound, Pod: ns + "/" + name, Err: errors.New("404")}
}

// fakeNet records what would be programmed in which namespace.
type fakeNet struct {
	programmed map[string]iptables.Model
	cleaned    []string
	programErr error
	// writes are how each Program was told to write.
	writes     []xtables.Write
	checkDiffs []string
	checkErr   error // every Check fails to read
	// holds, when set, is what the namespace holds: a check of another
	// model finds it differs.
	holds      *iptables.Model
	cleanupErr error
	hasIPv6    bool
	// removed are the models of each RemoveCopy, after how many
	// Programs it ran.
	removed   []removal
	removeErr error
}

type removal struct {
	m     iptables.Model
	after int // Programs before it
}

func (f *fakeNet) RemoveCopy(_ context.Context, _ string, m iptables.Model) error {
	f.removed = append(f.removed, removal{m, len(f.writes)})
	return f.removeErr
}

func (f *fakeNet) Program(_ context.Context, netns string, m iptables.Model, w xtables.Write) (map[iptables.Family]xtables.Written, error) {
	f.writes = append(f.writes, w)
	if f.programErr != nil {
		return nil, f.programErr
	}
	f.programmed[netns] = m
	return nil, nil
}

func (f *fakeNet) Check(_ context.Context, _ string, m iptables.Model) ([]string, error) {
	if f.checkErr != nil {
		return nil, f.checkErr
	}
	if f.holds != nil && !reflect.DeepEqual(*f.holds, m) {
		return []string{"nat ISTIO_OUTPUT: the rules differ"}, nil
	}
	return f.checkDiffs, nil
}

func (f *fakeNet) Cleanup(_ context.Context, netns string) error {
	f.cleaned = append(f.cleaned, netns)
	return f.cleanupErr
}

func (f *fakeNet) HasIPv6(string) (bool, error) { return f.hasIPv6, nil }

type harness struct {
	api       *fakeAPI
	getterErr error // from NewPodGetter, as for a kubeconfig that does not load
	net       *fakeNet
	p         *Plugin
	stdout    *bytes.Buffer
	stderr    *bytes.Buffer
}

func newHarness() *harness {
	h := &harness{
		api:    &fakeAPI{pods: map[string]*kube.Pod{}},
		net:    &fakeNet{programmed: map[string]iptables.Model{}},
		stdout: &bytes.Buffer{},
		stderr: &bytes.Buffer{},
	}
	h.p = NewWithDeps(Deps{
		NewPodGetter: func(*Config) (PodGetter, error) {
			if h.getterErr != nil {
				return nil, h.getterErr
			}
			return h.api, nil
		},
		NewPodNetwork: func(applied.Writer) PodNetwork { return h.net },
		Stdout:        h.stdout,
		Stderr:        h.stderr,
		Now:           time.Now,
	})
	return h
}

func cmdArgs(conf, cniArgs string) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/pod", IfName: "eth0", Args: cniArgs, StdinData: []byte(conf)}
}

func wantCode(t *testing.T, err error, code uint) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("err = %v, want CNI error code %d", err, code)
	}
}
