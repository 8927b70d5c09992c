package podns

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fakeProc builds a /proc with the given processes: pid -> cgroup file;
// each process gets its own ns/net file unless shareWith names another pid.
func fakeProc(t *testing.T, procs map[int]string, shareWith map[int]int) string {
	t.Helper()
	root := t.TempDir()
	mk := func(pid int) string {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	host := mk(1)
	if err := os.WriteFile(filepath.Join(host, "ns", "net"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for pid, cg := range procs {
		dir := mk(pid)
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cg), 0o644); err != nil {
			t.Fatal(err)
		}
		// Start times follow the pids: a lower pid started earlier.
		stat := fmt.Sprintf("%d (proc name) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0", pid, 1000+pid)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok := shareWith[pid]; !ok {
			if err := os.WriteFile(filepath.Join(dir, "ns", "net"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Hard links stand for one namespace seen from two processes.
	for pid, other := range shareWith {
		if err := os.Link(filepath.Join(root, strconv.Itoa(other), "ns", "net"), filepath.Join(root, strconv.Itoa(pid), "ns", "net")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	uidA = "6f0a4c2e-1b7d-4e8e-9a51-2c3d4e5f6a7b"
	uidB = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
	uidC = "11111111-2222-3333-4444-555555555555"
)

func TestFind(t *testing.T) {
	proc := fakeProc(t, map[int]string{
		// cgroup v1, cgroupfs driver, under a custom cgroup root.
		100: "4:memory:/istio-cni-icnie2e0/kubepods/besteffort/pod" + uidA + "/0123abcd\n1:cpu:/istio-cni-icnie2e0/kubepods/besteffort/pod" + uidA + "/0123abcd\n",
		// cgroup v2, systemd driver.
		200: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + "0b1c2d3e_4f50_6172_8394_a5b6c7d8e9f0" + ".slice/cri-containerd-99.scope\n",
		// A host-network pod: its process is in the host's namespace.
		300: "0::/kubepods/pod" + uidC + "/77\n",
		// Not a pod.
		400: "0::/system.slice/containerd.service\n",
		// A UID we were not asked about.
		500: "0::/kubepods/pod" + "99999999-2222-3333-4444-555555555555" + "/1\n",
	}, map[int]int{300: 1})
	got, err := Finder{Proc: proc, HostNetns: filepath.Join(proc, "1", "ns", "net")}.Find([]string{uidA, uidB, uidC})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("found %v, want pods A and B only", got)
	}
	if a := got[uidA]; a.PID != 100 || a.Path != filepath.Join(proc, "100", "ns", "net") || a.Inode == 0 {
		t.Errorf("pod A: %+v", a)
	}
	if b := got[uidB]; b.PID != 200 {
		t.Errorf("pod B: %+v", b)
	}
}

func TestFindSameSandboxSameInode(t *testing.T) {
	proc := fakeProc(t, map[int]string{
		10: "0::/kubepods/pod" + uidA + "/pause\n",
		11: "0::/kubepods/pod" + uidA + "/app\n",
	}, map[int]int{11: 10})
	first, err := Finder{Proc: proc, HostNetns: filepath.Join(proc, "1", "ns", "net")}.Find([]string{uidA})
	if err != nil {
		t.Fatal(err)
	}
	// Whichever process answers, the namespace is the same.
	if err := os.RemoveAll(filepath.Join(proc, strconv.Itoa(first[uidA].PID))); err != nil {
		t.Fatal(err)
	}
	second, err := Finder{Proc: proc, HostNetns: filepath.Join(proc, "1", "ns", "net")}.Find([]string{uidA})
	if err != nil {
		t.Fatal(err)
	}
	if first[uidA].Inode != second[uidA].Inode || first[uidA].PID == second[uidA].PID {
		t.Errorf("first %+v, second %+v: want the same inode from another process", first[uidA], second[uidA])
	}
}

func TestFindPicksThePodsFirstProcess(t *testing.T) {
	// pid 30 started first (the sandbox); pid 20 is listed first but made a
	// nested namespace later (ReadDir order is by name: "20" < "30").
	proc := fakeProc(t, map[int]string{
		30: "0::/kubepods/pod" + uidA + "/pause\n",
		20: "0::/kubepods/pod" + uidA + "/app\n",
	}, nil)
	if err := os.WriteFile(filepath.Join(proc, "20", "stat"), []byte("20 (dind (x)) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99999 0 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Finder{Proc: proc, HostNetns: filepath.Join(proc, "1", "ns", "net")}.Find([]string{uidA})
	if err != nil {
		t.Fatal(err)
	}
	if got[uidA].PID != 30 {
		t.Errorf("picked pid %d, want the pod's first process 30", got[uidA].PID)
	}
}

func TestFindRealProc(t *testing.T) {
	// The test process is no pod: nothing is found, and /proc is readable.
	got, err := Finder{Proc: "/proc"}.Find([]string{uidA})
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v", got, err)
	}
}

func BenchmarkFind(b *testing.B) {
	// The real /proc: the cost of one scan on this machine, per pass.
	f := Finder{Proc: "/proc"}
	for b.Loop() {
		if _, err := f.Find([]string{uidA, uidB}); err != nil {
			b.Fatal(err)
		}
	}
}
