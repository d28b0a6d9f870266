package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// A partition's consumer reads committed records only (isolation level
// read_committed), as Java's consumers do when configured so and as a task producer
// using transactions (confluent-kafka's init_transactions/begin/produce/commit,
// Java's KafkaProducer with a transactional.id) expects: a record of a transaction
// that was aborted is never delivered, one of a transaction still open is delivered
// only once it commits (the broker holds back every record of the partition from
// the first open transaction's on, until it commits, aborts, or the broker aborts
// it at its transaction timeout), and the transaction markers the broker writes
// into the partition are not records to deliver. kafka-go's Reader does none of
// this: it reads uncommitted records, drops the broker's list of aborted
// transactions, and hands the markers over as records (a task consumer saw them as
// malformed tasks). So the partition's consumer fetches through kafka-go's protocol
// package and filters the batches itself, as the Java consumer does.

// fetchRequestSlack is added to FetchMaxWait to bound one fetch request.
const fetchRequestSlack = 10 * time.Second

// partitionReader fetches one partition's committed records in offset order. It is
// used by one goroutine.
type partitionReader struct {
	client    *kafkago.Client // the subscriber's admin client: its transport routes a fetch to the partition's leader
	routes    *routes         // that transport's, to refresh when the leader moved
	topic     string          // the Kafka name
	partition int
	maxBytes  int
	maxWait   time.Duration

	// offset is the next offset to fetch: an absolute one, or kafkago.FirstOffset
	// or LastOffset until resolve fixes it.
	offset int64
}

// readRecord is a record of the partition, or one to skip (skip says why: a
// transaction marker, a record of an aborted transaction). A skipped record is
// not delivered, but it counts as consumed: its offset is committed.
type readRecord struct {
	rec  kafkago.Message
	skip string
}

// resolve turns a FirstOffset or LastOffset start into an absolute offset (the
// last one as read_committed consumers see it: the last stable offset).
func (r *partitionReader) resolve(ctx context.Context) error {
	if r.offset >= 0 {
		return nil
	}
	first, last, err := r.bounds(ctx)
	if err != nil {
		return err
	}
	if r.offset == kafkago.FirstOffset {
		r.offset = first
	} else {
		r.offset = last
	}
	return nil
}

// bounds returns the partition's first offset and its last stable one.
func (r *partitionReader) bounds(ctx context.Context) (first, last int64, err error) {
	res, err := r.client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{
		Topics:         map[string][]kafkago.OffsetRequest{r.topic: {kafkago.FirstOffsetOf(r.partition), kafkago.LastOffsetOf(r.partition)}},
		IsolationLevel: kafkago.ReadCommitted,
	})
	if err != nil {
		return 0, 0, err
	}
	for _, po := range res.Topics[r.topic] {
		if po.Partition != r.partition {
			continue
		}
		if po.Error != nil {
			return 0, 0, po.Error
		}
		if po.FirstOffset < 0 || po.LastOffset < 0 {
			return 0, 0, fmt.Errorf("partition %d: no offsets in the response", r.partition)
		}
		return po.FirstOffset, po.LastOffset, nil
	}
	return 0, 0, fmt.Errorf("partition %d: missing from the response", r.partition)
}

// lag returns how many records lie after start (an absolute offset, or FirstOffset
// or LastOffset) up to the last stable offset.
func (r *partitionReader) lag(ctx context.Context, start int64) (int64, error) {
	first, last, err := r.bounds(ctx)
	if err != nil {
		return 0, err
	}
	switch start {
	case kafkago.FirstOffset:
		start = first
	case kafkago.LastOffset:
		start = last
	}
	return max(last-start, 0), nil
}

// fetch reads the next records from offset, waiting up to maxWait for some, and
// moves offset past them (the skipped ones too). It returns none when nothing new
// was committed meanwhile. A kafkago.Error is the partition's (OffsetOutOfRange:
// see outOfRange).
func (r *partitionReader) fetch(ctx context.Context) ([]readRecord, error) {
	if err := r.resolve(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.maxWait+fetchRequestSlack)
	defer cancel()
	m, err := r.client.Transport.RoundTrip(ctx, r.client.Addr, &fetchapi.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(r.maxWait / time.Millisecond),
		MinBytes:       1,
		MaxBytes:       int32(r.maxBytes),
		IsolationLevel: int8(kafkago.ReadCommitted),
		SessionID:      -1,
		SessionEpoch:   -1,
		Topics: []fetchapi.RequestTopic{{
			Topic: r.topic,
			Partitions: []fetchapi.RequestPartition{{
				Partition:          int32(r.partition),
				CurrentLeaderEpoch: -1,
				FetchOffset:        r.offset,
				LogStartOffset:     -1,
				PartitionMaxBytes:  int32(r.maxBytes),
			}},
		}},
	})
	if err != nil {
		return nil, err
	}
	res, ok := m.(*fetchapi.Response)
	if !ok {
		return nil, fmt.Errorf("fetch: unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		return nil, kafkago.Error(res.ErrorCode)
	}
	var part *fetchapi.ResponsePartition
	for i := range res.Topics {
		for j := range res.Topics[i].Partitions {
			if p := &res.Topics[i].Partitions[j]; res.Topics[i].Topic == r.topic && int(p.Partition) == r.partition {
				part = p
			}
		}
	}
	if part == nil {
		return nil, fmt.Errorf("fetch: partition %d of %s missing from the response", r.partition, r.topic)
	}
	if part.ErrorCode != 0 {
		return nil, kafkago.Error(part.ErrorCode)
	}
	return r.committed(part)
}

