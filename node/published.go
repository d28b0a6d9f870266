package node

import "sync"

// A sharded node that is assigned partitions publishes again the latest task of
// each session of theirs that ended lately (resumeOwned): a previous owner killed
// between appending a session's last events and publishing them left them only in
// the log. A partition this process held before the rebalance had no other owner
// for the sessions it ran itself, though, and every rebalance (a node added, one
// restarted, one paused) republished the results of the last ten minutes of every
// partition: the chaos run counted 139,771 records on troupe.results for 10,392
// sessions. So the node remembers, per session, the highest seq its session actors
// handed to the outbox, which publishes whatever it is given while the process
// lives; a session the log holds no further than that is not published again. A
// session another owner appended to since (a node paused past the group's session
// timeout, whose partitions ran elsewhere meanwhile, then came back) is past the
// mark and is; so is every session of a process that restarted, which remembers
// nothing. Partitions whose previous owner, this process or another, released them
// cleanly (handOver, fencing.go) need no mark: their next owner publishes none of
// their ended sessions again; for those it did not, the previous owner's last
// publication mark (pubmark.go) bounds what is published again.

// maxPublishedMarks bounds the sessions publishedSeqs remembers: past it, it forgets
// them all, and the next rebalance publishes their latest tasks again (duplicates,
// never a loss).
const maxPublishedMarks = 100_000

// publishedSeqs is the highest seq of each session this process handed to its
// outbox. It is safe for concurrent use.
type publishedSeqs struct {
	mu sync.Mutex
	m  map[string]uint64
}

// record notes that the events of session up to seq were handed to the outbox.
func (p *publishedSeqs) record(session string, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, ok := p.m[session]
	if !ok && len(p.m) >= maxPublishedMarks {
		clear(p.m)
	}
	if p.m == nil {
		p.m = map[string]uint64{}
	}
	if seq > old {
		p.m[session] = seq
	}
}

// covers reports whether this process handed the events of session up to seq to
// the outbox.
func (p *publishedSeqs) covers(session string, seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	got, ok := p.m[session]
	return ok && got >= seq
}
