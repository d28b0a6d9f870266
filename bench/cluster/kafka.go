package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

var benchTopics = []string{messages.TopicTasks, messages.TopicEvents, messages.TopicResults}

// runTopics is the topic layout of one run: topics of its own, whose names start
// with a prefix named after the run (kafka.TopicLayout.Prefix), so that a run on a
// real broker never reads what earlier or concurrent runs left there.
func runTopics(runID string, partitions int) kafka.TopicLayout {
	return kafka.TopicLayout{Prefix: "bench" + runID + ".", InitializeTopics: true, Default: kafka.TopicConfig{Partitions: partitions}}
}

// ensureTopics creates the troupe topics that are missing (an existing topic is left
// as it is) and waits until the cluster knows them.
func ensureTopics(ctx context.Context, brokers []string, topics kafka.TopicLayout) error {
	s, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, Topics: topics}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer s.Close()
	for _, t := range benchTopics {
		if err := s.SubscribeInitialize(t); err != nil {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return ctx.Err()
}

func adminClient(brokers []string) *kafkago.Client {
	return &kafkago.Client{Addr: kafkago.TCP(brokers...), Timeout: 10 * time.Second}
}

// partitionCount returns the number of partitions of topic (a Kafka name, with the
// prefix).
func partitionCount(ctx context.Context, c *kafkago.Client, topic string) (int, error) {
	md, err := c.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	for _, t := range md.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return 0, fmt.Errorf("metadata of %s: %w", topic, t.Error)
			}
			return len(t.Partitions), nil
		}
	}
	return 0, fmt.Errorf("metadata of %s: topic not found", topic)
}

// startGroupAtEnd commits, for a consumer group no one has joined yet, the current
// end of every partition of topic (a Kafka name): the group's members then skip
// whatever earlier scenarios of the run left on the topic, and start with the tasks
// this scenario publishes.
func startGroupAtEnd(ctx context.Context, c *kafkago.Client, group, topic string, partitions int) error {
	req := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for p := range partitions {
		req.Topics[topic] = append(req.Topics[topic], kafkago.LastOffsetOf(p))
	}
	offs, err := c.ListOffsets(ctx, req)
	if err != nil {
		return fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	commit := &kafkago.OffsetCommitRequest{GroupID: group, GenerationID: -1, Topics: map[string][]kafkago.OffsetCommit{}}
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			return fmt.Errorf("end offset of %s/%d: %w", topic, po.Partition, po.Error)
		}
		commit.Topics[topic] = append(commit.Topics[topic], kafkago.OffsetCommit{Partition: po.Partition, Offset: po.LastOffset})
	}
	if n := len(commit.Topics[topic]); n != partitions {
		return fmt.Errorf("end offsets of %s: got %d partitions, want %d", topic, n, partitions)
	}
	// A broker that has just started, or a group new to it, may not have its
	// coordinator yet (the offsets topic being created or loaded): the commit is
	// tried again until it has, as a consumer's would be.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := commitOnce(ctx, c, commit, group, topic)
		if err == nil || !coordinatorNotReady(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the broker's group coordinator was not ready within a minute)", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func commitOnce(ctx context.Context, c *kafkago.Client, commit *kafkago.OffsetCommitRequest, group, topic string) error {
	res, err := c.OffsetCommit(ctx, commit)
	if err != nil {
		return fmt.Errorf("commit start offsets for group %s: %w", group, err)
	}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return fmt.Errorf("commit start offset of %s/%d for group %s: %w", topic, p.Partition, group, p.Error)
		}
	}
	return nil
}

// coordinatorNotReady reports whether err says the group's coordinator is not
// ready yet: a broker that has just started, or is loading the group.
func coordinatorNotReady(err error) bool {
	return errors.Is(err, kafkago.NotCoordinatorForGroup) || errors.Is(err, kafkago.GroupCoordinatorNotAvailable) ||
		errors.Is(err, kafkago.GroupLoadInProgress)
}

