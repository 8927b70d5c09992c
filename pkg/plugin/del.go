package plugin

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/pkg/xtables"
)

// Del removes our chains from the pod's namespace if it still exists. It
// makes no API call and always succeeds: a DEL that fails blocks the
// runtime's teardown of the sandbox, and the namespace, with whatever rules
// it still holds, is destroyed with it. Problems are logged.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	start := p.deps.Now()
	conf, confErr := parseConfig(args.StdinData)
	if confErr != nil {
		// Clean up with the defaults rather than leave rules behind.
		conf = &Config{backend: xtables.Auto}
	}
	log, closeLog := newLogger(conf, p.deps.Stderr)
	defer closeLog()
	var out outcome
	if ns, name, ok, _ := podID(args.Args); ok {
		out.pod = ns + "/" + name
	}
	err := confErr
	if args.Netns != "" {
		ctx, cancel := context.WithTimeout(context.Background(), opBudget)
		defer cancel()
		if cErr := p.deps.NewPodNetwork(conf).Cleanup(ctx, args.Netns); cErr != nil && !errors.Is(cErr, podnet.ErrNoNetns) {
			err = errors.Join(err, cErr)
		}
	}
	if err != nil {
		log.Warn("DEL incomplete; succeeding anyway", "container", args.ContainerID, "pod", out.pod, "error", err.Error())
		return nil
	}
	logOutcome(log, "DEL", args, out, p.deps.Now().Sub(start), nil)
	return nil
}
