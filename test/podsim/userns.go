package podsim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// UserNSBase is where a pod with hostUsers: false has its uids and gids
// 0–65535 on the host, as the kubelet maps the first such pod of a node.
// The proxy's 1337 is UserNSBase+1337 there.
const UserNSBase = 100000

// NewUserNSNetns makes a network namespace owned by a new user namespace
// that maps 0–65535 to UserNSBase, as a runtime makes one for a pod with
// hostUsers: false, pinned at a file in /run/netns. The process that made
// them has exited; the namespace holds its owner.
func NewUserNSNetns() (ns.NetNS, error) {
	maps := []syscall.SysProcIDMap{{ContainerID: 0, HostID: UserNSBase, Size: 65536}}
	holder := exec.Command("sleep", "infinity")
	holder.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNET,
		UidMappings: maps,
		GidMappings: maps,
	}
	if err := holder.Start(); err != nil {
		return nil, fmt.Errorf("starting a process in a new user and network namespace: %w", err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("/run/netns", "userns-")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	_ = f.Close()
	src := filepath.Join("/proc", strconv.Itoa(holder.Process.Pid), "ns", "net")
	if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
		return nil, errors.Join(fmt.Errorf("pinning %s at %s: %w", src, path, err), os.Remove(path))
	}
	n, err := ns.GetNS(path)
	if err != nil {
		return nil, errors.Join(err, unix.Unmount(path, unix.MNT_DETACH), os.Remove(path))
	}
	return n, nil
}

// NewUserNSSandbox is NewSandbox for a pod with hostUsers: false
// (NewUserNSNetns).
func NewUserNSSandbox(podNS, podName string) (*Sandbox, error) {
	n, err := NewUserNSNetns()
	if err != nil {
		return nil, err
	}
	return newSandbox(n, podNS, podName)
}

// CloseNetns removes a namespace NewSandbox or NewUserNSSandbox made.
//
// It unpins the file itself: testutils.UnmountNS, as root, only unpins
// under /var/run/netns and says nothing of another path.
func CloseNetns(n ns.NetNS) error {
	path := n.Path()
	return errors.Join(n.Close(), unix.Unmount(path, unix.MNT_DETACH), os.Remove(path))
}
