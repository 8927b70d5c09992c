//go:build tools

// Package flannel pins Flannel, the fleet's primary CNI (test/cluster's
// PrimaryFlannel): flanneld and install-conf, built from their module
// (`make flannel`) into the image its DaemonSet runs, never fetched as
// binaries. The flannel CNI plugin itself is pinned beside it, in
// test/flannel/cni: a module of its own, since it lives in an older
// containernetworking/plugins than flanneld's.
package flannel

import (
	_ "github.com/flannel-io/flannel"
	_ "github.com/flannel-io/flannel/cmd/install_conf"
)
