package node

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Metrics are a node's Prometheus metrics, in a registry of its own (served at
// GET /metrics), with the Go runtime's (go_memstats_*, go_goroutines) and the
// process's (process_resident_memory_bytes, …) beside them.
type Metrics struct {
	Registry   *prometheus.Registry
	retries    *prometheus.CounterVec
	poisoned   *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	panics     *prometheus.CounterVec
	handled    *prometheus.HistogramVec
	partitions prometheus.Gauge
	total      prometheus.Gauge
	assigned   prometheus.Counter
	effectHits prometheus.Counter
	reissued   prometheus.Counter
	pubFailed  prometheus.Counter
	// replyRefused counts troupe_bus_reply_topic_refusals_total.
	replyRefused prometheus.Counter
	forwarded    prometheus.Counter
	epoch        prometheus.Gauge
	fenced       prometheus.Counter
	// awaitingOwnership counts troupe_cluster_calls_awaiting_ownership.
	awaitingOwnership prometheus.Gauge
	released          prometheus.Counter
	unreleased        prometheus.Counter
	marks             prometheus.Counter
	resumptions       prometheus.Counter
	republished       prometheus.Counter
	foundOnBus        prometheus.Counter
	storedPruned      prometheus.Counter // troupe_bus_stored_messages_pruned_total
	// sessions counts what the node's sessions record (metrics.go); appends times
	// their log appends, by backend.
	sessions *sessionMetrics
	appends  *prometheus.HistogramVec
	// logFailing is 1 during an outage of the log's writes; logFailures counts
	// the sessions' failed attempts (logoutage.go).
	logFailing  prometheus.Gauge
	logFailures prometheus.Counter
	// degraded is troupe_node_degraded, kept by the log's outage (logoutage.go).
	degraded prometheus.Gauge
}

func newMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "retries_total", Help: "Handler retries of bus messages after a transient error."}, []string{"handler"}),
		poisoned: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "poisoned_total", Help: "Bus messages sent to the poison topic."}, []string{"handler"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "duplicates_total", Help: "Redelivered bus messages skipped by ID."}, []string{"handler"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "panics_total", Help: "Handler panics recovered."}, []string{"handler"}),
		handled: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "handler_seconds", Help: "Time to handle a bus message, by outcome.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10)}, []string{"handler", "outcome"}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "partitions_owned", Help: "Partitions of troupe.tasks this node owns (sharded nodes only)."}),
		total: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "partitions_total", Help: "Partitions of troupe.tasks in the cluster (sharded nodes only)."}),
		assigned: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "assignments_total", Help: "Partition assignments this node received (one per rebalance of the sessions group)."}),
		effectHits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "effect_requests_coalesced_total", Help: "Effect requests answered from an earlier or concurrent performance of the same key."}),
		reissued: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "effect_requests_reissued_total", Help: "Effect requests this node published again because their reply had not come (Config.EffectReissue): a reply lost, or a call slower than its timeout."}),
		pubFailed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "publish_failures_total", Help: "Batches of session events or results the bus kept refusing (retried until the broker is back; dropped only at shutdown; the log has the events), and replies to a task's reply topic dropped because its queue was full or retrying gave up (the results are on troupe.results and in the log)."}),
		replyRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "reply_topic_refusals_total", Help: "Publishes to a task's reply topic dropped because the topic does not exist and the node may not create it (--reply-topics-create, --reply-topics-max); the results are on troupe.results and in the log."}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "tasks_forwarded_total", Help: "Messages read from a partition of troupe.tasks other than their session's (a producer with another partitioner than murmur2, or without a key) and forwarded to it."}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "ownership_epoch", Help: "The ownership epoch this node took for its partitions in the event log at its latest assignment (0 before any)."}),
		awaitingOwnership: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "calls_awaiting_ownership", Help: "Calls of this node's sessions waiting, after a pause of the process, for the event log to confirm that the node still owns their partition."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "fenced_appends_total", Help: "Session appends the event log refused because another node took the session's partition since (their session actors stopped)."}),
		released: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "partitions_released_total", Help: "Partitions this node gave up cleanly, recorded in the event log once the bus had all their events: their next owners publish nothing of their ended sessions again."}),
		unreleased: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "handovers_unreleased_total", Help: "Hand-overs of this node's partitions left without a clean release (the bus or the log did not answer in time, or sessions to resume were not all resumed): their next owners publish the lately ended sessions' latest tasks again."}),
		marks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "published_marks_total", Help: "Marks this node recorded in the event log of the time before which it had published every event of its partitions' sessions (Config.PublishMarkInterval): a next owner taking them unreleased publishes again only the sessions that ended after it."}),
		resumptions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "resumptions_total", Help: "Assignments whose sessions to resume (the unfinished ones, and the lately ended ones to publish again) were all resumed before the next rebalance."}),
		republished: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "ended_sessions_republished_total", Help: "Sessions that ended lately, of partitions taken over from an owner that did not release them cleanly, resumed to publish their latest task's events and result again."}),
		foundOnBus: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "cluster",
			Name: "ended_sessions_found_on_bus_total", Help: "Sessions that ended lately, of partitions taken over from an owner that did not release them cleanly, whose last event and result were found on troupe.events and troupe.results already: none of it is published again (unless the task has a reply topic)."}),
		storedPruned: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "bus",
			Name: "stored_messages_pruned_total", Help: "Messages too large for the bus that the log kept for their references, deleted once older than the node's retention (Bus.StoredRetention)."}),
		sessions: newSessionMetrics(reg),
		appends: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "troupe", Subsystem: "eventlog",
			Name: "append_seconds", Help: "Time of the session actors' appends to the event log (one per batch of a session's events, errors included), by backend (sqlite, clickhouse).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 3, 12)}, []string{"backend"}),
		logFailing: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "eventlog",
			Name: "writes_failing", Help: "1 while the event log's writes fail (a full disk, a log that is down: new tasks are refused, or on Kafka wait there, sessions retry their writes), from the first failed write to the first that goes through again; else 0."}),
		logFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "eventlog",
			Name: "write_failures_total", Help: "The session actors' log writes that failed, each attempt (retried until one goes through; a new task a full log refused is not retried)."}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "node",
			Name: "degraded", Help: "1 while, on Kafka, the event log's writes fail (from the first failed write, a session's or a health check's, to the first that goes through again): the node takes tasks, which wait on Kafka until the log writes again; else 0."}),
	}
	reg.MustRegister(m.retries, m.poisoned, m.duplicates, m.panics, m.handled, m.partitions, m.total, m.assigned, m.effectHits, m.reissued, m.pubFailed, m.replyRefused, m.forwarded,
		m.epoch, m.fenced, m.awaitingOwnership, m.released, m.unreleased, m.marks, m.resumptions, m.republished, m.foundOnBus, m.appends, m.storedPruned,
		m.logFailing, m.logFailures, m.degraded)
	// The process (memory, descriptors, CPU) and the Go runtime (goroutines, heap, GC).
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// recoverPanics turns a handler panic into an error (which Retry and the poison
// queue then handle) and counts it.
func (m *Metrics) recoverPanics(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) (out []*message.Message, err error) {
		defer func() {
			if r := recover(); r != nil {
				m.panics.WithLabelValues(message.HandlerNameFromCtx(msg.Context())).Inc()
				err = fmt.Errorf("%w: handler panicked: %v\n%s", errPermanent, r, debug.Stack())
			}
		}()
		return h(msg)
	}
}

// observe records each handling's duration and outcome.
func (m *Metrics) observe(h message.HandlerFunc) message.HandlerFunc {
	var observers sync.Map // handler name -> *handlerObservers
	return func(msg *message.Message) ([]*message.Message, error) {
		start := time.Now()
		out, err := h(msg)
		name := message.HandlerNameFromCtx(msg.Context())
		o, ok := observers.Load(name)
		if !ok {
			o, _ = observers.LoadOrStore(name, &handlerObservers{
				ok: m.handled.WithLabelValues(name, "ok"), err: m.handled.WithLabelValues(name, "error")})
		}
		obs := o.(*handlerObservers).ok
		if err != nil {
			obs = o.(*handlerObservers).err
		}
		obs.Observe(time.Since(start).Seconds())
		return out, err
	}
}

// handlerObservers are a handler's series of troupe_bus_handler_seconds, looked up
// once rather than with every message.
type handlerObservers struct{ ok, err prometheus.Observer }

