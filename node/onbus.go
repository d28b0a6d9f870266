package node

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// What the bus holds already. A node that takes partitions over from an owner that
// died unreleased publishes again the latest task of each of their sessions that
// ended after the owner's last publication mark (pubmark.go): up to a mark interval
// of results, which the owner had most likely published, reached troupe.results
// twice (the chaos run: 50 of 3,136). So before it resumes them, the node reads
// the bus (a Bus.Publisher that is a RecordFinder: Kafka) for the records of those
// sessions since a little before their latest event: troupe.results for the
// result of each one's last event, then troupe.events for that event itself. A
// session whose both are there needs nothing published again (SessionDeps.OnBus):
//
//   - the result proves the owner's outbox published the batch that ended the task
//     on troupe.results; the last event on troupe.events proves it did on
//     troupe.events too, and with it every earlier event of the session: they are
//     all on one partition, the outbox publishes one batch after another (each
//     retried until the broker takes it), and the publisher writes a partition's
//     records in order, a chunk after the previous one was acknowledged;
//   - a task with a reply topic is published again all the same (the session
//     actor checks): its copy on the reply topic went out beside the result and
//     was not read;
//   - anything else (a session whose last event is no task's end, a record not
//     found, a read that fails or takes longer than findWait) is published again,
//     as before: a duplicate at worst, never a lost result.
//
// The records are found by their message UUIDs (the event's ID, session/seq, and
// that with "/result"; the event's record must also carry the seq and the stamp
// the log has, which a late write of a fenced owner under the same seq would
// not), from the broker's time index: Publish stamps each record
// with the time it is published, on the owner's clock, which stamped the session's
// latest event before (findMargin covers a clock step back between the two, and a
// Config.Clock other than the wall clock). The read is bounded by the sessions: only
// the partitions they are keyed to, only since findMargin before the earliest of
// their latest events, only up to the end offsets at the start.

// RecordFinder is the optional capability of a Bus.Publisher to tell which
// messages a topic holds (kafka.Publisher.FindRecords): it calls found with the key,
// UUID and payload of each message on topic keyed by one of keys and published at since or
// later, up to the topic's end when it is called. An error means some may have been
// missed.
type RecordFinder interface {
	FindRecords(ctx context.Context, topic string, keys []string, since time.Time, found func(key, uuid string, value []byte)) error
}

// findWait bounds the reading of the bus before a takeover republishes.
const findWait = 15 * time.Second

// findMargin is read before the earliest latest event of the sessions looked for.
const findMargin = time.Minute

// findOnBus looks on the bus for the last event, and its result, of each of the
// ended sessions to publish again, records those it found (n.onBus), and
// returns them. It finds nothing on a bus that cannot tell (the embedded one).
func (n *Node) findOnBus(ctx context.Context, ended []eventlog.SessionInfo) map[string]bool {
	f, ok := n.pub.(RecordFinder)
	if !ok || len(ended) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, findWait)
	defer cancel()
	last := make(map[string]string, len(ended))
	info := make(map[string]eventlog.SessionInfo, len(ended))
	keys := make([]string, 0, len(ended))
	var earliest int64 = math.MaxInt64
	for _, s := range ended {
		last[s.ID] = messages.EffectKey{SessionID: s.ID, Seq: s.LastSeq}.String()
		info[s.ID] = s
		keys = append(keys, s.ID)
		earliest = min(earliest, s.UpdatedUS)
	}
	since := time.UnixMicro(earliest).Add(-findMargin)
	resulted := map[string]bool{}
	if err := f.FindRecords(ctx, messages.TopicResults, keys, since, func(key, uuid string, _ []byte) {
		if uuid == last[key]+"/result" {
			resulted[key] = true
		}
	}); err != nil {
		n.cfg.Logger.Warn("cannot read what the bus holds of the sessions to publish again; publishing them all",
			"topic", messages.TopicResults, "sessions", len(keys), "err", err)
		return nil
	}
	keys = keys[:0]
	for k := range resulted {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	found := map[string]bool{}
	if err := f.FindRecords(ctx, messages.TopicEvents, keys, since, func(key, uuid string, value []byte) {
		// The very event the log holds: the same seq and stamp (an owner fenced
		// late may have published another event under that seq).
		var e messages.Envelope
		if uuid == last[key] && resulted[key] && json.Unmarshal(value, &e) == nil &&
			e.ID == uuid && e.Seq == info[key].LastSeq && e.TS == info[key].UpdatedUS {
			found[key] = true
		}
	}); err != nil {
		n.cfg.Logger.Warn("cannot read what the bus holds of the sessions to publish again; publishing them all",
			"topic", messages.TopicEvents, "sessions", len(keys), "err", err)
		return nil
	}
	for _, s := range ended {
		if found[s.ID] {
			n.onBus.record(s.ID, s.LastSeq)
		}
	}
	return found
}
