package handoff

import (
	"io"
	"strconv"
)

// RunFunc runs a handed-off ADD in the pod's network namespace, open at
// netnsFD, which the caller closes after; after, if not nil, runs once
// the shim has the answer, and only then.
type RunFunc func(req Request, netnsFD int) (resp Response, after func())

// Answer is the agent's side of a hand-off: frame is the request as read
// from conn, fds the descriptors that came with it (the pod's network
// namespace). It writes the answer, closes conn, and then runs what waited
// for the shim to have it. A nil run hands every ADD back.
func Answer(conn io.WriteCloser, frame []byte, fds []int, run RunFunc) {
	var req Request
	var resp Response
	var after func()
	err := req.UnmarshalBinary(frame)
	switch {
	case err != nil:
		resp.HandBack = "the agent cannot read the hand-off: " + err.Error()
	case len(fds) != 1:
		resp.HandBack = "the request carries " + strconv.Itoa(len(fds)) + " descriptors, want the pod's network namespace"
	case run == nil:
		resp.HandBack = "the agent runs no ADDs"
	default:
		resp, after = run(req, fds[0])
	}
	b, err := resp.MarshalBinary()
	if err != nil {
		b, _ = Response{HandBack: err.Error()}.MarshalBinary()
		after = nil
	}
	_, err = conn.Write(b)
	_ = conn.Close()
	// A shim that stopped waiting runs the plugin, which reports.
	if err == nil && after != nil {
		after()
	}
}
