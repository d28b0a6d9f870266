package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"
)

// ErrSubscriberClosed is returned by Subscribe after Close.
var ErrSubscriberClosed = errors.New("kafka: subscriber is closed")

// subscribeSetupTimeout bounds topic creation in Subscribe and SubscribeInitialize.
const subscribeSetupTimeout = 30 * time.Second

// Subscriber consumes Kafka topics as Watermill message channels. It is safe for
// concurrent use. Every Subscribe call is a consumer of its own: with a
// ConsumerGroup, a member of that group.
type Subscriber struct {
	cfg       SubscriberConfig
	logger    watermill.LoggerAdapter
	transport *kafkago.Transport
	routes    *routes // the transport's, refreshed when a partition's leader moved
	dialer    *kafkago.Dialer
	admin     admin

	closing   chan struct{}
	mu        sync.Mutex
	closed    bool
	handoff   handoffTiming  // cfg's, or as HoldInFlight raised it; read by Subscribe
	subs      sync.WaitGroup // subscriptions; done once their channel is closed
	cleanup   sync.WaitGroup // kafka-go teardown: leaving groups, closing readers
	closeOnce sync.Once
	closeErr  error

	lagRegistry // the lags of the partitions consumed now (ConsumerLag)
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber. It does not connect until Subscribe.
func NewSubscriber(cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	logger = logger.With(watermill.LogFields{"component": "kafka.Subscriber", "consumer_group": cfg.ConsumerGroup})
	tr := newTransport(cfg.Brokers, cfg.ClientID, cfg.DialTimeout, cfg.MetadataMaxAge)
	return &Subscriber{
		cfg:       cfg,
		logger:    logger,
		transport: tr,
		routes:    &routes{transport: tr},
		dialer:    newDialer(cfg.ClientID, cfg.DialTimeout),
		admin: admin{
			client: &kafkago.Client{Addr: kafkago.TCP(cfg.Brokers...), Transport: tr, Timeout: cfg.CoordinatorTimeout},
			layout: cfg.Topics,
		},
		closing: make(chan struct{}),
		handoff: handoffTiming{wait: cfg.HandoffWait, rebalance: cfg.RebalanceTimeout},
	}, nil
}

// handoffTiming is how long a member giving up a partition waits for its
// messages in flight (wait), and the RebalanceTimeout its group is joined with.
type handoffTiming struct {
	wait, rebalance time.Duration
}

// HoldInFlight says that the handler may hold a message up to d before it acks
// or nacks it (e.g. the longest call it performs for one, which it answers by then),
// and that a member giving up a partition in a rebalance should wait that long
// for the messages in flight rather than leave them to the partition's next
// owner, who would handle them again while this member still does. It raises
// HandoffWait to d, and RebalanceTimeout to d plus the margin the configuration
// left after HandoffWait (by default, half of RebalanceTimeout), so that the
// coordinator does not evict the member meanwhile. The cost: a rebalance of the
// group (a member joining or leaving) pauses the group's consumption until the
// messages in flight were settled, up to d. A shorter d than the configured
// HandoffWait changes nothing. It applies to the subscriptions made after it
// (call it before Subscribe); every member of a group should hold as long, since
// a member's JoinGroup waits up to its own RebalanceTimeout for the rebalance.
func (s *Subscriber) HoldInFlight(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= s.handoff.wait {
		return
	}
	margin := s.cfg.RebalanceTimeout - s.cfg.HandoffWait
	s.handoff = handoffTiming{wait: d, rebalance: max(s.handoff.rebalance, d+margin)}
	s.logger.Debug("consumer group: holding messages in flight through rebalances",
		watermill.LogFields{"handoff_wait": d, "rebalance_timeout": s.handoff.rebalance})
}

// SubscribeInitialize creates topic (the Kafka topic Topics.Prefix + topic, with the
// configured layout, even when InitializeTopics is off: it is an explicit request)
// and waits until the cluster knows it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if topic == "" {
		return errors.New("kafka: subscribe to an empty topic name")
	}
	wire, err := s.cfg.Topics.wire(topic)
	if err != nil {
		return err
	}
	ctx, cancel := s.untilClosed(context.Background(), subscribeSetupTimeout)
	defer cancel()
	a := s.admin
	a.layout.InitializeTopics = true
	if _, err := a.ensureTopic(ctx, topic, wire); err != nil {
		return err
	}
	_, err = a.partitions(ctx, wire)
	return err
}

