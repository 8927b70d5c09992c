package install

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// TokenMinter returns a new bearer token for the plugin and when it expires.
type TokenMinter func(ctx context.Context) (token string, expires time.Time, err error)

// Token lifetimes the API server accepts: it refuses less than 10 minutes,
// and a day bounds how long a token copied off a node stays useful.
const (
	MinPluginTokenTTL = 10 * time.Minute
	MaxPluginTokenTTL = 24 * time.Hour
)

// mintTimeout bounds one TokenRequest; a failure is retried after
// mintRetry while the current token is still good.
const (
	mintTimeout = 10 * time.Second
	mintRetry   = 10 * time.Second
)

// PluginTokenMinter mints tokens for the plugin's own ServiceAccount with
// the TokenRequest API, so the kubeconfig on the host carries only the
// plugin's rights (get pods), not the installer's.
func PluginTokenMinter(cfg *rest.Config, namespace, serviceAccount string, ttl time.Duration) (TokenMinter, error) {
	if namespace == "" || serviceAccount == "" {
		return nil, errors.New("the plugin ServiceAccount's namespace and name are needed to mint its token")
	}
	client, err := corev1.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	seconds := int64(ttl / time.Second)
	return func(ctx context.Context) (string, time.Time, error) {
		tr, err := client.ServiceAccounts(namespace).CreateToken(ctx, serviceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}},
			metav1.CreateOptions{})
		if err != nil {
			return "", time.Time{}, fmt.Errorf("minting a token for ServiceAccount %s/%s: %w", namespace, serviceAccount, err)
		}
		if tr.Status.Token == "" {
			return "", time.Time{}, fmt.Errorf("minting a token for ServiceAccount %s/%s: the API server returned an empty token", namespace, serviceAccount)
		}
		return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
	}, nil
}

// pluginTokenState is the minted token and when to replace it.
type pluginTokenState struct {
	token     string
	expires   time.Time
	refreshAt time.Time // zero: mint at the next reconcile
}

// pluginToken returns the token for the plugin's kubeconfig: the minted one
// while it is fresh, else a new one. Tokens are replaced at 80% of their
// lifetime (as kubelet does for projected tokens), so a failed mint is
// retried for a fifth of the lifetime before the plugin's token lapses.
func (in *Installer) pluginToken() (string, error) {
	now := in.now()
	st := &in.pluginTok
	if st.token != "" && now.Before(st.refreshAt) {
		return st.token, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), mintTimeout)
	defer cancel()
	token, expires, err := in.mint(ctx)
	if err != nil {
		st.refreshAt = now.Add(mintRetry)
		if st.token != "" && now.Before(st.expires) {
			in.log.Warn("keeping the plugin's current token", "expires", st.expires, "retry_in", mintRetry.String(), "error", err.Error())
			return st.token, nil
		}
		return "", err
	}
	if !expires.After(now) {
		st.refreshAt = now.Add(mintRetry)
		return "", fmt.Errorf("minted plugin token expires at %s, which is not in the future: check the node's clock", expires.Format(time.RFC3339))
	}
	st.token, st.expires = token, expires
	st.refreshAt = now.Add(expires.Sub(now) * 4 / 5)
	in.log.Info("minted the plugin's token", "expires", expires.Format(time.RFC3339), "refresh_at", st.refreshAt.Format(time.RFC3339))
	return token, nil
}

// tokenRefresh fires when the plugin's token is due to be replaced (or a
// failed mint to be retried); nil when tokens are not minted.
func (in *Installer) tokenRefresh() <-chan time.Time {
	if in.mint == nil || in.pluginTok.refreshAt.IsZero() {
		return nil
	}
	return time.After(in.pluginTok.refreshAt.Sub(in.now()))
}
