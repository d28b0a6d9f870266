package kafka

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by PublisherConfig and SubscriberConfig to zero fields.
const (
	DefaultPartitions        = 12 // as deploy/kafka/topics.txt
	DefaultReplicationFactor = 1  // one local broker; use 3 in a cluster
	DefaultClientID          = "troupe"
)

// TopicConfig is how a topic is created when InitializeTopics is on. Zero fields
// take DefaultPartitions and DefaultReplicationFactor.
type TopicConfig struct {
	Partitions        int
	ReplicationFactor int
	// Configs are topic-level settings, e.g. "retention.ms".
	Configs map[string]string
}

func (t TopicConfig) withDefaults(def TopicConfig) TopicConfig {
	if t.Partitions == 0 {
		t.Partitions = def.Partitions
	}
	if t.Partitions == 0 {
		t.Partitions = DefaultPartitions
	}
	if t.ReplicationFactor == 0 {
		t.ReplicationFactor = def.ReplicationFactor
	}
	if t.ReplicationFactor == 0 {
		t.ReplicationFactor = DefaultReplicationFactor
	}
	if t.Configs == nil {
		t.Configs = def.Configs
	}
	return t
}

func (t TopicConfig) validate(name string) error {
	if t.Partitions < 0 || t.ReplicationFactor < 0 {
		return fmt.Errorf("kafka: topic %q: partitions and replication factor must not be negative", name)
	}
	return nil
}

// TopicLayout says how the topic names a Publisher or Subscriber is given map to
// Kafka topics, and whether and how it creates them. Topics are created on first use
// (the first Publish to a topic, Subscribe or SubscribeInitialize); a topic that
// already exists is left as it is.
type TopicLayout struct {
	// Prefix is put before every topic name used through this Publisher or
	// Subscriber on the wire: with "prod.", troupe.tasks is the Kafka topic
	// "prod.troupe.tasks". Watermill callers keep using the logical names (Publish,
	// Subscribe, SubscribeInitialize, Marshaler.Marshal and Assignment.Topic see
	// troupe.tasks); what Kafka sees, and what Record reports, is the prefixed name.
	// Clusters, or test runs, that share a broker and use different prefixes do not
	// see each other's records. Consumer group names are not prefixed: two clusters
	// with one ConsumerGroup name share the group (each still consumes only its own
	// topics, but their rebalances are joint), so give each cluster its own group too.
	// The prefix may hold only ASCII letters, digits, '.', '_' and '-', as Kafka topic
	// names, and the prefixed name may be at most 249 characters long. Empty: no prefix.
	Prefix string
	// InitializeTopics creates missing topics. Off by default: in a cluster, topics
	// come from deploy/kafka/topics.txt (deploy/kafka.sh topics).
	InitializeTopics bool
	// Topics configures named topics, by their logical names (troupe.tasks, also
	// with a Prefix; as deploy/kafka/topics.txt lists them); others use Default.
	Topics map[string]TopicConfig
	// Default configures every topic not in Topics (zero fields: 12 partitions,
	// replication factor 1).
	Default TopicConfig
	// Creatable, when set, is asked, by a topic's logical name and the
	// configuration the layout has for it, before InitializeTopics creates a topic
	// the cluster does not know (one that exists is used as it is, unasked). It
	// returns the configuration to create the topic with, or an error refusing it:
	// the topic is then neither created nor auto-created by a metadata request, and
	// Publish to it (or Subscribe) fails with that error, wrapped with
	// kafkago.UnknownTopicOrPartition. Nil: every missing topic is created. A node
	// uses it to bound the reply topics its clients name (node.ReplyTopics).
	Creatable func(topic string, tc TopicConfig) (TopicConfig, error)
	// Settled, when set, is told how each creation that Creatable allowed ended,
	// once it did: created is true when the topic was created by this client, or
	// may have been (a request that timed out, whose retry found the topic, or
	// that ctx cut short), false when nothing of this client's made it (refused
	// by the broker, created by another client meanwhile). A policy that counts
	// the topics it let be created (node.ReplyTopics) reserves room for one in
	// Creatable, and keeps it or gives it back here. Nil: nothing is told, and
	// such a policy counts every creation it allowed (node.ReplyTopics does).
	Settled func(topic string, created bool)
}

