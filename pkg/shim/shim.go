// Package shim is the binary the runtime runs as istio-cni. It hands an
// ADD to the node agent (pkg/wire/handoff), which runs the plugin's own ADD
// in the pod's namespace from its informer and writes the rules in one
// nf_tables transaction per family; it answers VERSION itself; for every
// other verb, and whenever the agent is absent or hands the ADD back, it
// execs the full plugin, istio-cni-full, installed beside it, with the
// same arguments, environment and stdin.
//
// Every pod start pays to load what the shim links, so it links the
// hand-off, the node's iptables release check and the standard library's
// smallest packages only: no CNI library, netlink, rule model or
// Kubernetes client, and no os, fmt or encoding/json, whose start alone
// cost each pod start about 0.1 ms (cmd/plugin's
// TestPluginLinksNoAgentCode, BENCHMARKS.md).
// It never decides anything about a pod: the plugin's code does, in the
// agent or in istio-cni-full.
package shim

import (
	"errors"
	"io"
	"path"
	"strconv"
	"strings"
	"syscall"

	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
)

// FullBinary is the full plugin's file name, beside the shim.
const FullBinary = "istio-cni-full"

// Env is what the shim reads of its process (Process is the real one).
type Env struct {
	Getenv  func(string) string
	Environ []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// Exe is the shim's own path, "" if unknown: the full plugin is
	// beside it. Args are its arguments, passed on to the full plugin
	// (read only then; none when unknown, as runtimes pass none).
	Exe  string
	Args func() []string
	// Procs is the shim's own GOMAXPROCS, as Go's runtime sized it on
	// this node (its CPUs, its cgroup's limit, or GOMAXPROCS); 0 if
	// unknown.
	Procs int
	// Exec replaces the process with path, stdin (when not nil) its fd 0
	// from then on; it returns only on failure.
	Exec func(path string, argv, envv []string, stdin []byte) error
	// HandOff is handoff.Send.
	HandOff func(socket string, req handoff.Request, netnsFD int) (handoff.Response, error)
}

