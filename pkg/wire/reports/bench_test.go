package reports

import (
	"context"
	"errors"
	"testing"
)

// BenchmarkSend is the cost an enabled agent socket adds to every verb:
// encode, connect, one datagram, close.
func BenchmarkSend(b *testing.B) {
	path := sockPath(b)
	l, err := Listen(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx, func(Report) {}); close(done) }()
	b.Cleanup(func() { cancel(); <-done; _ = l.Close() })
	rep := sample()
	b.ReportAllocs()
	for b.Loop() {
		if err := Send(path, rep); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendNoAgent is the cost when no agent listens (no socket file).
func BenchmarkSendNoAgent(b *testing.B) {
	path := sockPath(b)
	rep := sample()
	b.ReportAllocs()
	for b.Loop() {
		if err := Send(path, rep); !errors.Is(err, ErrNoAgent) {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendStaleSocket is the cost when the agent died and left its
// socket file (ECONNREFUSED).
func BenchmarkSendStaleSocket(b *testing.B) {
	path := sockPath(b)
	l, err := Listen(path)
	if err != nil {
		b.Fatal(err)
	}
	_ = l.conn.Close() // the file stays: nobody behind it
	rep := sample()
	b.ReportAllocs()
	for b.Loop() {
		if err := Send(path, rep); !errors.Is(err, ErrNoAgent) {
			b.Fatal(err)
		}
	}
}
