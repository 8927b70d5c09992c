package apiclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/install/kubeconfig"
)

// selfSigned is a PEM certificate and key, standing for a CA or a client.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func TestLoadKubeconfig(t *testing.T) {
	ca, _ := selfSigned(t)
	cert, key := selfSigned(t)
	dir := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": ca, "client.crt": cert, "client.key": key, "token": []byte("file-token\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b64 := base64.StdEncoding.EncodeToString
	// The installer's own output, as the plugin reads it on every node.
	installed, err := kubeconfig.Build(kubeconfig.Source{Server: "https://10.96.0.1:443", CAData: ca, Token: "minted"})
	if err != nil {
		t.Fatal(err)
	}
	doc := func(cluster, user string) string {
		return "clusters: [{name: c, cluster: {" + cluster + "}}]\nusers: [{name: u, user: {" + user + "}}]\n" +
			"contexts: [{name: other, context: {cluster: nope, user: u}}, {name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	}
	for _, tc := range []struct {
		name, data string
		host       string
		token      string
		certs, cas bool
		err        string
	}{
		{name: "the installer's", data: string(installed), host: "https://10.96.0.1:443", token: "minted", cas: true},
		{name: "token, CA data", data: doc("server: https://api:6443, certificate-authority-data: "+b64(ca), "token: t"), host: "https://api:6443", token: "t", cas: true},
		{name: "files relative to the kubeconfig", data: doc("server: api:6443/, certificate-authority: ca.crt", "tokenFile: token"), host: "https://api:6443", token: "file-token", cas: true},
		{name: "client certificate files", data: doc("server: https://api", "client-certificate: client.crt, client-key: "+filepath.Join(dir, "client.key")), host: "https://api", certs: true},
		{name: "client certificate data", data: doc("server: https://api", "client-certificate-data: "+b64(cert)+", client-key-data: "+b64(key)), host: "https://api", certs: true},
		{name: "JSON", data: `{"clusters":[{"name":"c","cluster":{"server":"https://api"}}],"users":[{"name":"u","user":{"token":"j"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`, host: "https://api", token: "j"},
		{name: "exec", data: doc("server: https://api", "exec: {command: aws}"), err: "exec and auth-provider credentials are not supported"},
		{name: "no credentials", data: doc("server: https://api", "username: admin"), err: "no credentials"},
		{name: "no server", data: doc("insecure-skip-tls-verify: true", "token: t"), err: `cluster "c": no server`},
		{name: "bad CA", data: doc("server: https://api, certificate-authority-data: "+b64([]byte("junk")), "token: t"), err: "no PEM certificate"},
		{name: "missing CA file", data: doc("server: https://api, certificate-authority: gone.crt", "token: t"), err: "certificate-authority"},
		{name: "no context", data: strings.Replace(doc("server: https://api", "token: t"), "current-context: x", "current-context: gone", 1), err: `current-context "gone"`},
		{name: "not YAML", data: "{{", err: "yaml"},
		{name: "over 1 MiB", data: doc("server: https://api", "token: t") + "# " + strings.Repeat("x", maxKubeconfig), err: "more than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadKubeconfig(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.host != tc.host || cfg.token != tc.token || (len(cfg.tls.Certificates) > 0) != tc.certs || (cfg.tls.RootCAs != nil) != tc.cas {
				t.Errorf("host %q token %q certs %d CAs %v; want %q %q %v %v", cfg.host, cfg.token, len(cfg.tls.Certificates),
					cfg.tls.RootCAs != nil, tc.host, tc.token, tc.certs, tc.cas)
			}
		})
	}
}
