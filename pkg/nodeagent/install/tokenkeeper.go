package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"istio-cni.local/istio-cni/pkg/nodeagent/health"
)

// pluginToken keeps the plugin's minted token on a goroutine of its own
// (run): it mints in the background, renews at 80% of the lifetime, mints
// at once when the plugin reports the token refused or the node it is
// bound to registered again, and tells Run's loop of every mint (news).
// The loop only takes the news, so a slow or unreachable API server never
// holds up a repair.
type pluginToken struct {
	mint    TokenMinter
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration // bounds one mint
	retry   time.Duration // after a failed mint
	// refusedGap is the least time between mints a refusal asks for.
	refusedGap time.Duration
	// nodeUID reads the UID of the node the token is bound to, every
	// nodeEvery (tokennode.go); nil: never checked.
	nodeUID   func(ctx context.Context, fresh bool) (string, error)
	nodeEvery time.Duration
	// lifetime is the plugin's tokens' (Config.PluginTokenTTL): once the
	// API has refused the agent that long since it started, no token an
	// earlier run minted is valid (removed.go).
	lifetime time.Duration
	busy     *health.Beat           // a mint in flight, for /healthz
	mints    *prometheus.CounterVec // mints by result; nil: not counted

	refusals chan struct{} // the plugin reported the token refused
	// news goes to the loop, unbuffered: each is taken before the next
	// mint can start.
	news     chan tokenNews
	minted   chan mintResult // the background mint's result
	nodeSeen chan string     // the node's UID, as a check read it

	// Only run's goroutine touches the rest.
	state     tokenState
	refreshAt time.Time // when to mint next
	started   time.Time // when the last mint started
	minting   bool      // a mint runs; its result arrives on minted
	results   int       // mints that returned
	// refusedSince: the first mint was refused for the agent's own
	// credentials, and none succeeded since; zero otherwise.
	refusedSince time.Time
	due          *time.Timer // fires at refreshAt
	lapse        *time.Timer // fires a lifetime after refusedSince
}

// tokenState is the plugin's token, or why there is none: what its
// kubeconfig is to carry.
type tokenState struct {
	token   string
	expires time.Time
	err     error // the last mint's failure
}

func (s tokenState) valid(now time.Time) bool { return s.token != "" && now.Before(s.expires) }

// current is the token for the plugin's kubeconfig: the minted one while it
// is valid. It never falls back to the installer's own token.
func (s tokenState) current(now time.Time) (string, error) {
	if s.valid(now) {
		return s.token, nil
	}
	if s.err != nil {
		return "", fmt.Errorf("no valid token for the plugin: %w", s.err)
	}
	return "", errors.New("no valid token for the plugin yet: minting")
}

// tokenNews is what the keeper tells the loop: after each mint, and when a
// refusal has lasted the token lifetime.
type tokenNews struct {
	state   tokenState
	changed bool // a new token
	// agentRefused: this mint was refused for the agent's own
	// credentials (agentRefused in removed.go).
	agentRefused bool
	// lapsed: the API has refused the agent since its start for a whole
	// token lifetime.
	lapsed bool
}

type mintResult struct {
	token   string
	expires time.Time
	err     error
}

// defaultRefusedGap is the least time between mints that a refused token
// asks for: whatever reports the refusal, it costs the API server at most
// one TokenRequest per node per gap.
const defaultRefusedGap = 30 * time.Second

// newPluginToken is the keeper of deps.PluginToken's tokens; deps has its
// defaults filled in.
func newPluginToken(deps Deps, lifetime time.Duration) *pluginToken {
	p := &pluginToken{mint: deps.PluginToken, log: deps.Log, now: deps.Now,
		timeout: defaultMintTimeout, retry: defaultMintRetry, refusedGap: defaultRefusedGap,
		nodeUID: deps.NodeUID, nodeEvery: nodeCheckEvery, lifetime: lifetime, mints: deps.Metrics.TokenMints,
		refusals: make(chan struct{}, 1), news: make(chan tokenNews), minted: make(chan mintResult, 1),
		nodeSeen: make(chan string, 1), due: stoppedTimer(), lapse: stoppedTimer()}
	if deps.Liveness != nil {
		p.busy = deps.Liveness.Episodic("token minter", 3*defaultMintTimeout)
	}
	return p
}

