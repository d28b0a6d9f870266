package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// findFetchBytes bounds one fetch of FindRecords.
const findFetchBytes = 1 << 20

// findTopicWait bounds how long FindRecords waits for the cluster to know its
// topic: a topic that does not exist holds nothing to find (a fresh cluster whose
// troupe.results no result was published on yet), and waiting for it as for a
// topic just created held a takeover for as long as its caller allowed.
const findTopicWait = 2 * time.Second

// FindRecords calls found with the key, the message UUID (HeaderUUID) and the
// value of each record of topic (the name Publish is given, without Topics.Prefix) whose key is
// one of keys and whose timestamp is since or later, among the records the topic
// holds when FindRecords is called: it reads only the partitions those keys go to
// (Balancer), from the first offset the broker's time index gives for since, up to
// the end offsets read at the start. Publish stamps each record with the time it
// sends it (kafka-go does, for a record given none); a record another producer
// wrote without a timestamp is not found. It returns an error if the topic
// or a partition cannot be read before ctx ends, having called found for some of
// the records maybe: a caller that must not miss one takes that as "unknown". A
// topic the cluster does not know for findTopicWait holds nothing: found is not
// called, and the error is nil.
func (p *Publisher) FindRecords(ctx context.Context, topic string, keys []string, since time.Time, found func(key, uuid string, value []byte)) error {
	wire, err := p.cfg.Topics.wire(topic)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, findTopicWait)
	n, err := p.admin.partitions(tctx, wire)
	cancel()
	if err != nil {
		if errors.Is(err, kafkago.UnknownTopicOrPartition) && ctx.Err() == nil {
			// No such topic, as far as the cluster has told for findTopicWait:
			// nothing was published on it. Had it been created just now by another
			// client, what it holds is not found: the caller's "not found".
			return nil
		}
		return err
	}
	wanted := map[int]map[string]bool{}
	for _, k := range keys {
		part := Partition([]byte(k), n)
		if wanted[part] == nil {
			wanted[part] = map[string]bool{}
		}
		wanted[part][k] = true
	}
	starts := make([]kafkago.OffsetRequest, 0, len(wanted))
	ends := make([]kafkago.OffsetRequest, 0, len(wanted))
	for part := range wanted {
		starts = append(starts, kafkago.TimeOffsetOf(part, since))
		ends = append(ends, kafkago.LastOffsetOf(part))
	}
	end, err := p.admin.endOffsetsOnce(ctx, wire, ends)
	if err != nil {
		return fmt.Errorf("kafka: end offsets of %s: %w", wire, err)
	}
	res, err := p.admin.client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{wire: starts}})
	if err != nil {
		return fmt.Errorf("kafka: offsets of %s at %s: %w", wire, since.Format(time.RFC3339Nano), err)
	}
	start := map[int]int64{}
	for _, po := range res.Topics[wire] {
		if po.Error != nil {
			return fmt.Errorf("kafka: offset of partition %d of %s at %s: %w", po.Partition, wire, since.Format(time.RFC3339Nano), po.Error)
		}
		for off := range po.Offsets {
			start[po.Partition] = off // -1: no record that late
		}
	}
	for part, ks := range wanted {
		from, ok := start[part]
		if !ok {
			return fmt.Errorf("kafka: partition %d of %s: missing from the offsets' response", part, wire)
		}
		if from < 0 {
			continue
		}
		if err := p.findIn(ctx, wire, part, from, end[part], ks, found); err != nil {
			return err
		}
	}
	return nil
}

// findIn reads partition part of wire from offset from to end (excluded) and calls
// found for each record keyed by one of keys.
func (p *Publisher) findIn(ctx context.Context, wire string, part int, from, end int64, keys map[string]bool, found func(key, uuid string, value []byte)) error {
	for off := from; off < end; {
		res, err := p.admin.client.Fetch(ctx, &kafkago.FetchRequest{Topic: wire, Partition: part, Offset: off,
			MinBytes: 1, MaxBytes: findFetchBytes, MaxWait: 100 * time.Millisecond})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			return fmt.Errorf("kafka: fetch partition %d of %s at offset %d: %w", part, wire, off, err)
		}
		next := off
		for {
			rec, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("kafka: read partition %d of %s at offset %d: %w", part, wire, next, err)
			}
			if rec.Offset < off || rec.Offset >= end {
				continue // a batch read whole, or past the end read at the start
			}
			next = rec.Offset + 1
			if rec.Key == nil {
				continue
			}
			key, err := io.ReadAll(rec.Key)
			if err != nil || !keys[string(key)] {
				continue
			}
			for _, h := range rec.Headers {
				if h.Key != HeaderUUID {
					continue
				}
				var value []byte
				if rec.Value != nil {
					if value, err = io.ReadAll(rec.Value); err != nil {
						return fmt.Errorf("kafka: read partition %d of %s at offset %d: %w", part, wire, rec.Offset, err)
					}
				}
				found(string(key), string(h.Value), value)
			}
		}
		if next == off {
			// Nothing read at or past off before end (a compacted or aborted
			// range): given up rather than guessed past.
			return fmt.Errorf("kafka: partition %d of %s: no record read at offset %d before %d", part, wire, off, end)
		}
		off = next
	}
	return nil
}
