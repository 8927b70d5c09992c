//go:build tools

package cluster

// The node's primary CNI: the reference plugins at the version go.mod
// requires, built by `make cni-plugins` (referencePluginDir). This file
// keeps their packages in the module's graph, so go.sum holds what they
// need and `go mod tidy` keeps it.
import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)
