// Package kubeconfig builds the CNI plugin's kubeconfig from the installer's
// own service-account credentials.
package kubeconfig

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Source is what the kubeconfig is built from.
type Source struct {
	Server string // e.g. https://10.96.0.1:443
	CAData []byte // PEM certificates the server is verified against
	Token  string // bearer token
}

// FromServiceAccount reads token and ca.crt from dir, the projected
// service-account volume, and the API server from host and port (the values
// of the env vars hostEnvName and portEnvName, named in errors).
//
// Reading follows symlinks: the volume's files are links into its ..data
// directory, and the volume is our own pod's.
func FromServiceAccount(dir, hostEnvName, host, portEnvName, port string) (Source, error) {
	server, err := serverURL(hostEnvName, host, portEnvName, port)
	if err != nil {
		return Source{}, err
	}
	token, err := readToken(filepath.Join(dir, "token"))
	if err != nil {
		return Source{}, err
	}
	ca, err := readCA(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return Source{}, err
	}
	return Source{Server: server, CAData: ca, Token: token}, nil
}

// serverURL joins host and port into an https URL; net.JoinHostPort
// brackets an IPv6 host.
func serverURL(hostEnvName, host, portEnvName, port string) (string, error) {
	// Tolerate a host that is already bracketed so it is not bracketed twice.
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if h == "" {
		return "", fmt.Errorf("%s is empty: the API server host is needed", hostEnvName)
	}
	if strings.ContainsAny(h, "/[]@?# \t\r\n") {
		return "", fmt.Errorf("%s=%q: not a host name or IP address", hostEnvName, host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", fmt.Errorf("%s=%q: not a port number (1-65535)", portEnvName, port)
	}
	return "https://" + net.JoinHostPort(h, strconv.FormatUint(p, 10)), nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path) // #nosec G304 -- our own service-account volume
	if err != nil {
		return "", fmt.Errorf("reading service-account token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("service-account token %s is empty", path)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("service-account token %s contains whitespace: not a bearer token", path)
	}
	return token, nil
}

// readCA accepts a file of one or more PEM certificates and nothing else,
// so a truncated or wrong file fails here rather than at the plugin's first
// API call.
func readCA(path string) ([]byte, error) {
	b, err := os.ReadFile(path) // #nosec G304 -- our own service-account volume
	if err != nil {
		return nil, fmt.Errorf("reading service-account CA: %w", err)
	}
	rest, n := b, 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("service-account CA %s: PEM block %d is %q, want CERTIFICATE", path, n+1, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("service-account CA %s: certificate %d: %w", path, n+1, err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("service-account CA %s holds no PEM certificate", path)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("service-account CA %s: data after the last PEM certificate", path)
	}
	return b, nil
}
