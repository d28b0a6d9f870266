package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools/notes"
)

// Ingest pipelining. The Router handles every message its subscriber delivers on a
// goroutine of its own, so the tasks handler works on as many tasks as the bus hands
// out at once: on Kafka, kafka.NodeTasksInFlight per partition of troupe.tasks
// (kafka.SubscriberConfig.MaxInFlight), all partitions at once. A session's tasks and
// cancellations must still reach it in the order the bus delivered them, so the
// handler does not see the bus's subscriber directly but a sessionOrder in front of
// it, which hands over one message per session at a time, except a notes stream's
// commands, several of which run at once: the stream writes them in groups
// (entity.Batch).

// Limits of a sessionOrder.
const (
	// maxQueuedTasks bounds the messages a sessionOrder holds (handed over or
	// waiting for their session's turn); at the bound it stops reading the bus, which
	// then holds the rest back (Kafka, by MaxInFlight per partition first).
	maxQueuedTasks = 4096
	// taskResendPause is the pause before a message its handler failed on (after the
	// Retry middleware's attempts) is handed over again, in its session's turn.
	taskResendPause = 500 * time.Millisecond
	// maxParallelCommands bounds the memory commands of one stream a sessionOrder
	// hands over at once.
	maxParallelCommands = 64
)

// sessionOrder is a message.Subscriber in front of the tasks topic's subscriber. It
// hands the messages over as the bus delivers them, at once for different sessions,
// but one at a time per session, in delivery order: a session's next message only
// once the previous one was acked. A nacked message is handed over again (after
// taskResendPause) before anything later of its session, so a failure does not
// reorder a session's tasks, and the bus does not see the Nack.
//
// The memory commands (MetaType messages.TypeMemoryCommand) to a notes stream or a
// memory namespace (notes.IsStream, memory.IsStream) are the exception: the
// commands queued one after another for one stream (a "session" of commands alone)
// are handed over together, up to maxParallelCommands at once, so that the stream
// decides and appends them in groups instead of one Append each. They need no
// order among themselves: a session's own calls are sequential across its steps
// (the next is sent after the last was answered), the calls of one step are
// independent, each is made once by its key whatever the order, and the parts of
// a POST /v1/memories are sent one after another, each once the last was answered. A message that is not a memory command still waits
// for every message of its session before it, and nothing after it is handed over
// before it was acked.
//
// The bus's message is acked when the handler acked the copy it got: on Kafka, the
// task's offset is committed only after the session recorded it. ackOnArrival acks it
// as soon as it is queued instead: on the embedded bus, whose Publish waits for the
// ack (BlockPublishUntilSubscriberAck, which keeps one publisher's messages in order)
// and would otherwise let one task through at a time; a message of the in-process
// bus is lost in a crash either way (Submit does not use the embedded bus: it hands
// its task to the session directly, and waits for the session's acceptance).
//
// A message whose context the bus cancels before its turn (a Kafka partition given
// up in a rebalance) is dropped, as is one that was nacked after the bus gave it up:
// the partition's next owner gets them again. The kafka Subscriber cancels a
// partition's messages from the last back, so a session's later messages are
// dropped too and none of them overtakes the one dropped.
type sessionOrder struct {
	sub          message.Subscriber
	ackOnArrival bool
}

var _ message.Subscriber = (*sessionOrder)(nil)

// Subscribe subscribes to topic on the bus and returns the messages in the order
// described on sessionOrder. The channel closes when the bus's does, or ctx ends.
func (o *sessionOrder) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := o.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	q := &sessionQueues{
		ackOnArrival: o.ackOnArrival,
		ctx:          ctx,
		queues:       map[string][]*queuedTask{},
		settled:      make(chan taskSettlement),
		done:         make(chan struct{}),
	}
	out := make(chan *message.Message)
	go q.run(in, out)
	return out, nil
}

// Close closes the bus's subscriber (the Router closes its handlers' subscribers).
func (o *sessionOrder) Close() error { return o.sub.Close() }

