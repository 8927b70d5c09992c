# istio-cni: the README says how to install it (make image-index, make chart) and
# that the two developer commands are `make test` and `make demo`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
OUT := _output
BIN := $(OUT)/bin
TOOLS := $(OUT)/tools
# VERSION is the one version every binary (pkg/version), the image's
# labels and SBOM and the packaged chart carry: the tag, or the tag and the
# commits since, or the commit alone; "-dirty" for uncommitted changes.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Once: a commit or an edit during a long build must not split it.
VERSION := $(VERSION)
VERSION_LDFLAGS = -X istio-cni.local/istio-cni/pkg/version.version=$(VERSION)
# The binaries are linked again when VERSION changes, not only their
# sources: the image's label and the binaries' version then agree.
VERSION_STAMP := $(OUT)/version
GOLANGCI_LINT_VERSION := v2.15.0
# Debian packages the tests, bench and demo run: iptables (both backends),
# etcd for the test API server, nsenter (util-linux), ip (iproute2), GNU
# time (the bench's peak-RSS probe), the real node's runc, and promtool
# (prometheus) for the chart's alert rules' tests, busybox (the
# Flannel image's cp, as its own image has one) and a C toolchain
# (flanneld links cgo, as Flannel builds it). The node's containerd
# is built (kube-binaries): Kubernetes 1.36 needs containerd 2, and
# Debian's is 1.6. So are its reference CNI plugins (cni-plugins):
# Debian's (1.1.1) speak CNI only up to 1.0.0.
APT_PACKAGES := iptables nftables etcd-server util-linux iproute2 time runc prometheus busybox gcc libc6-dev
# The image `make image` writes, under the reference deployments/ uses.
IMAGE := localhost/istio-cni/install-cni:0.1.0
IMAGE_TAR := $(OUT)/istio-cni-image.tar
IMAGE_INDEX_TAR := $(OUT)/istio-cni-image-index.tar
# SHIM is the shim's file name in the image, the name the installer copies
# it by; the version-skew tests build an earlier release's installer with
# this tree's shim, which that release copies as istio-cni.
SHIM ?= istio-cni-sidecar
KUBE_BINARIES := kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
CONTAINERD_BINARIES := containerd containerd-shim-runc-v2 ctr
NODE_BINARIES := $(KUBE_BINARIES) $(CONTAINERD_BINARIES)

GO_SOURCES := $(shell find cmd pkg -name '*.go' -not -name '*_test.go') go.mod go.sum

# Every go command here builds one way: static (the image has no libc for
# our binaries), without local paths and without DWARF (nothing here runs a
# debugger; stack traces keep their files and lines). The image's binaries,
# lint and the tests then share one build cache, and on a fresh machine
# each package compiles once, not once per configuration; no DWARF takes
# about a sixth off each compile and link (BENCHMARKS.md, "Test suites").
BUILD_FLAGS := -trimpath -gcflags=all=-dwarf=false -ldflags=-w
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(BUILD_FLAGS) $(filter-out $(BUILD_FLAGS),$(GOFLAGS)))

.PHONY: FORCE all help build kubectl-plugin image image-index chart deps kube-binaries cni-plugins flannel helm istio-binaries old-iptables newer-iptables lint test test-e2e test-packages unit goldens fuzz e2e e2e-multinode chaos bench bench-upstream bench-node upstream-cni-image demo demo-down clean

all: build

## help: this list.
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

## build: the plugin as nodes get it (static: the shim
## /opt/cni/bin/istio-cni-sidecar, the full plugin istio-cni-full and its API
## lookup helper istio-cni-apilookup beside it).
build: $(BIN)/istio-cni-sidecar $(BIN)/istio-cni-full $(BIN)/istio-cni-apilookup $(BIN)/install-cni

$(BIN)/istio-cni-sidecar: $(GO_SOURCES) $(VERSION_STAMP)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $@ ./cmd/plugin

$(BIN)/istio-cni-full: $(GO_SOURCES) $(VERSION_STAMP)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $@ ./cmd/plugin/full

$(BIN)/istio-cni-apilookup: $(GO_SOURCES) $(VERSION_STAMP)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $@ ./cmd/plugin/apilookup