// waitForGroup waits until the group is stable with members members that between
// them are assigned every partition of topic (a Kafka name), so that no rebalance runs while tasks
// are measured.
func waitForGroup(ctx context.Context, c *kafkago.Client, group, topic string, members, partitions int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "not described yet"
	for {
		res, err := c.DescribeGroups(ctx, &kafkago.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err != nil {
			last = err.Error()
		} else {
			for _, g := range res.Groups {
				if g.GroupID != group {
					continue
				}
				assigned := map[int]bool{}
				for _, m := range g.Members {
					for _, t := range m.MemberAssignments.Topics {
						if t.Topic == topic {
							for _, p := range t.Partitions {
								assigned[p] = true
							}
						}
					}
				}
				last = fmt.Sprintf("state %s, %d members, %d of %d partitions assigned (err %v)", g.GroupState, len(g.Members), len(assigned), partitions, g.Error)
				if g.Error == nil && g.GroupState == "Stable" && len(g.Members) == members && len(assigned) == partitions {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer group %s did not settle: %s: %w", group, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// arrival is a result read from troupe.results and when it was read.
type arrival struct {
	at  time.Time
	res messages.TaskResult
}

// kafkaClient is what an external Kafka client does: publish plain JSON tasks to
// troupe.tasks, keyed by session ID, and read their results from troupe.results.
type kafkaClient struct {
	pub *kafka.Publisher
	sub *kafka.Subscriber

	mu sync.Mutex
	// waiting maps a task's task_id (its session's ID: one task per session) to
	// the channel its result goes to.
	waiting map[string]chan arrival

	measuredPrefix string
	unmatched      atomic.Int64 // results of measured sessions nobody waited for (duplicates)
	undecodable    atomic.Int64
	done           chan struct{}
}

// newKafkaClient subscribes to troupe.results from the latest offset, in no group,
// and dispatches results to the tasks waiting for them.
func newKafkaClient(ctx context.Context, brokers []string, topics kafka.TopicLayout, measuredPrefix string) (*kafkaClient, error) {
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Topics: topics}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, InitialOffset: kafka.FromLatest, Topics: topics}, watermill.NopLogger{})
	if err != nil {
		return nil, errors.Join(err, pub.Close())
	}
	results, err := sub.Subscribe(ctx, messages.TopicResults)
	if err != nil {
		return nil, errors.Join(err, sub.Close(), pub.Close())
	}
	c := &kafkaClient{pub: pub, sub: sub, waiting: map[string]chan arrival{}, measuredPrefix: measuredPrefix, done: make(chan struct{})}
	go c.dispatch(results)
	return c, nil
}

func (c *kafkaClient) dispatch(results <-chan *message.Message) {
	defer close(c.done)
	for msg := range results {
		at := time.Now()
		msg.Ack()
		var r messages.TaskResult
		if err := json.Unmarshal(msg.Payload, &r); err != nil || r.SessionID == "" || r.TaskID == "" {
			c.undecodable.Add(1)
			continue
		}
		// A result names its task: a result published again (a partition taken
		// over) finds no waiter and counts as unmatched.
		c.mu.Lock()
		ch, ok := c.waiting[r.TaskID]
		if ok {
			delete(c.waiting, r.TaskID)
		}
		c.mu.Unlock()
		if ok {
			ch <- arrival{at: at, res: r} // buffered, one result per waiter
		} else if strings.HasPrefix(r.SessionID, c.measuredPrefix) {
			c.unmatched.Add(1)
		}
	}
}

func (c *kafkaClient) close() error {
	err := c.sub.Close()
	<-c.done
	return errors.Join(err, c.pub.Close())
}

// run publishes a task for a new session, named as its session (task_id), and waits
// for the result with that task_id; the latency is from just before Publish to the
// moment the result was read.
func (c *kafkaClient) run(ctx context.Context, id string) (time.Duration, error) {
	ch := make(chan arrival, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
	}()
	body, err := json.Marshal(node.Task{Input: taskInput, SessionID: id, TaskID: id})
	if err != nil {
		return 0, err
	}
	msg := message.NewMessage(watermill.NewUUID(), body)
	msg.Metadata.Set(messages.MetaSessionID, id) // the record key
	start := time.Now()
	if err := c.pub.Publish(messages.TopicTasks, msg); err != nil {
		return 0, fmt.Errorf("session %s: publish task: %w", id, err)
	}
	select {
	case a := <-ch:
		if a.res.Status != messages.StatusCompleted || a.res.Output != taskOutput || a.res.SessionID != id {
			return 0, fmt.Errorf("session %s: result %+v, want status %s and output %q", id, a.res, messages.StatusCompleted, taskOutput)
		}
		return a.at.Sub(start), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("session %s: no result on %s: %w", id, messages.TopicResults, ctx.Err())
	}
}

// errNoResult is a task whose result did not come in time.
var errNoResult = errors.New("no result in time")

// cover runs tasks in sessions chosen so that, together, they use every partition of
// troupe.tasks and of troupe.results, until each partition carried a task and a
// result that arrived. A result published before the results subscriber's consumer
// of its partition started is skipped (FromLatest), so a task whose result does not
// come within a few seconds is run again in another session on the same partitions.
// It returns the number of sessions it started.
func (c *kafkaClient) cover(ctx context.Context, prefix string, taskParts, resultParts int) (int, error) {
	needT, needR := map[int]bool{}, map[int]bool{}
	for p := range taskParts {
		needT[p] = true
	}
	for p := range resultParts {
		needR[p] = true
	}
	started := 0
	for round := 0; len(needT)+len(needR) > 0; round++ {
		if round == 10 {
			return started, fmt.Errorf("partitions without a result after %d rounds: tasks %v, results %v", round, keys(needT), keys(needR))
		}
		// Sessions that cover the missing partitions, fresh IDs every round.
		type pick struct {
			id     string
			tp, rp int
		}
		var picks []pick
		gotT, gotR := map[int]bool{}, map[int]bool{}
		for i := 0; len(gotT) < len(needT) || len(gotR) < len(needR); i++ {
			id := fmt.Sprintf("%s-r%d-%04d", prefix, round, i)
			tp, rp := kafka.Partition([]byte(id), taskParts), kafka.Partition([]byte(id), resultParts)
			if (needT[tp] && !gotT[tp]) || (needR[rp] && !gotR[rp]) {
				picks = append(picks, pick{id, tp, rp})
				if needT[tp] {
					gotT[tp] = true
				}
				if needR[rp] {
					gotR[rp] = true
				}
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for _, p := range picks {
			started++
			wg.Add(1)
			go func() {
				defer wg.Done()
				tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_, err := c.run(tctx, p.id)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					delete(needT, p.tp)
					delete(needR, p.rp)
				case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
					// try again next round
				case firstErr == nil:
					firstErr = err
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return started, firstErr
		}
	}
	return started, nil
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// runKafka measures nodes nodes on Kafka, on the run's topics, in one fresh
// consumer group and sharing one SQLite event log, with tasks published and results
// read as an external Kafka client would.
func runKafka(ctx context.Context, o options, scenario string, round, nodes int, brokers []string, topics kafka.TopicLayout, runID string) (result, error) {
	admin := adminClient(brokers)
	tasksTopic, resultsTopic := topics.Prefix+messages.TopicTasks, topics.Prefix+messages.TopicResults
	taskParts, err := partitionCount(ctx, admin, tasksTopic)
	if err != nil {
		return result{}, err
	}
	resultParts, err := partitionCount(ctx, admin, resultsTopic)
	if err != nil {
		return result{}, err
	}
	prefix := fmt.Sprintf("bench-%s-%s-r%d", runID, scenario, round)
	group := "troupe-" + prefix
	if err := startGroupAtEnd(ctx, admin, group, tasksTopic, taskParts); err != nil {
		return result{}, err
	}

	asPart(ctx, "client")
	defer asPart(ctx, "bench")
	client, err := newKafkaClient(ctx, brokers, topics, prefix+"-run")
	if err != nil {
		return result{}, err
	}
	defer func() {
		if err := client.close(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: close client: %v\n", scenario, err)
		}
	}()

	dir, err := os.MkdirTemp("", "troupe-bench-"+scenario+"-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	asPart(ctx, "node") // the log's writer is the nodes'
	log, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		return result{}, err
	}
	defer log.Close()

	var ns []*node.Node
	var pubs []*timedPublisher
	for i := range nodes {
		clients, err := kafka.DialNode(brokers, group, topics, watermill.NopLogger{})
		if err != nil {
			return result{}, fmt.Errorf("node %d: %w", i+1, err)
		}
		defer clients.Close() // after the node stopped (defers run in reverse)
		cfg, err := nodeConfig()
		if err != nil {
			return result{}, err
		}
		cfg.Log = log
		pub := &timedPublisher{Publisher: clients.Publisher, stats: map[string]*publishStats{}, noEvents: o.noEventsFeed}
		pubs = append(pubs, pub)
		// Wired as `node serve --kafka` wires a node: sharded by partition, the nodes
		// sharing one log.
		cfg.Bus = &node.Bus{Publisher: pub, Tasks: clients.Group, Live: clients.Live,
			Tools: clients.Tools, Models: clients.Models, Sharded: true, Partition: kafka.PartitionOf, TopicPrefix: topics.Prefix}
		cfg.NodeID = fmt.Sprintf("bench-node-%d", i+1)
		n, err := node.New(ctx, cfg)
		if err != nil {
			return result{}, fmt.Errorf("node %d: %w", i+1, err)
		}
		clients.SetOwner(n)
		stop, err := n.Start(ctx)
		if err != nil {
			_ = n.Close()
			return result{}, fmt.Errorf("node %d: %w", i+1, err)
		}
		defer stop()
		ns = append(ns, n)
	}
	asPart(ctx, "client")
	if err := waitForGroup(ctx, admin, group, tasksTopic, nodes, taskParts); err != nil {
		return result{}, err
	}
	covered, err := client.cover(ctx, prefix+"-cover", taskParts, resultParts)
	if err != nil {
		return result{}, fmt.Errorf("warm-up over every partition: %w", err)
	}

	r, err := measure(ctx, o, fmt.Sprintf("%s-r%d", scenario, round), client.run, prefix)
	if err != nil {
		return r, err
	}
	summary, err := checkLog(ctx, log, covered+o.warmup+o.tasks)
	r.notes = append(r.notes, summary)
	for i, n := range ns {
		r.notes = append(r.notes, fmt.Sprintf("node %d: %s; its Publish calls: %s", i+1, handlerStats(n), pubs[i]))
	}
	r.notes = append(r.notes, fmt.Sprintf("topics: %s %d partitions, %s %d; %d warm-up sessions to cover them; duplicate results of measured sessions: %d; undecodable results: %d",
		tasksTopic, taskParts, resultsTopic, resultParts, covered, client.unmatched.Load(), client.undecodable.Load()))
	return r, err
}

// timedPublisher counts a node's Publish calls and their time, by topic: the node's
// outbox publishes the session actors' events and results in batches, in the
// background, so this is the bus's time, not time a session waits.
type timedPublisher struct {
	message.Publisher
	noEvents bool // -no-events-feed: tell the node that troupe.events has no reader
	mu       sync.Mutex
	stats    map[string]*publishStats
}

// HasReaders implements actors.TopicReaders (through the node's outbox): a Kafka
// topic may always have readers, except troupe.events with -no-events-feed, whose
// records the session actors then neither encode nor publish.
func (p *timedPublisher) HasReaders(topic string) bool {
	return !p.noEvents || topic != messages.TopicEvents
}

type publishStats struct {
	calls, msgs int
	total       time.Duration
}

func (p *timedPublisher) Publish(topic string, msgs ...*message.Message) error {
	start := time.Now()
	err := p.Publisher.Publish(topic, msgs...)
	d := time.Since(start)
	p.mu.Lock()
	st := p.stats[topic]
	if st == nil {
		st = &publishStats{}
		p.stats[topic] = st
	}
	st.calls++
	st.msgs += len(msgs)
	st.total += d
	p.mu.Unlock()
	return err
}

func (p *timedPublisher) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for topic, st := range p.stats {
		parts = append(parts, fmt.Sprintf("%s %d calls (%d messages) mean %s", topic, st.calls, st.msgs, fmtDur(st.total/time.Duration(max(st.calls, 1)))))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
