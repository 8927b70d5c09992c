package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Primary is the CNI a fleet's nodes chain istio-cni after.
type Primary string

const (
	// PrimaryBridge: the harness writes each node a bridge + host-local
	// conflist over a range of its own (10.252.i.0/24) and routes the
	// nodes' ranges to one another.
	PrimaryBridge Primary = ""
	// PrimaryFlannel: Flannel, installed as its own manifests install it
	// (InstallFlannel): a DaemonSet whose pods copy the flannel CNI plugin
	// into /opt/cni/bin, write 10-flannel.conflist and run flanneld with
	// the API as its subnet manager (the controller manager allocates each
	// node a /24 of FlannelNetwork) and the vxlan backend between the
	// nodes. The node's reference plugins (bridge, host-local, portmap,
	// loopback) are in /opt/cni/bin beforehand, as a node's OS package
	// puts them.
	PrimaryFlannel Primary = "flannel"
)

// FlannelNetwork is the Flannel fleet's pod network: the controller
// manager's cluster CIDR, Flannel's net-conf Network.
var FlannelNetwork = netip.MustParsePrefix("10.252.0.0/16")

// FlannelImage is the Flannel image `make flannel` builds.
const FlannelImage = "localhost/flannel-io/flannel:v0.28.10"

// FlannelConflist is the file Flannel's DaemonSet writes on each node.
const FlannelConflist = "10-flannel.conflist"

// flannelManifest is Flannel v0.28.10's Documentation/kube-flannel.yml
// with this fleet's values: its image (%[1]s, built here; one image for
// both init containers and flanneld), Network (%[2]s), the API server's
// address (%[3]s, %[4]d: no kube-proxy, so no Service IP), flanneld's
// --iface=eth0 (a fleet node has no default route to find it by), and the
// CNI config at cniVersion 0.3.1, as Flannel's manifests wrote it while
// the flannel plugin was containernetworking/plugins' (its v0.9.1 speaks
// CNI up to 0.4.0).
//
// One flag is the fleet's own, not the manifest's: --iptables-resync=60.
// flanneld checks each of its host rules with an `iptables -C` process
// every --iptables-resync seconds (default 5); on three nodes that was
// two fifths of an idle fleet's CPU and 8% of the multi-node suite's
// (BENCHMARKS.md, Test suites), for rules nothing here removes. flanneld
// writes them at its start (a failed write is retried at the next
// resync); istio-cni writes no host rules, and the checks are
// iptables-nft's, which take no xtables lock istio-cni's legacy writes
// could wait on.
const flannelManifest = `---
kind: Namespace
apiVersion: v1
metadata:
  name: kube-flannel
  labels:
    k8s-app: flannel
    pod-security.kubernetes.io/enforce: privileged
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata:
  labels:
    k8s-app: flannel
  name: flannel
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [patch]
---
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata:
  labels:
    k8s-app: flannel
  name: flannel
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: flannel
subjects:
- kind: ServiceAccount
  name: flannel
  namespace: kube-flannel
---
apiVersion: v1
kind: ServiceAccount
metadata:
  labels:
    k8s-app: flannel
  name: flannel
  namespace: kube-flannel
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: kube-flannel-cfg
  namespace: kube-flannel
  labels:
    tier: node
    k8s-app: flannel
    app: flannel
data:
  cni-conf.json: |
    {
      "name": "cbr0",
      "cniVersion": "0.3.1",
      "plugins": [
        {
          "type": "flannel",
          "delegate": {
            "hairpinMode": true,
            "isDefaultGateway": true
          }
        },
        {
          "type": "portmap",
          "capabilities": {
            "portMappings": true
          }
        }
      ]
    }
  net-conf.json: |
    {
      "Network": "%[2]s",
      "EnableNFTables": false,
      "Backend": {
        "Type": "vxlan"
      }
    }
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-flannel-ds
  namespace: kube-flannel
  labels:
    tier: node
    app: flannel
    k8s-app: flannel
spec:
  selector:
    matchLabels:
      app: flannel
  template:
    metadata:
      labels:
        tier: node
        app: flannel
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - key: kubernetes.io/os
                operator: In
                values:
                - linux
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations:
      - operator: Exists
        effect: NoSchedule
      serviceAccountName: flannel
      initContainers:
      - name: install-cni-plugin
        image: %[1]s
        command:
        - cp
        args:
        - -f
        - /flannel
        - /opt/cni/bin/flannel
        volumeMounts:
        - name: cni-plugin
          mountPath: /opt/cni/bin
      - name: install-cni
        image: %[1]s
        command:
        - /opt/bin/install-conf
        args:
        - /etc/kube-flannel/cni-conf.json
        - /etc/cni/net.d/` + FlannelConflist + `
        volumeMounts:
        - name: cni
          mountPath: /etc/cni/net.d
        - name: flannel-cfg
          mountPath: /etc/kube-flannel/
      containers:
      - name: kube-flannel
        image: %[1]s
        command:
        - /opt/bin/flanneld
        args:
        - --ip-masq
        - --kube-subnet-mgr
        - --iface=eth0
        - --iptables-resync=60
        - --healthz-port=8081
        ports:
        - name: healthz
          containerPort: 8081
          protocol: TCP
        livenessProbe:
          httpGet:
            path: /healthz
            port: healthz
          initialDelaySeconds: 10
          periodSeconds: 30
        readinessProbe:
          httpGet:
            path: /readyz
            port: healthz
          initialDelaySeconds: 5
          periodSeconds: 10
        resources:
          requests:
            cpu: "100m"
            memory: "50Mi"
        securityContext:
          privileged: false
          capabilities:
            add: ["NET_ADMIN", "NET_RAW"]
        env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        - name: EVENT_QUEUE_DEPTH
          value: "5000"
        - name: CONT_WHEN_CACHE_NOT_READY
          value: "false"
        - name: KUBERNETES_SERVICE_HOST
          value: "%[3]s"
        - name: KUBERNETES_SERVICE_PORT
          value: "%[4]d"
        volumeMounts:
        - name: run
          mountPath: /run/flannel
        - name: flannel-cfg
          mountPath: /etc/kube-flannel/
        - name: xtables-lock
          mountPath: /run/xtables.lock
      volumes:
      - name: run
        hostPath:
          path: /run/flannel
      - name: cni-plugin
        hostPath:
          path: /opt/cni/bin
      - name: cni
        hostPath:
          path: /etc/cni/net.d
      - name: flannel-cfg
        configMap:
          name: kube-flannel-cfg
      - name: xtables-lock
        hostPath:
          path: /run/xtables.lock
          type: FileOrCreate
`