$(BIN)/install-cni: $(GO_SOURCES) $(VERSION_STAMP)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $@ ./cmd/install-cni

## kubectl-plugin: `kubectl istio-cni` (why, check, logs; docs/kubectl-plugin.md)
## for this machine, $(BIN)/kubectl-istio_cni, and for users' machines
## (linux and darwin, amd64 and arm64) under $(OUT)/release.
kubectl-plugin: $(BIN)/kubectl-istio_cni $(foreach p,linux_amd64 linux_arm64 darwin_amd64 darwin_arm64,$(OUT)/release/kubectl-istio_cni_$(p))

$(BIN)/kubectl-istio_cni: $(GO_SOURCES) $(VERSION_STAMP)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $@ ./cmd/kubectl-istio_cni

$(OUT)/release/kubectl-istio_cni_%: $(GO_SOURCES) $(VERSION_STAMP)
	os=$*; CGO_ENABLED=0 GOOS=$${os%%_*} GOARCH=$${os#*_} $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $@ ./cmd/kubectl-istio_cni

$(VERSION_STAMP): FORCE
	@mkdir -p $(OUT); echo '$(VERSION)' | cmp -s - $@ || echo '$(VERSION)' >$@

# The other architecture's binaries, for the image index.
$(BIN)/linux_%/istio-cni-sidecar $(BIN)/linux_%/istio-cni-full $(BIN)/linux_%/istio-cni-apilookup $(BIN)/linux_%/install-cni: $(GO_SOURCES) $(VERSION_STAMP)
	for p in istio-cni-sidecar=./cmd/plugin istio-cni-full=./cmd/plugin/full istio-cni-apilookup=./cmd/plugin/apilookup install-cni=./cmd/install-cni; do \
		GOARCH=$* $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN)/linux_$*/$${p%%=*} $${p#*=}; \
	done

## image: the DaemonSet's image for this machine's architecture (installer
## + plugin, static; iptables for the agent) as a docker-archive tarball for
## `ctr -n k8s.io images import` or `docker load`.
image: $(IMAGE_TAR)

## image-index: the release's image for amd64 and arm64 as one OCI image
## index, in an OCI layout tarball ($(IMAGE_INDEX_TAR)) for `skopeo copy --all
## oci-archive:...`, `crane push` of it unpacked, or `ctr images import`.
image-index: $(IMAGE_INDEX_TAR)

# The node agent runs iptables itself, both backends, from the image (not
# the node's, which would need the host's root mounted): Debian's
# iptables package, its extension modules and their libraries; and
# util-linux's nsenter, which runs it as root of a hostUsers: false pod's
# user namespace (pkg/iptables/xtables/userns.go). The packages are
# Debian's, by name and version (build/debian/image-packages), for each
# architecture, fetched from Debian's archive, not the build machine's;
# each one's control paragraph and copyright go in too, and an SPDX SBOM
# listing them and the Go modules the binaries link.
ARCH := $(shell $(GO) env GOARCH)
IMAGE_ARCHES := amd64 arm64
DEBIAN_SUITE := bookworm
DEBIAN_DISTRO := debian-12
IMAGE_ROOT = $(OUT)/image-root/$(1)
image_tar = $(if $(filter $(1),$(ARCH)),$(IMAGE_TAR),$(OUT)/istio-cni-image-$(1).tar)
triplet = $(if $(filter arm64,$(1)),aarch64-linux-gnu,x86_64-linux-gnu)
DOC := /usr/share/doc/istio-cni
# $(call image_flags,ARCH,BINDIR,SHIM): mkimage's flags for one architecture.
image_flags = -arch $(1) -root $(call IMAGE_ROOT,$(1)) -entrypoint /install-cni \
	-file /install-cni=$(2)/install-cni:0755 -file /$(3)=$(2)/$(3):0755 \
	-file /istio-cni-full=$(2)/istio-cni-full:0755 -file /istio-cni-apilookup=$(2)/istio-cni-apilookup:0755 \
	-libraries -file /usr/bin/nsenter=$(call IMAGE_ROOT,$(1))/usr/bin/nsenter \
	-file /etc/os-release=$(call IMAGE_ROOT,$(1))/usr/lib/os-release:0644 \
	-dir /usr/share/common-licenses=$(call IMAGE_ROOT,$(1))/usr/share/common-licenses \
	-file /usr/sbin/xtables-nft-multi=$(call IMAGE_ROOT,$(1))/usr/sbin/xtables-nft-multi \
	-file /usr/sbin/xtables-legacy-multi=$(call IMAGE_ROOT,$(1))/usr/sbin/xtables-legacy-multi \
	$(foreach b,nft legacy,$(foreach f,iptables ip6tables,$(foreach op,save restore,-link /usr/sbin/$(f)-$(b)-$(op)=xtables-$(b)-multi))) \
	-dir /usr/lib/$(call triplet,$(1))/xtables=$(call IMAGE_ROOT,$(1))/usr/lib/$(call triplet,$(1))/xtables \
	-file $(DOC)/LICENSE=LICENSE:0644 -file $(DOC)/NOTICE=NOTICE:0644 -file $(DOC)/go/LICENSE=$$($(GO) env GOROOT)/LICENSE:0644 \
	-go-licenses $(DOC)/go-modules=$$($(GO) env GOMODCACHE) \
	-sbom $(DOC)/sbom.spdx.json -name istio-cni -version $(VERSION) -distro $(DEBIAN_DISTRO) \
	-label org.opencontainers.image.title=istio-cni -label org.opencontainers.image.version=$(VERSION) \
	-label org.opencontainers.image.revision=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	-label org.opencontainers.image.licenses=Apache-2.0 \
	-label "org.opencontainers.image.description=Istio sidecar mesh CNI plugin and node agent"
MKIMAGE_SOURCES := $(shell find cmd/mkimage -name '*.go' -not -name '*_test.go')

# Fetched once per _output: the unpinned packages (glibc, util-linux,
# base-files) are those of that day; `make clean`, or removing
# _output/image-root, fetches the suite's current ones. A release builds
# from a clean clone.
$(OUT)/image-root/%/VERSIONS: build/debian/fetch.sh build/debian/image-packages
	FETCH_UPDATES=1 build/debian/fetch.sh $(OUT)/image-root/$* $(DEBIAN_SUITE) $* $$(sed 's/#.*//' build/debian/image-packages)

$(IMAGE_TAR): $(BIN)/$(SHIM) $(BIN)/istio-cni-full $(BIN)/istio-cni-apilookup $(BIN)/install-cni $(call IMAGE_ROOT,$(ARCH))/VERSIONS LICENSE NOTICE $(MKIMAGE_SOURCES) Makefile
	$(GO) run ./cmd/mkimage -o $@ -tag $(IMAGE) $(call image_flags,$(ARCH),$(BIN),$(SHIM))

$(OUT)/istio-cni-image-%.tar: $(addprefix $(BIN)/linux_%/,istio-cni-sidecar istio-cni-full istio-cni-apilookup install-cni) $(OUT)/image-root/%/VERSIONS LICENSE NOTICE $(MKIMAGE_SOURCES) Makefile
	$(GO) run ./cmd/mkimage -o $@ -tag $(IMAGE) $(call image_flags,$*,$(BIN)/linux_$*,istio-cni-sidecar)

# Kept, not removed as pattern rules' intermediates: the next build reuses
# them.
.SECONDARY: $(foreach a,$(IMAGE_ARCHES),$(OUT)/image-root/$(a)/VERSIONS \
	$(addprefix $(BIN)/linux_$(a)/,istio-cni-sidecar istio-cni-full istio-cni-apilookup install-cni))

$(IMAGE_INDEX_TAR): $(foreach a,$(IMAGE_ARCHES),$(call image_tar,$(a)))
	$(GO) run ./cmd/mkimage -index -o $@ -tag $(IMAGE) $^

## chart: the Helm chart packaged, its appVersion the build's VERSION, and
## its version too from a release tag (v1.2.3, or v1.2.3-4-gabc after it:
## semver without the v); else Chart.yaml's ($(OUT)/istio-cni-VERSION.tgz).
chart: $(TOOLS)/helm
	$(TOOLS)/helm package deployments/helm/istio-cni --app-version $(VERSION) \
		$(if $(filter v%,$(VERSION)),--version $(patsubst v%,%,$(VERSION))) -d $(OUT)

# The test images (Flannel's, upstream's) copy this machine's iptables.
XTABLES_MODULES = $(firstword $(wildcard /usr/lib/*/xtables))
IPTABLES_IMAGE_FILES = -libraries \
	-file /usr/bin/nsenter=/usr/bin/nsenter \
	-file /usr/sbin/xtables-nft-multi=/usr/sbin/xtables-nft-multi \
	-file /usr/sbin/xtables-legacy-multi=/usr/sbin/xtables-legacy-multi \
	$(foreach b,nft legacy,$(foreach f,iptables ip6tables,$(foreach op,save restore,-link /usr/sbin/$(f)-$(b)-$(op)=xtables-$(b)-multi))) \
	-dir $(XTABLES_MODULES)=$(XTABLES_MODULES)

## deps: install the system packages (needs root; a no-op when present).
deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## kube-binaries: the test node's Kubernetes and containerd (with its runc
## shim and ctr), built from k8s.io/kubernetes and containerd's module
## (test/kube).
kube-binaries: $(addprefix $(BIN)/,$(NODE_BINARIES))

# One go build for all eight: the packages they share compile once. Their
# versions are stamped from test/kube/go.mod (Istio's injector reads the
# node's Kubernetes version).
$(addprefix $(BIN)/,$(NODE_BINARIES)) &: test/kube/go.mod test/kube/go.sum
	cd test/kube && CGO_ENABLED=0 $(GO) build -trimpath \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$$($(GO) list -m -f '{{.Version}}' k8s.io/kubernetes) -X github.com/containerd/containerd/v2/version.Version=$$($(GO) list -m -f '{{.Version}}' github.com/containerd/containerd/v2)" \
		-o $(CURDIR)/$(BIN)/ $(addprefix k8s.io/kubernetes/cmd/,$(KUBE_BINARIES)) \
		$(addprefix github.com/containerd/containerd/v2/cmd/,$(CONTAINERD_BINARIES))

## cni-plugins: the node's primary CNI, the reference plugins bridge,
## host-local, portmap and loopback, built (static) from
## github.com/containernetworking/plugins at the version go.mod requires
## (test/cluster/tools.go keeps them in the module's graph): a primary
## that speaks CNI 1.1.0, whose STATUS containerd 2 calls.
CNI_PLUGINS := $(TOOLS)/cni-plugins
CNI_PLUGIN_PACKAGES := main/bridge ipam/host-local meta/portmap main/loopback
cni-plugins: $(addprefix $(CNI_PLUGINS)/,$(notdir $(CNI_PLUGIN_PACKAGES)))

$(addprefix $(CNI_PLUGINS)/,$(notdir $(CNI_PLUGIN_PACKAGES))) &: go.mod go.sum
	$(GO) build -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$$($(GO) list -m -f '{{.Version}}' github.com/containernetworking/plugins)" \
		-o $(CURDIR)/$(CNI_PLUGINS)/ $(addprefix github.com/containernetworking/plugins/plugins/,$(CNI_PLUGIN_PACKAGES))

## flannel: the multi-node fleet's primary CNI as Flannel's own manifests
## install it, in an image of its own (FLANNEL_IMAGE): flanneld and
## install-conf built from github.com/flannel-io/flannel (test/flannel; cgo,
## as Flannel builds it, for its udp backend), the flannel CNI plugin from
## containernetworking/plugins v0.9.1 (test/flannel/cni), busybox's cp for
## the plugin's init container, and iptables for flanneld's masquerade rules.
FLANNEL := $(TOOLS)/flannel
FLANNEL_IMAGE := localhost/flannel-io/flannel:v0.28.10
FLANNEL_IMAGE_TAR := $(OUT)/flannel-image.tar
flannel: $(FLANNEL_IMAGE_TAR)

$(FLANNEL)/flanneld $(FLANNEL)/install_conf &: test/flannel/go.mod test/flannel/go.sum $(wildcard test/flannel/tencentvpc/go.mod test/flannel/tencentvpc/*/*.go)
	cd test/flannel && CGO_ENABLED=1 $(GO) build -tags netgo,osusergo \
		-ldflags "-s -w -extldflags -static -X github.com/flannel-io/flannel/pkg/version.Version=$$($(GO) list -m -f '{{.Version}}' github.com/flannel-io/flannel)" \
		-o $(CURDIR)/$(FLANNEL)/ github.com/flannel-io/flannel github.com/flannel-io/flannel/cmd/install_conf
	mv $(FLANNEL)/flannel $(FLANNEL)/flanneld

$(FLANNEL)/cni/flannel: test/flannel/cni/go.mod test/flannel/cni/go.sum
	cd test/flannel/cni && $(GO) build -ldflags "-s -w" -o $(CURDIR)/$@ github.com/containernetworking/plugins/plugins/meta/flannel

$(FLANNEL_IMAGE_TAR): $(FLANNEL)/flanneld $(FLANNEL)/install_conf $(FLANNEL)/cni/flannel $(shell find cmd/mkimage -name '*.go') | deps
	$(GO) run ./cmd/mkimage -o $@ -tag $(FLANNEL_IMAGE) -entrypoint /opt/bin/flanneld \
		-file /opt/bin/flanneld=$(FLANNEL)/flanneld:0755 -file /opt/bin/install-conf=$(FLANNEL)/install_conf:0755 \
		-file /flannel=$(FLANNEL)/cni/flannel:0755 -file /bin/busybox=/bin/busybox:0755 -link /bin/cp=busybox \
		$(foreach f,iptables ip6tables iptables-save ip6tables-save iptables-restore ip6tables-restore,-link /usr/sbin/$(f)=xtables-nft-multi) \
		$(IPTABLES_IMAGE_FILES)

$(TOOLS)/golangci-lint:
	GOBIN=$(CURDIR)/$(TOOLS) $(FILL) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

## helm: the Helm CLI, built from the helm.sh/helm/v3 module test/helm pins
## (the chart's tests and the e2e's helm install run it; no binary is
## downloaded).
helm: $(TOOLS)/helm

# Stamped as Helm's own Makefile stamps it: its version, and the
# Kubernetes release `helm template` assumes without a cluster, the one its
# client-go is (v0.36 is 1.36; unstamped it assumes 1.20, which the chart's
# kubeVersion refuses).
$(TOOLS)/helm: test/helm/go.mod test/helm/go.sum Makefile
	cd test/helm && minor=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2) && $(GO) build -o $(CURDIR)/$@ \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v3) \
			$(foreach p,chartutil lint/rules,-X helm.sh/helm/v3/pkg/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$(p).k8sVersionMinor=$$minor)" \
		helm.sh/helm/v3/cmd/helm

