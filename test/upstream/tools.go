//go:build tools

// Package upstream pins upstream Istio at one istio.io/istio version: its
// istio-cni plugin, which `make bench-upstream` builds to measure beside
// ours, and istiod (pilot-discovery) and pilot-agent, which `make
// istio-binaries` builds for the e2e's real control plane (its injector
// and istio-validation), and upstream's istio-cni installer, whose image
// (`make upstream-cni-image`) the e2e switches from and back to. Never
// shipped, never fetched as a binary.
package upstream

import (
	_ "istio.io/istio/cni/cmd/install-cni"
	_ "istio.io/istio/cni/cmd/istio-cni"
	_ "istio.io/istio/pilot/cmd/pilot-agent"
	_ "istio.io/istio/pilot/cmd/pilot-discovery"
)
