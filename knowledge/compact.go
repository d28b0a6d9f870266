package knowledge

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/troupe-run/troupe/eventlog"
)

// Compaction of a knowledge base's stream. A document's state is its latest
// event (an ingestion replaces its chunks whole; a removal drops them), or the
// parts of its latest ingestion when its chunk set was split across events
// (messages.KBDocumentIngested.Parts), so the events a later one of the same
// source superseded say nothing the fold needs:
// when they outnumber the live documents (and at least CompactMin of them are
// due), a write deletes them from the log (eventlog.Compacting, in one
// transaction) and a fold, of a restart, a base released when idle or a base
// moved to another node, reads about one event per live document and the
// CompactTail latest. Kept: every live document's latest event (all the parts
// of its latest ingestion); the event
// whose vectors set the base's first dimension, and so its collection (with the
// latest of its source); the CompactTail latest events; and the events that
// carry an idempotency key (a key's mark, messages.KBKeyPart, too) for
// KeyRetention (a mark holds no version of its document: past KeyRetention it
// goes, though no later event of its source follows), so that a retry under
// the key is
// answered from its event (once deleted, a retry under its key is decided
// afresh). A
// removal goes at the compaction after the one that deleted the events before
// it (see compactable). Only a base whose vector store is in
// line with its fold is compacted: a later rebuild deletes from the store only
// the chunks the stream still names. Agents' sessions that used the base are
// untouched: they recorded the tool's results.
const (
	// CompactMin is the fewest superseded events a compaction deletes.
	CompactMin = 64
	// CompactTail is the number of latest events compaction keeps.
	CompactTail = 64
)

// KeyRetention is how long compaction keeps a superseded event that carries an
// idempotency key, after it in the log's own time: until the stream holds an
// event stamped (messages.Envelope.TS) KeyRetention or more after it. A retry
// under its key, also after a restart or a base folded anew elsewhere, is then
// answered as the write was (the first result, nothing written), where it
// would be decided afresh without the event: an ingestion's older bytes
// written over a newer version of the document, a removal's document brought
// back after it was added again and removed by another key. The stream's time,
// not the clock of the node that compacts, so that every node folding the
// stream keeps the same events. A production API keeps its keys about as long
// (the node's Idempotency-Keys: 24 hours).
const KeyRetention = 24 * time.Hour

// AutoKeyPrefix begins the keys a writer makes up for a write its caller sent
// without one: a node's command to the owner of the base, which the bus may
// deliver twice ("auto/" and a random name), retried only while the node
// waits for its answer. Compaction keeps the event of such a key with the
// CompactTail latest, not for KeyRetention, so that a cluster's writes without
// keys are compacted as a single node's are.
const AutoKeyPrefix = "auto/"

// retained reports whether compaction keeps the event of seq, of a trail, for
// its idempotency key (KeyRetention). The caller holds mu.
func (s *state) retained(seq uint64) bool {
	at, keyed := s.keyedAt[seq]
	return keyed && s.ts-at < KeyRetention.Microseconds()
}

// isMark reports whether the event of seq, of a trail, is a key's mark
// (messages.KBKeyPart). The caller holds mu.
func (s *state) isMark(seq uint64) bool {
	_, ok := s.marks[seq]
	return ok
}

// compactable returns the seqs a compaction would delete now, ascending. The
// caller holds mu.
//
// A fold that reads any part of them, with the events kept, finds the same
// documents as one that reads all of them or none: a log may delete them in
// parts that its readers see one after the other (ClickHouse's mutations,
// eventlog.Compacting). A source's state is that of its latest event other
// than a key's mark (a mark changes no document: state.apply) (an
// ingestion replaces its chunks whole, a removal drops them, and chunk IDs
// name their source, so no other source's events bear on it; a split
// ingestion's parts are kept together, and a part read without the parts
// before it is not folded: state.applyPart), and of each source either that
// event is kept or it is the only one deleted: the latest
// event of a source no longer live (a removal) goes only once the events
// before it are gone, at a later compaction, since a fold that read one of
// those without it would find the document live. The dimension is that of
// the anchor, kept, and no event before it has a vector. What may differ is
// not the documents: the idempotency keys of the events read (those of the
// last KeyRetention are kept: retained),
// the chunk IDs ever named (a rebuild deletes a few more vectors that are not
// there), and holes (a fold that missed some rebuilds its store).
func (s *state) compactable() []uint64 {
	cut := uint64(0)
	if s.seq > CompactTail {
		cut = s.seq - CompactTail
	}
	var out []uint64
	for _, src := range slices.Sorted(maps.Keys(s.trail)) {
		trail := s.trail[src]
		last := trail[len(trail)-1]
		d := s.docs[src]
		live := d != nil
		anchored := slices.Contains(trail, s.anchor)
		for _, seq := range trail {
			switch {
			case seq > cut || seq == s.seq:
			case s.retained(seq):
			case s.isMark(seq):
				// A key's mark, past KeyRetention: it holds no version of
				// its document, though no later event of its source follows.
				out = append(out, seq)
			case live && slices.Contains(d.seqs, seq):
			case seq == last && (live || anchored || len(trail) > 1):
			case seq == s.anchor:
			default:
				out = append(out, seq)
			}
		}
	}
	slices.Sort(out)
	return out
}