## old-iptables: Debian bullseye's iptables 1.8.7, the oldest 1.8 Debian
## serves, unpacked (not installed) for the netlink writer's per-release
## parity test and the audit's cross-release test (test/oldiptables;
## pkg/iptables/nfnl, pkg/iptables/xtables).
OLD_IPTABLES := $(TOOLS)/iptables-1.8.7
old-iptables: $(OLD_IPTABLES)/usr/sbin/xtables-nft-multi

$(OLD_IPTABLES)/usr/sbin/xtables-nft-multi: test/oldiptables/fetch.sh build/debian/fetch.sh
	test/oldiptables/fetch.sh $(CURDIR)/$(OLD_IPTABLES)
	touch $@

## newer-iptables: Debian trixie's iptables 1.8.11, with its own glibc,
## unpacked (not installed) for the same two tests (test/oldiptables).
NEWER_IPTABLES := $(TOOLS)/iptables-1.8.11
newer-iptables: $(NEWER_IPTABLES)/usr/sbin/xtables-nft-multi

$(NEWER_IPTABLES)/usr/sbin/xtables-nft-multi: test/oldiptables/fetch.sh build/debian/fetch.sh
	test/oldiptables/fetch.sh $(CURDIR)/$(NEWER_IPTABLES) trixie
	touch $@

