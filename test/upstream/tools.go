//go:build tools

// Package upstream pins upstream istio-cni's plugin, which `make
// bench-upstream` builds from its module to measure beside ours. It is
// never shipped, and never fetched as a binary.
package upstream

import _ "istio.io/istio/cni/cmd/istio-cni"
