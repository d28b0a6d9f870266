package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
)

// produce writes recs to the Kafka topic wire and returns once the in-sync replicas
// of every partition have them (acks=all). Each record goes to the partition
// Balancer picks for its key. One produce request per leader broker carries the
// records of all of that broker's partitions (at most BatchSize records and
// BatchBytes bytes of each partition per request; a partition's further records
// follow in later requests, in order), where kafka-go's Writer sent a request per
// partition, looked the topic's partitions up for every record and preallocated
// BatchSize records per batch. A partition whose write fails with a temporary error
// (a leader moving, a broken connection) is written again, after a backoff, up to
// MaxAttempts times; the error of one that still fails is returned as a
// kafkago.WriteErrors (one entry per record, nil for the records written). A
// partition of 0 or more puts every record there instead (PublishToPartition).
func (p *Publisher) produce(deadline time.Time, wire string, recs []kafkago.Message, partition int) error {
	for i := range recs {
		if int64(recordSize(&recs[i])) > p.cfg.BatchBytes {
			return kafkago.MessageTooLargeError{Message: recs[i], Remaining: recs[i+1:]}
		}
	}
	// One context per round of requests, bounded by WriteTimeout and the deadline.
	round := func() (context.Context, context.CancelFunc) {
		d := time.Now().Add(p.cfg.WriteTimeout)
		if deadline.Before(d) {
			d = deadline
		}
		return context.WithDeadline(context.Background(), d)
	}
	ctx, cancel := round()
	defer func() { cancel() }()
	leaders, err := p.leaders(ctx, wire)
	// Reading the partitions' leaders is tried again as a write is: once a refused
	// write made the transport read the metadata afresh (routes.refresh), the read
	// goes to the brokers, which may be down for a moment (a restart), where the
	// transport's cached metadata used to answer at once.
	for attempt := 1; err != nil && (isRetriable(err) || leaderMoved(err)) && attempt < p.cfg.MaxAttempts && time.Now().Before(deadline); attempt++ {
		cancel()
		p.logger.Debug("reading the partitions' leaders failed, retrying", watermill.LogFields{"err": err.Error(), "attempt": attempt})
		time.Sleep(max(min(writeBackoff(attempt, p.cfg.RetryBackoffMin, p.cfg.RetryBackoffMax), time.Until(deadline)), 0))
		ctx, cancel = round()
		leaders, err = p.leaders(ctx, wire)
	}
	if err == nil && partition >= len(leaders) {
		// Partitions added since the metadata was read: read it again now.
		p.routes.refresh()
		if leaders, err = p.leaders(ctx, wire); err == nil && partition >= len(leaders) {
			err = fmt.Errorf("kafka: partition %d of %s, which has %d: %w", partition, wire, len(leaders), ErrUnknownPartition)
		}
	}
	if err != nil {
		return err
	}
	byPartition := make([]*partitionRecords, len(leaders))
	var order []*partitionRecords // partitions in order of their first record
	for i := range recs {
		n := partition
		if n < 0 {
			n = kafkago.Murmur2Balancer{}.Balance(recs[i], partitionList(len(leaders))...)
		}
		pr := byPartition[n]
		if pr == nil {
			pr = &partitionRecords{partition: n}
			byPartition[n] = pr
			order = append(order, pr)
		}
		pr.idx = append(pr.idx, i)
	}
	var failed kafkago.WriteErrors
	for attempt := 0; ; attempt++ {
		// Every partition with records left sends its next chunk, grouped by leader.
		var groups [][]*partitionRecords
		for _, pr := range order {
			if pr.done() {
				continue
			}
			l := leaders[pr.partition]
			g := slices.IndexFunc(groups, func(g []*partitionRecords) bool { return leaders[g[0].partition] == l })
			if g < 0 {
				groups = append(groups, nil)
				g = len(groups) - 1
			}
			groups[g] = append(groups[g], pr)
		}
		if len(groups) == 0 {
			break
		}
		if len(groups) == 1 {
			p.produceTo(ctx, wire, recs, groups[0])
		} else {
			var wg sync.WaitGroup
			for _, group := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.produceTo(ctx, wire, recs, group)
				}()
			}
			wg.Wait()
		}
		var retry error // the first error retried
		moved := false  // a partition's leader is not where the metadata says
		for _, pr := range order {
			switch {
			case pr.err == nil:
			case isRetriable(pr.err) && pr.attempts < p.cfg.MaxAttempts && time.Now().Before(deadline):
				if retry == nil {
					retry = pr.err
				}
				moved = moved || leaderMoved(pr.err)
			default:
				if failed == nil {
					failed = make(kafkago.WriteErrors, len(recs))
				}
				for _, i := range pr.idx[pr.next:] {
					failed[i] = pr.err
				}
				pr.next = len(pr.idx) // given up
			}
		}
		if !slices.ContainsFunc(order, func(pr *partitionRecords) bool { return !pr.done() }) {
			break
		}
		cancel()
		if retry != nil {
			p.logger.Debug("produce failed, retrying", watermill.LogFields{"err": retry.Error(), "attempt": attempt + 1})
			wait := min(writeBackoff(attempt+1, p.cfg.RetryBackoffMin, p.cfg.RetryBackoffMax), time.Until(deadline))
			time.Sleep(max(wait, 0))
		}
		ctx, cancel = round()
		if moved {
			// The new leaders, read now rather than at the transport's next
			// periodic refresh (MetadataMaxAge), which the attempts might not
			// outlast.
			p.routes.refresh()
		}
		if retry != nil {
			if l, err := p.leaders(ctx, wire); err == nil && len(l) >= len(leaders) {
				leaders = l
			}
		}
	}
	if failed != nil {
		return failed
	}
	return nil
}