## lint: gofmt and golangci-lint (.golangci.yml; go vet is its govet).
# go vet runs inside golangci-lint: its govet linter runs go vet's default
# analyzers (less loopclosure, a no-op since Go 1.22; plus inline), over
# test files too. A separate `go vet ./...` type-checked the whole
# dependency graph a second time (up to 3 CPU-minutes on a fresh machine,
# BENCHMARKS.md) to report the same findings.
lint: $(TOOLS)/golangci-lint
	@unformatted=$$(gofmt -l cmd pkg test); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@$(GO) mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1; }
	$(FILL) $(TOOLS)/golangci-lint run ./...

## test: everything CI runs: lint, unit, the chart against deployments/,
## real-namespace, API and real-node e2e tests.
# The builds run one after another, the node's first: Istio, Helm and
# the tests share its modules' packages (test/gomodules), and two go
# builds at once each compile the packages neither has finished yet.
# A build beside the tests starved them (BENCHMARKS.md, cold29). The
# other architecture's image is the exception: test/image builds it
# (make image-index) among the package tests, while the e2e mostly waits
# on its node: its packages compile for arm64, sharing nothing with the
# node's builds, and before the tests it would add minutes to every run.
test: deps kube-binaries cni-plugins istio-binaries upstream-cni-image image flannel helm old-iptables newer-iptables
	$(MAKE) --no-print-directory -j3 test-e2e lint test-packages FILL="nice -n 10"

