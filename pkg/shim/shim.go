// Package shim is the binary the runtime runs as istio-cni. It hands an
// ADD to the node agent (pkg/wire/handoff), which runs the plugin's own ADD
// in the pod's namespace from its informer and writes the rules in one
// nf_tables transaction per family; it answers VERSION itself; for every
// other verb, and whenever the agent is absent or hands the ADD back, it
// execs the full plugin, istio-cni-full, installed beside it, with the
// same arguments, environment and stdin.
//
// It links little: no CNI skel, no netlink library, no logger, no rule
// model, no encoding/json, crypto or os/exec, and not even os, fmt or
// time (process.go has the process's side in plain system calls), since
// what a Go program links costs its start, used or not. Its start then
// costs little more than an empty Go program's, and a pod's ADD is that
// start and one local round trip. It never decides anything
// about a pod: the plugin's code does, in the agent or in istio-cni-full.
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

// Env is what the shim reads of its process.
type Env struct {
	Getenv  func(string) string
	Environ []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// Exe is the shim's own path (the full plugin is beside it; "" if
	// unknown) and Args its arguments (none if unknown), asked only to
	// exec it.
	Exe  func() string
	Args func() []string
	// Exec replaces the process with path (syscall.Exec), stdin the
	// process's fd 0 from then on; it returns only on failure.
	Exec func(path string, argv, envv []string, stdin []byte) error
	// HandOff is handoff.Send.
	HandOff func(socket string, req handoff.Request, netnsFD int) (handoff.Response, error)
}

// entry is what the shim reads of the plugin's config (decodeEntry); the
// tags say how json.Unmarshal would read it, which its tests hold it to.
type entry struct {
	CNIVersion      string      `json:"cniVersion"`
	PodSocket       string      `json:"pod_socket"`
	CacheDir        string      `json:"cache_dir"`
	IptablesBackend string      `json:"iptables_backend"`
	PrevResult      *prevResult `json:"prevResult"`
}

// prevResult is what the shim reads of the primary's result.
type prevResult struct {
	IPs []prevIP `json:"ips"`
}

type prevIP struct {
	Address string `json:"address"`
}

// family is one whose iptables the shim checks: its name on the wire
// (iptables.Family's String, which the agent reads) and whether it is
// IPv6.
type family struct {
	name string
	ipv6 bool
}

var ipv4, ipv6 = family{"ipv4", false}, family{"ipv6", true}

// families are those whose iptables the shim checks: IPv6 only when the
// pod may have it (a primary's result with an IPv6 address, or none to
// tell). The agent hands back an ADD that needs a family it was not told
// of, so this only spares IPv4-only pods a check.
func (c entry) families() []family {
	if c.PrevResult != nil && len(c.PrevResult.IPs) > 0 {
		v6 := false
		for _, ip := range c.PrevResult.IPs {
			v6 = v6 || strings.Contains(ip.Address, ":")
		}
		if !v6 {
			return []family{ipv4}
		}
	}
	return []family{ipv4, ipv6}
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
	stdin, err := readAll(e.Stdin)
	if err != nil {
		return e.fail("", errors.New("reading stdin: "+err.Error()))
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
	conf, err := decodeEntry(stdin)
	if err != nil {
		return handoff.Response{}, "the config does not decode", false
	}
	if conf.PodSocket == "" {
		return handoff.Response{}, "the entry names no pod_socket", false
	}
	req := handoff.Request{ContainerID: e.Getenv("CNI_CONTAINERID"), Netns: e.Getenv("CNI_NETNS"),
		IfName: e.Getenv("CNI_IFNAME"), Args: e.Getenv("CNI_ARGS"), Path: e.Getenv("CNI_PATH"), Stdin: stdin}
	var off []string
	for _, f := range conf.families() {
		// Never run here: a release not remembered yet is the plugin's
		// to read, and this ADD's to hand over.
		if err := release.Writable(conf.IptablesBackend, f.ipv6, conf.CacheDir, nil); err != nil {
			off = append(off, err.Error())
			continue
		}
		req.Netlink = append(req.Netlink, f.name)
	}
	if len(req.Netlink) == 0 {
		return handoff.Response{}, "no family goes over netlink on this node: [" + strings.Join(off, " ") + "]", false
	}
	if req.Netns == "" {
		return handoff.Response{}, "no CNI_NETNS", false
	}
	// O_NONBLOCK: a FIFO at the path must not hold the shim in open.
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
	env := e.Environ
	if why != "" {
		env = append(append([]string(nil), env...), why)
	}
	argv := []string{full}
	if args := e.Args(); len(args) > 1 {
		argv = append(argv, args[1:]...)
	}
	err = e.Exec(full, argv, env, stdin)
	return e.fail(cniVersion(stdin), errors.New("running "+full+": "+err.Error()))
}

// fullPath is the full plugin's path: beside the shim. Without the
// shim's own path (no /proc), it is looked for on CNI_PATH, where the
// runtime found the shim; never relative to the working directory.
func (e Env) fullPath() (string, error) {
	if exe := e.Exe(); path.IsAbs(exe) {
		return path.Join(path.Dir(exe), FullBinary), nil
	}
	for _, dir := range strings.Split(e.Getenv("CNI_PATH"), ":") {
		var st syscall.Stat_t
		if p := path.Join(dir, FullBinary); path.IsAbs(dir) && syscall.Stat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			return p, nil
		}
	}
	return "", errors.New("finding " + FullBinary + ": the shim's own path is unknown (no /proc/self/exe) and CNI_PATH has none")
}

// cniVersion is the config's cniVersion, read on past a field of the
// wrong type, as Unmarshal reads it: only an exec that failed gets here.
func cniVersion(stdin []byte) string {
	conf, _ := decode(stdin) // none on a syntax error
	if conf.CNIVersion == "" {
		return "1.0.0"
	}
	return conf.CNIVersion
}

// fail prints a CNI error (code 999, internal) and returns its status.
func (e Env) fail(version string, err error) int {
	if version == "" {
		version = "1.0.0"
	}
	_, _ = io.WriteString(e.Stdout, `{"cniVersion":`+quote(version)+`,"code":999,"msg":`+quote("istio-cni: "+err.Error())+"}\n")
	return 1
}

// Exec is Env.Exec on the real process: stdin, when given, becomes fd 0
// through a memory file, since the runtime's pipe was read to the end.
func Exec(path string, argv, envv []string, stdin []byte) error {
	if stdin != nil {
		fd, err := memfd("istio-cni-stdin")
		if err != nil {
			return errors.New("passing stdin on: " + err.Error())
		}
		if err := writeAll(fd, stdin); err != nil {
			return errors.New("passing stdin on: " + err.Error())
		}
		if _, err := syscall.Seek(fd, 0, io.SeekStart); err != nil {
			return errors.New("passing stdin on: " + err.Error())
		}
		if err := syscall.Dup3(fd, 0, 0); err != nil {
			return errors.New("passing stdin on: " + err.Error())
		}
		_ = syscall.Close(fd)
	}
	return syscall.Exec(path, argv, envv)
}

// readAll is io.ReadAll from a buffer an entry and its prevResult fit
// in: one read, where io.ReadAll's 512 bytes would grow through several.
func readAll(r io.Reader) ([]byte, error) {
	b := make([]byte, 0, 16<<10)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}
