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

// defaultMintTimeout bounds one TokenRequest; a failure is retried after
// defaultMintRetry.
const (
	defaultMintTimeout = 10 * time.Second
	defaultMintRetry   = 10 * time.Second
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
		return nil, fmt.Errorf("client for minting the plugin's token: %w", err)
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

// pluginTokenState is the minted token, when to replace it, and the
// mint in flight. Only Run's loop touches it.
type pluginTokenState struct {
	token     string
	expires   time.Time
	refreshAt time.Time // when to mint next; zero: at once
	minting   bool      // a mint runs; its result arrives on Installer.minted
	lastErr   error     // the last mint's failure, for readiness
}

type mintResult struct {
	token   string
	expires time.Time
	err     error
}

// startMint mints in the background, so a slow or unreachable API server
// never holds up a repair: the loop goes on and takes the result from
// in.minted.
func (in *Installer) startMint(ctx context.Context) {
	in.pluginTok.minting = true
	go func() {
		ctx, cancel := context.WithTimeout(ctx, in.mintTimeout)
		defer cancel()
		token, expires, err := in.mint(ctx)
		in.minted <- mintResult{token: token, expires: expires, err: err}
	}()
}

// minted takes a mint's result. Tokens are replaced at 80% of their
// lifetime (as kubelet does for projected tokens), so a failed mint is
// retried every mintRetry for a fifth of the lifetime before the plugin's
// token lapses. It reports whether the token changed.
func (in *Installer) mintDone(r mintResult) bool {
	st := &in.pluginTok
	st.minting = false
	now := in.now() // after the call, which may have taken mintTimeout
	switch {
	case r.err != nil:
		st.refreshAt, st.lastErr = now.Add(in.mintRetry), r.err
		if st.token != "" && now.Before(st.expires) {
			in.log.Warn("keeping the plugin's current token", "expires", st.expires.Format(time.RFC3339),
				"retry_in", in.mintRetry.String(), "error", r.err.Error())
		}
		return false
	case !r.expires.After(now):
		st.refreshAt = now.Add(in.mintRetry)
		st.lastErr = fmt.Errorf("minted plugin token expires at %s, which is not in the future: check the node's clock", r.expires.Format(time.RFC3339))
		return false
	}
	st.token, st.expires, st.lastErr = r.token, r.expires, nil
	st.refreshAt = now.Add(r.expires.Sub(now) * 4 / 5)
	in.log.Info("minted the plugin's token", "expires", r.expires.Format(time.RFC3339), "refresh_at", st.refreshAt.Format(time.RFC3339))
	return true
}

// pluginToken is the token for the plugin's kubeconfig: the minted one
// while it is valid. It never mints (the loop does, in the background), and
// never falls back to the installer's own token.
func (in *Installer) pluginToken() (string, error) {
	st := &in.pluginTok
	if st.token != "" && in.now().Before(st.expires) {
		return st.token, nil
	}
	if st.lastErr != nil {
		return "", fmt.Errorf("no valid token for the plugin: %w", st.lastErr)
	}
	return "", errors.New("no valid token for the plugin yet: minting")
}

// tokenRefresh fires when the next mint is due; nil when tokens are not
// minted or a mint is in flight.
func (in *Installer) tokenRefresh() <-chan time.Time {
	if in.mint == nil || in.pluginTok.minting {
		return nil
	}
	return time.After(in.pluginTok.refreshAt.Sub(in.now()))
}

// writePluginToken puts a new token into the kubeconfig. During a conflict
// reconcile stands still, but the plugin's credential must not lapse: only
// the kubeconfig is written then.
func (in *Installer) writePluginToken() {
	t := trigger{reason: reasonPluginToken, at: in.now()}
	if in.conflict == "" {
		in.reconcile(t)
		return
	}
	if o := in.run(fileKubeconfig, in.installKubeconfig); o.problem != nil {
		in.log.Warn("writing the plugin's new token", "error", o.problem.Error())
	}
}
