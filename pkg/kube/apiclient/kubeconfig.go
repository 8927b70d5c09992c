package apiclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// kubeconfigFile is the part of a kubeconfig file the plugin uses: the current
// context's cluster and user, with the fields the installer writes plus the
// usual file-based variants. client-go's loader would cost every plugin
// exec (ADD, DEL, CHECK, excluded pods included) a few milliseconds of
// package init for features a node-local credential never uses.
type kubeconfigFile struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			TLSServerName            string `json:"tls-server-name"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Token                 string         `json:"token"`
			TokenFile             string         `json:"tokenFile"`
			ClientCertificate     string         `json:"client-certificate"`
			ClientCertificateData []byte         `json:"client-certificate-data"`
			ClientKey             string         `json:"client-key"`
			ClientKeyData         []byte         `json:"client-key-data"`
			Exec                  map[string]any `json:"exec"`
			AuthProvider          map[string]any `json:"auth-provider"`
		} `json:"user"`
	} `json:"users"`
}

// maxKubeconfig bounds the file read: a kubeconfig is a few kilobytes.
const maxKubeconfig = 1 << 20

// restConfig is what a request needs: where, whom to trust, who we are.
type restConfig struct {
	host  string
	tls   *tls.Config
	token string
}

// loadKubeconfig reads path's current context. Relative file paths in it
// are relative to the file's directory, as kubectl reads them. Exec and
// auth-provider credentials are refused: the plugin runs per pod start and
// must not start programs to get a token.
func loadKubeconfig(path string) (*restConfig, error) {
	kc, err := readKubeconfig(path)
	if err != nil {
		return nil, err
	}
	clusterName, userName, err := kc.current()
	if err != nil {
		return nil, err
	}
	rel := relativeTo(filepath.Dir(path))
	cfg := &restConfig{}
	if cfg.host, cfg.tls, err = kc.cluster(clusterName, rel); err != nil {
		return nil, err
	}
	if err := kc.credentials(userName, rel, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// readKubeconfig reads and parses the file, at most maxKubeconfig bytes.
func readKubeconfig(path string) (*kubeconfigFile, error) {
	f, err := os.Open(path) // #nosec G304 -- the configured kubeconfig
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKubeconfig+1))
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	return parseKubeconfig(data)
}

func parseKubeconfig(data []byte) (*kubeconfigFile, error) {
	if len(data) > maxKubeconfig {
		return nil, fmt.Errorf("more than %d bytes", maxKubeconfig)
	}
	var kc kubeconfigFile
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, err
	}
	return &kc, nil
}

// current names the current context's cluster and user.
func (kc *kubeconfigFile) current() (cluster, user string, err error) {
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			cluster, user = c.Context.Cluster, c.Context.User
		}
	}
	if cluster == "" {
		return "", "", fmt.Errorf("current-context %q: no such context with a cluster", kc.CurrentContext)
	}
	return cluster, user, nil
}

// relativeTo resolves a path the kubeconfig names against its directory.
func relativeTo(dir string) func(string) string {
	return func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
}

// cluster is where the API server is and whom to trust there.
func (kc *kubeconfigFile) cluster(name string, rel func(string) string) (string, *tls.Config, error) {
	for _, c := range kc.Clusters {
		if c.Name != name {
			continue
		}
		cl := c.Cluster
		host := strings.TrimSuffix(cl.Server, "/")
		if host == "" {
			return "", nil, fmt.Errorf("cluster %q: no server", name)
		}
		if !strings.Contains(host, "://") {
			host = "https://" + host
		}
		conf := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, ServerName: cl.TLSServerName,
			InsecureSkipVerify: cl.InsecureSkipTLSVerify} // #nosec G402 -- the kubeconfig's explicit choice
		ca := cl.CertificateAuthorityData
		if len(ca) == 0 && cl.CertificateAuthority != "" {
			var err error
			if ca, err = os.ReadFile(rel(cl.CertificateAuthority)); err != nil {
				return "", nil, fmt.Errorf("cluster %q: certificate-authority: %w", name, err)
			}
		}
		if len(ca) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return "", nil, fmt.Errorf("cluster %q: certificate-authority: no PEM certificate", name)
			}
			conf.RootCAs = pool
		}
		return host, conf, nil
	}
	return "", nil, fmt.Errorf("context %q: no cluster %q", kc.CurrentContext, name)
}

// credentials sets who we are: the user's token or client certificate.
func (kc *kubeconfigFile) credentials(name string, rel func(string) string, cfg *restConfig) error {
	for _, u := range kc.Users {
		if u.Name != name {
			continue
		}
		us := u.User
		switch {
		case us.Exec != nil || us.AuthProvider != nil:
			return fmt.Errorf("user %q: exec and auth-provider credentials are not supported: want a token or a client certificate", name)
		case us.Token != "":
			cfg.token = us.Token
		case us.TokenFile != "":
			b, err := os.ReadFile(rel(us.TokenFile))
			if err != nil {
				return fmt.Errorf("user %q: tokenFile: %w", name, err)
			}
			cfg.token = strings.TrimSpace(string(b))
		}
		cert, key := us.ClientCertificateData, us.ClientKeyData
		var err error
		if len(cert) == 0 && us.ClientCertificate != "" {
			if cert, err = os.ReadFile(rel(us.ClientCertificate)); err != nil {
				return fmt.Errorf("user %q: client-certificate: %w", name, err)
			}
		}
		if len(key) == 0 && us.ClientKey != "" {
			if key, err = os.ReadFile(rel(us.ClientKey)); err != nil {
				return fmt.Errorf("user %q: client-key: %w", name, err)
			}
		}
		if len(cert) > 0 || len(key) > 0 {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return fmt.Errorf("user %q: client certificate: %w", name, err)
			}
			cfg.tls.Certificates = []tls.Certificate{pair}
		}
	}
	if cfg.token == "" && len(cfg.tls.Certificates) == 0 {
		return errors.New("no credentials: want the user's token, tokenFile or client certificate")
	}
	return nil
}

// httpClient makes one client for the process's few requests: HTTP/1.1,
// which skips HTTP/2's connection preface and settings for a single GET;
// the environment's proxy settings, as client-go honours them; the bearer
// token, when there is one, on every request.
func (c *restConfig) httpClient() *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     c.tls,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   false,
		Proxy:               http.ProxyFromEnvironment, // as client-go does
	}
	var rt http.RoundTripper = tr
	if c.token != "" {
		rt = bearer{token: c.token, next: tr}
	}
	return &http.Client{Transport: rt}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
