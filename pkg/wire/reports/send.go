package reports

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// SendTimeout bounds Send as a whole: connecting, and waiting for room in
// the agent's receive queue when it is full (an agent that stopped
// reading). Past it the report is dropped.
const SendTimeout = 50 * time.Millisecond

// ErrNoAgent says nobody listens at the socket path: the file does not
// exist (no agent on the node yet, or its directory was emptied) or no
// process has it open (the agent exited). Callers ignore it.
var ErrNoAgent = errors.New("no agent listening")

// Send writes rep to the agent's datagram socket at path, as one datagram of
// at most MaxDatagram bytes (encode shortens long strings to fit). It never
// takes much longer than SendTimeout. The version is set for the caller.
func Send(path string, rep Report) error {
	b, err := encode(rep)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(SendTimeout)
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("unixgram", path)
	if err != nil {
		return sendError(path, err)
	}
	defer func() { _ = c.Close() }()
	if err := c.SetWriteDeadline(deadline); err != nil {
		return sendError(path, err)
	}
	if _, err := c.Write(b); err != nil {
		return sendError(path, err)
	}
	return nil
}

// sendError wraps err, adding ErrNoAgent when it means nobody listens: the
// socket file is missing (ENOENT) or has no open socket behind it
// (ECONNREFUSED, also what a write gets when the agent closes its socket
// between the connect and the write). A full queue ends in a deadline error
// (os.ErrDeadlineExceeded).
func sendError(path string, err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("reporting to the agent at %s: %w: %w", path, ErrNoAgent, err)
	}
	return fmt.Errorf("reporting to the agent at %s: %w", path, err)
}
