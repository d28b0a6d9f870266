package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// lagProbeTimeout bounds the one request a partition's consumer makes when it
// starts, to learn its lag before it has read a record (an idle partition's lag).
const lagProbeTimeout = 10 * time.Second

// ConsumerLag calls each with the lag of every partition this subscriber consumes
// now (with a group: the partitions assigned to it), by topic as Subscribe was given
// it: the records of the partition after the end of its acked prefix, up to its high
// watermark as of the latest fetch. A partition is reported once its consumer knows
// the lag: after its first fetch, or after the end offset it asks for when it
// starts. A subscriber with two subscriptions to one topic reports a partition once
// per subscription. It is safe for concurrent use and does no I/O.
func (s *Subscriber) ConsumerLag(each func(topic string, partition int, lag int64)) {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	for pl := range s.lags {
		if lag, ok := pl.lag(); ok {
			each(pl.topic, pl.partition, lag)
		}
	}
}

// partitionLag is what one partition consumer knows of its lag. Every field is -1
// while unknown.
type partitionLag struct {
	topic     string
	partition int
	// high is the partition's high watermark (the offset after its last record) as
	// of the latest fetch; next, the offset after the consumer's acked prefix.
	high, next atomic.Int64
	// probed is the lag the consumer read from the broker when it started, before
	// its first fetch.
	probed atomic.Int64
}

func (pl *partitionLag) lag() (int64, bool) {
	high, next := pl.high.Load(), pl.next.Load()
	if high >= 0 && next >= 0 {
		return max(high-next, 0), true
	}
	if p := pl.probed.Load(); p >= 0 {
		return p, true
	}
	return 0, false
}

// fetched records a fetched record: its partition's high watermark, and, for the
// first record, where the consumer's acked prefix ends (the records before it
// were consumed before this consumer started).
func (pl *partitionLag) fetched(rec kafkago.Message) {
	pl.next.CompareAndSwap(-1, rec.Offset)
	pl.high.Store(rec.HighWaterMark)
}

// trackLag registers the lag of a partition consumer starting at offset (a
// kafka-go FirstOffset or LastOffset, or an absolute one); the function returned
// unregisters it.
func (sub *subscription) trackLag(partition int, offset int64) (*partitionLag, func()) {
	pl := &partitionLag{topic: sub.topic, partition: partition}
	pl.high.Store(-1)
	pl.next.Store(-1)
	pl.probed.Store(-1)
	if offset >= 0 {
		pl.next.Store(offset)
	}
	s := sub.s
	s.lagMu.Lock()
	if s.lags == nil {
		s.lags = map[*partitionLag]struct{}{}
	}
	s.lags[pl] = struct{}{}
	s.lagMu.Unlock()
	return pl, func() {
		s.lagMu.Lock()
		delete(s.lags, pl)
		s.lagMu.Unlock()
	}
}

// probeLag asks the broker for the lag of rd from start (its start offset) before
// anything is fetched, so that an idle partition reports its lag (0) too.
// A probe that fails (a topic just created may have no leader yet) is tried again
// with back-off until one answers, a record is fetched, or ctx ends. It runs beside
// the fetches, counted in the subscriber's cleanup.
func (sub *subscription) probeLag(ctx context.Context, rd *partitionReader, start int64, pl *partitionLag) {
	sub.s.cleanup.Add(1)
	go func() {
		defer sub.s.cleanup.Done()
		backoff := 100 * time.Millisecond
		for {
			pctx, cancel := context.WithTimeout(ctx, lagProbeTimeout)
			lag, err := rd.lag(pctx, start)
			cancel()
			if err == nil {
				pl.probed.Store(max(lag, 0))
				return
			}
			if pl.high.Load() >= 0 {
				return // a fetch told the lag meanwhile
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
}

// lagRegistry is the Subscriber's set of partition consumers' lags.
type lagRegistry struct {
	lagMu sync.Mutex
	lags  map[*partitionLag]struct{}
}
