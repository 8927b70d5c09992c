package install

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
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
func PluginTokenMinter(client kubeclient.Interface, namespace, serviceAccount string, ttl time.Duration, node string) (TokenMinter, error) {
	if namespace == "" || serviceAccount == "" {
		return nil, errors.New("the plugin ServiceAccount's namespace and name are needed to mint its token")
	}
	if node == "" {
		return nil, errors.New("the plugin's tokens are bound to the node: --node-name (NODE_NAME, downward API spec.nodeName) is required")
	}
	if ttl < MinPluginTokenTTL || ttl > MaxPluginTokenTTL {
		return nil, fmt.Errorf("the plugin's token lifetime %s: want %s to %s", ttl, MinPluginTokenTTL, MaxPluginTokenTTL)
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

// startTokens starts the keeper of the plugin's token, when there is one,
// and takes its first mint before the first reconcile, so a fresh node
// gets a working kubeconfig with everything else; the wait is bounded by
// the mint timeout, and a failure only means not ready until a retry. It
// returns the keeper's news (nil without a keeper) and what stops it.
func (in *Installer) startTokens(ctx context.Context) (<-chan tokenNews, func()) {
	if in.tokens == nil {
		return nil, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		in.tokens.run(ctx)
	}()
	select {
	case n := <-in.tokens.news:
		in.token = n.state
		in.refusedHold = n.agentRefused
	case <-ctx.Done():
	}
	return in.tokens.news, func() { cancel(); <-stopped }
}

// takeToken takes the keeper's news: a new token goes into the kubeconfig
// at once, and so does the lack of a valid one (readiness says why); the
// first token minted after a hold installs everything.
func (l *loop) takeToken(n tokenNews) {
	in := l.in
	in.token = n.state
	if n.lapsed {
		in.clearHeldNode()
	}
	switch {
	case in.refusedHold && n.changed:
		in.log.Info("the API accepts this agent again: installing")
		in.refusedHold = false
		l.now(trigger{reason: reasonInstall, at: in.now()})
	case n.changed || !n.state.valid(in.now()):
		in.writePluginToken()
	}
}

// PluginTokenRefused tells the installer that the API server refused the
// plugin's token (the plugin reports it): a new one is minted at once, at
// most every 30 s. Safe from any goroutine; it never blocks.
func (in *Installer) PluginTokenRefused() {
	if in.tokens != nil {
		in.tokens.reportRefused()
	}
}

// writePluginToken puts a new token into the kubeconfig. Only the
// kubeconfig is concerned, and it is written even while a fight paces other
// repairs: the plugin's credential must not lapse.
func (in *Installer) writePluginToken() {
	in.reconcile(trigger{reason: reasonPluginToken, at: in.now()})
}