// topic returns the configuration topic is created with.
func (l TopicLayout) topic(name string) TopicConfig {
	def := l.Default.withDefaults(TopicConfig{})
	if t, ok := l.Topics[name]; ok {
		return t.withDefaults(def)
	}
	return def
}

// MaxTopicNameLength is the longest topic name Kafka accepts, prefix included.
const MaxTopicNameLength = 249

// ErrInvalidTopic is returned for a topic name Kafka would refuse: empty, longer
// than MaxTopicNameLength with its prefix, or with a character other than ASCII
// letters, digits, '.', '_' and '-'; also for such a TopicLayout.Prefix.
var ErrInvalidTopic = errors.New("kafka: invalid topic name")

// Validate reports a layout that cannot work: a Prefix Kafka would refuse, an
// unnamed topic in Topics, negative partitions or replication factors.
func (l TopicLayout) Validate() error {
	if c, bad := invalidTopicChar(l.Prefix); bad {
		return fmt.Errorf("%w: topic prefix %q has %q; Kafka topic names allow ASCII letters, digits, '.', '_' and '-'", ErrInvalidTopic, l.Prefix, c)
	}
	if len(l.Prefix) >= MaxTopicNameLength {
		return fmt.Errorf("%w: topic prefix %q is %d characters long; with the topic name it must stay within %d", ErrInvalidTopic, l.Prefix, len(l.Prefix), MaxTopicNameLength)
	}
	if err := l.Default.validate("default"); err != nil {
		return err
	}
	for name, t := range l.Topics {
		if name == "" {
			return errors.New("kafka: a topic in TopicLayout.Topics has an empty name")
		}
		if err := t.validate(name); err != nil {
			return err
		}
	}
	return nil
}

// wire returns the Kafka name of topic: Prefix + topic, or ErrInvalidTopic.
func (l TopicLayout) wire(topic string) (string, error) {
	if topic == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidTopic)
	}
	name := l.Prefix + topic
	if c, bad := invalidTopicChar(topic); bad {
		return "", fmt.Errorf("%w: %q has %q; Kafka topic names allow ASCII letters, digits, '.', '_' and '-'", ErrInvalidTopic, topic, c)
	}
	if len(name) > MaxTopicNameLength {
		if l.Prefix != "" {
			return "", fmt.Errorf("%w: topic %q with prefix %q is %d characters long, more than Kafka's %d", ErrInvalidTopic, topic, l.Prefix, len(name), MaxTopicNameLength)
		}
		return "", fmt.Errorf("%w: %q is %d characters long, more than Kafka's %d", ErrInvalidTopic, topic, len(name), MaxTopicNameLength)
	}
	if name == "." || name == ".." {
		return "", fmt.Errorf("%w: %q", ErrInvalidTopic, name)
	}
	return name, nil
}

// invalidTopicChar returns the first character of s that a Kafka topic name cannot
// hold.
func invalidTopicChar(s string) (rune, bool) {
	for _, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return c, true
		}
	}
	return 0, false
}

// ParseTopics reads the topic layout format of deploy/kafka/topics.txt: one topic a
// line, "name partitions replication retention_ms", blank lines and lines starting
// with # ignored. The retention becomes the "retention.ms" config. A name Kafka
// would refuse is an error (ErrInvalidTopic) naming its line.
func ParseTopics(r io.Reader) (map[string]TopicConfig, error) {
	out := map[string]TopicConfig{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("kafka: topics line %d: want 4 fields (name partitions replication retention_ms), got %d", n, len(f))
		}
		parts, err1 := strconv.Atoi(f[1])
		repl, err2 := strconv.Atoi(f[2])
		ret, err3 := strconv.ParseInt(f[3], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil || parts <= 0 || repl <= 0 || ret < -1 {
			return nil, fmt.Errorf("kafka: topics line %d: partitions and replication must be positive integers, retention_ms an integer >= -1: %q", n, line)
		}
		// A name Kafka refuses (or that a byte order mark makes another name) would
		// leave the topic meant with the default layout.
		if _, err := (TopicLayout{}).wire(f[0]); err != nil {
			return nil, fmt.Errorf("kafka: topics line %d: %w", n, err)
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("kafka: topics line %d: topic %q listed twice", n, f[0])
		}
		out[f[0]] = TopicConfig{Partitions: parts, ReplicationFactor: repl, Configs: map[string]string{"retention.ms": f[3]}}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kafka: read topics: %w", err)
	}
	return out, nil
}