// Subscribe returns the messages of topic (the Kafka topic Topics.Prefix + topic).
// Each partition's messages come in offset order, at most MaxInFlight of them past
// its first unacked one (by default one at a time: the next only after the previous
// was acked). Partitions are consumed concurrently. With a ConsumerGroup, the offset
// after a partition's longest acked prefix is committed, in the background; a
// partition's consumer waits for its commits before it gives the partition up or
// stops, and the Rebalance listener is told about each generation's partitions. A
// Nack delivers the same message again (after NackResendSleep) before anything of
// its partition not delivered yet. Without a group and with FromLatest, Subscribe
// returns once every partition's start is fixed at its end offset (waiting until the
// cluster knows the topic), so every record published after it returned is
// delivered. The channel is closed when ctx is done or Close is called; the
// messages' contexts derive from ctx and are canceled on Ack, Nack and Close, and
// when their partition is given up.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic == "" {
		return nil, errors.New("kafka: subscribe to an empty topic name")
	}
	wire, err := s.cfg.Topics.wire(topic)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrSubscriberClosed
	}
	s.subs.Add(1)
	handoff := s.handoff
	s.mu.Unlock()

	setup, cancelSetup := s.untilClosed(ctx, subscribeSetupTimeout)
	created, err := s.admin.ensureTopic(setup, topic, wire)
	var (
		group  *kafkago.ConsumerGroup
		sticky *stickyBalancer // the group's
		starts map[int]int64   // partition -> first offset to read, without a group
	)
	switch {
	case err != nil:
	case s.cfg.ConsumerGroup != "":
		sticky = &stickyBalancer{}
		group, err = kafkago.NewConsumerGroup(s.groupConfig(wire, sticky, handoff.rebalance))
	case s.cfg.InitialOffset == FromLatest && created > 0:
		// Created just now: every partition ends at offset 0. Asking the cluster
		// would wait for its metadata to learn of the topic (seconds, on some brokers).
		starts = make(map[int]int64, created)
		for p := range created {
			starts[p] = 0
		}
	case s.cfg.InitialOffset == FromLatest:
		// Fixed now, not when each partition's reader starts, so that a record
		// published after Subscribe returned is not skipped.
		starts, err = s.admin.endOffsets(setup, wire)
	}
	cancelSetup()
	if err != nil {
		s.subs.Done()
		return nil, fmt.Errorf("kafka: subscribe to %s: %w", wire, err)
	}

	run, cancel := s.untilClosed(ctx, 0)
	sub := &subscription{
		s:       s,
		topic:   topic,
		wire:    wire,
		sticky:  sticky,
		handoff: handoff,
		out:     make(chan *message.Message),
		logger:  s.logger.With(watermill.LogFields{"topic": wire}),
	}
	go func() {
		defer s.subs.Done()
		defer close(sub.out)
		defer cancel()
		if group != nil {
			sub.runGroup(run, group)
		} else {
			sub.runAll(run, starts)
		}
		sub.logger.Debug("subscription stopped", nil)
	}()
	return sub.out, nil
}

// Close closes every subscription and its channel, waits for the offset commits of
// acked messages, leaves the consumer groups and releases the connections. Messages
// delivered but not acked are delivered again later. Close is idempotent and
// returns within CloseTimeout.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		done := make(chan struct{})
		go func() {
			s.subs.Wait()
			s.cleanup.Wait()
			s.transport.CloseIdleConnections()
			close(done)
		}()
		t := time.NewTimer(s.cfg.CloseTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			s.closeErr = fmt.Errorf("kafka: subscriber close: consumers still stopping after %s", s.cfg.CloseTimeout)
		}
	})
	return s.closeErr
}