// flannelNodeDirs are the per-node directories a Flannel node has besides
// the CNI ones, bound at the paths a real node has them: flanneld's
// subnet.env, which the flannel plugin reads, and the CNI plugins' state
// (host-local's leases, the flannel plugin's delegate records), which on
// a real node is per node too.
var flannelNodeDirs = []string{"/run/flannel", "/var/lib/cni"}

// MakeFlannelImage runs `make flannel` and returns the image's tarball,
// for ImportImages.
func MakeFlannelImage(ctx context.Context) (string, error) {
	return makeTarball(ctx, "flannel", "flannel-image.tar")
}

// InstallFlannel applies Flannel's manifest (written into dir) as a user
// does, `kubectl apply -f`, and waits until its DaemonSet has rolled out:
// every node then has 10-flannel.conflist and a lease. It returns
// kubectl's output.
func (f *Fleet) InstallFlannel(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	api := f.APIAddr()
	manifest := filepath.Join(dir, "kube-flannel.yml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(flannelManifest, FlannelImage, FlannelNetwork, api.Addr(), api.Port())), 0o600); err != nil {
		return "", err
	}
	out, err := f.Kubectl(ctx, "apply", "-f", manifest)
	if err != nil {
		return out, err
	}
	status, err := f.Kubectl(ctx, "-n", "kube-flannel", "rollout", "status", "daemonset/kube-flannel-ds", "--timeout=5m")
	return out + status, err
}