# test-e2e: the real-node tests in a go test of their own, started first.
# They are the suite's longest run, mostly waiting on the node; inside
# `go test ./...` they waited minutes for one of its two slots (test/chart
# and test/cluster held them). Lint and the other packages' tests (on a
# fresh machine, minutes of compiling) fill the e2e's waits, at a lower
# priority (FILL): the e2e is a chain of short steps on the node, each
# stretched when it shares the cores equally with compiles, and on a fresh
# machine it then ran alone, mostly idle, for minutes after the rest had
# finished (BENCHMARKS.md). Any failing fails make test.
FILL ?=
test-e2e:
	$(GO) test -count=1 -timeout 40m ./test/e2e

# test-packages: every other package's tests, then the multi-node e2e:
# after test/cluster's own nodes are down, so that at most two clusters
# share the cores (the single-node e2e's and one of these). Starting the
# fleet beside the e2e from the start instead made its tests slower still
# (BENCHMARKS.md, s51a).
test-packages:
	pkgs=$$($(GO) list ./... | grep -v '/test/e2e'); ISTIO_CNI_OLD_IPTABLES=$(CURDIR)/$(OLD_IPTABLES) ISTIO_CNI_NEWER_IPTABLES=$(CURDIR)/$(NEWER_IPTABLES) $(GO) test -count=1 -timeout 30m $$pkgs
	cd test/upstream && $(GO) test -count=1 ./...
	$(FILL) $(GO) test -count=1 -timeout 40m ./test/e2e/multinode