// untilClosed returns a context canceled when parent is done, when the Subscriber
// closes, or after timeout (if positive).
func (s *Subscriber) untilClosed(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, timeout)
		prev := cancel
		cancel = func() { cancelT(); prev() }
	}
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (s *Subscriber) startOffset() int64 {
	if s.cfg.InitialOffset == FromLatest {
		return kafkago.LastOffset
	}
	return kafkago.FirstOffset
}

// groupConfig configures the group of one subscription to wire, a Kafka topic name,
// joined with rebalance as its RebalanceTimeout.
// Its members agree on sticky assignment (stickyBalancer), or on kafka-go's
// default balancers, range then round robin, with members of builds without it.
func (s *Subscriber) groupConfig(wire string, sticky *stickyBalancer, rebalance time.Duration) kafkago.ConsumerGroupConfig {
	return kafkago.ConsumerGroupConfig{
		ID:                     s.cfg.ConsumerGroup,
		GroupBalancers:         []kafkago.GroupBalancer{sticky, kafkago.RangeGroupBalancer{}, kafkago.RoundRobinGroupBalancer{}},
		Brokers:                s.cfg.Brokers,
		Dialer:                 s.dialer,
		Topics:                 []string{wire},
		HeartbeatInterval:      s.cfg.HeartbeatInterval,
		SessionTimeout:         s.cfg.SessionTimeout,
		RebalanceTimeout:       rebalance,
		JoinGroupBackoff:       s.cfg.JoinGroupBackoff,
		WatchPartitionChanges:  true,
		PartitionWatchInterval: s.cfg.PartitionWatchInterval,
		StartOffset:            s.startOffset(),
		Timeout:                s.cfg.CoordinatorTimeout,
		Logger:                 traceLogger(s.logger),
		ErrorLogger:            debugLogger(s.logger),
	}
}

// subscription is one Subscribe call.
type subscription struct {
	s      *Subscriber
	topic  string          // as Subscribe was given it
	wire   string          // topic's name in Kafka, with the prefix
	sticky *stickyBalancer // the group's balancer (nil without a group)
	// handoff is the Subscriber's when Subscribe was called.
	handoff handoffTiming
	out     chan *message.Message
	logger  watermill.LoggerAdapter
}

// runGroup consumes the partitions the group assigns to this member, generation
// after generation, until ctx is done.
func (sub *subscription) runGroup(ctx context.Context, group *kafkago.ConsumerGroup) {
	var running sync.WaitGroup // every generation's partition consumers and watcher
	defer func() {
		running.Wait()
		sub.s.cleanup.Add(1)
		go func() {
			defer sub.s.cleanup.Done()
			_ = group.Close() // leaves the group; bounded by the coordinator timeout
		}()
	}()
	member := ""             // the member ID of the last generation, until kafka-go gives it up
	stopLeaving := func() {} // ends leaveAbandoned's tries
	defer func() { stopLeaving() }()
	for {
		gen, err := group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafkago.ErrGroupClosed) {
				return
			}
			if member != "" && !errors.Is(err, kafkago.RebalanceInProgress) {
				// kafka-go gave the member ID up (after any error but
				// RebalanceInProgress: kafka-go v0.4.51, consumergroup.go, run)
				// and joins as a new member; its LeaveGroup for the old one
				// went where the error came from, most often a coordinator it
				// could not reach. The group's next coordinator would wait for
				// the old member until its session expired.
				stopLeaving()
				stopLeaving = sub.leaveAbandoned(ctx, member, &running)
				member = ""
			}
			// kafka-go joins again by itself (after JoinGroupBackoff).
			sub.logger.Info("consumer group: join failed, retrying", watermill.LogFields{"err": err.Error()})
			continue
		}
		if ctx.Err() != nil {
			return // Next may pick a generation over a done ctx; Close ends it
		}
		// A generation began: a member abandoned before has left or expired.
		stopLeaving()
		member = gen.MemberID
		sub.runGeneration(ctx, gen, &running)
	}
}

