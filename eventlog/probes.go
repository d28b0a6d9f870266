package eventlog

import (
	"context"
	"sync"
	"time"
)

// Probes paces the probe writes of a log's Writable (Health) once its writes
// failed: one caller at a time probes, at most once every Every, so that a node
// asking on every health check and every new task does not write on each; the
// other callers get the failure known. The SQLite and ClickHouse logs share it,
// each with a probe of its own.
type Probes struct {
	Every time.Duration
	mu    sync.Mutex
	last  time.Time
}

// Try returns failing(), the log's failure known (nil when its writes go
// through), unless it may probe: then it returns probe's answer, given that
// failure. It probes when no other caller is probing, the failure still stands
// once it holds the turn, and the last probe was at least Every ago.
func (p *Probes) Try(ctx context.Context, failing func() error, probe func(ctx context.Context, known error) error) error {
	if !p.mu.TryLock() {
		return failing() // another caller is probing
	}
	defer p.mu.Unlock()
	known := failing()
	if known == nil || time.Since(p.last) < p.Every {
		return known
	}
	p.last = time.Now()
	return probe(ctx, known)
}
