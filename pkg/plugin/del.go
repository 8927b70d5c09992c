package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/podnet"
)

// Del removes our chains from the pod's namespace if it still exists. It
// makes no API call and always succeeds: a DEL that fails blocks the
// runtime's teardown of the sandbox, and the namespace, with whatever rules
// it still holds, is destroyed with it. Problems are logged, and reported
// to the agent as the DEL's error.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	start := p.deps.Now()
	conf, confErr := parseConfig(args.StdinData)
	if confErr != nil {
		conf = fallbackConfig(args.StdinData)
	}
	log, closeLog := newLogger(conf, p.deps.Stderr)
	defer closeLog()
	var out outcome
	ref, isPod, _ := podID(args.Args)
	if isPod {
		out.pod, out.podUID = ref.String(), ref.uid
	}
	// ADD records every sandbox, pass-through ones too: the record goes
	// first, whatever the pod; its rules are removed as its ADD wrote
	// them (native nftables or iptables), whatever the node writes now.
	err := confErr
	w := conf.writer()
	if r, ok := recorded(conf, args, out.podUID); ok && !r.Passed {
		w = writerOf(conf, r)
	}
	if conf.RecordsDir != "" {
		if rErr := (applied.Store{Dir: conf.RecordsDir}).Remove(out.podUID, args.ContainerID); rErr != nil {
			err = errors.Join(err, rErr)
		}
	}
	if isPod && err == nil {
		// Pods decided before the API are never programmed: nothing to undo.
		if d, decided := decision.Namespace(ref.namespace, conf.ExcludeNamespaces); decided {
			out.decision = d
			p.finish(log, conf, "DEL", args, inPlugin{}, out, start, nil)
			return nil
		}
	}
	if args.Netns != "" {
		ctx, cancel := context.WithTimeout(context.Background(), opBudget)
		defer cancel()
		if cErr := p.deps.NewPodNetwork(w).Cleanup(ctx, args.Netns); cErr != nil && !errors.Is(cErr, podnet.ErrNoNetns) {
			err = errors.Join(err, cErr)
		}
	}
	if err != nil {
		log.Warn("DEL incomplete; succeeding anyway", "container", args.ContainerID, "pod", out.pod, "error", err.Error())
		p.report(log, conf, "DEL", args, inPlugin{}, out, start, p.deps.Now(), err)
		return nil
	}
	p.finish(log, conf, "DEL", args, inPlugin{}, out, start, nil)
	return nil
}

// fallbackConfig keeps what DEL can use from a config that did not
// validate: the backend the node pinned (or native nftables), if
// readable, so the cleanup looks where the rules are, and the agent's socket, so the problem is reported.
func fallbackConfig(stdin []byte) *Config {
	var raw struct {
		IptablesBackend string `json:"iptables_backend"`
		NativeNftables  any    `json:"native_nftables"` // any: a bad value keeps the rest
		ReportsSocket   string `json:"reports_socket"`
		RecordsDir      string `json:"records_dir"`
	}
	conf := &Config{}
	conf.parsed.Backend = release.Auto
	if json.Unmarshal(stdin, &raw) == nil {
		if b, err := release.ParseBackend(raw.IptablesBackend); err == nil {
			conf.parsed.Backend = b
		}
		conf.parsed.Native = raw.NativeNftables == true
		if filepath.IsAbs(raw.ReportsSocket) {
			conf.ReportsSocket = raw.ReportsSocket
		}
		if filepath.IsAbs(raw.RecordsDir) {
			conf.RecordsDir = raw.RecordsDir
		}
	}
	return conf
}
