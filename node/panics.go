package node

import (
	"sync"
	"sync/atomic"
)

// panicsBeforePoison is how many times in a row a session's actor may panic on a
// task read from the bus (actors.ErrSessionPanicked) before the task goes to the
// poison topic: a bug met again at each attempt would otherwise hold the session's
// later messages, and its partition's commits, for good. So may the log refuse the
// task's append as another event's (eventlog.ErrSeqConflict: an ID taken stays
// taken). Other failures that are no bug (a log that is down or refuses a batch, a
// partition moving) are retried for as long as they last.
const panicsBeforePoison = 3

// panicCountsMax bounds the messages panicCounts tracks: past it, it starts again
// from none (a message whose count is lost is retried a few times more).
const panicCountsMax = 4096

// panicCounts counts, per bus message, the attempts in a row whose session's actor
// panicked on it. The zero value is ready.
type panicCounts struct {
	mu sync.Mutex
	n  map[string]int
	// size is len(n), read without mu by forget: most messages were never counted.
	size atomic.Int32
}

// again counts one more panic on message id and returns how many in a row.
func (p *panicCounts) again(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil || len(p.n) >= panicCountsMax {
		p.n = map[string]int{}
	}
	p.n[id]++
	p.size.Store(int32(len(p.n)))
	return p.n[id]
}

// forget drops message id's count: it was handled, or failed otherwise.
func (p *panicCounts) forget(id string) {
	if p.size.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.n, id)
	p.size.Store(int32(len(p.n)))
}
