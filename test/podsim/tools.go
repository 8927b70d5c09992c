//go:build tools

// podsim builds the reference bridge and host-local plugins
// from the containernetworking/plugins module as the primary CNI; this file
// keeps their packages in go.sum.
package podsim

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
)
