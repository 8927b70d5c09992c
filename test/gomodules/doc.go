// Package gomodules checks the project's Go modules against each other:
// the main module, test/upstream (Istio's istiod, pilot-agent and
// istio-cni) and test/helm (the Helm CLI) must select the same version of
// every module their builds share. The Kubernetes client libraries are
// the bulk of each build; built at one version with the Makefile's one set
// of flags, a fresh machine compiles them once for all three, not three
// times (BENCHMARKS.md, "Test suites"). test/kube is left out: the test
// node's Kubernetes (v1.32, the newest this machine's containerd 1.6
// runs) cannot share those versions.
package gomodules