## e2e: only the real-node tests (test/e2e).
e2e: deps kube-binaries cni-plugins image helm
	$(GO) test -count=1 -timeout 30m -v ./test/e2e

## e2e-multinode: only the multi-node tests (test/e2e/multinode): a fleet
## of NODES nodes (3 by default) on this machine, each a containerd and a
## kubelet in namespaces of its own, one control plane (docs/testing.md).
e2e-multinode: deps kube-binaries cni-plugins istio-binaries upstream-cni-image image flannel helm
	NODES=$(or $(NODES),3) $(GO) test -count=1 -timeout 40m -v ./test/e2e/multinode

## chaos: the long chaos loop on a real node (make test runs 5 iterations):
## 50 perturbations while meshed pods come and go; figures in
## $(OUT)/chaos.json (BENCHMARKS.md).
CHAOS_ITERATIONS ?= 50
chaos: deps kube-binaries cni-plugins image
	$(GO) test -count=1 -timeout 90m -v -run 'TestChaos' ./test/e2e -args -chaos.iterations=$(CHAOS_ITERATIONS) -chaos.report=$(CURDIR)/$(OUT)/chaos.json

## unit: the package tests (the real-namespace ones need root).
unit:
	$(GO) test -count=1 ./pkg/... ./cmd/...

