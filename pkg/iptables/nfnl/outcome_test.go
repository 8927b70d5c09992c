package nfnl

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// A transaction's outcome from the kernel's replies: the last message's
// ack and no error is success; any error fails it, named; anything else
// is unknown, for the caller to read back.
func TestOutcome(t *testing.T) {
	ops := []func() string{func() string { return "table nat" }, func() string { return "chain nat ISTIO_INBOUND" }, func() string { return "rule 1" }}
	for name, c := range map[string]struct {
		replies []reply
		want    error // nil, ErrUnknownOutcome, or a KernelError's errno
		op      string
	}{
		"the last message acked":         {[]reply{{i: 2}}, nil, ""},
		"no reply at all":                {nil, ErrUnknownOutcome, ""},
		"only another message acked":     {[]reply{{i: 1}}, ErrUnknownOutcome, ""},
		"a message refused":              {[]reply{{i: 1, errno: unix.EEXIST}, {i: 2}}, unix.EEXIST, "chain nat ISTIO_INBOUND"},
		"the last message refused":       {[]reply{{i: 2, errno: unix.ENOENT}}, unix.ENOENT, "rule 1"},
		"the batch refused":              {[]reply{{i: -1, errno: unix.EPERM}}, unix.EPERM, "the transaction"},
		"the commit failed after acking": {[]reply{{i: -1, errno: unix.ENOMEM}, {i: 2}}, unix.ENOMEM, "the transaction"},
		"an ack of the batch itself":     {[]reply{{i: 3}, {i: 2}}, unix.EPROTO, "the transaction"},
		"a batch error without errno":    {[]reply{{i: -1}, {i: 2}}, unix.EPROTO, "the transaction"},
	} {
		t.Run(name, func(t *testing.T) {
			err := outcome(c.replies, len(ops), ops)
			var kerr *KernelError
			switch {
			case c.want == nil && err != nil:
				t.Errorf("got %v, want success", err)
			case errors.Is(c.want, ErrUnknownOutcome) && !errors.Is(err, ErrUnknownOutcome):
				t.Errorf("got %v, want an unknown outcome", err)
			case c.op != "" && (!errors.As(err, &kerr) || !errors.Is(err, c.want) || kerr.Op != c.op || errors.Is(err, ErrUnknownOutcome)):
				t.Errorf("got %v, want the kernel's %v for %s", err, c.want, c.op)
			}
		})
	}
}