// retry handles a message again after a transient failure: up to max more times,
// waiting between tries as an exponential backoff from initial, growing by factor
// up to most, while retryable says so of the error and the message's context lasts
// (then it returns the context's cause). onRetry is called before each retry. It
// does with a loop what Watermill's middleware.Retry does with a backoff object,
// options and closures allocated for every message, and waits as long as it did
// (its ShouldRetry hook advanced the backoff once more per failure).
type retry struct {
	max           int
	initial, most time.Duration
	factor        float64
	retryable     func(error) bool
	onRetry       func()
	logger        *slog.Logger
}

func (r retry) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		interval := r.initial
		for try := 0; ; try++ {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			out, err := h(msg)
			if err == nil || !r.retryable(err) || try >= r.max {
				return out, err
			}
			if err := r.wait(msg, try, &interval, err); err != nil {
				return out, err
			}
		}
	}
}

// wait logs a failed attempt, try, of msg's handler and waits out the backoff
// (interval, which it moves on), or returns the cause of msg's context once it
// is done. It is a function of its own so that the handler's goroutine, which
// Watermill starts for each message, needs no stack for it on the way to the
// handler: the log call's arguments would take half a kilobyte of every
// message's stack, and a goroutine's stack grows by copying.
//
//go:noinline
func (r retry) wait(msg *message.Message, try int, interval *time.Duration, err error) error {
	ctx := msg.Context()
	next := func() time.Duration {
		d := *interval
		if float64(*interval) >= float64(r.most)/r.factor {
			*interval = r.most
		} else {
			*interval = time.Duration(float64(*interval) * r.factor)
		}
		return d
	}
	next()
	wait := next()
	r.onRetry()
	level := slog.LevelWarn
	if errors.Is(err, eventlog.ErrFull) {
		level = slog.LevelDebug // the node tells an outage of its log once (logOutage)
	}
	r.logger.Log(ctx, level, "bus message handler failed; retrying", "handler", message.HandlerNameFromCtx(ctx), "message", idHead(msg.UUID),
		"retry", try+1, "max_retries", r.max, "wait", wait, "err", err)
	t := time.NewTimer(wait)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		return context.Cause(ctx)
	}
}

// deduplicator skips a message whose ID was handled successfully within TTL: bus
// delivery is at least once. It is a fast path in front of the durable check each
// session makes against its log (a task ID seen before is never recorded twice), so
// it remembers at most max IDs, forgetting the oldest first, and forgets IDs older
// than TTL whether messages come or not (expire): its memory follows the traffic of
// the last TTL, up to a bound, instead of growing with every message a node handled.
type deduplicator struct {
	m   *Metrics
	ttl time.Duration
	max int

	// seed hashes the payloads of the tasks topic's messages (digest).
	seed maphash.Seed

	mu sync.Mutex
	// seen maps a handler's message ID to when it was handled (Unix ns) and, for
	// the tasks topic, its payload's digest; order holds the same IDs oldest
	// first (from head on).
	seen  map[string]handledAt
	order []seenID
	head  int
	// peak is the most IDs seen held since it was last rebuilt: a Go map keeps the
	// memory of its largest size, so a map that shrank well below it is copied.
	peak int
}

// handledAt is when a message was handled (Unix ns), and the digest of its
// payload when it is a task's (0: not known, any payload is the same).
type handledAt struct {
	at     int64
	digest uint64
}

type seenID struct {
	key string
	at  int64
}

// defaultDedupeIDs bounds the IDs a node's deduplicator remembers (about 200 bytes
// each, with the map and the queue); a bus message is one ID per handler that
// receives it, and a one-step task about five (its task message and its events).
const defaultDedupeIDs = 1 << 15

func newDeduplicator(m *Metrics, ttl time.Duration, max int) *deduplicator {
	if max <= 0 {
		max = defaultDedupeIDs
	}
	return &deduplicator{m: m, ttl: ttl, max: max, seed: maphash.MakeSeed(), seen: map[string]handledAt{}}
}

