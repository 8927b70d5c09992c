package apiclient

import (
	"testing"
)

// The kubeconfig is read by the plugin as root at every pod start; it is
// the installer's, but a node's admin may edit it. Whatever it holds,
// reading it never panics: an unusable one is an error.
func FuzzParseKubeconfig(f *testing.F) {
	f.Add([]byte(`apiVersion: v1
clusters: [{name: local, cluster: {server: "https://10.96.0.1:443", certificate-authority-data: Q0E=}}]
contexts: [{name: c, context: {cluster: local, user: u}}]
current-context: c
users: [{name: u, user: {token: t}}]
`))
	f.Add([]byte(`{"current-context":"c","contexts":[{"name":"c","context":{"cluster":"x","user":"y"}}]}`))
	f.Add([]byte(`users: [{name: u, user: {exec: {command: sh}}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		kc, err := parseKubeconfig(data)
		if err != nil {
			return
		}
		cluster, user, err := kc.current()
		if err != nil {
			return
		}
		dir := t.TempDir() // empty: every file the kubeconfig names is missing
		rel := relativeTo(dir)
		cfg := &restConfig{}
		if cfg.host, cfg.tls, err = kc.cluster(cluster, rel); err != nil {
			return
		}
		_ = kc.credentials(user, rel, cfg)
	})
}
