package install

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// The plugin's tokens are bound to the node's Node object, by its UID: a
// Node deleted and registered again (a node re-provisioned under its name,
// or `kubectl delete node` while its kubelet lives) has a new UID, and the
// API server refuses every token bound to the old one. The plugin reports a
// refusal only once a lookup of its own failed, the agent answering all
// others; so the agent checks the UID itself, and mints at once when it
// changed, rather than leave a revoked credential on the node until the
// next renewal (hours), for the day its agent is down.

// nodeCheckEvery is how often the agent reads its Node's UID: one GET
// served from the API server's watch cache, 1,000 nodes making about 17
// a second.
const nodeCheckEvery = time.Minute

// boundNodeUID is the UID of the Node the token is bound to, from its
// claims (kubernetes.io.node.uid); "" if it is not a JWT naming one. The
// token is our own, just minted by the API server: it is read, not
// verified.
func boundNodeUID(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		K8s struct {
			Node struct {
				UID string `json:"uid"`
			} `json:"node"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	return claims.K8s.Node.UID
}

// checkNode reads the node's UID in the background and hands it to run
// (nodeSeen). The read is from the API server's cache; one that differs
// from the UID the current token names is read again from storage, so that
// a cache behind the times cannot have the agent mint each minute. A
// failed read is logged (a check that keeps failing, a 403 after an RBAC
// change, must not go unseen) and dropped: the next check tries again. A
// token that names no node is not checked: the API server binds it
// otherwise, and renewal replaces it.
func (p *pluginToken) checkNode(ctx context.Context) {
	bound := p.boundNode()
	if bound == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, defaultMintTimeout)
		defer cancel()
		uid, err := p.nodeUID(ctx, false)
		if err == nil && uid != bound {
			uid, err = p.nodeUID(ctx, true)
		}
		if err != nil {
			p.log.Warn("reading this node's UID, to check the plugin's token is bound to it", "error", err.Error())
			return
		}
		if uid == "" {
			return
		}
		select {
		case p.nodeSeen <- uid:
		default:
		}
	}()
}

// onNodeUID mints at once when the node has a new UID, which revoked the
// token, as onRefusal does.
func (p *pluginToken) onNodeUID(ctx context.Context, uid string) {
	if p.nodeChanged(uid) && p.mayMintAgain() {
		p.log.Info("the node was registered again (a new UID), which revoked the plugin's token: minting a new one", "node_uid", uid)
		p.start(ctx)
	}
}

// boundNode is the UID of the node the current token is bound to; "" if
// there is no token, or it names no node.
func (p *pluginToken) boundNode() string { return boundNodeUID(p.state.token) }

// nodeChanged reports whether the node now has another UID than the one
// the plugin's current token is bound to.
func (p *pluginToken) nodeChanged(uid string) bool {
	bound := p.boundNode()
	return bound != "" && bound != uid
}