## goldens: rewrite the rule and conflist golden files after an intended
## change, and pkg/iptables/nftables' cni-*.golden from upstream's istio-nftables;
## review the diff (git diff pkg).
goldens:
	$(GO) test -count=1 ./pkg/iptables ./pkg/chain -update
	cd test/upstream && $(GO) test -count=1 -run TestCNIGoldens . -update

## fuzz: run each fuzzer for FUZZTIME (30s) over the input istio-cni reads
## from others: pods' annotations, the primary's config, iptables-save output
## from a pod's namespace, the reports socket's datagrams, the shim's hand-off
## frames, the kubeconfig; and the shim's CNI error against encoding/json's.
FUZZTIME ?= 30s
FUZZERS := decision:FuzzPodAnnotations decision:FuzzParsePorts decision:FuzzParsePrefixes \
	chain:FuzzOwnedFromAnyPrimary iptables:FuzzPlanTouchesOnlyOurs wire/reports:FuzzDecode wire/handoff:FuzzRequestFrame \
	kube/apiclient:FuzzParseKubeconfig shim:FuzzWalkEntry shim:FuzzErrorResult
fuzz:
	@for f in $(FUZZERS); do \
		echo "== pkg/$${f%%:*} $${f##*:}"; \
		$(GO) test ./pkg/$${f%%:*} -run XXX -fuzz "^$${f##*:}$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

