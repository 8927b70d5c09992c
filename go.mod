module istio-cni.local/istio-cni

go 1.26

require (
	github.com/containernetworking/cni v1.3.1 // indirect
	github.com/containernetworking/plugins v1.9.1 // indirect
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.47.0 // indirect
	k8s.io/client-go v0.37.2 // indirect
)
