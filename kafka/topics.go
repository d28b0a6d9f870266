package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"syscall"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
)

// defaultMetadataMaxAge is the default MetadataMaxAge: kafka-go's.
const defaultMetadataMaxAge = 6 * time.Second

func newTransport(brokers []string, clientID string, dialTimeout, metadataMaxAge time.Duration) *kafkago.Transport {
	return &kafkago.Transport{
		Dial:        (&net.Dialer{Timeout: dialTimeout}).DialContext,
		DialTimeout: dialTimeout,
		ClientID:    clientID,
		MetadataTTL: metadataMaxAge,
	}
}

// minRefreshInterval spaces the metadata refreshes of one transport: the
// partitions of a broker that lost its leaderships fail together, and one fresh
// read of the metadata serves them all.
const minRefreshInterval = 500 * time.Millisecond

// routes is a transport whose cached cluster metadata, which routes each request
// to its partition's leader, can be read again before MetadataMaxAge is over.
type routes struct {
	transport *kafkago.Transport

	mu   sync.Mutex
	last time.Time // of the last refresh
}

// refresh drops the transport's connection pools, unless it did so within
// minRefreshInterval: the next request starts a pool that reads the metadata
// before it sends anything (kafka-go v0.4.51, transport.go: grabPool, then
// roundTrip waits for the pool's first metadata), and requests in flight end on
// the pools they started on. kafka-go has no other way to have it read again.
func (r *routes) refresh() {
	r.mu.Lock()
	if time.Since(r.last) < minRefreshInterval {
		r.mu.Unlock()
		return
	}
	r.last = time.Now()
	r.mu.Unlock()
	r.transport.CloseIdleConnections()
}

