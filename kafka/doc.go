// Package kafka is Troupe's distributed bus: a Watermill message.Publisher and
// message.Subscriber on Kafka, written on github.com/segmentio/kafka-go. It is the
// Kafka side of the bus seam whose embedded side is Watermill's GoChannel
// (node.NewEmbeddedBus); both pass Watermill's universal test suite
// (github.com/ThreeDotsLabs/watermill/pubsub/tests).
//
// Messages enter through Publisher.Publish, become Kafka records (DefaultMarshaler:
// payload as the value, UUID and metadata as headers, the "session_id" metadata as
// the key) and leave through the channel Subscriber.Subscribe returns.
//
// # Partitioner
//
// One session's messages belong on one partition, or they are consumed by two nodes
// and lose their order. The common defaults disagree: for key "s-9" on 3 partitions,
// kafka-go's Hash (FNV-1a) picks 2, librdkafka's and kcat's consistent_random
// (CRC32) picks 1, and the Java client's murmur2 picks 0. Troupe uses the Java
// client's partitioner, toPositive(murmur2(key)) % partitions, as Balancer returns
// it (kafka-go's Murmur2Balancer; the tests check it against a transcription of the
// Java code). Other producers: the Java client, Kafka's tools and franz-go's default
// partitioner hash keys this way; librdkafka clients and kcat do with
// partitioner=murmur2_random (kcat -X partitioner=murmur2_random), and by CRC32
// by default. A record without a key goes to a random partition, as with
// murmur2_random (the Java client spreads such records too). Partition computes a
// key's partition. Users' producers write only troupe.tasks, and there a node
// forwards a record read from a partition other than its session's to the right one
// (package node): another partitioner, or no key, costs a hop; Subscriber's
// MessagePartition tells a node where a message was read.
//
// # Delivery
//
// Publish is synchronous: it returns once the records are on every in-sync replica
// (RequiredAcks = all). The messages of one call go out at once, in one produce
// request per leader broker with a batch per partition (several requests, in order,
// past PublisherConfig.BatchSize); a partition's failed batch is retried
// (PublisherConfig.MaxAttempts, with backoff) when the error is temporary. kafka-go
// has no idempotent producer, so a retry after a lost response, or a caller
// publishing again after an error, can write a record twice: delivery is at least
// once, and consumers dedupe by message UUID (records from other clients get the
// stable UUID "kafka:<topic>/<partition>/<offset>@<timestamp>", messages.RecordID). Records of one partition keep
// the order in which their Publish calls returned.
//
// Subscribe delivers each partition's records in offset order. By default
// (SubscriberConfig.MaxInFlight 1) it delivers them one at a time: the next only
// after the handler acked the previous one, and a Nack delivers the same message
// again (after SubscriberConfig.NackResendSleep) before anything later in its
// partition. With MaxInFlight N, up to N messages of a partition, counted from its
// first unacked one, are out at a time, so a handler (a Watermill Router handles
// each message on a goroutine of its own) works on several at once, and they may be
// acked in any order:
//   - Delivery is in offset order; a nacked message is delivered again, after
//     NackResendSleep, before any message of its partition not delivered when the
//     Nack was taken in (the subscriber then cancels the message's context; nacked
//     ones go in offset order), while the messages delivered after it stay out. A
//     consumer that needs a key's messages handled in order serializes them itself
//     (a node does, per session).
//   - The window advances only at its start: when the first unacked message is
//     acked, it and the acked messages right after it leave the window, and as many
//     later messages can be delivered.
//   - The committed offset is the contiguous-ack watermark: the offset after the
//     longest acked prefix of the partition. It never passes a message that was not
//     acked, so a crash or a rebalance delivers again the first unacked message and
//     every message after it, acked or not (at least once).
//
// Only committed records are delivered (isolation level read_committed; fetch.go):
// a record of a transaction its producer aborted never is, the broker's
// transaction markers are not records, and a transaction still open holds back
// every later record of its partition until it commits or aborts (or the broker
// aborts it at its timeout). Skipped records count as acked. kafka-go's Reader reads
// uncommitted, so partitions are fetched through kafka-go's protocol package.
//
// Different partitions are delivered concurrently. With a ConsumerGroup, commits
// run in the background while delivery goes on, and a partition's consumer waits for
// them before it gives the partition up. In a rebalance it stops delivering at once
// and waits up to HandoffWait (half of RebalanceTimeout by default; see
// Subscriber.HoldInFlight) for the messages out to be acked or nacked; it then commits the watermark and gives the partition up, so the next
// owner starts at its first unacked message. An Ack after that is not committed,
// and a Nack during it does not deliver again: the next owner has those messages.
// Subscriber.MessageHandoff tells a handler that the wait began (a context that
// ends then), so that it can nack a message whose work it has not begun rather than
// begin it.
// When a consumer stops, it cancels the contexts of the messages it gave up, the
// partition's last first. If a commit fails, the generation ends and the messages
// acked since the last commit are delivered again. Without a group, each Subscribe
// reads every partition from InitialOffset and commits nothing.
//
// InitialOffset (default FromEarliest) applies to a partition without a committed
// offset. Without a group, FromLatest is resolved in Subscribe: it returns once
// every partition's end offset is read (it waits, up to 30 s, until the cluster
// knows the topic), and each partition's consumer starts there, so every record
// published after Subscribe returned is delivered (partitions the topic gains
// later are read from their first record). With a group, FromLatest is resolved
// when a partition's consumer starts, so records published between Subscribe and
// that moment may be skipped.
//
// # Rebalances
//
// In cluster mode, nodes share sessions by partition: the node whose group member
// owns a partition owns the sessions keyed to it. SubscriberConfig.Rebalance (a
// RebalanceListener) follows that ownership. For each generation of the group, a
// subscription calls Assigned with the member's partitions of the topic (sorted,
// maybe none) and the topic's partition count (read from a broker for each
// generation, so it includes partitions just added), before any message of that
// generation is delivered. When the generation ends (a rebalance, a lost session,
// Close, or the subscription's context), it calls Revoked with the same
// Assignment, after the generation's partition consumers stopped and flushed their
// offset commits, and before the member joins the next generation: kafka-go joins
// again only after every function of the generation returned, and the coordinator
// completes the rebalance only when every member rejoined (it evicts a member that
// has not once RebalanceTimeout passed since the rebalance began, or after
// SessionTimeout without a heartbeat). kafka-go does not heartbeat between
// generations, so the subscription does, every HeartbeatInterval from the end of
// the generation until Revoked returned: the coordinator answers
// REBALANCE_IN_PROGRESS and keeps the member, so Revoked may take longer than
// SessionTimeout. So a partition's next owner gets its Assigned only after the
// previous owner's Revoked returned, as long as Revoked returns well within
// RebalanceTimeout (30 s for a node's groups). The calls of one subscription come in
// order and never overlap. Rebalances are eager: every member's partitions are
// revoked, then assigned again, even those that stay with it.
//
// Subscriber.ConsumerLag reports, for each partition a subscriber consumes now, the
// records after its acked prefix up to the high watermark of its latest fetch (a
// partition's consumer asks the broker once when it starts, so an idle partition
// reports 0 before it read anything); a node exports it as troupe_bus_consumer_lag.
//
// # Topics
//
// With TopicLayout.InitializeTopics, a topic is created on first use with its
// partitions, replication factor and configs from TopicLayout.Topics, or
// TopicLayout.Default (12 partitions, replication factor 1). ParseTopics reads
// deploy/kafka/topics.txt, the layout deploy/kafka.sh creates.
// TopicLayout.Creatable, when set, decides which missing topics are created
// (a node bounds so the reply topics its clients name): one it refuses is only
// published to once it exists. TopicLayout.Settled is then told whether each
// creation it allowed made the topic, so that a count of the topics created
// counts only those.
//
// TopicLayout.Prefix separates clusters, or test runs, that share a broker: with
// Prefix "prod.", Publish(messages.TopicTasks, …) writes to the Kafka topic
// "prod.troupe.tasks", and Subscribe(ctx, messages.TopicTasks) reads it. Callers use
// the logical names throughout (Publish, Subscribe, SubscribeInitialize, the
// Marshaler, Assignment.Topic, and the keys of TopicLayout.Topics); the prefixed name
// is what Kafka, other clients (kcat) and RecordInfo.Topic see. Consumer group names
// are not prefixed. A topic name that Kafka would refuse (characters other than
// [a-zA-Z0-9._-], more than 249 with the prefix) fails with ErrInvalidTopic before
// anything is sent.
//
// # Limits
//
// Group membership is kafka-go's ConsumerGroup, with its limits:
//   - Rebalances are eager: every join or leave stops all members, which rejoin at
//     their next heartbeat (HeartbeatInterval); there is no cooperative or KIP-848
//     protocol, no static membership.
//   - A member closed while a rebalance is in progress may not send LeaveGroup; the
//     group then waits SessionTimeout for it before it rebalances again.
//   - A member that loses its coordinator (the coordinator's broker dies) gives its
//     partitions up at once and joins again as a new member once the group has a
//     new coordinator; Java's consumer keeps fetching meanwhile. The old member
//     is made to leave then, so the rejoin does not wait for its session to expire.
//   - Partitions a topic gains start at InitialOffset like new ones (kafka-go's
//     StartOffset), so with FromLatest their first records can be skipped.
//
// The members agree on sticky assignment (StickyProtocol) when all of them offer
// it: each keeps the partitions it held as far as an even share allows, so that a
// join or a leave moves only the partitions it must; a member of an older build
// offers kafka-go's range and round robin only, and the group then uses range.
//
// Each Subscribe call is one group member with one connection to the coordinator and
// one per assigned partition (fetches go through the Subscriber's transport, which
// finds each partition's leader from the cluster metadata it reads again every
// MetadataMaxAge, 6 s by default, and at once when a broker refuses a fetch or a
// write as no longer the partition's leader or cannot be reached, as after a
// leader election, a reassignment or a broker's death). A record the Marshaler cannot decode is logged and
// skipped (committed), so that it cannot stall its partition; DefaultMarshaler
// decodes any record. Publish does not consult the messages' contexts; it is bounded
// by PublisherConfig.PublishTimeout. There are no metrics yet.
//
// # A node's clients
//
// DialNode builds what one Troupe node uses: a Publisher; Group, the consumer group
// the nodes share on troupe.tasks (NodeTasksInFlight messages in flight per
// partition), whose rebalances go to the Owner set with NodeClients.SetOwner (a node: it resumes the sessions of the partitions it gets and
// hands over those it loses); Tools and Models, groups of their own (<group>.tools,
// <group>.models) on the internal request topics, so that nodes serving tools can come
// and go without moving sessions; and Live, every partition from the latest offset in
// no group, for live event streams and the replies to a node's own requests. The groups
// heartbeat every second and notice a dead member after 10 s.
//
// # Tests
//
// The tests run against kfake (franz-go's in-process Kafka) unless
// TROUPE_TEST_KAFKA names a broker; TROUPE_TEST_KAFKA_CONTROL=1 also lets them
// restart that broker with deploy/kafka.sh; TROUPE_TEST_KAFKA_LOG=1 prints the
// adapter's log.
package kafka
