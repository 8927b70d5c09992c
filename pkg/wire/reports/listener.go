package reports

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"istio-cni.local/istio-cni/pkg/wire/sockfile"
)

// checkInterval is how often Run looks whether the socket file at its path
// is still the one it bound.
const checkInterval = time.Second

// Listener is the agent's end: a unix datagram socket at a fixed path.
//
// Memory is bounded by construction: Run reads into one buffer of
// MaxDatagram+1 bytes, decodes one report at a time and hands it to the
// handler before reading the next; it keeps nothing per report but
// counters. While the handler is slow, datagrams wait in the kernel's
// receive queue, whose length the kernel bounds (net.unix.max_dgram_qlen);
// once it is full, senders give up after SendTimeout and their reports are
// dropped, so a stuck agent costs the node neither memory nor pod starts.
type Listener struct {
	path     string
	interval time.Duration

	mu     sync.Mutex
	conn   *net.UnixConn
	file   sockfile.File
	closed bool
	stats  Stats
}

// Stats are what a Listener has seen since Listen.
type Stats struct {
	Reports uint64 // decoded and handed to the handler
	// Malformed datagrams were dropped: not a JSON report, or longer than
	// MaxDatagram. LastMalformed says why the last one was.
	Malformed     uint64
	LastMalformed error
	// Recreated counts the sockets bound again after the file at the path
	// was removed or replaced; RecreateError is the last failure to, nil
	// once it succeeds (Run tries again every check).
	Recreated     uint64
	RecreateError error
	// Superseded is true while another process listens at the path (a newer
	// agent bound it): Run leaves that socket alone.
	Superseded bool
}

// Listen binds a datagram socket at path, mode 0600; path's directory must
// exist. A socket file already there (left by an agent that exited) is
// replaced; any other kind of file is an error (pkg/wire/sockfile).
func Listen(path string) (*Listener, error) {
	conn, file, err := bind(path)
	if err != nil {
		return nil, err
	}
	return &Listener{path: path, interval: checkInterval, conn: conn, file: file}, nil
}

func bind(path string) (*net.UnixConn, sockfile.File, error) {
	conn, file, err := sockfile.Bind(path, "unixgram", func(name string) (*net.UnixConn, error) {
		return net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	})
	if err != nil {
		return nil, file, fmt.Errorf("plugin reports: %w", err)
	}
	return conn, file, nil
}

// Stats returns the counters so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Run reads reports and passes each to handle, in order, on Run's goroutine,
// until ctx ends or Close is called; it then returns nil. A datagram that
// is not a report is counted (Stats) and dropped. About every second it
// checks that the file at the path is still its socket and, when the file
// was removed (the directory is a tmpfs a reboot empties, and the
// installer cleans it) or replaced by something that no longer listens, it
// binds a new socket there. Call Run once per Listener.
func (l *Listener) Run(ctx context.Context, handle func(Report)) error {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		_ = l.conn.SetReadDeadline(time.Unix(1, 0)) // wake the read
	})
	defer stop()
	buf := make([]byte, MaxDatagram+1)
	next := time.Now().Add(l.interval)
	for {
		conn := l.arm(ctx, next)
		if conn == nil {
			return nil
		}
		n, err := conn.Read(buf)
		switch {
		case err == nil:
			l.deliver(buf[:n], handle)
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, net.ErrClosed):
			return nil // Close; Run itself closes a socket only after replacing it
		default:
			return fmt.Errorf("plugin reports %s: %w", l.path, err)
		}
		if now := time.Now(); !now.Before(next) {
			l.check()
			next = now.Add(l.interval)
		}
	}
}

// arm returns the socket to read, its deadline set to the next check, or
// nil when Run must return. Holding the lock orders it with the AfterFunc
// that wakes a read when ctx ends: either ctx.Err is already set here, or
// the AfterFunc runs after this deadline and overrides it.
func (l *Listener) arm(ctx context.Context, next time.Time) *net.UnixConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || ctx.Err() != nil {
		return nil
	}
	_ = l.conn.SetReadDeadline(next)
	return l.conn
}

// deliver decodes one datagram and hands it on, or counts it as malformed.
func (l *Listener) deliver(b []byte, handle func(Report)) {
	var rep Report
	err := fmt.Errorf("datagram longer than %d bytes", MaxDatagram)
	if len(b) <= MaxDatagram {
		rep, err = decode(b)
	}
	l.mu.Lock()
	if err != nil {
		l.stats.Malformed++
		l.stats.LastMalformed = err
	} else {
		l.stats.Reports++
	}
	l.mu.Unlock()
	if err == nil {
		handle(rep)
	}
}

// check binds a new socket when the file at the path is no longer ours and
// nobody else listens there.
func (l *Listener) check() {
	state := l.file.State()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	switch state {
	case sockfile.Ours:
		l.stats.Superseded = false
		return
	case sockfile.Superseded:
		l.stats.Superseded = true
		return
	}
	conn, file, err := bind(l.path)
	if err != nil {
		l.stats.RecreateError = err
		return
	}
	old := l.conn
	l.conn, l.file = conn, file
	l.stats.Recreated++
	l.stats.RecreateError, l.stats.Superseded = nil, false
	_ = old.Close()
}

// Listening says whether a process (an agent) listens at path.
func Listening(path string) bool { return sockfile.Listening("unixgram", path) }

// Close closes the socket and removes its file if the file is still the
// one Listen or Run bound (a newer agent's socket stays). Run returns.
func (l *Listener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.file.Remove()
	return l.conn.Close()
}