// PublisherConfig configures a Publisher. Zero fields take the documented defaults.
type PublisherConfig struct {
	// Brokers are the bootstrap addresses (host:port). Required.
	Brokers []string
	// Marshaler turns Watermill messages into Kafka records (default
	// DefaultMarshaler{}: key from the "session_id" metadata).
	Marshaler Marshaler
	// Topics creates missing topics on first publish when InitializeTopics is on.
	Topics TopicLayout

	// BatchTimeout is not used any more: Publish sends the messages of each call at
	// once, one produce request per leader broker, without waiting for more (the
	// calls made while a produce to the topic is in flight go out together after
	// it; a node's outbox publishes what its sessions queued meanwhile in one
	// call).
	//
	// Deprecated: it has no effect.
	BatchTimeout time.Duration
	// BatchSize caps the records of one partition in one produce request (default
	// 100). A Publish of more messages to one partition sends them in several
	// requests, in order.
	BatchSize int
	// BatchBytes caps the bytes of one partition's records in one produce request
	// (default 1 MiB, Kafka's default message.max.bytes). A larger single message is
	// rejected (kafkago.MessageTooLargeError).
	BatchBytes int64
	// MaxAttempts is how many times a batch is sent before Publish fails (default 10).
	MaxAttempts int
	// RetryBackoffMin and RetryBackoffMax bound the wait between attempts (defaults
	// 100 ms and 1 s).
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// WriteTimeout bounds one produce request (default 10 s).
	WriteTimeout time.Duration
	// PublishTimeout bounds one Publish call, retries and topic creation included
	// (default 60 s).
	PublishTimeout time.Duration
	// MetadataMaxAge is how long the cluster metadata (which broker leads each
	// partition) is used before it is read again (default 6 s, kafka-go's). A
	// request that finds a partition's leader gone (a leader election, a
	// reassignment, a broker down) has it read again at once, whatever this says.
	MetadataMaxAge time.Duration
	// DialTimeout bounds a connection attempt (default 5 s).
	DialTimeout time.Duration
	// CloseTimeout bounds Close (default 30 s).
	CloseTimeout time.Duration
	// ClientID names this client to the brokers (default "troupe").
	ClientID string
}

