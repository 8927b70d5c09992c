package kubeconfig

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubernetes"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// saDir lays files out like a projected service-account volume: the names
// are symlinks into ..data, itself a link to a timestamped directory.
func saDir(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func fromEnv(dir, host, port string) (Source, error) {
	return FromServiceAccount(dir, "KUBERNETES_SERVICE_HOST", host, "KUBERNETES_SERVICE_PORT", port)
}

func TestRoundTrip(t *testing.T) {
	ca := testCA(t)
	dir := saDir(t, map[string][]byte{"token": []byte("header.payload.sig\n"), "ca.crt": ca})
	src, err := fromEnv(dir, "10.96.0.1", "443")
	if err != nil {
		t.Fatal(err)
	}
	want := Source{Server: "https://10.96.0.1:443", CAData: ca, Token: "header.payload.sig"}
	if src.Server != want.Server || src.Token != want.Token || !bytes.Equal(src.CAData, ca) {
		t.Fatalf("FromServiceAccount = %+v, want %+v", src, want)
	}
	out, err := Build(src)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "istio-cni" || cfg.Contexts["istio-cni"].Cluster != "local" || cfg.Contexts["istio-cni"].AuthInfo != "istio-cni" {
		t.Errorf("unexpected contexts: current %q, %+v", cfg.CurrentContext, cfg.Contexts)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != want.Server || rc.BearerToken != want.Token || !bytes.Equal(rc.CAData, ca) {
		t.Errorf("client config host %q token %q CA equal %v", rc.Host, rc.BearerToken, bytes.Equal(rc.CAData, ca))
	}

	// The plugin loads its kubeconfig from a file path.
	path := filepath.Join(t.TempDir(), "ZZZ-istio-cni-kubeconfig")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err = clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != want.Server || rc.BearerToken != want.Token || !bytes.Equal(rc.CAData, ca) {
		t.Errorf("loaded from file: host %q token %q", rc.Host, rc.BearerToken)
	}
}

func TestServerURL(t *testing.T) {
	for _, tc := range []struct{ host, port, want string }{
		{"10.96.0.1", "443", "https://10.96.0.1:443"},
		{"fd00:10:96::1", "443", "https://[fd00:10:96::1]:443"},
		{"[fd00:10:96::1]", "6443", "https://[fd00:10:96::1]:6443"},
		{"kubernetes.default.svc", "00443", "https://kubernetes.default.svc:443"},
	} {
		got, err := serverURL("H", tc.host, "P", tc.port)
		if err != nil || got != tc.want {
			t.Errorf("serverURL(%q, %q) = %q, %v; want %q", tc.host, tc.port, got, err, tc.want)
		}
	}
}

func TestErrorsNameTheProblem(t *testing.T) {
	ca := testCA(t)
	token := []byte("tok")
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("x")})
	for _, tc := range []struct {
		name       string
		files      map[string][]byte
		host, port string
		want       []string
	}{
		{"missing token", map[string][]byte{"ca.crt": ca}, "10.0.0.1", "443", []string{"token", "no such file"}},
		{"empty token", map[string][]byte{"token": []byte(" \n"), "ca.crt": ca}, "10.0.0.1", "443", []string{"token", "empty"}},
		{"token with space", map[string][]byte{"token": []byte("a b"), "ca.crt": ca}, "10.0.0.1", "443", []string{"token", "whitespace"}},
		{"missing CA", map[string][]byte{"token": token}, "10.0.0.1", "443", []string{"ca.crt", "no such file"}},
		{"CA not PEM", map[string][]byte{"token": token, "ca.crt": []byte("hello")}, "10.0.0.1", "443", []string{"ca.crt", "no PEM certificate"}},
		{"CA is a key", map[string][]byte{"token": token, "ca.crt": key}, "10.0.0.1", "443", []string{"ca.crt", "PRIVATE KEY"}},
		{"CA trailing junk", map[string][]byte{"token": token, "ca.crt": append(bytes.Clone(ca), "junk"...)}, "10.0.0.1", "443", []string{"ca.crt", "after the last"}},
		{"empty host", map[string][]byte{"token": token, "ca.crt": ca}, "", "443", []string{"KUBERNETES_SERVICE_HOST", "empty"}},
		{"host with path", map[string][]byte{"token": token, "ca.crt": ca}, "a/b", "443", []string{"KUBERNETES_SERVICE_HOST", "a/b"}},
		{"port zero", map[string][]byte{"token": token, "ca.crt": ca}, "10.0.0.1", "0", []string{"KUBERNETES_SERVICE_PORT", "1-65535"}},
		{"port too big", map[string][]byte{"token": token, "ca.crt": ca}, "10.0.0.1", "65536", []string{"KUBERNETES_SERVICE_PORT", "65536"}},
		{"port named", map[string][]byte{"token": token, "ca.crt": ca}, "10.0.0.1", "https", []string{"KUBERNETES_SERVICE_PORT", "https"}},
		{"port empty", map[string][]byte{"token": token, "ca.crt": ca}, "10.0.0.1", "", []string{"KUBERNETES_SERVICE_PORT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fromEnv(saDir(t, tc.files), tc.host, tc.port)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	s := Source{Server: "https://[fd00::1]:443", CAData: testCA(t), Token: "tok"}
	first, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("Build output differs:\n%s\n---\n%s", first, again)
		}
	}
}

func TestBuildRejectsIncompleteSource(t *testing.T) {
	ca := testCA(t)
	for _, tc := range []struct {
		src  Source
		want string
	}{
		{Source{Server: "", CAData: ca, Token: "t"}, "server"},
		{Source{Server: "http://10.0.0.1:80", CAData: ca, Token: "t"}, "https"},
		{Source{Server: "https://10.0.0.1:443", Token: "t"}, "CA data is empty"},
		{Source{Server: "https://10.0.0.1:443", CAData: ca}, "token is empty"},
		{Source{Server: "https://10.0.0.1:443", CAData: ca, Token: "a\nb"}, "whitespace"},
	} {
		if _, err := Build(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build(%+v) = %v, want an error mentioning %q", tc.src, err, tc.want)
		}
	}
}
