// Package gomodules checks the project's Go modules against each other:
// the main module, test/upstream (Istio's istiod, pilot-agent and
// istio-cni), test/helm (the Helm CLI) and test/kube (the test node's
// Kubernetes and containerd) must select the same version of every module
// their builds share. The Kubernetes libraries are the bulk of each
// build; built at one version with the Makefile's one set of flags, a
// fresh machine compiles them once for all four (BENCHMARKS.md, "Test
// suites").
package gomodules