// committed returns the records of a fetch response, marking those of aborted
// transactions and the transaction markers as skipped: a transactional batch is
// aborted when its producer has an aborted transaction that began at or before the
// batch, and that producer's abort marker is not behind (the broker lists the
// aborted transactions that overlap the records it returned).
func (r *partitionReader) committed(part *fetchapi.ResponsePartition) ([]readRecord, error) {
	var batches []protocol.RecordReader
	switch rs := part.RecordSet.Records.(type) {
	case nil:
	case *protocol.RecordStream:
		batches = rs.Records
	default:
		batches = []protocol.RecordReader{rs}
	}
	pending := slices.SortedFunc(slices.Values(part.AbortedTransactions), func(a, b fetchapi.ResponseTransaction) int {
		return cmp.Compare(a.FirstOffset, b.FirstOffset)
	})
	aborting := map[int64]bool{} // producers whose batches are of an aborted transaction
	var out []readRecord
	add := func(rec *protocol.Record, skip string) error {
		defer closeBytes(rec)
		if rec.Offset < r.offset {
			return nil // a batch may begin before the offset asked for
		}
		m := kafkago.Message{Topic: r.topic, Partition: r.partition, Offset: rec.Offset, HighWaterMark: part.HighWatermark, Time: rec.Time}
		if skip == "" {
			var err error
			if m.Key, err = protocol.ReadAll(rec.Key); err != nil {
				return err
			}
			if m.Value, err = protocol.ReadAll(rec.Value); err != nil {
				return err
			}
			m.Headers = slices.Clone(rec.Headers)
		}
		out = append(out, readRecord{rec: m, skip: skip})
		r.offset = rec.Offset + 1
		return nil
	}
	upTo := func(base int64) {
		for len(pending) > 0 && pending[0].FirstOffset <= base {
			aborting[pending[0].ProducerID] = true
			pending = pending[1:]
		}
	}
	for _, b := range batches {
		switch b := b.(type) {
		case *protocol.ControlBatch:
			upTo(b.BaseOffset)
			for {
				cr, err := b.ReadControlRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return out, fmt.Errorf("fetch: transaction marker: %w", err)
				}
				if cr.Type == 0 { // abort: the producer's later batches are another transaction's
					delete(aborting, b.ProducerID)
				}
				if err := add(&protocol.Record{Offset: cr.Offset, Time: cr.Time}, "transaction marker"); err != nil {
					return out, err
				}
			}
		case *protocol.RecordBatch:
			upTo(b.BaseOffset)
			skip := ""
			if b.Attributes.Transactional() && aborting[b.ProducerID] {
				skip = "aborted transaction"
			}
			if err := r.readAll(b, skip, add); err != nil {
				return out, err
			}
		default:
			if err := r.readAll(b, "", add); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

func (r *partitionReader) readAll(b protocol.RecordReader, skip string, add func(*protocol.Record, string) error) error {
	for {
		rec, err := b.ReadRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		if err := add(rec, skip); err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
	}
}

// dropIdleConns closes the transport's idle connections: one was found closed by
// the broker or the network, which then closed those idle as long too.
func (r *partitionReader) dropIdleConns() {
	if t, ok := r.client.Transport.(*kafkago.Transport); ok {
		t.CloseIdleConnections()
	}
}

// closedConn reports whether err is a request's connection found closed (by the
// broker or the network) rather than an answer of the broker's.
func closedConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func closeBytes(rec *protocol.Record) {
	if rec.Key != nil {
		rec.Key.Close()
	}
	if rec.Value != nil {
		rec.Value.Close()
	}
}

// outOfRange handles an OffsetOutOfRange fetch: an offset before the partition's
// first (its records were deleted: retention) moves to the first; one past the
// last stays (the caller waits and fetches again). It returns how many records
// were skipped.
func (r *partitionReader) outOfRange(ctx context.Context) (int64, error) {
	first, _, err := r.bounds(ctx)
	if err != nil {
		return 0, err
	}
	if r.offset < first {
		skipped := first - r.offset
		r.offset = first
		return skipped, nil
	}
	return 0, nil
}
