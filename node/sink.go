package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Sink copies the events of messages.TopicEvents into an event log (in a cluster: the
// ClickHouse log the fleet's analytics and replay read), in batches of what the bus
// has ready. It acknowledges
// bus messages only after the log accepted the batch that holds them, so a log outage
// backs events up on the bus and never loses them; a failed batch is nacked, and the
// bus redelivers it. Appends are idempotent on event ID, so a redelivered event is
// stored once.
type Sink struct {
	cfg SinkConfig
}

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Subscriber reads messages.TopicEvents; in a cluster, a consumer group of its own
	// (e.g. "troupe-sink"), so each event is copied by one sink.
	Subscriber message.Subscriber
	Log        eventlog.Log
	// BatchSize bounds a batch (default 1,000 events).
	BatchSize int
	// RetryBackoff is the wait after a failed write before the batch is redelivered
	// (default 1 s).
	RetryBackoff time.Duration
	Logger       *slog.Logger
}

// NewSink builds a sink.
func NewSink(cfg SinkConfig) (*Sink, error) {
	if cfg.Subscriber == nil || cfg.Log == nil {
		return nil, errors.New("node: a sink needs a subscriber and a log")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sink{cfg: cfg}, nil
}

// Run copies events until ctx ends.
func (s *Sink) Run(ctx context.Context) error {
	msgs, err := s.cfg.Subscriber.Subscribe(ctx, messages.TopicEvents)
	if err != nil {
		return fmt.Errorf("node: sink: subscribe: %w", err)
	}
	var (
		batch  []*message.Message
		events []messages.Envelope
	)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		err := s.cfg.Log.Append(ctx, events)
		switch {
		case err == nil:
			for _, m := range batch {
				m.Ack()
			}
		case errors.Is(err, eventlog.ErrSeqConflict) || errors.Is(err, eventlog.ErrInvalidEvent):
			// A batch the log refuses for its content would be refused forever: write
			// the events one by one so that only the bad one is dropped, loudly.
			for i, m := range batch {
				if err := s.cfg.Log.Append(ctx, events[i:i+1]); err != nil && !errors.Is(err, eventlog.ErrSeqConflict) && !errors.Is(err, eventlog.ErrInvalidEvent) {
					m.Nack()
					continue
				} else if err != nil {
					s.cfg.Logger.Error("sink: the log refused an event", "session", events[i].SessionID, "seq", events[i].Seq, "err", err)
				}
				m.Ack()
			}
		default:
			s.cfg.Logger.Warn("sink: log write failed; the batch stays on the bus and comes again", "events", len(events), "err", err)
			for _, m := range batch {
				m.Nack()
			}
			select {
			case <-time.After(s.cfg.RetryBackoff):
			case <-ctx.Done():
			}
		}
		batch, events = batch[:0], events[:0]
	}
	add := func(m *message.Message) {
		e, err := messages.Unmarshal(m.Payload)
		if err != nil {
			s.cfg.Logger.Error("sink: undecodable event on the bus, skipped", "message", m.UUID, "err", err)
			m.Ack()
			return
		}
		if m.Metadata.Get(messages.MetaStored) != "" {
			// The reference of an event too large for the bus: the event is in the log of
			// the node that ran the session, not here, and a reference must not stand for it.
			s.cfg.Logger.Error("sink: an event too large for the bus is not copied; it is in its node's log",
				"session", e.SessionID, "seq", e.Seq, "type", e.Type)
			m.Ack()
			return
		}
		batch, events = append(batch, m), append(events, e)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-msgs:
			if !ok {
				return nil
			}
			add(m)
			// Take whatever else is ready, then write. Buses deliver a partition's next
			// message only after the previous one is acked, so waiting for a fuller
			// batch would only add latency; the log coalesces concurrent writers.
		drain:
			for len(batch) < s.cfg.BatchSize {
				select {
				case m, ok := <-msgs:
					if !ok {
						break drain
					}
					add(m)
				default:
					break drain
				}
			}
			flush()
		}
	}
}