// orderKey is the session a tasks-topic message belongs to, as handleTask and
// handleCancel find it: the payload's session_id (a task.submitted envelope's, a
// plain task's, a cancel request's), else the session_id metadata (a record's key),
// else none: a task that names no session gets one named after its message ID, so
// it has no order to keep with any other message but its own redeliveries.
func orderKey(msg *message.Message) string {
	if sid := payloadSessionID(msg.Payload); sid != "" {
		return sid
	}
	if sid := msg.Metadata.Get(messages.MetaSessionID); sid != "" {
		return sid
	}
	return "\x00message:" + msg.UUID
}

// payloadSessionID returns what decoding payload into
// struct{SessionID string `json:"session_id"`} gives, "" when the decoding fails:
// for one valid JSON object, the value of its last member named session_id in any
// case (encoding/json matches keys as bytes.EqualFold does) whose value is not
// null, when no such member's value is other than a string or null. It reads the
// object's keys only, and decodes a key or the value only when it has escapes or
// other than ASCII.
func payloadSessionID(payload []byte) string {
	if !messages.ValidJSON(payload) {
		return ""
	}
	var id []byte // the value, quoted
	bad := false
	scanMembers(payload, func(raw, value []byte) {
		if bad {
			return
		}
		key := string(raw) // compared only: a short key is not copied to the heap
		if !plainASCII(raw) {
			var unquoted string
			if json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &unquoted) != nil {
				bad = true
				return
			}
			key = unquoted
		}
		if !strings.EqualFold(key, "session_id") {
			return
		}
		switch {
		case string(value) == "null": // leaves a string as it was
		case value[0] == '"':
			id = value
		default:
			bad = true // a type error: the decoding fails
		}
	})
	if bad || len(id) < 2 {
		return ""
	}
	if text := id[1 : len(id)-1]; plainASCII(text) {
		return string(text)
	}
	var sid string
	if json.Unmarshal(id, &sid) != nil {
		return ""
	}
	return sid
}

// queuedTask is a bus message a sessionOrder holds.
type queuedTask struct {
	key string
	// parallel: a memory command, which may run beside the memory commands of its
	// session queued next to it.
	parallel bool
	// out: handed over (or waiting to be again, after a Nack).
	out    bool
	bus    *message.Message // as the bus delivered it
	cur    *message.Message // the copy handed over last
	cancel context.CancelFunc
	due    time.Time // when a nacked message is handed over again
}

type taskSettlement struct {
	t     *queuedTask
	cur   *message.Message
	acked bool
}

// sessionQueues is the state of one sessionOrder subscription, owned by run.
type sessionQueues struct {
	ackOnArrival bool
	ctx          context.Context // the subscription's

	queues  map[string][]*queuedTask // per session, delivery order; the first is handed over (or waits to be again)
	held    int                      // messages in queues
	ready   []*queuedTask            // their session's turn: to be handed over
	resend  []*queuedTask            // nacked, waiting for their due time
	settled chan taskSettlement
	done    chan struct{} // closed when run returns
}

func (q *sessionQueues) run(in <-chan *message.Message, out chan<- *message.Message) {
	defer close(out)
	defer close(q.done)
	defer func() {
		// Not handed over: their contexts end here. Those in a handler end with the
		// subscription's context: one watch for all of them, rather than one each
		// for as long as they are out.
		for _, t := range append(q.ready, q.resend...) {
			t.cancel()
		}
		var out []context.CancelFunc
		for _, ts := range q.queues {
			for _, t := range ts {
				if t.out && t.cancel != nil {
					out = append(out, t.cancel)
				}
			}
		}
		if len(out) > 0 {
			context.AfterFunc(q.ctx, func() {
				for _, cancel := range out {
					cancel()
				}
			})
		}
	}()
	for {
		var (
			next      *message.Message
			nextTo    chan<- *message.Message
			read      <-chan *message.Message
			resendAt  <-chan time.Time
			stopTimer func() bool
		)
		if len(q.ready) > 0 {
			next, nextTo = q.ready[0].cur, out
		}
		if q.held < maxQueuedTasks {
			read = in
		}
		if len(q.resend) > 0 {
			wait := time.Until(q.resend[0].due)
			if wait <= 0 {
				t := q.resend[0]
				q.resend = q.resend[1:]
				if !q.handOver(t) {
					q.fill(t.key)
				}
				continue
			}
			timer := time.NewTimer(wait)
			resendAt, stopTimer = timer.C, timer.Stop
		}
		select {
		case msg, ok := <-read:
			if !ok {
				return
			}
			q.arrive(msg)
		case nextTo <- next:
			q.watch(q.ready[0])
			q.ready = q.ready[1:]
		case s := <-q.settled:
			q.settle(s)
		case <-resendAt:
		case <-q.ctx.Done():
			return
		}
		if stopTimer != nil {
			stopTimer()
		}
	}
}

