//go:build tools

// Package helm pins the Helm CLI that the chart's tests and the e2e's helm
// install run, built from its module (`make helm`), never fetched as a
// binary. Its Kubernetes libraries are held at the versions the main
// module and test/upstream's Istio build with, so on a fresh machine the
// three builds compile them once (test/gomodules).
package helm

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
