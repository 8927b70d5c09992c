package cluster

import (
	"context"
	"fmt"
	"time"
)

const (
	pollInterval   = 100 * time.Millisecond
	attemptTimeout = 2 * time.Second
)

// poll calls ready every pollInterval until it returns nil, p exits, or ctx
// ends. Errors from ready mean "not yet"; the last one is reported on
// timeout, with the tail of p's log.
func poll(ctx context.Context, p *proc, ready func(context.Context) error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := ready(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; last error: %v\n--- tail of %s ---\n%s",
				p.name, ctx.Err(), err, p.log, logTail(p.log, 30))
		case <-t.C:
		}
	}
}