// leaveAbandoned tells the group's coordinator, in the background, that member,
// a member ID of this subscription's that kafka-go gave up, has left: once the
// coordinator of a dead broker has moved (the controller fenced the broker), the
// rebalance that the subscription's new member joined completes without waiting
// for the old one's session to expire (a session the new coordinator starts anew
// when it loads the group, so it may end long after SessionTimeout from the
// death). It tries, every JoinGroupBackoff, until the returned function is called
// (the next generation began: the member is gone), or ctx is done, or
// SessionTimeout plus RebalanceTimeout twice over have passed.
func (sub *subscription) leaveAbandoned(ctx context.Context, member string, running *sync.WaitGroup) (stop func()) {
	cfg := sub.s.cfg
	ctx, cancel := context.WithTimeout(ctx, 2*(cfg.SessionTimeout+sub.handoff.rebalance))
	running.Add(1)
	go func() {
		defer running.Done()
		defer cancel()
		left := false
		for {
			res, err := sub.s.admin.client.LeaveGroup(ctx, &kafkago.LeaveGroupRequest{
				GroupID: cfg.ConsumerGroup,
				Members: []kafkago.LeaveGroupRequestMember{{ID: member}},
			})
			if err == nil {
				err = res.Error
				for _, m := range res.Members {
					err = cmp.Or(err, m.Error)
				}
			}
			switch {
			case err == nil || errors.Is(err, kafkago.UnknownMemberId):
				if !left {
					sub.logger.Info("consumer group: the member given up after an error left the group", watermill.LogFields{"member": member, "unknown": err != nil})
				}
				left = true
			default:
				sub.logger.Debug("consumer group: the member given up could not leave yet", watermill.LogFields{"member": member, "err": err.Error()})
				if leaderMoved(err) {
					sub.s.routes.refresh()
				}
			}
			// The leave is sent again until the next generation begins (stop),
			// even once acknowledged: a coordinator handing the group over (its
			// broker shutting down) acknowledged it and still handed the member
			// over to the next coordinator, which waited for it to expire.
			if !sleepCtx(ctx, nil, cfg.JoinGroupBackoff) {
				if !left && errors.Is(ctx.Err(), context.DeadlineExceeded) {
					sub.logger.Info("consumer group: the member given up after an error did not leave; the coordinator waits for its session to expire", watermill.LogFields{"member": member})
				}
				return
			}
		}
	}()
	return cancel
}

// runAll consumes every partition of the topic without a group, and the partitions
// it gains later. A partition in starts begins at that offset, any other at the
// earliest one: with FromEarliest all of them, with FromLatest those that were not
// there when Subscribe fixed the start offsets (all of their records are new).
func (sub *subscription) runAll(ctx context.Context, starts map[int]int64) {
	var parts sync.WaitGroup
	defer parts.Wait()
	started := map[int]bool{}
	for {
		n, err := sub.s.admin.partitionsOnce(ctx, sub.wire)
		if err != nil && ctx.Err() == nil {
			sub.logger.Debug("partitions not known yet", watermill.LogFields{"err": err.Error()})
		}
		for p := range n {
			if started[p] {
				continue
			}
			started[p] = true
			offset, ok := starts[p]
			if !ok {
				offset = kafkago.FirstOffset
			}
			parts.Add(1)
			go func() {
				defer parts.Done()
				sub.consume(ctx, nil, nil, p, offset)
			}()
		}
		if !sleepCtx(ctx, nil, sub.s.cfg.PartitionWatchInterval) {
			return
		}
	}
}

