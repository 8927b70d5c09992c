//go:build tools

// Package cni pins the flannel CNI plugin (plugins/meta/flannel), which
// github.com/containernetworking/plugins carried until v0.9.1, as
// Flannel's own manifests installed it for years; built by `make flannel`
// into the fleet's Flannel image. It speaks CNI up to 0.4.0, so the
// fleet's 10-flannel.conflist says cniVersion 0.3.1.
package cni

import (
	_ "github.com/containernetworking/plugins/plugins/meta/flannel"
)