func (d *deduplicator) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		// Handlers dedupe apart: a plain JSON task's message ID is also the ID of the
		// task.submitted event it becomes, which the live-events handler must still see.
		handler := message.HandlerNameFromCtx(msg.Context())
		key := handler + "\x00" + msg.UUID
		// A task's ID is its record's UUID header, which a producer may reuse for
		// another task: only the same task (its payload) is a redelivery; another
		// goes on to its session, which refuses it (checkRedelivery).
		var digest uint64
		if handler == tasksHandler {
			digest = maphash.Bytes(d.seed, msg.Payload) | 1
		}
		d.mu.Lock()
		was, dup := d.seen[key]
		dup = dup && time.Now().UnixNano()-was.at <= int64(d.ttl) && (was.digest == 0 || was.digest == digest)
		d.mu.Unlock()
		if dup {
			d.m.duplicates.WithLabelValues(message.HandlerNameFromCtx(msg.Context())).Inc()
			return nil, nil
		}
		out, err := h(msg)
		// A message forwarded to its session's partition was not handled here: its
		// copy, with the same ID, may come back to this node.
		if err == nil && !forwarded(msg) {
			d.add(key, digest, time.Now())
		}
		return out, err
	}
}

// handled remembers that handler handled the message id without the bus: a task
// Submit handed to its session directly, which the tasks topic may bring again.
func (d *deduplicator) handled(handler, id string) {
	d.add(handler+"\x00"+id, 0, time.Now())
}

func (d *deduplicator) add(key string, digest uint64, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[key] = handledAt{now.UnixNano(), digest}
	d.order = append(d.order, seenID{key, now.UnixNano()})
	d.peak = max(d.peak, len(d.seen))
	d.evict(now)
}

// expire forgets the IDs handled more than TTL before now.
func (d *deduplicator) expire(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.evict(now)
}

// evict drops the oldest IDs while there are more than max or they are older than
// TTL, then gives back the memory of a map and queue that shrank.
func (d *deduplicator) evict(now time.Time) {
	for d.head < len(d.order) {
		o := d.order[d.head]
		if len(d.order)-d.head <= d.max && now.UnixNano()-o.at <= int64(d.ttl) {
			break
		}
		if h, ok := d.seen[o.key]; ok && h.at == o.at {
			delete(d.seen, o.key)
		}
		d.order[d.head] = seenID{}
		d.head++
	}
	if d.head > 0 && d.head >= len(d.order)/2 {
		d.order = append(make([]seenID, 0, 2*(len(d.order)-d.head)), d.order[d.head:]...)
		d.head = 0
	}
	if d.peak >= 1024 && len(d.seen) <= d.peak/4 {
		seen := make(map[string]handledAt, len(d.seen))
		for k, at := range d.seen {
			seen[k] = at
		}
		d.seen, d.peak = seen, len(seen)
	}
}

// size reports how many IDs the deduplicator remembers.
func (d *deduplicator) size() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.seen)
}

// isPermanent decides which errors go to the poison topic. It neither counts nor
// logs them: a publish to the poison topic may fail (its partition's broker down),
// and the message then comes again and is decided again; poisonPublisher counts
// and logs a message once the poison topic took it.
func isPermanent(err error) bool { return errors.Is(err, errPermanent) }

// poisonPublisher is the publisher of the poison middleware: it counts and logs
// each message the poison topic took, with its reason (on the embedded bus, a
// poison topic nobody subscribes to keeps nothing), and a publish that failed as
// such, so that a message retried while the poison topic is unavailable is not
// told as sent at each try.
type poisonPublisher struct {
	message.Publisher
	m       *Metrics
	handler string
	logger  *slog.Logger
	// record, when set, returns the position of a message in its topic (Kafka:
	// messages.CoordinatesID), its idempotency key on the poison topic
	// (RecordPoisonedKey); sent remembers the positions poisoned already.
	record func(*message.Message) (string, bool)
	sent   *boundedSet
}

// RecordPoisonedKey is the metadata entry (a record header on Kafka) of a
// message on TopicPoison that names the record it is a copy of:
// "kafka:<topic>/<partition>/<offset>" (messages.CoordinatesID). It is the
// poisoned copy's idempotency key. A node poisons a record once while it runs:
// one read again (its offset not committed yet, the partition back after a
// rebalance) is not copied again. It cannot be exactly once across a crash or a
// failed publish: the copy and the commit of the record's offset are writes to
// two places (an exactly-once copy would need both in one Kafka transaction,
// which the node's producer does not make), so a node killed between the two,
// or a publish that failed after the broker wrote it, copies the record again on
// its next read; a reader of troupe.poison skips a copy whose key it has seen.
const RecordPoisonedKey = "record_poisoned"