// leaderMoved reports whether err says that the metadata the transport routed a
// request by is out of date: the broker is no longer the partition's leader (a
// leader election, a reassignment), the partition has no leader for now, or is
// unknown to the broker (its replica moved away, or the topic is new), or the
// broker is gone (its connection refused, or not in the metadata any more). The
// request should be sent again after a refresh (routes.refresh), as Java's
// clients do.
func leaderMoved(err error) bool {
	for _, e := range []kafkago.Error{kafkago.NotLeaderForPartition, kafkago.LeaderNotAvailable,
		kafkago.UnknownTopicOrPartition, kafkago.ReplicaNotAvailable, kafkago.FencedLeaderEpoch,
		kafkago.UnknownLeaderEpoch, kafkago.KafkaStorageError, kafkago.BrokerNotAvailable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func newDialer(clientID string, timeout time.Duration) *kafkago.Dialer {
	return &kafkago.Dialer{ClientID: clientID, Timeout: timeout, DualStack: true}
}

// admin creates topics and reads partition counts. Its methods take the topic's
// Kafka name (with the layout's Prefix); ensureTopic also the logical name, which
// picks the topic's configuration.
type admin struct {
	client *kafkago.Client
	layout TopicLayout
}

// ensureTopic creates the Kafka topic wire, the name of topic with the layout's
// prefix, when the layout says so, with the configuration the layout has for topic;
// an existing topic is fine. created is the partition count when this call created
// the topic (it holds no record older than the call), else 0.
func (a admin) ensureTopic(ctx context.Context, topic, wire string) (created int, err error) {
	if !a.layout.InitializeTopics {
		return 0, nil
	}
	tc := a.layout.topic(topic)
	timedOut := false             // a CreateTopics request was not answered in time
	var settle func(string, bool) // Settled, for a creation Creatable allowed
	if a.layout.Creatable != nil {
		// Only a topic the cluster does not know is the policy's to refuse.
		n, err := a.partitionsOnceAuto(ctx, wire, false)
		if err == nil && n > 0 {
			return 0, nil
		}
		// The transport answered from its cache, which may be older than the
		// topic (created by an operator since): ask the cluster afresh.
		if n, err = a.partitionsFresh(ctx, wire); err == nil && n > 0 {
			return 0, nil
		}
		missing := err == nil || errors.Is(err, kafkago.UnknownTopicOrPartition)
		allowed, refusal := a.layout.Creatable(topic, tc)
		switch {
		case refusal != nil && missing:
			return 0, fmt.Errorf("kafka: topic %s does not exist and is not created: %w (%w)", wire, refusal, kafkago.UnknownTopicOrPartition)
		case refusal != nil:
			// Whether the topic exists is not known (the broker did not answer):
			// the caller retries as through any outage.
			return 0, fmt.Errorf("kafka: metadata of topic %s: %w", wire, err)
		}
		tc = allowed
		settle = a.layout.Settled
	}
	if settle != nil {
		// The topic is created by this call if it ends with no error (or, after a
		// request that timed out, may have been: one that ended with an error, or
		// TopicAlreadyExists, all the same); another client's creation
		// (TopicAlreadyExists at once) or a refusal made nothing. err and created
		// are the results, not the metadata reads' above.
		defer func() { settle(topic, err == nil && created > 0 || timedOut) }()
	}
	entries := make([]kafkago.ConfigEntry, 0, len(tc.Configs))
	for k, v := range tc.Configs {
		entries = append(entries, kafkago.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].ConfigName < entries[j].ConfigName })
	// A broker busy with many creations (a JVM on a loaded machine) may not answer
	// within the client's timeout; the request may still have created the topic, so
	// it is sent again (a few times, while ctx lasts) and TopicAlreadyExists then
	// counts as existing: created stays 0, which claims nothing about older records.
	//
	// A broker that has just started may refuse the request for a while
	// (BROKER_NOT_AVAILABLE while a KRaft broker registers with its controller,
	// NOT_CONTROLLER, LEADER_NOT_AVAILABLE): the request created nothing, and is
	// sent again with back-off, for up to notReadyWait, while ctx lasts. A node
	// started beside its broker (a compose file, a CI job) would otherwise exit.
	var notReadySince time.Time
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// Whether ctx was alive as the request went out: one it had already
		// ended (the metadata reads above used it up) reached no broker.
		sent := ctx.Err() == nil
		res, err := a.client.CreateTopics(ctx, &kafkago.CreateTopicsRequest{
			Topics: []kafkago.TopicConfig{{
				Topic: wire, NumPartitions: tc.Partitions, ReplicationFactor: tc.ReplicationFactor, ConfigEntries: entries,
			}},
		})
		if err == nil {
			err = res.Errors[wire]
		}
		switch {
		case err == nil && !timedOut:
			return tc.Partitions, nil
		case err == nil, errors.Is(err, kafkago.TopicAlreadyExists):
			return 0, nil
		case attempt < createAttempts && ctx.Err() == nil && isTimeout(err):
			timedOut = true
			continue
		case notReady(err) && ctx.Err() == nil && (notReadySince.IsZero() || time.Since(notReadySince) < notReadyWait):
			if notReadySince.IsZero() {
				notReadySince = time.Now()
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, fmt.Errorf("kafka: create topic %s (%d partitions, replication %d): %w (the broker was not ready; waited until %w)", wire, tc.Partitions, tc.ReplicationFactor, err, ctx.Err())
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		default:
			if sent && ctx.Err() != nil && (isTimeout(err) || errors.Is(err, context.Canceled)) {
				// ctx cut the request short: the broker may have created the
				// topic all the same (Settled says it may have). A request
				// never sent created nothing.
				timedOut = true
			}
			return 0, fmt.Errorf("kafka: create topic %s (%d partitions, replication %d): %w", wire, tc.Partitions, tc.ReplicationFactor, err)
		}
	}
}

// createAttempts bounds the CreateTopics requests of one ensureTopic that the
// broker did not answer in time.
const createAttempts = 3

// notReadyWait bounds how long ensureTopic sends a CreateTopics request again that
// a broker refused as not ready yet (notReady).
const notReadyWait = 30 * time.Second

// notReady reports whether err is a broker's refusal to create a topic because it
// is not ready yet (starting, or between controllers): the request created
// nothing and may succeed soon.
func notReady(err error) bool {
	return errors.Is(err, kafkago.BrokerNotAvailable) || errors.Is(err, kafkago.NotController) ||
		errors.Is(err, kafkago.LeaderNotAvailable) || errors.Is(err, kafkago.ThrottlingQuotaExceeded)
}

// isTimeout reports whether err is a request that was not answered in time (the
// client's own timeout, not the caller's context).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() || errors.Is(err, kafkago.RequestTimedOut)
}

