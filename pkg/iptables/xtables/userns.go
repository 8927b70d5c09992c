package xtables

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// A pod with hostUsers: false runs in a user namespace of its own, which
// owns its network namespace. The kernel takes an owner match only from a
// writer in that user namespace (xt_owner's check, for nf_tables and
// legacy alike), and there uid 1337 means the proxy's uid as the pod
// sees it. A Go process cannot enter a user namespace (setns needs a
// single thread), so its rules are written by the node's programs run
// under nsenter (util-linux), as upstream istio-cni does; reading them
// needs nothing of the kind.

// ErrUserNS is why such a namespace's rules go in with iptables-restore
// and not over netlink.
var ErrUserNS = errors.New("the pod's network namespace belongs to the pod's own user namespace (hostUsers: false), " +
	"and the kernel takes owner matches only from a writer inside it")

// UserNSRunner is a Runner that can run programs as root of another user
// namespace, open as userns.
type UserNSRunner interface {
	Runner
	InUserNS(userns *os.File) Runner
}

// InUserNS runs programs through nsenter, as root of userns.
func (ExecRunner) InUserNS(userns *os.File) Runner { return nsenterRunner{userns: userns} }

type nsenterRunner struct{ userns *os.File }

// userNSLock is the xtables lock legacy iptables takes in the pod's user
// namespace, where the node's lock file (root's, 0600) cannot be opened:
// the pod's network namespace itself, readable by all, as upstream locks
// it. Only this pod's writers contend for it. iptables before 1.8.6 reads
// no XTABLES_LOCKFILE, and a legacy write there fails closed, saying so.
const userNSLock = "XTABLES_LOCKFILE=/proc/self/ns/net"

func (r nsenterRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	path, err := release.LookPath(name)
	if err != nil {
		return nil, err
	}
	nsenter, err := release.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("%w; writing its rules needs nsenter (util-linux): %w", ErrUserNS, err)
	}
	// The calling thread is in the pod's network namespace, which the
	// child inherits; nsenter enters the user namespace and becomes its
	// uid 0, so the program keeps its capabilities there across exec.
	// Credentials otherwise preserved: setting the groups would need
	// CAP_SETGID, which the agent does not hold, in a user namespace
	// that may deny setgroups (as one made with Go's defaults does).
	cmd := exec.CommandContext(ctx, nsenter, append([]string{"--user=/proc/self/fd/3", "--preserve-credentials", "--setuid=0", "--", path}, args...)...)
	cmd.ExtraFiles = []*os.File{r.userns}
	cmd.Env = append(os.Environ(), userNSLock)
	out, err := run(cmd, name, stdin)
	if err != nil {
		return nil, fmt.Errorf("%w (%s, under nsenter, as the pod's root; legacy needs iptables 1.8.6 or later): %w", ErrUserNS, name, err)
	}
	return out, nil
}

// InUserNS is p for a network namespace the user namespace open as userns
// owns: iptables-restore runs as that namespace's root, and nothing goes
// over netlink (Written.Refused is ErrUserNS). iptables-save runs as
// before: reading needs no owner check, and legacy's cannot list the
// tables from inside.
func (p *Programmer) InUserNS(userns *os.File) (*Programmer, error) {
	r, ok := p.Runner.(UserNSRunner)
	if !ok {
		return nil, fmt.Errorf("%w; this writer (%T) cannot run programs in it", ErrUserNS, p.Runner)
	}
	q := *p
	q.restorer = r.InUserNS(userns)
	return &q, nil
}
