package kubeconfig

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Names inside the kubeconfig; the plugin uses whatever context is current.
const (
	clusterName = "local"
	userName    = "istio-cni"
	contextName = "istio-cni"
)

// Build renders the plugin's kubeconfig: cluster "local" (server and CA
// data), user "istio-cni" (the token) and the current context "istio-cni"
// joining them. The same Source always gives the same bytes, so a
// hash-guarded write of the result only happens when a credential changed.
func Build(s Source) ([]byte, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("building kubeconfig: %w", err)
	}
	cluster := clientcmdapi.NewCluster()
	cluster.Server = s.Server
	cluster.CertificateAuthorityData = s.CAData
	user := clientcmdapi.NewAuthInfo()
	user.Token = s.Token
	ctx := clientcmdapi.NewContext()
	ctx.Cluster = clusterName
	ctx.AuthInfo = userName

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = cluster
	cfg.AuthInfos[userName] = user
	cfg.Contexts[contextName] = ctx
	cfg.CurrentContext = contextName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("building kubeconfig: %w", err)
	}
	return out, nil
}

func (s Source) validate() error {
	u, err := url.Parse(s.Server)
	if err != nil {
		return fmt.Errorf("server %q: %w", s.Server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("server %q: want https://host:port", s.Server)
	}
	if len(s.CAData) == 0 {
		return errors.New("CA data is empty")
	}
	if s.Token == "" {
		return errors.New("token is empty")
	}
	if strings.ContainsAny(s.Token, " \t\r\n") {
		return errors.New("token contains whitespace")
	}
	return nil
}

// Ours reports whether data is a kubeconfig this package built: its
// current context is ours. Upstream Istio's installer writes the plugin's
// kubeconfig at the same path with the context "istio-cni-context"; an
// uninstall removes only ours.
func Ours(data []byte) bool {
	cfg, err := clientcmd.Load(data)
	if err != nil || cfg.CurrentContext != contextName {
		return false
	}
	ctx := cfg.Contexts[contextName]
	return ctx != nil && ctx.Cluster == clusterName && ctx.AuthInfo == userName
}