// consume delivers one partition's records from offset until ctx or gctx (the group
// generation, nil without a group) is done: in offset order, up to MaxInFlight of
// them past the first unacked one (see partitionWindow). With a group, the offset
// after the longest acked prefix is committed, in the background, as it grows.
func (sub *subscription) consume(ctx, gctx context.Context, commits *committer, partition int, offset int64) {
	cfg := sub.s.cfg
	logger := sub.logger.With(watermill.LogFields{"partition": partition})
	rd := &partitionReader{
		client:    sub.s.admin.client,
		routes:    sub.s.routes,
		topic:     sub.wire,
		partition: partition,
		maxBytes:  cfg.FetchMaxBytes,
		maxWait:   cfg.FetchMaxWait,
		offset:    offset,
	}
	fetched := make(chan fetchedRecord)
	fetcherDone := make(chan struct{})
	fetchCtx, cancelFetch := context.WithCancel(ctx)
	defer func() {
		cancelFetch()
		sub.s.cleanup.Add(1)
		go func() {
			defer sub.s.cleanup.Done()
			<-fetcherDone // a fetch in flight ends with fetchCtx
		}()
	}()
	lag, untrack := sub.trackLag(partition, offset)
	defer untrack()
	sub.probeLag(fetchCtx, rd, offset, lag)
	var genDone <-chan struct{}
	if gctx != nil {
		genDone = gctx.Done()
		stop := context.AfterFunc(gctx, cancelFetch)
		defer stop()
	}
	go func() {
		defer close(fetcherDone)
		sub.fetch(fetchCtx, rd, fetched, lag, logger)
	}()
	logger.Debug("consuming partition", watermill.LogFields{"offset": offset})
	if commits != nil {
		defer func() {
			if err := commits.flush(partition); err != nil {
				// The generation is over. The partition's next owner (maybe this
				// member) starts from the last committed offset and delivers the
				// messages acked since then again.
				logger.Info("offset commit failed; messages acked since the last commit will be delivered again",
					watermill.LogFields{"err": err.Error()})
			}
		}()
	}
	handoff, endHandoff := context.WithCancel(ctx)
	w := &partitionWindow{
		ctx:        ctx,
		handoff:    handoff,
		handingOff: endHandoff,
		sub:        sub,
		partition:  partition,
		commits:    commits,
		logger:     logger,
		settled:    make(chan settlement),
		stopped:    make(chan struct{}),
		lag:        lag,
	}
	w.run(genDone, fetched)
}

// fetchedRecord is a record read from a partition, with its message (nil when the
// Marshaler could not decode it).
type fetchedRecord struct {
	rec kafkago.Message
	msg *message.Message
}