// arrive queues a message in its session's queue, and hands it over if the session
// has nothing else queued.
func (q *sessionQueues) arrive(msg *message.Message) {
	if q.ackOnArrival {
		msg.Ack()
	}
	t := &queuedTask{key: orderKey(msg), bus: msg}
	// Only a notes stream's and a memory namespace's commands run beside each
	// other: their writes are grouped (entity.Batch). A knowledge base's upload
	// parts must arrive in order.
	t.parallel = msg.Metadata.Get(messages.MetaType) == messages.TypeMemoryCommand && (notes.IsStream(t.key) || memory.IsStream(t.key))
	q.queues[t.key] = append(q.queues[t.key], t)
	q.held++
	q.fill(t.key)
}

// fill hands over the messages of session key whose turn it is: the first of its
// queue, and after it, while it and every message before them are memory commands,
// the memory commands that follow, up to maxParallelCommands handed over at once.
func (q *sessionQueues) fill(key string) {
	out, commands := 0, true
	for i := 0; i < len(q.queues[key]); {
		t := q.queues[key][i]
		if !t.out {
			if i > 0 && (!commands || !t.parallel || out >= maxParallelCommands) {
				return
			}
			if !q.handOver(t) {
				continue // dropped: the next one is at i now
			}
		}
		out++
		if commands = commands && t.parallel; !commands {
			return
		}
		i++
	}
}

// handOver makes a fresh copy of t's message ready for the handler and returns
// true, or drops t (false) if the bus gave it up: the caller fills its session.
func (q *sessionQueues) handOver(t *queuedTask) bool {
	if q.ackOnArrival || t.bus.Context().Err() == nil {
		base := t.bus.Context()
		if q.ackOnArrival {
			base = context.WithoutCancel(base) // the bus ends it once acked
		}
		// Its context ends when the bus's message's does, when it is settled, and
		// when the subscription's does (run, as it returns).
		ctx, cancel := context.WithCancel(base)
		t.cur = t.bus.Copy()
		t.cur.SetContext(ctx)
		t.cancel = cancel
		t.out = true
		q.ready = append(q.ready, t)
		return true
	}
	q.pop(t)
	return false
}

// pop removes t from its session's queue.
func (q *sessionQueues) pop(t *queuedTask) {
	ts := q.queues[t.key]
	i := slices.Index(ts, t)
	if i < 0 {
		return
	}
	ts = slices.Delete(ts, i, i+1)
	q.held--
	if len(ts) == 0 {
		delete(q.queues, t.key)
		return
	}
	q.queues[t.key] = ts
}

// watch waits, in the background, for the handler's Ack or Nack of t's copy (the
// Router settles every message it was handed). An Ack reaches the bus's message from
// there, also after the subscription ended.
func (q *sessionQueues) watch(t *queuedTask) {
	cur := t.cur
	go func() {
		s := taskSettlement{t: t, cur: cur}
		select {
		case <-cur.Acked():
			s.acked = true
			if !q.ackOnArrival {
				t.bus.Ack()
			}
		case <-cur.Nacked():
		}
		select {
		case q.settled <- s:
		case <-q.done:
		}
	}()
}

// settle takes an Ack or Nack in: an acked message leaves its queue and the session's
// next ones are handed over (fill); a nacked one is handed over again after taskResendPause,
// unless the bus gave it up.
func (q *sessionQueues) settle(s taskSettlement) {
	t := s.t
	if t.cur != s.cur {
		return
	}
	t.cancel()
	if !s.acked && (q.ackOnArrival || t.bus.Context().Err() == nil) {
		t.due = time.Now().Add(taskResendPause)
		q.resend = append(q.resend, t) // one pause for all: due times come in order
		return
	}
	q.pop(t)
	q.fill(t.key)
}