// partitionRecords are the records of one Publish call for one partition: the
// indexes in recs of its records, how many of them are written, and the error of
// its last attempt.
type partitionRecords struct {
	partition int
	idx       []int
	next      int // idx[:next] are written
	chunk     int // how many records from next the request in flight carries
	attempts  int
	err       error
}

func (pr *partitionRecords) done() bool { return pr.next >= len(pr.idx) }

// produceTo sends one produce request with the next chunk of each of group's
// partitions (all led by one broker) and records each partition's outcome.
func (p *Publisher) produceTo(ctx context.Context, wire string, recs []kafkago.Message, group []*partitionRecords) {
	req := &produceAPI.Request{
		Acks:    int16(kafkago.RequireAll),
		Timeout: int32(p.cfg.WriteTimeout / time.Millisecond),
		Topics:  []produceAPI.RequestTopic{{Topic: wire, Partitions: make([]produceAPI.RequestPartition, 0, len(group))}},
	}
	for _, pr := range group {
		pr.attempts++
		pr.err = nil
		var size int64
		pr.chunk = 0
		for _, i := range pr.idx[pr.next:] {
			n := int64(recordSize(&recs[i]))
			if pr.chunk > 0 && (pr.chunk >= p.cfg.BatchSize || size+n > p.cfg.BatchBytes) {
				break
			}
			pr.chunk++
			size += n
		}
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, produceAPI.RequestPartition{
			Partition: int32(pr.partition),
			RecordSet: protocol.RecordSet{Records: &recordReader{recs: recs, idx: pr.idx[pr.next : pr.next+pr.chunk]}},
		})
	}
	res, err := p.transport.RoundTrip(ctx, p.addr, req)
	if err == nil {
		if r, ok := res.(*produceAPI.Response); ok {
			for _, pr := range group {
				answered := false
				for _, t := range r.Topics {
					for _, rp := range t.Partitions {
						if t.Topic == wire && int(rp.Partition) == pr.partition {
							answered = true
							if rp.ErrorCode != 0 {
								pr.err = kafkago.Error(rp.ErrorCode)
							}
						}
					}
				}
				if !answered {
					pr.err = fmt.Errorf("kafka: no answer for partition %d of %s", pr.partition, wire)
				}
				if pr.err == nil {
					pr.next += pr.chunk
					pr.attempts = 0
				}
			}
			return
		}
		err = fmt.Errorf("kafka: unexpected produce response %T", res)
	}
	for _, pr := range group {
		pr.err = err
	}
}

// leaders returns the leader broker of each partition of wire, from the metadata
// the transport caches (and refreshes every few seconds).
func (p *Publisher) leaders(ctx context.Context, wire string) ([]int32, error) {
	res, err := p.transport.RoundTrip(ctx, p.addr, &metadataAPI.Request{TopicNames: []string{wire}})
	if err != nil {
		return nil, err
	}
	md, ok := res.(*metadataAPI.Response)
	if !ok {
		return nil, fmt.Errorf("kafka: unexpected metadata response %T", res)
	}
	for _, t := range md.Topics {
		if t.Name != wire {
			continue
		}
		if t.ErrorCode != 0 {
			return nil, kafkago.Error(t.ErrorCode)
		}
		if len(t.Partitions) == 0 {
			break
		}
		leaders := make([]int32, len(t.Partitions))
		for _, part := range t.Partitions {
			if int(part.PartitionIndex) < len(leaders) {
				leaders[part.PartitionIndex] = part.LeaderID
			}
		}
		return leaders, nil
	}
	return nil, kafkago.UnknownTopicOrPartition
}

// partitionList returns 0, 1, …, n-1 for a Balancer.
func partitionList(n int) []int {
	if n <= len(partitionIDs) {
		return partitionIDs[:n]
	}
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return parts
}