// WaitReady waits until every node is Ready (on a Flannel fleet, once
// Flannel and istio-cni have written their configs), then lifts the
// not-ready taint, as StartFleet does for a bridge fleet.
func (f *Fleet) WaitReady(ctx context.Context) error {
	for _, n := range f.Nodes {
		if err := n.waitReady(ctx); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

// waitPodCIDR waits for the node's pod range from the controller
// manager's IPAM and makes it the node's Subnet.
func (n *Node) waitPodCIDR(ctx context.Context) error {
	kubelet := n.components[len(n.components)-1]
	return poll(ctx, kubelet, func(ctx context.Context) error {
		var node struct {
			Spec struct {
				PodCIDR string `json:"podCIDR"`
			} `json:"spec"`
		}
		if err := n.getJSON(ctx, "/api/v1/nodes/"+n.Name, &node); err != nil {
			return err
		}
		if node.Spec.PodCIDR == "" {
			return fmt.Errorf("node %s has no podCIDR yet", n.Name)
		}
		p, err := netip.ParsePrefix(node.Spec.PodCIDR)
		if err != nil || !FlannelNetwork.Contains(p.Addr()) {
			return fmt.Errorf("node %s's podCIDR %q: want a range in %s", n.Name, node.Spec.PodCIDR, FlannelNetwork)
		}
		n.Subnet = p
		n.gateway = netip.PrefixFrom(p.Addr().Next(), p.Bits())
		return nil
	})
}

// getJSON reads path from the API server into v.
func (n *Node) getJSON(ctx context.Context, path string, v any) error {
	status, body, err := n.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

// InstallBeforeFlannel installs istio-cni, then Flannel, the order that
// has users wait longest: istio-cni's agents run on nodes with no primary
// CNI (they write no config and are not Ready); between the two, seen (if
// set) looks at the fleet. Flannel's config then arrives on every node,
// istio-cni's chains after it, and every node turns Ready. It returns
// kubectl's output.
func (f *Fleet) InstallBeforeFlannel(ctx context.Context, dir string, fastAudit bool, seen func(context.Context) error) (string, error) {
	out, err := f.Apply(ctx, filepath.Join(dir, "overlay"), fastAudit)
	if err != nil {
		return out, err
	}
	if seen != nil {
		if err := seen(ctx); err != nil {
			return out, err
		}
	}
	fl, err := f.InstallFlannel(ctx, filepath.Join(dir, "flannel"))
	out += fl
	if err != nil {
		return out, err
	}
	if err := f.WaitInstalled(ctx); err != nil {
		return out, err
	}
	return out, f.WaitReady(ctx)
}

// RejoinFlannel does on a Flannel node whose Node was deleted and has
// registered again what its operator must: the controller manager gave
// the new Node another pod range, which flanneld, started with the old
// one, does not follow, and which the other nodes' flanneld do not route
// (the new Node lacks its annotations). It waits for the new range (n's
// Subnet and this machine's route follow), deletes the node's cni0 (the
// bridge plugin refuses one holding the old gateway address), then the
// node's Flannel pod, and waits for its replacement to be Ready.
func (f *Fleet) RejoinFlannel(ctx context.Context, n *Node) error {
	if f.Primary != PrimaryFlannel {
		return fmt.Errorf("cluster: the fleet's primary is %q, not Flannel", f.Primary)
	}
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	old := n.Subnet
	if err := n.waitPodCIDR(ctx); err != nil {
		return err
	}
	if old != n.Subnet {
		_ = exec.Command("ip", "route", "del", old.String()).Run() // #nosec G204 -- the fleet's own route; gone already is fine
		if err := f.route(n); err != nil {
			return err
		}
	}
	if err := n.ns.run("ip", "link", "delete", fleetPodBridge); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		return err
	}
	if out, err := f.Kubectl(ctx, "-n", "kube-flannel", "delete", "pod", "-l", "app=flannel", "--field-selector", "spec.nodeName="+n.Name, "--wait=true", "--timeout=2m"); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	kubelet := n.components[len(n.components)-1]
	return poll(ctx, kubelet, func(ctx context.Context) error {
		var list struct {
			Items []Pod `json:"items"`
		}
		if err := n.getJSON(ctx, "/api/v1/namespaces/kube-flannel/pods?labelSelector=app%3Dflannel&fieldSelector=spec.nodeName%3D"+n.Name, &list); err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Metadata.DeletionTimestamp == nil && p.Status.Phase == "Running" && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready {
				return nil
			}
		}
		return fmt.Errorf("no Ready Flannel pod on %s yet", n.Name)
	})
}