// run mints the first token at once, then keeps it until ctx ends.
func (p *pluginToken) run(ctx context.Context) {
	defer p.due.Stop()
	defer p.lapse.Stop()
	var nodeTick <-chan time.Time
	if p.nodeUID != nil {
		t := time.NewTicker(p.nodeEvery)
		defer t.Stop()
		nodeTick = t.C
	}
	p.start(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-p.minted:
			if !p.tell(ctx, p.done(r)) {
				return
			}
		case <-p.lapse.C:
			if !p.tell(ctx, tokenNews{state: p.state, lapsed: p.lapsed()}) {
				return
			}
		case <-p.due.C:
			p.start(ctx)
		case <-p.refusals:
			p.onRefusal(ctx)
		case <-nodeTick:
			p.checkNode(ctx)
		case uid := <-p.nodeSeen:
			p.onNodeUID(ctx, uid)
		}
	}
}

// tell hands the loop news; false when ctx ended first.
func (p *pluginToken) tell(ctx context.Context, n tokenNews) bool {
	select {
	case p.news <- n:
		return true
	case <-ctx.Done():
		return false
	}
}

// start mints in the background: the result arrives on minted.
func (p *pluginToken) start(ctx context.Context) {
	p.due.Stop()
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
// retry for a fifth of the lifetime before the plugin's token lapses.
func (p *pluginToken) done(r mintResult) tokenNews {
	p.minting = false
	p.busy.Done()
	now := p.now() // after the call, which may have taken the timeout
	p.count(r, now)
	n := tokenNews{agentRefused: agentRefused(r.err)}
	if p.results++; p.results == 1 && n.agentRefused && p.lifetime > 0 {
		p.refusedSince = now
		p.lapse.Reset(p.lifetime)
	}
	switch {
	case r.err != nil:
		p.refreshAt, p.state.err = now.Add(p.retry), r.err
		if p.state.valid(now) {
			p.log.Warn("keeping the plugin's current token", "expires", p.state.expires.Format(time.RFC3339),
				"retry_in", p.retry.String(), "error", r.err.Error())
		}
	case !r.expires.After(now):
		p.refreshAt = now.Add(p.retry)
		p.state.err = fmt.Errorf("minted plugin token expires at %s, which is not in the future: check the node's clock", r.expires.Format(time.RFC3339))
	default:
		p.state = tokenState{token: r.token, expires: r.expires}
		p.refreshAt = now.Add(r.expires.Sub(now) * 4 / 5)
		p.refusedSince = time.Time{}
		p.lapse.Stop()
		n.changed = true
		p.log.Info("minted the plugin's token", "expires", r.expires.Format(time.RFC3339), "refresh_at", p.refreshAt.Format(time.RFC3339))
	}
	p.due.Reset(p.refreshAt.Sub(now))
	n.state, n.lapsed = p.state, p.lapsed()
	return n
}

// count counts a mint by its result.
func (p *pluginToken) count(r mintResult, now time.Time) {
	if p.mints == nil {
		return
	}
	result := "success"
	if r.err != nil || !r.expires.After(now) {
		result = "failure"
	}
	p.mints.WithLabelValues(result).Inc()
}

// onRefusal mints at once for a refused token, unless a mint runs or ran
// less than refusedGap ago.
func (p *pluginToken) onRefusal(ctx context.Context) {
	if p.mayMintAgain() {
		p.log.Info("the API server refused the plugin's token: minting a new one")
		p.start(ctx)
	}
}

// mayMintAgain: a mint a refusal asks for costs the API server at most one
// TokenRequest per refusedGap.
func (p *pluginToken) mayMintAgain() bool {
	return !p.minting && p.now().Sub(p.started) >= p.refusedGap
}

// lapsed: the API has refused the agent for the whole token lifetime since
// it started.
func (p *pluginToken) lapsed() bool {
	return !p.refusedSince.IsZero() && !p.now().Before(p.refusedSince.Add(p.lifetime))
}

// reportRefused tells the keeper that the API server refused the token.
// It never blocks: refusals that come while one waits are one.
func (p *pluginToken) reportRefused() {
	select {
	case p.refusals <- struct{}{}:
	default:
	}
}