// recordSize is the size kafka-go's Writer counts for a record against BatchBytes.
func recordSize(m *kafkago.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// isRetriable reports a produce error worth another attempt: a temporary Kafka
// error (a leader moving, a timeout) or a broken connection.
func isRetriable(err error) bool {
	var temp interface{ Temporary() bool }
	if errors.As(err, &temp) && temp.Temporary() {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded)
}

// writeBackoff is kafka-go's backoff between attempts: attempt² × min, at most max.
func writeBackoff(attempt int, lo, hi time.Duration) time.Duration {
	return min(time.Duration(attempt*attempt)*lo, hi)
}

// recordReader reads the records recs[idx[0]], recs[idx[1]], … into a produce
// request without copying their keys and values.
type recordReader struct {
	recs       []kafkago.Message
	idx        []int
	i          int
	rec        protocol.Record
	key, value bytesReadCloser
}

func (r *recordReader) ReadRecord() (*protocol.Record, error) {
	if r.i >= len(r.idx) {
		return nil, io.EOF
	}
	m := &r.recs[r.idx[r.i]]
	r.i++
	r.rec = protocol.Record{Time: m.Time, Headers: m.Headers}
	if m.Key != nil {
		r.key.Reset(m.Key)
		r.rec.Key = &r.key
	}
	if m.Value != nil {
		r.value.Reset(m.Value)
		r.rec.Value = &r.value
	}
	return &r.rec, nil
}

type bytesReadCloser struct{ bytes.Reader }

func (*bytesReadCloser) Close() error { return nil }

// produceQueue holds the Publish calls to one topic that wait while another call's
// produce is in flight (busy). Concurrent Publish calls (a client submitting many
// tasks at once, each with its own call) are sent together: the call that finds
// the topic idle produces its records at once, and when it is done, the first call
// that queued meanwhile produces the records of every call queued, in the order
// they queued, in one round of requests (one per leader broker) instead of one per
// call. A call alone waits for nothing; a call that queued waits for at most one
// produce in flight before its own goes out.
type produceQueue struct {
	mu      sync.Mutex
	busy    bool
	pending []*produceCall
}

// produceCall is one Publish call's records and how it ended.
type produceCall struct {
	recs     []kafkago.Message
	deadline time.Time
	err      error
	wake     chan bool // true: produce what is queued; false: done, err is set
}

// produceShared is produce of recs to their keys' partitions, shared with the
// calls to wire that queue meanwhile (see produceQueue). Each call still returns
// once its own records are written (acks=all) or failed, with the errors of its
// own records only: the records of a call stay in its order, one after the other,
// within each partition. A record too large fails its call alone.
func (p *Publisher) produceShared(deadline time.Time, wire string, recs []kafkago.Message) error {
	for i := range recs {
		if int64(recordSize(&recs[i])) > p.cfg.BatchBytes {
			return kafkago.MessageTooLargeError{Message: recs[i], Remaining: recs[i+1:]}
		}
	}
	v, ok := p.queues.Load(wire)
	if !ok {
		v, _ = p.queues.LoadOrStore(wire, &produceQueue{})
	}
	q := v.(*produceQueue)
	call := &produceCall{recs: recs, deadline: deadline, wake: make(chan bool, 1)}
	q.mu.Lock()
	q.pending = append(q.pending, call)
	if q.busy {
		q.mu.Unlock()
		if lead := <-call.wake; !lead {
			return call.err
		}
		q.mu.Lock()
	}
	q.busy = true
	calls := q.pending
	q.pending = nil
	q.mu.Unlock()

	p.produceCalls(wire, calls)

	q.mu.Lock()
	if len(q.pending) > 0 {
		next := q.pending[0]
		q.mu.Unlock()
		next.wake <- true
	} else {
		q.busy = false
		q.mu.Unlock()
	}
	return call.err
}

// produceCalls produces the records of calls in one produce (by the earliest of
// their deadlines; a call whose deadline passed while it waited fails alone), sets
// each call's error and wakes every call but the first (the caller's own).
func (p *Publisher) produceCalls(wire string, calls []*produceCall) {
	first := calls[0]
	if len(calls) > 1 {
		now := time.Now()
		live := calls[:0:0]
		for i, c := range calls {
			if !c.deadline.After(now) {
				c.err = fmt.Errorf("kafka: waited for another produce to %s until the publish deadline: %w", wire, context.DeadlineExceeded)
				if i > 0 {
					c.wake <- false
				}
				continue
			}
			live = append(live, c)
		}
		if len(live) == 0 {
			return
		}
		calls = live
	}
	recs := calls[0].recs
	deadline := calls[0].deadline
	if len(calls) > 1 {
		n := 0
		for _, c := range calls {
			n += len(c.recs)
			if c.deadline.Before(deadline) {
				deadline = c.deadline
			}
		}
		recs = make([]kafkago.Message, 0, n)
		for _, c := range calls {
			recs = append(recs, c.recs...)
		}
	}
	err := p.produce(deadline, wire, recs, -1)
	var werr kafkago.WriteErrors
	perRecord := errors.As(err, &werr) && len(werr) == len(recs)
	off := 0
	for _, c := range calls {
		switch {
		case err == nil:
		case perRecord:
			own := werr[off : off+len(c.recs)]
			if own.Count() > 0 {
				c.err = own
			}
		default:
			c.err = err
		}
		off += len(c.recs)
		if c != first {
			c.wake <- false
		}
	}
}
