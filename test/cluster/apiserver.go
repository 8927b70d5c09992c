// Package cluster starts real Kubernetes parts on loopback. StartAPIServer
// runs etcd and kube-apiserver alone, for integration tests and benchmarks:
// pods are stored, never run. StartNode adds kube-controller-manager,
// kube-scheduler, containerd and kubelet: a real single node whose pods
// run, for the e2e tests and the demo.
//
// Every child runs in its own process group with Pdeathsig=SIGKILL, and Stop
// ends exactly the processes Start started, by PID. APIServer.Pause and
// Resume, and Node.Reboot, stage outages for chaos tests: a process they
// restart takes its predecessor's place, for Stop and StopRecorded alike.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configures StartAPIServer.
type Options struct {
	// Dir holds certificates, tokens, etcd data and the logs
	// (etcd.log, kube-apiserver.log). Required; must exist.
	Dir string
	// StartTimeout bounds start-up; default 60s.
	StartTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL;
	// default 10s.
	StopGrace time.Duration
	// Host is the address the server binds and advertises, and its
	// serving certificate names; default 127.0.0.1. A fleet's nodes,
	// each in its own network namespace, reach it on their shared link.
	Host netip.Addr
	// AlsoNamed are more addresses the serving certificate names: a
	// node's gateway, where a proxy lets its pods (which have no Service
	// network) reach the server.
	AlsoNamed []netip.Addr
	// AuditUsers, when set, has the API server write an audit log
	// (AuditLogPath) of these users' requests, metadata only: what a
	// component costs the control plane, counted per request.
	AuditUsers []string
	// Node: controllers and a kubelet will run against this server, so
	// pods get service accounts (ServiceAccount admission stays on).
	Node bool
	// Detach: the processes outlive this one (no Pdeathsig) and are
	// recorded in Dir/pids for StopRecorded.
	Detach bool
}

// APIServer is a running etcd + kube-apiserver pair.
type APIServer struct {
	URL    string // https://<Options.Host>:<port>
	CAFile string // PEM of the CA that signed the serving cert
	Dir    string

	caPEM    []byte
	certs    certFiles
	token    string       // the static token file
	admin    *http.Client // trusts CAFile; requests carry a bearer token
	launcher *launcher
	etcd     *proc
	grace    time.Duration
	timeout  time.Duration // Options.StartTimeout, also for Resume

	// mu guards apiserv, which Resume replaces, and stopped, after which
	// Resume starts nothing.
	mu      sync.Mutex
	apiserv *proc
	stopped bool

	stopOnce sync.Once
	stopErr  error
}

// StartAPIServer starts etcd and kube-apiserver under o.Dir, installs the
// plugin's RBAC (unless o.Node), and returns once /readyz answers 200 and the plugin token
// is authorized. The processes outlive ctx; end them with Stop.
func StartAPIServer(ctx context.Context, o Options) (_ *APIServer, err error) {
	if o.Dir == "" {
		return nil, errors.New("cluster: Options.Dir is required")
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 10 * time.Second
	}
	apiBin, err := apiserverBinary()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	etcdBin, err := etcdBinary()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if !o.Host.IsValid() {
		o.Host = netip.MustParseAddr("127.0.0.1")
	}
	certs, err := writeCerts(o.Dir, append([]netip.Addr{o.Host}, o.AlsoNamed...))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	tokenFile, err := writeTokenFile(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	a := &APIServer{
		URL:      "https://" + netip.AddrPortFrom(o.Host, uint16(ports[0])).String(), // #nosec G115 -- a port
		CAFile:   certs.caCert,
		Dir:      o.Dir,
		caPEM:    certs.caPEM,
		certs:    certs,
		token:    tokenFile,
		launcher: newLauncher(pidFileFor(o)),
		grace:    o.StopGrace,
		timeout:  o.StartTimeout,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, a.Stop())
		}
	}()
	if a.admin, err = newClient(certs.caPEM); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()

	var etcdURL string
	a.etcd, etcdURL, err = startEtcd(ctx, a.launcher, etcdBin, o.Dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	args := apiserverArgs(o.Dir, o.Host, ports[0], etcdURL, certs, tokenFile)
	if len(o.AuditUsers) > 0 {
		policy, err := writeAuditPolicy(o.Dir, o.AuditUsers)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		args = append(args, "--audit-policy-file="+policy, "--audit-log-path="+AuditLogPath(o.Dir), "--audit-log-format=json")
	}
	if !o.Node {
		// Pods are created without a service account (no controller
		// manager makes the default one), so skip its admission plugin.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	a.apiserv, err = startProc(a.launcher, "kube-apiserver", apiBin, args, filepath.Join(o.Dir, "kube-apiserver.log"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := poll(ctx, a.apiserv, a.readyz); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// A node gets its RBAC from deployments/, as a user's cluster does.
	if !o.Node {
		if err := a.installPluginRBAC(ctx); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	return a, nil
}

func apiserverArgs(dir string, host netip.Addr, port int, etcdURL string, c certFiles, tokenFile string) []string {
	return []string{
		"--bind-address=" + host.String(),
		"--advertise-address=" + host.String(),
		"--secure-port=" + strconv.Itoa(port),
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + dir,
		"--tls-cert-file=" + c.servingCert,
		"--tls-private-key-file=" + c.servingKey,
		"--client-ca-file=" + c.caCert,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.saKey,
		"--service-account-signing-key-file=" + c.saKey,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		// Endpoints may not be loopback, so reconciling the kubernetes
		// Service onto 127.0.0.1 fails (and logs) forever. Nothing here
		// reaches the server through the Service IP.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		// exec and logs dial the kubelet at its node's IP: a node's
		// hostname resolves nowhere here.
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// readyz succeeds once GET /readyz answers 200; otherwise it names the
// failing checks.
func (a *APIServer) readyz(ctx context.Context) error {
	status, body, err := a.Do(ctx, http.MethodGet, "/readyz?verbose", nil)
	if err != nil {
		return err
	}
	if status == http.StatusOK {
		return nil
	}
	var failing []string
	for line := range strings.Lines(string(body)) {
		if check, ok := strings.CutPrefix(line, "[-]"); ok {
			failing = append(failing, strings.Fields(check)[0])
		}
	}
	return fmt.Errorf("/readyz: %d, failing: %s", status, strings.Join(failing, ", "))
}

// PIDs returns the process IDs of kube-apiserver and etcd (0 if not started).
func (a *APIServer) PIDs() (apiserver, etcd int) {
	if p := a.apiProc(); p != nil {
		apiserver = p.pid()
	}
	if a.etcd != nil {
		etcd = a.etcd.pid()
	}
	return apiserver, etcd
}

// Stop ends kube-apiserver, then etcd: SIGTERM to the PID it started, then
// SIGKILL after the grace period. It is safe to call more than once; later
// calls return the first result.
func (a *APIServer) Stop() error {
	a.stopOnce.Do(func() {
		a.mu.Lock()
		a.stopped = true
		procs := []*proc{a.apiserv, a.etcd}
		a.mu.Unlock()
		var errs []error
		for _, p := range procs {
			if p != nil {
				errs = append(errs, p.stop(a.grace))
			}
		}
		if a.launcher != nil {
			a.launcher.close()
		}
		if a.admin != nil {
			a.admin.CloseIdleConnections()
		}
		a.stopErr = errors.Join(errs...)
	})
	return a.stopErr
}

// newClient returns an HTTP client that trusts only caPEM.
func newClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in CA PEM")
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
	}}, nil
}