// VersionInfo is the full plugin's answer to VERSION: skel's encoding of
// the CNI library's version.All, whatever the config. The shim gives it
// without an exec; its tests hold it to the library's.
const VersionInfo = `{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n"

// Run is the shim's main: the exit status when it does not exec.
func Run(e Env) int {
	switch e.Getenv("CNI_COMMAND") {
	case "ADD":
	case "VERSION":
		// skel reads no stdin for VERSION either: a caller's write of
		// the config to a closed pipe is its to ignore, as libcni does.
		if _, err := io.WriteString(e.Stdout, VersionInfo); err != nil {
			return 1
		}
		return 0
	default:
		return e.full(nil, "")
	}
	stdin, err := io.ReadAll(e.Stdin)
	if err != nil {
		return e.fail("", wrap("reading stdin", err))
	}
	resp, why, asked := e.handOff(stdin)
	if why != "" {
		env := handoff.EnvNotHandedOff
		if asked {
			env = handoff.EnvHandedBack
		}
		return e.full(stdin, env+"="+why)
	}
	_, _ = e.Stderr.Write(resp.Stderr)
	if _, err := e.Stdout.Write(resp.Stdout); err != nil {
		return 1
	}
	return 0
}

// handOff asks the agent to run the ADD; why says why it did not, asked
// whether the agent got the request (it may then have written rules).
func (e Env) handOff(stdin []byte) (resp handoff.Response, why string, asked bool) {
	if len(stdin) > handoff.MaxRequest/2 {
		return handoff.Response{}, "stdin is " + strconv.Itoa(len(stdin)) + " bytes, over the hand-off's " + strconv.Itoa(handoff.MaxRequest/2), false
	}
	conf, ok := walkEntry(stdin)
	if !ok {
		return handoff.Response{}, "the config does not decode as the shim reads it (not JSON, or not the plain shapes of the plugin's own entry)", false
	}
	if conf.PodSocket == "" {
		return handoff.Response{}, "the entry names no pod_socket", false
	}
	req := handoff.Request{ContainerID: e.Getenv("CNI_CONTAINERID"), Netns: e.Getenv("CNI_NETNS"),
		IfName: e.Getenv("CNI_IFNAME"), Args: e.Getenv("CNI_ARGS"), Path: e.Getenv("CNI_PATH"), Stdin: stdin}
	var off []string
	backend := conf.IptablesBackend
	if backend == "" {
		backend = release.Auto
	}
	for _, f := range conf.families() {
		if conf.NativeNftables {
			// Native nftables: the agent writes over netlink whatever
			// the node's iptables (it reads native_nftables in stdin).
			break
		}
		// Never run here: a release not remembered yet is the plugin's
		// to read, and this ADD's to hand over.
		v, err := release.Writable(backend, f.ipv6, conf.CacheDir, nil)
		switch {
		case err == nil && req.Release != "" && v != req.Release:
			// One package gives both; two releases are the plugin's.
			off = append(off, f.name+" is iptables "+v+", the other family "+req.Release)
		case err == nil:
			req.Netlink, req.Release = append(req.Netlink, f.name), v
		case legacy(backend, f):
			// The x_tables ABI is every release's: the agent's own
			// x_tables writes are what the node's restore would write.
			req.Legacy = append(req.Legacy, f.name)
		default:
			off = append(off, err.Error())
		}
	}
	switch {
	case len(req.Netlink) > 0 && len(req.Legacy) > 0:
		return handoff.Response{}, "the node's families are on two backends: nf_tables " + strings.Join(req.Netlink, ",") + ", legacy " + strings.Join(req.Legacy, ","), false
	case len(req.Netlink) == 0 && len(req.Legacy) == 0 && !conf.NativeNftables:
		return handoff.Response{}, "no family the agent writes on this node: [" + strings.Join(off, " ") + "]", false
	}
	if req.Netns == "" {
		return handoff.Response{}, "no CNI_NETNS", false
	}
	// O_NONBLOCK: a FIFO at the path must not hold the shim in open. A
	// bare descriptor: it only travels to the agent.
	fd, err := syscall.Open(req.Netns, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return handoff.Response{}, "opening CNI_NETNS: " + err.Error(), false
	}
	defer func() { _ = syscall.Close(fd) }()
	resp, err = e.HandOff(conf.PodSocket, req, fd)
	switch {
	case err != nil:
		return handoff.Response{}, err.Error(), true
	case !resp.Done:
		return handoff.Response{}, "the agent: " + resp.HandBack, true
	}
	return resp, "", true
}

// full execs the full plugin, with why (NAME=reason) added to its
// environment when set; stdin nil leaves fd 0 as the runtime passed it.
func (e Env) full(stdin []byte, why string) int {
	full, err := e.fullPath()
	if err != nil {
		return e.fail(cniVersion(stdin), err)
	}
	env := fullEnv(e.Environ, e.Procs, why)
	argv := []string{full}
	if e.Args != nil {
		if args := e.Args(); len(args) > 1 {
			argv = append(argv, args[1:]...)
		}
	}
	err = e.Exec(full, argv, env, stdin)
	return e.fail(cniVersion(stdin), wrap("running "+full, err))
}

// fullProcs caps the full plugin's GOMAXPROCS. Its work waits on the API
// and on the restores it execs (two at most, a family each), not on
// CPU; Go's runtime, sized by the node's CPUs at every start, costs it
// 5-6 page faults and about 20 KB a CPU past two (BENCHMARKS.md), which
// a 64-CPU node would pay on every DEL, CHECK, STATUS and ADD the agent
// does not run.
const fullProcs = 2

// fullEnv is the full plugin's environment: the runtime's, GOMAXPROCS
// set to the shim's own or fullProcs, whichever is fewer (left as the
// runtime passed it when the shim's is unknown), and why (NAME=reason)
// when set. Go's runtime reads the first GOMAXPROCS, so any other goes.
func fullEnv(environ []string, procs int, why string) []string {
	env := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		if procs > 0 && strings.HasPrefix(kv, "GOMAXPROCS=") {
			continue
		}
		env = append(env, kv)
	}
	if procs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(min(procs, fullProcs)))
	}
	if why != "" {
		env = append(env, why)
	}
	return env
}

// fullPath is the full plugin's path: beside the shim. Without the
// shim's own path (no /proc), it is looked for on CNI_PATH, where the
// runtime found the shim; never relative to the working directory.
func (e Env) fullPath() (string, error) {
	if path.IsAbs(e.Exe) {
		return path.Join(path.Dir(e.Exe), FullBinary), nil
	}
	for _, dir := range strings.Split(e.Getenv("CNI_PATH"), ":") {
		if !path.IsAbs(dir) {
			continue
		}
		p := path.Join(dir, FullBinary)
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			return p, nil
		}
	}
	return "", errors.New("finding " + FullBinary + ": the shim's own path is unknown (no /proc/self/exe) and CNI_PATH has none")
}

// fail prints a CNI error (code 999, internal) and returns its status.
func (e Env) fail(version string, err error) int {
	if version == "" {
		version = "1.0.0"
	}
	_, _ = io.WriteString(e.Stdout, errorResult(version, 999, "istio-cni: "+err.Error()))
	return 1
}

// legacy says whether a family's rules go through iptables-legacy on
// this node: pinned so, or the node's own iptables leading there.
func legacy(b release.Backend, f family) bool {
	resolved, err := b.Resolve(f.ipv6)
	return err == nil && resolved == release.Legacy
}