// newPoisonedRecords remembers the positions of the last poisonedRecordsMax
// records sent to the poison topic.
func newPoisonedRecords() *boundedSet { return newBoundedSet(poisonedRecordsMax) }

// poisonedRecordsMax bounds the positions a node remembers as poisoned.
const poisonedRecordsMax = 4096

func (p poisonPublisher) Publish(topic string, msgs ...*message.Message) error {
	keys := make([]string, 0, len(msgs))
	out := msgs[:0:0]
	for _, msg := range msgs {
		key, ok := "", false
		if p.record != nil {
			key, ok = p.record(msg)
		}
		if ok && p.sent != nil && p.sent.has(key) {
			// Read again after it was poisoned here: its copy is there already.
			p.logger.Warn("bus message poisoned before read again; not copied to the poison topic again", "handler", p.handler, "message", idHead(msg.UUID), "record", key)
			continue
		}
		if ok {
			msg.Metadata.Set(RecordPoisonedKey, key)
		}
		keys = append(keys, key)
		out = append(out, fitPoisoned(msg))
	}
	if len(out) == 0 {
		return nil
	}
	err := p.Publisher.Publish(topic, out...)
	for i, msg := range out {
		reason := msg.Metadata.Get(middleware.ReasonForPoisonedKey)
		if err != nil {
			p.logger.Warn("bus message not sent to the poison topic; it is handled again", "handler", p.handler, "topic", topic, "message", idHead(msg.UUID), "reason", reason, "err", err)
			continue
		}
		if keys[i] != "" && p.sent != nil {
			p.sent.add(keys[i])
		}
		p.m.poisoned.WithLabelValues(p.handler).Inc()
		p.logger.Error("bus message sent to the poison topic", "handler", p.handler, "topic", topic, "message", idHead(msg.UUID), "reason", reason)
	}
	return err
}

// TruncatedPoisonedKey is the metadata entry (a record header on Kafka) of a
// message on TopicPoison whose payload was cut to fit the bus: the payload's
// length, in bytes, before the cut. The whole record is where it was read from
// (its topic, partition and offset), as long as the topic keeps it.
const TruncatedPoisonedKey = "truncated_poisoned"

// maxPoisonReason bounds the reason a poisoned message carries
// (middleware.ReasonForPoisonedKey), in bytes.
const maxPoisonReason = 4096

// fitPoisoned returns msg, or, when its reason is over maxPoisonReason or its
// payload and metadata (the poison middleware's headers among them: the reason,
// the topic, the handler) are over messages.BusMessageMax, a copy with the reason
// cut at a character boundary and then the payload cut to fit, with
// TruncatedPoisonedKey. A record as large as its producer may send (a Java
// producer's default limit is the broker's) is larger than that once poisoned,
// and so was one whose reason quoted a long value of it: the bus refused it, and
// the message was handled again for ever, holding back its session and, past the
// partition's messages in flight, its partition.
func fitPoisoned(msg *message.Message) *message.Message {
	reason := msg.Metadata.Get(middleware.ReasonForPoisonedKey)
	over := messageSize(msg) + len(TruncatedPoisonedKey) + 20 - messages.BusMessageMax
	if len(reason) <= maxPoisonReason && (len(msg.Payload) == 0 || over <= 0) {
		return msg
	}
	out := msg.Copy()
	out.SetContext(msg.Context())
	if len(reason) > maxPoisonReason {
		cut := maxPoisonReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		out.Metadata.Set(middleware.ReasonForPoisonedKey, reason[:cut]+"…")
		over -= len(reason) - cut - len("…")
	}
	if len(msg.Payload) > 0 && over > 0 {
		out.Payload = msg.Payload[:max(len(msg.Payload)-over, 0)]
		out.Metadata.Set(TruncatedPoisonedKey, strconv.Itoa(len(msg.Payload)))
	}
	return out
}

type forwardedKey struct{}

// markForwarded records on a message that its handler forwarded it rather than
// handled it (see Node.forward).
func markForwarded(msg *message.Message) {
	msg.SetContext(context.WithValue(msg.Context(), forwardedKey{}, true))
}

func forwarded(msg *message.Message) bool {
	v, _ := msg.Context().Value(forwardedKey{}).(bool)
	return v
}