// partitions returns the number of partitions of topic, waiting (until ctx is done)
// while the cluster does not know it yet: a topic just created, or created by
// another client since the last metadata refresh.
func (a admin) partitions(ctx context.Context, topic string) (int, error) {
	wait := 50 * time.Millisecond
	for {
		n, err := a.partitionsOnce(ctx, topic)
		if err == nil && n > 0 {
			return n, nil
		}
		if err == nil {
			err = kafkago.UnknownTopicOrPartition
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("kafka: partitions of topic %s: %w (waited until %w)", topic, err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

func (a admin) partitionsOnce(ctx context.Context, topic string) (int, error) {
	return a.partitionsOnceAuto(ctx, topic, a.layout.InitializeTopics)
}

// partitionsFresh is partitionsOnceAuto(ctx, topic, false) read from the
// cluster's metadata now, not from the transport's cache, through a transport of
// its own: kafka-go reads afresh only a request that allows auto-creation.
func (a admin) partitionsFresh(ctx context.Context, topic string) (int, error) {
	tr := &kafkago.Transport{MetadataTopics: []string{topic}}
	if t, ok := a.client.Transport.(*kafkago.Transport); ok {
		tr.Dial, tr.DialTimeout, tr.ClientID, tr.SASL, tr.TLS = t.Dial, t.DialTimeout, t.ClientID, t.SASL, t.TLS
	}
	defer tr.CloseIdleConnections()
	return admin{client: &kafkago.Client{Addr: a.client.Addr, Transport: tr, Timeout: a.client.Timeout}, layout: a.layout}.partitionsOnceAuto(ctx, topic, false)
}

// partitionsOnceAuto is partitionsOnce, with the metadata request allowing the
// broker to auto-create the topic when auto says so.
func (a admin) partitionsOnceAuto(ctx context.Context, topic string, auto bool) (int, error) {
	// The transport answers metadata requests from a cache it refreshes every few
	// seconds. A request that allows auto-creation skips the cache for a topic the
	// cache does not know and refreshes it; it is sent only when this client may
	// create topics anyway (the topic was just created or found to exist).
	res, err := a.client.Transport.RoundTrip(ctx, a.client.Addr, &metadataAPI.Request{
		TopicNames:             []string{topic},
		AllowAutoTopicCreation: auto,
	})
	if err != nil {
		return 0, err
	}
	md, ok := res.(*metadataAPI.Response)
	if !ok {
		return 0, fmt.Errorf("kafka: unexpected metadata response %T", res)
	}
	for _, t := range md.Topics {
		if t.Name == topic {
			if t.ErrorCode != 0 {
				return 0, kafkago.Error(t.ErrorCode)
			}
			return len(t.Partitions), nil
		}
	}
	return 0, kafkago.UnknownTopicOrPartition
}

// endOffsets returns, for every partition topic has now, the offset its next record
// will get (the high watermark: every record whose Publish returned is below it).
// It waits (until ctx is done) while the cluster does not know the topic or a
// partition has no leader yet.
func (a admin) endOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	n, err := a.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	reqs := make([]kafkago.OffsetRequest, n)
	for p := range n {
		reqs[p] = kafkago.LastOffsetOf(p)
	}
	wait := 50 * time.Millisecond
	for {
		offsets, err := a.endOffsetsOnce(ctx, topic, reqs)
		if err == nil {
			return offsets, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("kafka: end offsets of topic %s: %w (waited until %w)", topic, err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

func (a admin) endOffsetsOnce(ctx context.Context, topic string, reqs []kafkago.OffsetRequest) (map[int]int64, error) {
	res, err := a.client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	offsets := make(map[int]int64, len(reqs))
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", po.Partition, po.Error)
		}
		if po.LastOffset < 0 {
			return nil, fmt.Errorf("partition %d: no end offset in the response", po.Partition)
		}
		offsets[po.Partition] = po.LastOffset
	}
	for _, r := range reqs {
		if _, ok := offsets[r.Partition]; !ok {
			return nil, fmt.Errorf("partition %d: missing from the response", r.Partition)
		}
	}
	return offsets, nil
}
