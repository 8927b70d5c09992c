package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// nodeNS is a fleet node's own network, mount and UTS namespaces, kept
// alive by bind mounts of their files under the node's directory (as
// `unshare --net=FILE` leaves them), so its containerd and kubelet, and
// everything they start, see the node's network, its hostname, and its
// own /opt/cni/bin, /etc/cni/net.d, /var/run/istio-cni and /var/run/netns
// at the paths a real node has them. The DaemonSet's hostPath volumes then
// land on the node's directories unmodified.
type nodeNS struct{ dir string }

// nsKinds are the namespaces a node has of its own, by their nsenter and
// unshare option names.
var nsKinds = []string{"net", "mount", "uts"}

func (s nodeNS) file(kind string) string { return filepath.Join(s.dir, "ns", kind) }

// enter is the command prefix that runs a program in the node's
// namespaces. nsenter execs it: the PID stays the program's.
func (s nodeNS) enter() []string {
	args := []string{"nsenter"}
	for _, k := range nsKinds {
		args = append(args, "--"+k+"="+s.file(k))
	}
	return append(args, "--")
}

// run runs a command in the node's namespaces.
func (s nodeNS) run(name string, args ...string) error {
	full := append(s.enter(), append([]string{name}, args...)...)
	out, err := exec.Command(full[0], full[1:]...).CombinedOutput() // #nosec G204 -- the harness's own commands
	if err != nil {
		return fmt.Errorf("%s in node namespaces: %w: %s", strings.Join(append([]string{name}, args...), " "), err, out)
	}
	return nil
}

// hostBind is one of a node's directories bind-mounted at the path a real
// node has it. shared: mounts made under either path show under both, as
// the sandboxes' namespaces must (containerd binds them under its state
// directory, the DaemonSet reads /var/run/netns).
type hostBind struct {
	src, dst string
	shared   bool
}

// createNodeNS makes the node's namespaces: hostname, loopback up, IP
// forwarding on (its pods' traffic to other nodes goes through it), and
// binds mounted. The mount namespace is a copy of this machine's made a
// slave of it: nothing mounted in the node reaches this machine (where /,
// /run or /run/netns may well be shared: `ip netns add` makes /run/netns
// so, and a bind over it would land here too). This machine reaches a
// node's mounts through its processes' roots (HostPath).
func createNodeNS(dir, hostname string, binds []hostBind) (nodeNS, error) {
	s := nodeNS{dir: dir}
	nsDir := filepath.Join(dir, "ns")
	if err := os.MkdirAll(nsDir, 0o700); err != nil {
		return s, err
	}
	// A namespace's file cannot be bound on a shared mount (systemd makes
	// / shared): the files get a private mount of their own.
	if err := unix.Mount(nsDir, nsDir, "", unix.MS_BIND, ""); err != nil {
		return s, fmt.Errorf("mount --bind %s: %w", nsDir, err)
	}
	if err := unix.Mount("", nsDir, "", unix.MS_PRIVATE, ""); err != nil {
		return s, fmt.Errorf("mount --make-private %s: %w", nsDir, err)
	}
	args := []string{"--propagation", "unchanged"} // made rslave by the script, once inside
	for _, k := range nsKinds {
		f := s.file(k)
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			return s, err
		}
		args = append(args, "--"+k+"="+f)
	}
	script := []string{
		"mount --make-rslave /",
		"hostname " + shellQuote(hostname),
		"ip link set lo up",
		"echo 1 > /proc/sys/net/ipv4/ip_forward",
	}
	for _, b := range binds {
		src, dst := shellQuote(b.src), shellQuote(b.dst)
		if b.shared {
			// A shared mount of its own first: its bind is then its peer.
			script = append(script, fmt.Sprintf("mount --bind %s %s && mount --make-shared %s", src, src, src))
		}
		// The mount point exists on this machine (ClaimHostDirs);
		// only the node's namespace mounts anything on it.
		script = append(script, fmt.Sprintf("mount --bind %s %s", src, dst))
	}
	args = append(args, "--", "sh", "-ec", strings.Join(script, "\n"))
	if out, err := exec.Command("unshare", args...).CombinedOutput(); err != nil { // #nosec G204 -- the harness's own script
		return s, fmt.Errorf("creating node %s's namespaces: %w: %s", hostname, err, out)
	}
	return s, nil
}

// HostPath is where this machine opens path as the node sees it: the path
// itself on a single node; on a fleet's, through its containerd's root,
// since what the node mounts (its sandboxes' network namespaces, kubelet's
// volumes) stays in its mount namespace, which only its processes hold.
func (n *Node) HostPath(path string) (string, error) {
	if !n.joined {
		return path, nil
	}
	if c := n.component("containerd"); c != nil && !c.exited() {
		return fmt.Sprintf("/proc/%d/root%s", c.pid(), path), nil
	}
	return "", fmt.Errorf("node %s: containerd is not running: nothing holds the node's mount namespace to read %s in", n.Name, path)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Command is name run on the node as an operator's shell there would run
// it: in the node's network, mount and UTS namespaces on a fleet's, in
// this machine's on a single node.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append([]string{name}, args...)
	if n.joined && n.ns != nil {
		argv = append(n.ns.enter(), argv...)
	}
	return exec.CommandContext(ctx, argv[0], argv[1:]...) // #nosec G204 -- the harness's own commands
}