// fetch reads a partition's committed records into out, in offset order, until ctx
// is done. The records it skips (transaction markers, records of aborted
// transactions) go out without a message, as consumed.
func (sub *subscription) fetch(ctx context.Context, rd *partitionReader, out chan<- fetchedRecord, lag *partitionLag, logger watermill.LoggerAdapter) {
	for {
		recs, err := rd.fetch(ctx)
		for again := 0; err != nil && closedConn(err) && ctx.Err() == nil && again < 3; again++ {
			// The transport's pooled connection was closed while it idled (the
			// broker closes connections idle for connections.max.idle.ms; a
			// network may forget them), and so may the others idle beside it:
			// they are dropped, and the fetch goes out again at once on a new one,
			// as kafka-go's Reader and Java's consumer reconnect without a word.
			logger.Debug("fetch on a closed connection, fetching again", watermill.LogFields{"err": err.Error(), "offset": rd.offset})
			rd.dropIdleConns()
			recs, err = rd.fetch(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, kafkago.OffsetOutOfRange) {
				if skipped, err := rd.outOfRange(ctx); err == nil {
					if skipped > 0 {
						logger.Info("records deleted before they were read (retention); skipping them",
							watermill.LogFields{"records": skipped, "offset": rd.offset})
					}
					if skipped > 0 || sleepCtx(ctx, nil, time.Second) {
						continue
					}
					return
				}
			}
			if leaderMoved(err) {
				// The partition's leader is not where the transport's metadata
				// says (an election, a reassignment, a broker down): it is read
				// again for the next fetch, rather than at the next periodic
				// refresh (MetadataMaxAge).
				rd.routes.refresh()
			}
			logger.Info("fetch failed, retrying", watermill.LogFields{"err": err.Error(), "offset": rd.offset})
			if !sleepCtx(ctx, nil, time.Second) {
				return
			}
			continue
		}
		for _, r := range recs {
			lag.fetched(r.rec)
			var msg *message.Message
			if r.skip != "" {
				logger.Debug("record skipped: "+r.skip, watermill.LogFields{"offset": r.rec.Offset})
			} else if msg, err = sub.s.cfg.Marshaler.Unmarshal(r.rec); err != nil {
				logger.Error("cannot decode record, skipping it", err, watermill.LogFields{"offset": r.rec.Offset})
				msg = nil
			}
			select {
			case out <- fetchedRecord{rec: r.rec, msg: msg}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// outstanding is one record of a partition's window: read, and not yet part of the
// acked prefix of the partition.
type outstanding struct {
	rec    kafkago.Message
	msg    *message.Message // the copy delivered last; nil for a record that could not be decoded
	state  outstandingState
	cancel context.CancelFunc // of the delivered copy's context
	due    time.Time          // when a nacked message is delivered again
}

type outstandingState int

const (
	queued    outstandingState = iota // read, not delivered yet
	delivered                         // in the handler's hands
	acked
	nacked    // to be delivered again
	abandoned // nacked while the partition was being given up: its next owner delivers it
)

// settlement is a delivered message's Ack or Nack.
type settlement struct {
	o     *outstanding
	msg   *message.Message // the copy that was settled
	acked bool
}

// partitionWindow delivers one partition's records in offset order and tracks their
// acks. The window is the records from the first unacked one on; it holds at most
// MaxInFlight of them, so delivery waits while it is full. When the first records of
// the window are acked they leave it, and the offset after them (the contiguous-ack
// watermark) is committed. A nacked message is delivered again, after
// NackResendSleep, before any record not delivered yet (nacked ones in offset
// order); messages delivered meanwhile stay out. When the generation ends, the
// window stops delivering and waits up to HandoffWait (or as HoldInFlight raised it) for the messages
// out to be settled; the watermark it commits then never passes a message that was
// not acked, and an Ack that comes later is not committed (the partition's next owner
// delivers that message, and everything after it, again).
type partitionWindow struct {
	ctx context.Context // the subscription's; messages' contexts derive from it
	// handoff ends (handingOff) when the window stops delivering to give the
	// partition up, or stops: Subscriber.MessageHandoff.
	handoff    context.Context
	handingOff context.CancelFunc
	sub        *subscription
	partition  int
	commits    *committer // nil without a group
	logger     watermill.LoggerAdapter
	lag        *partitionLag // where the acked prefix ends, for ConsumerLag

	window   []*outstanding // offset order
	resend   []*outstanding // nacked, offset order
	fresh    *outstanding   // the record read last, until it is delivered
	again    *outstanding   // the nacked message being offered again, until it is delivered
	out      int            // delivered and not settled
	settled  chan settlement
	stopped  chan struct{} // closed when run returns: the settlement watchers give up
	stopping bool
}

// run delivers until ctx is done, or until genDone is closed and the messages out
// are settled (or the handoff wait is over).
func (w *partitionWindow) run(genDone <-chan struct{}, fetched <-chan fetchedRecord) {
	cfg := w.sub.s.cfg
	defer w.stop()
	var handoff <-chan time.Time
	for {
		if w.stopping && w.out == 0 {
			return
		}
		var (
			offerTo   chan<- *message.Message
			offer     *message.Message
			fetch     <-chan fetchedRecord
			resendAt  <-chan time.Time
			stopTimer func() bool
		)
		// Nacked messages go before the record read last, which waits meanwhile.
		switch {
		case w.stopping:
		case w.again != nil:
			offerTo, offer = w.sub.out, w.again.msg
		case len(w.resend) > 0:
			wait := time.Until(w.resend[0].due)
			if wait <= 0 {
				w.offerAgain()
				continue
			}
			t := time.NewTimer(wait)
			resendAt, stopTimer = t.C, t.Stop
		case w.fresh != nil:
			offerTo, offer = w.sub.out, w.fresh.msg
		case len(w.window) < cfg.MaxInFlight:
			fetch = fetched
		}
		select {
		case offerTo <- offer:
			if w.again != nil {
				w.delivered(w.again)
				w.again = nil
			} else {
				w.delivered(w.fresh)
				w.fresh = nil
			}
		case f := <-fetch:
			if !w.add(f) {
				return
			}
		case s := <-w.settled:
			if !w.settle(s) {
				return
			}
		case <-resendAt:
		case <-genDone:
			genDone = nil
			w.stopping = true
			w.handingOff()              // handlers not begun on a message leave it to the next owner
			w.fresh, w.again = nil, nil // not delivered: they stay unacked in the window
			t := time.NewTimer(w.sub.handoff.wait)
			defer t.Stop()
			handoff = t.C
		case <-handoff:
			w.logger.Info("partition revoked and messages in flight were not acked in time; its next owner delivers them again",
				watermill.LogFields{"unsettled": w.out})
			return
		case <-w.ctx.Done():
			return
		}
		if stopTimer != nil {
			stopTimer()
		}
	}
}

// add puts a fetched record at the end of the window and offers it (a record that
// could not be decoded counts as acked: it is skipped and committed, so that it
// cannot stall its partition). false: a commit failed, the generation is over.
func (w *partitionWindow) add(f fetchedRecord) bool {
	o := &outstanding{rec: f.rec, msg: f.msg}
	w.window = append(w.window, o)
	if f.msg == nil {
		o.state = acked
		return w.advance()
	}
	w.prepare(o)
	w.fresh = o
	return true
}

// prepare gives o's message a context of its own before it is offered.
func (w *partitionWindow) prepare(o *outstanding) {
	ctx, cancel := context.WithCancel(withRecord(w.ctx, o.rec, w.handoff))
	o.msg.SetContext(ctx)
	o.cancel = cancel
	o.state = queued
}

// offerAgain offers the first nacked message again, as a fresh copy (same UUID,
// metadata and payload; new Ack and Nack state).
func (w *partitionWindow) offerAgain() {
	o := w.resend[0]
	w.resend = w.resend[1:]
	o.msg = o.msg.Copy()
	w.prepare(o)
	w.again = o
}

// delivered records that the subscriber's channel took o's message, and watches it
// for its Ack or Nack.
func (w *partitionWindow) delivered(o *outstanding) {
	o.state = delivered
	w.out++
	msg := o.msg
	go func() {
		var s settlement
		select {
		case <-msg.Acked():
			s = settlement{o: o, msg: msg, acked: true}
		case <-msg.Nacked():
			s = settlement{o: o, msg: msg}
		case <-w.stopped:
			return
		}
		select {
		case w.settled <- s:
		case <-w.stopped:
		}
	}()
}

// settle applies an Ack or Nack. false: a commit failed, the generation is over.
func (w *partitionWindow) settle(s settlement) bool {
	o := s.o
	if o.msg != s.msg || o.state != delivered {
		return true // a copy given up already
	}
	w.out--
	o.cancel()
	if s.acked {
		o.state = acked
		return w.advance()
	}
	w.sub.logger.Trace("message nacked", watermill.LogFields{"partition": w.partition, "offset": o.rec.Offset, "message_uuid": o.msg.UUID})
	if w.stopping {
		o.state = abandoned
		return true
	}
	o.state = nacked
	o.due = time.Now()
	if d := w.sub.s.cfg.NackResendSleep; d > 0 {
		o.due = o.due.Add(d)
	}
	i, _ := slices.BinarySearchFunc(w.resend, o.rec.Offset, func(e *outstanding, off int64) int { return cmp.Compare(e.rec.Offset, off) })
	w.resend = slices.Insert(w.resend, i, o)
	return true
}

// advance drops the acked records at the start of the window and commits the offset
// after them. false: a commit failed, the generation is over.
func (w *partitionWindow) advance() bool {
	n := 0
	for n < len(w.window) && w.window[n].state == acked {
		n++
	}
	if n == 0 {
		return true
	}
	next := w.window[n-1].rec.Offset + 1
	clear(w.window[:n])
	w.window = w.window[n:]
	w.lag.next.Store(next)
	if w.commits == nil {
		return true
	}
	return w.commits.add(w.partition, next) == nil // a failure is logged by consume
}

// stop ends the window: an Ack that raced with the stop still counts (an acked
// message is committed even while its consumer stops), then the contexts of the
// messages still out are canceled, the partition's last first, so that whoever sees
// a message's context canceled finds those of every later message of the partition
// canceled too.
func (w *partitionWindow) stop() {
	w.handingOff()
	for _, o := range w.window {
		if o.state == delivered && isAcked(o.msg) {
			o.state = acked
			w.out--
			o.cancel()
		}
	}
	w.advance()
	for i := len(w.window) - 1; i >= 0; i-- {
		if c := w.window[i].cancel; c != nil {
			c()
		}
	}
	close(w.stopped)
}

// isAcked reports an Ack that raced with a stop signal: an acked message is
// committed even while its consumer stops.
func isAcked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
}

// sleepCtx waits d; false if ctx or stop ended the wait.
func sleepCtx(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// committer commits the offsets of one generation's partitions in the background,
// so that the next message can be delivered while the previous offset is being
// committed. Offsets added while a commit is in flight go together in the next
// request (one request at a time: kafka-go's coordinator connection busy-waits on
// concurrent requests). A partition's consumer flushes its offsets before it stops,
// so the partition's next owner starts right after the last acked message.
type committer struct {
	gen   *kafkago.Generation
	topic string // the Kafka name

	mu        sync.Mutex
	cond      *sync.Cond
	running   bool
	pending   map[int]int64 // partition -> offset not yet sent
	wanted    map[int]int64 // partition -> highest offset added
	committed map[int]int64 // partition -> highest offset committed
	err       error         // the first failed commit: the generation is over
}

func newCommitter(gen *kafkago.Generation, topic string) *committer {
	c := &committer{gen: gen, topic: topic, pending: map[int]int64{}, wanted: map[int]int64{}, committed: map[int]int64{}}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// add queues offset (the next record to read) of partition for commit. It returns
// the error of an earlier failed commit.
func (c *committer) add(partition int, offset int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.pending[partition] = max(c.pending[partition], offset)
	c.wanted[partition] = max(c.wanted[partition], offset)
	if !c.running {
		c.running = true
		go c.run()
	}
	return nil
}

// flush waits until every offset added for partition is committed, or a commit
// failed. Each commit request is bounded by the coordinator timeout.
func (c *committer) flush(partition int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && c.committed[partition] < c.wanted[partition] {
		c.cond.Wait()
	}
	return c.err
}

func (c *committer) run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 && c.err == nil {
		batch := c.pending
		c.pending = map[int]int64{}
		c.mu.Unlock()
		err := c.gen.CommitOffsets(map[string]map[int]int64{c.topic: batch})
		c.mu.Lock()
		if err != nil {
			c.err = err
		}
		for p, o := range batch {
			if err == nil {
				c.committed[p] = max(c.committed[p], o)
			}
		}
		c.cond.Broadcast()
	}
	c.running = false
	c.cond.Broadcast()
}