func (c *PublisherConfig) setDefaults() {
	if c.Marshaler == nil {
		c.Marshaler = DefaultMarshaler{}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 1 << 20
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.RetryBackoffMin == 0 {
		c.RetryBackoffMin = 100 * time.Millisecond
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = time.Minute
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.MetadataMaxAge == 0 {
		c.MetadataMaxAge = defaultMetadataMaxAge
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 30 * time.Second
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
}

// Validate reports a configuration that cannot work.
func (c PublisherConfig) Validate() error {
	if err := validateBrokers(c.Brokers); err != nil {
		return err
	}
	if c.BatchTimeout < 0 || c.BatchSize < 0 || c.BatchBytes < 0 || c.MaxAttempts < 0 ||
		c.RetryBackoffMin < 0 || c.RetryBackoffMax < 0 || c.WriteTimeout < 0 ||
		c.PublishTimeout < 0 || c.DialTimeout < 0 || c.CloseTimeout < 0 || c.MetadataMaxAge < 0 {
		return errors.New("kafka: publisher sizes, attempts and timeouts must not be negative")
	}
	if c.RetryBackoffMin > 0 && c.RetryBackoffMax > 0 && c.RetryBackoffMax < c.RetryBackoffMin {
		return errors.New("kafka: RetryBackoffMax is smaller than RetryBackoffMin")
	}
	return c.Topics.Validate()
}

// InitialOffset is where a consumer starts on a partition that has no committed
// offset: a new consumer group, or a subscriber without a group.
type InitialOffset int

const (
	// FromEarliest reads a partition from its oldest retained record (the default):
	// nothing published before the first subscription is missed.
	FromEarliest InitialOffset = iota
	// FromLatest reads only records published after the subscription started.
	// Without a group, Subscribe fixes every partition's start at its end offset
	// before it returns, so a record published after Subscribe returned is read.
	// With a group, a partition without a committed offset starts at its end offset
	// when its consumer starts, so records published in between are skipped.
	FromLatest
)

// NoNackResendSleep makes a nacked message come back at once.
const NoNackResendSleep time.Duration = -1

// SubscriberConfig configures a Subscriber. Zero fields take the documented defaults.
type SubscriberConfig struct {
	// Brokers are the bootstrap addresses (host:port). Required.
	Brokers []string
	// ConsumerGroup is the Kafka consumer group of every Subscribe call. Members of a
	// group share a topic's partitions, and a message's offset is committed for the
	// group once the handler acked it. Empty means no group: every Subscribe reads
	// every partition from InitialOffset, and nothing is committed.
	ConsumerGroup string
	// InitialOffset is where a partition without a committed offset starts (default
	// FromEarliest). With a ConsumerGroup it also applies to partitions a topic
	// gains later; without one, those are read from their first record (every
	// record of theirs is newer than the subscription).
	InitialOffset InitialOffset
	// Rebalance, with a ConsumerGroup, is told when this member's partitions change.
	Rebalance RebalanceListener
	// Marshaler turns Kafka records into Watermill messages (default DefaultMarshaler{}).
	Marshaler Marshaler
	// Topics creates missing topics on Subscribe when InitializeTopics is on.
	Topics TopicLayout

	// NackResendSleep is the pause before a nacked message is delivered again
	// (default 100 ms; NoNackResendSleep for none).
	NackResendSleep time.Duration
	// MaxInFlight bounds how far delivery runs ahead of a partition's first unacked
	// message: at most MaxInFlight messages of a partition, counted from its first
	// unacked one, are delivered (acked or not) at a time; the next one comes once
	// that message is acked. Default 1: a partition's next message only after the
	// previous one was acked, Watermill's usual semantics, which a Router handler
	// relies on to see a partition's messages in order (the Router handles each
	// message it receives on a goroutine of its own). With more, a partition's
	// messages are still delivered in offset order, but may be handled and acked out
	// of order; the committed offset never passes an unacked message. See the
	// package documentation, Delivery.
	MaxInFlight int

	// HeartbeatInterval is how often a group member heartbeats; a rebalance is
	// noticed at the next heartbeat (default 3 s).
	HeartbeatInterval time.Duration
	// SessionTimeout is how long the coordinator waits for a heartbeat before it
	// evicts a member (default 30 s; the broker bounds it).
	SessionTimeout time.Duration
	// RebalanceTimeout is how long the coordinator waits for members to rejoin in a
	// rebalance (default 30 s). A member that is giving up a partition waits up to
	// HandoffWait for the handler to settle the messages in flight. It also bounds the
	// Rebalance listener's Revoked: the member heartbeats while Revoked runs, so
	// SessionTimeout does not, but a member that has not rejoined once
	// RebalanceTimeout passed since the rebalance began is evicted. The group's
	// members wait for the longest RebalanceTimeout among them.
	RebalanceTimeout time.Duration
	// HandoffWait is how long a member giving up a partition (a rebalance) waits
	// for the messages of it in flight to be acked or nacked before it leaves them
	// unacked, to be delivered again to the partition's next owner (default half of
	// RebalanceTimeout; it must be shorter than RebalanceTimeout, which also covers
	// stopping the partitions' consumers, their last commits and the next join).
	// Subscriber.HoldInFlight raises both for a handler that holds messages longer.
	HandoffWait time.Duration
	// JoinGroupBackoff is the pause before joining again after a failed join
	// (default 1 s).
	JoinGroupBackoff time.Duration
	// PartitionWatchInterval is how often partition counts are checked, so that
	// partitions added to a topic are consumed (default 5 s).
	PartitionWatchInterval time.Duration
	// CoordinatorTimeout bounds one request to the group coordinator, e.g. an
	// offset commit (default 5 s).
	CoordinatorTimeout time.Duration

	// FetchMaxWait is how long a fetch waits for new records (default 500 ms). It
	// also bounds how long stopping a partition consumer can take.
	FetchMaxWait time.Duration
	// FetchMaxBytes caps one fetch (default 1 MiB).
	FetchMaxBytes int
	// MetadataMaxAge is how long the cluster metadata (which broker leads each
	// partition) is used before it is read again (default 6 s, kafka-go's). A
	// request that finds a partition's leader gone (a leader election, a
	// reassignment, a broker down) has it read again at once, whatever this says.
	MetadataMaxAge time.Duration
	// DialTimeout bounds a connection attempt (default 5 s).
	DialTimeout time.Duration
	// CloseTimeout bounds Close (default 30 s).
	CloseTimeout time.Duration
	// ClientID names this client to the brokers (default "troupe").
	ClientID string
}

// defaultRebalanceTimeout is SubscriberConfig.RebalanceTimeout's default.
const defaultRebalanceTimeout = 30 * time.Second

func (c *SubscriberConfig) setDefaults() {
	if c.Marshaler == nil {
		c.Marshaler = DefaultMarshaler{}
	}
	if c.NackResendSleep == 0 {
		c.NackResendSleep = 100 * time.Millisecond
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 3 * time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 30 * time.Second
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = defaultRebalanceTimeout
	}
	if c.HandoffWait == 0 {
		c.HandoffWait = c.RebalanceTimeout / 2
	}
	if c.JoinGroupBackoff == 0 {
		c.JoinGroupBackoff = time.Second
	}
	if c.PartitionWatchInterval == 0 {
		c.PartitionWatchInterval = 5 * time.Second
	}
	if c.CoordinatorTimeout == 0 {
		c.CoordinatorTimeout = 5 * time.Second
	}
	if c.FetchMaxWait == 0 {
		c.FetchMaxWait = 500 * time.Millisecond
	}
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = 1 << 20
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.MetadataMaxAge == 0 {
		c.MetadataMaxAge = defaultMetadataMaxAge
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 30 * time.Second
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
}

// Validate reports a configuration that cannot work.
func (c SubscriberConfig) Validate() error {
	if err := validateBrokers(c.Brokers); err != nil {
		return err
	}
	if c.InitialOffset != FromEarliest && c.InitialOffset != FromLatest {
		return fmt.Errorf("kafka: unknown InitialOffset %d", c.InitialOffset)
	}
	if c.Rebalance != nil && c.ConsumerGroup == "" {
		return errors.New("kafka: a Rebalance listener needs a ConsumerGroup")
	}
	if c.NackResendSleep < 0 && c.NackResendSleep != NoNackResendSleep {
		return errors.New("kafka: NackResendSleep must not be negative (use NoNackResendSleep)")
	}
	if c.MaxInFlight < 0 {
		return fmt.Errorf("kafka: MaxInFlight must not be negative, got %d", c.MaxInFlight)
	}
	if c.HeartbeatInterval < 0 || c.SessionTimeout < 0 || c.RebalanceTimeout < 0 || c.JoinGroupBackoff < 0 ||
		c.PartitionWatchInterval < 0 || c.CoordinatorTimeout < 0 || c.FetchMaxWait < 0 || c.FetchMaxBytes < 0 ||
		c.DialTimeout < 0 || c.CloseTimeout < 0 || c.MetadataMaxAge < 0 || c.HandoffWait < 0 {
		return errors.New("kafka: subscriber sizes and timeouts must not be negative")
	}
	if c.HeartbeatInterval > 0 && c.SessionTimeout > 0 && c.HeartbeatInterval >= c.SessionTimeout {
		return errors.New("kafka: HeartbeatInterval must be shorter than SessionTimeout")
	}
	if rebalance := cmp.Or(c.RebalanceTimeout, defaultRebalanceTimeout); c.HandoffWait >= rebalance {
		return fmt.Errorf("kafka: HandoffWait (%s) must be shorter than RebalanceTimeout (%s)", c.HandoffWait, rebalance)
	}
	return c.Topics.Validate()
}

func validateBrokers(brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("kafka: no brokers configured")
	}
	for _, b := range brokers {
		if strings.TrimSpace(b) == "" {
			return errors.New("kafka: an empty broker address")
		}
	}
	return nil
}
