// Command pilotagent is the entrypoint of the e2e's stand-in for Istio's
// proxyv2 image, which istiod's injector puts in both containers it adds,
// with no command of their own:
//
//   - istio-validation runs `pilot-agent istio-iptables ... --run-validation`:
//     this execs the real pilot-agent, built from the pinned istio.io/istio
//     module, so the validation, its exit code (126) and its uid are
//     upstream's own;
//   - istio-proxy runs `pilot-agent proxy sidecar ...`: this execs the test
//     proxy in Envoy's place, its listeners on 15001 and 15006 and its
//     readiness on :15021/healthz/ready, where the injected probes ask;
//   - `wait` and `request` (native sidecars, hold-until-proxy-starts) end
//     at once.
package main

import (
	"fmt"
	"os"
	"syscall"
)

// Where the image holds the real agent and the test proxy.
const (
	upstreamAgent = "/usr/local/bin/pilot-agent-upstream"
	testProxy     = "/testproxy"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "pilot-agent (e2e stand-in): want istio-iptables, proxy, wait or request")
		os.Exit(2)
	}
	var argv []string
	var path string
	switch os.Args[1] {
	case "istio-iptables":
		path, argv = upstreamAgent, append([]string{"pilot-agent"}, os.Args[1:]...)
	case "proxy":
		path, argv = testProxy, []string{"testproxy", "proxy", "--health-addr", ":15021"}
	case "wait", "request":
		return
	default:
		fmt.Fprintf(os.Stderr, "pilot-agent (e2e stand-in): %q is not one of istio-iptables, proxy, wait, request\n", os.Args[1])
		os.Exit(2)
	}
	err := syscall.Exec(path, argv, os.Environ()) // #nosec G204 -- fixed paths in the test image
	fmt.Fprintf(os.Stderr, "pilot-agent (e2e stand-in): exec %s: %v\n", path, err)
	os.Exit(1)
}
