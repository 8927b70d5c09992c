package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerdConfig is containerd 2.3's config (version 4: the servers'
// addresses in their plugins' sections; no metrics), with every path
// under the node's directory: runc's state too (the runc options' Root),
// so a reboot or teardown removes it with the node's state. Only the
// shims' sockets stay in /run/containerd/s (shimSockets): its socket_dir
// takes at most 42 characters, too few for a node's directory in general.
// restrict_oom_score_adj: runc cannot set a negative oom_score_adj
// without CAP_SYS_RESOURCE, which this machine lacks; without it every
// sandbox fails. runtime_path: the shim from the same build as
// containerd. stats_collect_period: containerd 2.3 asks every shim for
// its containers' cgroup metrics each second by default; on this 2-core
// cgroup v1 machine, with 100 pods, that took most of a core (the shims
// 67%, containerd 31%) and stretched every test on the node. 10 s is
// kubelet's own cAdvisor housekeeping interval. NRI is off: nothing here
// uses it.
const containerdConfig = `version = 4
root = %q
state = %q

[plugins."io.containerd.server.v1.grpc"]
  address = %q

[plugins."io.containerd.server.v1.ttrpc"]
  address = %q

[plugins."io.containerd.server.v1.debug"]
  address = %q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  enable_selinux = false
  stats_collect_period = "10s"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %q
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.nri.v1.nri"]
  disable = true
`

func (n *Node) startContainerd(ctx context.Context, b nodeBins, dir string) error {
	base := filepath.Dir(n.ContainerdSocket)
	if err := os.MkdirAll(base, 0o711); err != nil {
		return err
	}
	cfg := filepath.Join(base, "config.toml")
	data := fmt.Sprintf(containerdConfig, filepath.Join(base, "root"), filepath.Join(base, "state"),
		n.ContainerdSocket, n.ContainerdSocket+".ttrpc", filepath.Join(base, "debug.sock"),
		SandboxImage, b.shim, runcRoot(n.dir), n.CNIBinDir, n.CNINetDir)
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		return err
	}
	// A fleet node's netns directory is shared inside its own mount
	// namespace (createNodeNS).
	if !n.joined {
		if err := shareDir(n.NetnsDir); err != nil {
			return err
		}
	}
	p, err := startProc(n.launcher, "containerd", b.containerd, []string{"--config", cfg, "--log-level", "info"},
		filepath.Join(dir, "containerd.log"))
	if err != nil {
		return err
	}
	n.components = append(n.components, p)
	return n.waitContainerd(ctx, p)
}

// waitContainerd returns once containerd p answers on its socket and its
// CRI service is initialized: kubelet exits at once if the CRI answers
// "server is not initialized yet", which a loaded machine shows for a
// while after containerd's own API is up.
func (n *Node) waitContainerd(ctx context.Context, p *proc) error {
	return poll(ctx, p, func(ctx context.Context) error {
		out, err := n.ctr(ctx, "version")
		if err != nil {
			return fmt.Errorf("ctr version: %w: %s", err, out)
		}
		rt, closeConn, err := n.cri()
		if err != nil {
			return err
		}
		defer func() { _ = closeConn() }()
		if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			return fmt.Errorf("CRI version: %w", err)
		}
		return nil
	})
}

// runcRoot is runc's state directory for the node in dir: below
// containerd's state, as /run/containerd/runc is on a real node.
func runcRoot(dir string) string {
	return filepath.Join(filepath.Dir(containerdSocket(dir)), "state", "runc")
}

// ctr runs containerd's CLI (the node's build of it) against this node's
// containerd, in the CRI's namespace.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, n.Ctr, append([]string{"--address", n.ContainerdSocket, "--namespace", "k8s.io"}, args...)...) // #nosec G204 -- test harness
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// ImportImages imports docker-archive tarballs into the node's containerd,
// where kubelet finds its images (no registry is involved).
func (n *Node) ImportImages(ctx context.Context, tarballs ...string) error {
	for _, tarball := range tarballs {
		if out, err := n.ctr(ctx, "images", "import", tarball); err != nil {
			return fmt.Errorf("importing %s: %w: %s", tarball, err, out)
		}
	}
	return nil
}

// TagImage gives an image in the node's containerd a second reference, as
// a new release of the same image would arrive under a new tag.
func (n *Node) TagImage(ctx context.Context, src, dst string) error {
	if out, err := n.ctr(ctx, "images", "tag", "--force", src, dst); err != nil {
		return fmt.Errorf("tagging %s as %s: %w: %s", src, dst, err, out)
	}
	return nil
}

// netnsDir is where this containerd binds sandboxes' network namespaces:
// under its CRI state directory (netns_mounts_under_state_dir), not the
// machine's /run/netns, so that every namespace of a node is found, and
// removed, with the node's directory, even after a run was killed, and two
// nodes on one machine never see each other's.
func netnsDir(dir string) string {
	return filepath.Join(filepath.Dir(containerdSocket(dir)), "state", "io.containerd.grpc.v1.cri", "netns")
}

// shareDir makes dir a shared mount point, as the netns directory is on a
// real node (systemd mounts / shared; `ip netns add` does this same step
// for /run/netns). The DaemonSet mounts it with HostToContainer
// propagation, which the runtime refuses from a private mount, and this
// machine's / is private. The recursive bind keeps namespaces already
// bound there; a directory that already is a mount point is only made
// shared.
func shareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("mount --make-rshared %s: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mount --rbind %s %s: %w", dir, dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mount --make-rshared %s: %w", dir, err)
	}
	return nil
}