// compactDue reports whether enough events are superseded to compact: more
// than the live documents, and at least atLeast (Base.compactMin). The caller
// holds mu.
func (s *state) compactDue(atLeast int) bool {
	superseded := s.events - s.live - CompactTail
	return superseded >= max(atLeast, len(s.docs))
}

// compactMin is the fewest superseded events that make a compaction due after a
// write: CompactMin, or what the log asks for if more (eventlog.CompactingCost:
// on ClickHouse each deletion rewrites data parts shared with other streams).
func (b *Base) compactMin() int {
	if c, ok := b.cfg.Log.(eventlog.CompactingCost); ok {
		return max(CompactMin, c.CompactMin())
	}
	return CompactMin
}

// forget takes the deleted seqs out of the trails. The caller holds mu for
// writing.
func (s *state) forget(deleted []uint64) {
	for src, trail := range s.trail {
		trail = slices.DeleteFunc(trail, func(seq uint64) bool {
			_, found := slices.BinarySearch(deleted, seq)
			return found
		})
		if len(trail) == 0 {
			delete(s.trail, src)
		} else {
			s.trail[src] = trail
		}
	}
}

// Compact deletes from the log the events of the knowledge base that later ones
// superseded (see CompactMin), whether or not enough are due, and returns how
// many it deleted: 0 when the log cannot delete events (it does not implement
// eventlog.Compacting), the vector store is not in line with the fold yet, or
// another compaction of the base runs (it deletes them). Searches and writes of
// the base go on while the log deletes (see compact).
func (b *Base) Compact(ctx context.Context) (int, error) {
	b.sync(ctx)
	b.mu.Lock()
	if err := b.fold(ctx); err != nil {
		b.mu.Unlock()
		return 0, err
	}
	seqs := b.startCompaction()
	b.mu.Unlock()
	if seqs == nil {
		return 0, nil
	}
	return b.compact(ctx, seqs)
}

// compactIfDue compacts after a write that asked for it (compactAsked) when
// enough events are superseded; a failure is told to Config.CompactTrouble and
// tried again after a later write. The caller does not hold mu: a write calls
// it once it released its lock.
func (b *Base) compactIfDue(ctx context.Context) {
	b.mu.Lock()
	var seqs []uint64
	if b.compactAsked && b.st.compactDue(b.compactMin()) {
		seqs = b.startCompaction()
		if seqs != nil && len(seqs) < max(b.compactMin(), len(b.st.docs)) {
			// Most of the superseded events are kept for their keys
			// (retained): not enough to delete yet.
			seqs, b.compacting = nil, false
		}
	}
	b.compactAsked = false
	b.mu.Unlock()
	if seqs == nil {
		return
	}
	if _, err := b.compact(ctx, seqs); err != nil && b.cfg.CompactTrouble != nil {
		b.cfg.CompactTrouble(b.name, err)
	}
}

// startCompaction returns the seqs a compaction deletes now (compactable) and
// marks the compaction running (compacting), or nil when none is to run: the log
// cannot delete, the store is not in line with the fold, nothing is superseded,
// a compaction runs already, or the base was released (the instance loaded in
// its place compacts). The caller holds mu for writing, folded the stream, and
// calls compact with the seqs.
func (b *Base) startCompaction() []uint64 {
	if _, ok := b.cfg.Log.(eventlog.Compacting); !ok || b.compacting || b.use.Released() {
		return nil
	}
	if !b.inLine() || len(b.parked) > 0 || len(b.retired) > 0 {
		return nil
	}
	seqs := b.st.compactable()
	if len(seqs) == 0 {
		return nil
	}
	b.compacting = true
	return seqs
}

// compact deletes the events of seqs (startCompaction) without holding mu, so
// that searches and writes go on while the log deletes (a ClickHouse mutation
// takes seconds to minutes on a large table), then takes them out of the fold's
// trails. A write meanwhile appends at the next seq, above every one deleted
// (compactable never lists the fold's last, and DeleteEvents never deletes the
// stream's highest), and supersedes, never revives, what they held: a listed
// event stays superseded by a later event of its source, or is the removal of a
// document whose earlier events are gone, and a later ingestion of its source
// supersedes it too. A fold meanwhile reads only the events after its seq, so
// none of the deleted; one by another instance may read any part of them,
// which compactable allows for. The chunks only the deleted events named were
// out of the store when they were chosen (the store was in line), and no write
// brings them back without an event of its own, kept. compacting keeps a second
// compaction of the base from choosing before this one's seqs are forgotten,
// and the base from being released meanwhile (releaseBase).
func (b *Base) compact(ctx context.Context, seqs []uint64) (int, error) {
	n, err := b.cfg.Log.(eventlog.Compacting).DeleteEvents(ctx, b.stream, seqs)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.compacting = false
	if err != nil {
		return 0, fmt.Errorf("knowledge: %s: compacting %d superseded events: %w", b.name, len(seqs), err)
	}
	b.st.forget(seqs)
	for _, seq := range seqs {
		delete(b.st.keyedAt, seq)
		delete(b.st.marks, seq)
	}
	b.st.events -= n
	return n, nil
}