## bench: ADD latency, RSS and VERSION time against a real API server.
## UPSTREAM=/path/to/istio-cni adds upstream's plugin beside ours (or
## bench-upstream, which builds it from its module, test/upstream);
## NATIVE=1 measures the as-installed (and upstream's) ADD with native
## nftables, against nft -f. IPTABLES=1.8.7 (Debian bullseye's) or 1.8.11
## (trixie's) measures as on a node with that iptables instead of the
## machine's 1.8.9, the floor included (test/oldiptables/asnode.sh);
## IPTABLES=legacy as on a node whose iptables is legacy only, where
## upstream's plugin (UPSTREAM=) writes legacy too
## (test/oldiptables/aslegacy.sh). CPUS=64 runs each plugin as on a node
## with 64 CPUs (Go's runtime sizes itself by the count at every start).
BENCH_RELEASES := 1.8.7 1.8.11
comma := ,
ifneq ($(IPTABLES),)
ifneq ($(words $(IPTABLES))$(filter $(IPTABLES),$(BENCH_RELEASES) legacy),1$(strip $(IPTABLES)))
$(error IPTABLES=$(IPTABLES): want one of $(BENCH_RELEASES), the releases test/oldiptables unpacks, or legacy)
endif
ifneq ($(NATIVE),)
$(error NATIVE with IPTABLES: native nftables writes no iptables$(if $(filter legacy,$(IPTABLES)),$(comma) whatever the node's: make bench NATIVE=1,; the swapped libnftnl would time the machine's nft on another release's library))
endif
endif
BENCH_NODE := $(if $(filter legacy,$(IPTABLES)),test/oldiptables/aslegacy.sh $(TOOLS)/legacy-node,$(if $(IPTABLES),test/oldiptables/asnode.sh $(TOOLS)/iptables-$(IPTABLES)))
bench: deps kube-binaries build $(if $(filter $(BENCH_RELEASES),$(IPTABLES)),$(TOOLS)/iptables-$(IPTABLES)/usr/sbin/xtables-nft-multi)
	$(BENCH_NODE) $(GO) run ./test/bench -plugin $(BIN)/istio-cni-sidecar $(if $(UPSTREAM),-upstream $(UPSTREAM)) $(if $(NATIVE),-native-nftables) $(if $(CPUS),-cpus $(CPUS))

bench-upstream: $(TOOLS)/upstream-istio-cni
	$(MAKE) bench UPSTREAM=$(CURDIR)/$(TOOLS)/upstream-istio-cni

$(TOOLS)/upstream-istio-cni: test/upstream/go.mod test/upstream/go.sum
	cd test/upstream && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(CURDIR)/$@ istio.io/istio/cni/cmd/istio-cni

## upstream-cni-image: upstream Istio's istio-cni installer image, laid out as
## its cni/deployments/kubernetes/Dockerfile.install-cni lays it out
## (/usr/local/bin/install-cni, /opt/cni/bin/istio-cni, iptables), both
## built from the istio.io/istio module test/upstream pins: the e2e's
## switch from upstream's istio-cni and back (docs/migration.md). The
## installer takes pilot-agent's tags (upstream adds grpcnotrace and
## retrynotrace, which only drop tracing), so the two share their compiles.
UPSTREAM_CNI_IMAGE := localhost/istio-cni-test/install-cni:istio-test
UPSTREAM_CNI_IMAGE_TAR := $(OUT)/upstream-cni-image.tar
upstream-cni-image: $(UPSTREAM_CNI_IMAGE_TAR)

$(TOOLS)/upstream-install-cni: test/upstream/go.mod test/upstream/go.sum
	cd test/upstream && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -tags agent,disable_pgv -o $(CURDIR)/$@ istio.io/istio/cni/cmd/install-cni

$(UPSTREAM_CNI_IMAGE_TAR): $(TOOLS)/upstream-install-cni $(TOOLS)/upstream-istio-cni $(shell find cmd/mkimage -name '*.go') | deps
	$(GO) run ./cmd/mkimage -o $@ -tag $(UPSTREAM_CNI_IMAGE) -entrypoint /usr/local/bin/install-cni \
		-file /usr/local/bin/install-cni=$(TOOLS)/upstream-install-cni:0755 -file /opt/cni/bin/istio-cni=$(TOOLS)/upstream-istio-cni:0755 \
		$(foreach f,iptables ip6tables iptables-save ip6tables-save iptables-restore ip6tables-restore,-link /usr/sbin/$(f)=xtables-nft-multi) \
		$(IPTABLES_IMAGE_FILES)

## istio-binaries: istiod (pilot-discovery) and pilot-agent, built from the
## istio.io/istio module test/upstream pins, with upstream's build tags; the
## e2e's real control plane (test/cluster/istio.go). `make test` builds
## them first; a bare `go test ./test/e2e` builds them itself.
istio-binaries: $(TOOLS)/pilot-discovery $(TOOLS)/pilot-agent

$(TOOLS)/pilot-discovery: test/upstream/go.mod test/upstream/go.sum
	cd test/upstream && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -tags vtprotobuf,disable_pgv -o $(CURDIR)/$@ istio.io/istio/pilot/cmd/pilot-discovery

$(TOOLS)/pilot-agent: test/upstream/go.mod test/upstream/go.sum
	cd test/upstream && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -tags agent,disable_pgv -o $(CURDIR)/$@ istio.io/istio/pilot/cmd/pilot-agent

## bench-node: pod starts on a real node, meshed against plain; then what
## the agents cost the control plane and their nodes on fleets of 1 to
## NODES nodes (3 by default); then pod starts on a Flannel fleet of NODES
## nodes, meshed against plain (BENCHMARKS.md).
bench-node: deps kube-binaries cni-plugins image flannel
	$(GO) run ./test/bench -node -pods 50 -burst 108
	$(GO) run ./test/bench -fleet $(or $(NODES),3)
	$(GO) run ./test/bench -flannel $(or $(NODES),3) -pods 50

## demo: a real local node with istio-cni installed from deployments/, a
## meshed and an unmeshed app; the node keeps running (make demo-down).
## NODES=3: the same on a fleet of 3 nodes, in the foreground until Ctrl-C.
demo: deps kube-binaries cni-plugins image
	$(GO) run ./test/demo -nodes $(or $(NODES),1)

## demo-down: stop the demo node (every process it started, by PID).
demo-down:
	@if [ -e $(OUT)/demo ]; then $(GO) run ./test/demo -down; else echo "no demo node is running"; fi

clean: demo-down
	rm -rf $(OUT)
