package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/nodeagent/health"
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
// plugin's rights (get pods), not the installer's. Each token lives ttl (at
// most MaxPluginTokenTTL), has the API server's own audience (the plugin
// uses it only there, and the API server accepts no other) and is bound to
// node: the API server puts the node in its claims and refuses it once the
// Node object is gone or re-registered (a new UID), so a copy taken off the
// node cannot outlive the node, and one node's tokens can be revoked alone
// (docs/security.md). Such a token lives through agent restarts and
// upgrades. Binding to a Node needs Kubernetes 1.31+
// (ServiceAccountTokenNodeBinding, GA in 1.33); the agent's pod cannot
// stand in, because the API server binds a token only to a pod that runs
// as the token's own ServiceAccount.
func PluginTokenMinter(cfg *rest.Config, namespace, serviceAccount string, ttl time.Duration, node string) (TokenMinter, error) {
	if namespace == "" || serviceAccount == "" {
		return nil, errors.New("the plugin ServiceAccount's namespace and name are needed to mint its token")
	}
	if node == "" {
		return nil, errors.New("the plugin's tokens are bound to the node: --node-name (NODE_NAME, downward API spec.nodeName) is required")
	}
	if ttl < MinPluginTokenTTL || ttl > MaxPluginTokenTTL {
		return nil, fmt.Errorf("the plugin's token lifetime %s: want %s to %s", ttl, MinPluginTokenTTL, MaxPluginTokenTTL)
	}
	client, err := corev1.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for minting the plugin's token: %w", err)
	}
	seconds := int64(ttl / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node}}}
	return func(ctx context.Context) (string, time.Time, error) {
		tr, err := client.ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, req.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsBadRequest(err) {
			return "", time.Time{}, fmt.Errorf("minting a token for ServiceAccount %s/%s bound to node %s: %w "+
				"(binding tokens to a Node needs Kubernetes 1.31+ with the ServiceAccountTokenNodeBinding feature)", namespace, serviceAccount, node, err)
		}
		if err != nil {
			return "", time.Time{}, fmt.Errorf("minting a token for ServiceAccount %s/%s: %w", namespace, serviceAccount, err)
		}
		if tr.Status.Token == "" {
			return "", time.Time{}, fmt.Errorf("minting a token for ServiceAccount %s/%s: the API server returned an empty token", namespace, serviceAccount)
		}
		return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
	}, nil
}

// pluginTokens is the plugin's minted token, when to replace it, and the
// mint in flight. Only Run's loop touches it.
type pluginTokens struct {
	mint    TokenMinter
	log     *slog.Logger
	now     func() time.Time
	minted  chan mintResult // background mints report here
	timeout time.Duration   // bounds one mint
	retry   time.Duration   // after a failed mint
	// refusedGap is the least time between mints a refusal asks for.
	refusedGap time.Duration
	busy       *health.Beat // a mint in flight, for /healthz

	token     string
	expires   time.Time
	refreshAt time.Time // when to mint next; zero: at once
	started   time.Time // when the last mint started
	minting   bool      // a mint runs; its result arrives on minted
	lastErr   error     // the last mint's failure, for readiness
	// mints counts mints by result (success, failure); nil: not counted.
	mints *prometheus.CounterVec
}

type mintResult struct {
	token   string
	expires time.Time
	err     error
}

func newPluginTokens(mint TokenMinter, log *slog.Logger, now func() time.Time) *pluginTokens {
	return &pluginTokens{mint: mint, log: log, now: now, minted: make(chan mintResult, 1),
		timeout: defaultMintTimeout, retry: defaultMintRetry, refusedGap: defaultRefusedGap}
}

// start mints in the background, so a slow or unreachable API server never
// holds up a repair: the loop goes on and takes the result from minted.
func (p *pluginTokens) start(ctx context.Context) {
	p.minting, p.started = true, p.now()
	p.busy.Start()
	go func() {
		ctx, cancel := context.WithTimeout(ctx, p.timeout)
		defer cancel()
		token, expires, err := p.mint(ctx)
		p.minted <- mintResult{token: token, expires: expires, err: err}
	}()
}

// done takes a mint's result. Tokens are replaced at 80% of their lifetime
// (as kubelet does for projected tokens), so a failed mint is retried every
// retry for a fifth of the lifetime before the plugin's token lapses. It
// reports whether the token changed.
func (p *pluginTokens) done(r mintResult) bool {
	p.minting = false
	p.busy.Done()
	now := p.now() // after the call, which may have taken the timeout
	if p.mints != nil {
		result := "success"
		if r.err != nil || !r.expires.After(now) {
			result = "failure"
		}
		p.mints.WithLabelValues(result).Inc()
	}
	switch {
	case r.err != nil:
		p.refreshAt, p.lastErr = now.Add(p.retry), r.err
		if p.valid() {
			p.log.Warn("keeping the plugin's current token", "expires", p.expires.Format(time.RFC3339),
				"retry_in", p.retry.String(), "error", r.err.Error())
		}
		return false
	case !r.expires.After(now):
		p.refreshAt = now.Add(p.retry)
		p.lastErr = fmt.Errorf("minted plugin token expires at %s, which is not in the future: check the node's clock", r.expires.Format(time.RFC3339))
		return false
	}
	p.token, p.expires, p.lastErr = r.token, r.expires, nil
	p.refreshAt = now.Add(r.expires.Sub(now) * 4 / 5)
	p.log.Info("minted the plugin's token", "expires", r.expires.Format(time.RFC3339), "refresh_at", p.refreshAt.Format(time.RFC3339))
	return true
}

func (p *pluginTokens) valid() bool { return p.token != "" && p.now().Before(p.expires) }

// current is the token for the plugin's kubeconfig: the minted one while it
// is valid. It never mints (the loop does, in the background), and never
// falls back to the installer's own token.
func (p *pluginTokens) current() (string, error) {
	if p.valid() {
		return p.token, nil
	}
	if p.lastErr != nil {
		return "", fmt.Errorf("no valid token for the plugin: %w", p.lastErr)
	}
	return "", errors.New("no valid token for the plugin yet: minting")
}

// defaultRefusedGap is the least time between mints that a refused token
// asks for: whatever reports the refusal, it costs the API server at most
// one TokenRequest per node per gap.
const defaultRefusedGap = 30 * time.Second

// refused is told that the API server refused the current token (the plugin
// reported a denied lookup: its Node re-registered, its pod is gone, or it
// was revoked another way). It reports whether to mint now.
func (p *pluginTokens) refused() bool {
	return !p.minting && p.now().Sub(p.started) >= p.refusedGap
}

// due fires when the next mint is due; nil when a mint is in flight.
func (p *pluginTokens) due() <-chan time.Time {
	if p.minting {
		return nil
	}
	return time.After(p.refreshAt.Sub(p.now()))
}

// PluginTokenRefused tells the installer that the API server refused the
// plugin's token (the plugin reports it): a new one is minted at once, at
// most every 30 s. Safe from any goroutine; it never blocks.
func (in *Installer) PluginTokenRefused() {
	select {
	case in.refused <- struct{}{}:
	default:
	}
}

// writePluginToken puts a new token into the kubeconfig. Only the
// kubeconfig is concerned, and it is written even while a fight paces other
// repairs: the plugin's credential must not lapse.
func (in *Installer) writePluginToken() {
	in.reconcile(trigger{reason: reasonPluginToken, at: in.now()})
}
