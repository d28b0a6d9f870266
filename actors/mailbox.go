package actors

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// sessionQueue is the queue of a session actor's mailbox (stoppedAnswering), and the
// session host's mailbox: protoactor's unbounded mailbox (actor.Unbounded, its
// defaultMailbox) as these actors use it, with no middleware, and without its
// allocations: protoactor's queues allocate a node for each system message and
// three objects per mailbox, and its mailbox a function value each time it
// schedules a run. Every effect's reply and every task is a message to a session,
// and every run a schedule. Its behaviour is defaultMailbox's: system messages
// first, user messages while not suspended (SuspendMailbox, ResumeMailbox),
// throughput messages at a time before yielding, one run at a time on the
// dispatcher, and a panic escalated with the message it happened on.
type sessionQueue struct {
	mu           sync.Mutex
	user, system msgQueue
	// userN and sysN count the messages queued, read without mu.
	userN, sysN atomic.Int32
	running     atomic.Bool
	suspended   atomic.Bool
	invoker     actor.MessageInvoker
	dispatcher  actor.Dispatcher
	process     func() // processMessages, made once
}

var _ actor.Mailbox = (*sessionQueue)(nil)

// msgQueue is a FIFO queue of messages; its array is reused once emptied.
type msgQueue struct {
	items []any
	head  int
}

func (q *msgQueue) push(m any) {
	if q.items == nil {
		q.items = make([]any, 0, 4)
	}
	q.items = append(q.items, m)
}

// pop returns the oldest message, or nil if there is none.
func (q *msgQueue) pop() any {
	if q.head == len(q.items) {
		return nil
	}
	m := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 64 && 2*q.head >= len(q.items):
		// A queue that never empties would grow without end: move what is left to
		// the front.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return m
}

// PostUserMessage implements actor.Mailbox.
func (q *sessionQueue) PostUserMessage(msg any) {
	// As defaultMailbox does: a batch's messages, then the batch.
	if batch, ok := msg.(actor.MessageBatch); ok {
		for _, m := range batch.GetMessages() {
			q.PostUserMessage(m)
		}
	}
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		if batch, ok := env.Message.(actor.MessageBatch); ok {
			for _, m := range batch.GetMessages() {
				q.PostUserMessage(m)
			}
		}
	}
	q.mu.Lock()
	q.user.push(msg)
	q.mu.Unlock()
	q.userN.Add(1)
	q.schedule()
}

// PostSystemMessage implements actor.Mailbox.
func (q *sessionQueue) PostSystemMessage(msg any) {
	q.mu.Lock()
	q.system.push(msg)
	q.mu.Unlock()
	q.sysN.Add(1)
	q.schedule()
}

// RegisterHandlers implements actor.Mailbox.
func (q *sessionQueue) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	q.invoker, q.dispatcher = invoker, dispatcher
	q.process = q.processMessages
}

// Start implements actor.Mailbox.
func (q *sessionQueue) Start() {}

// UserMessageCount implements actor.Mailbox.
func (q *sessionQueue) UserMessageCount() int { return int(q.userN.Load()) }

func (q *sessionQueue) schedule() {
	if q.running.CompareAndSwap(false, true) {
		q.dispatcher.Schedule(q.process)
	}
}

func (q *sessionQueue) processMessages() {
	for {
		q.run()
		q.running.Store(false)
		if q.sysN.Load() == 0 && (q.suspended.Load() || q.userN.Load() == 0) {
			return
		}
		// A message came after run found none: run again, unless a poster
		// scheduled a run already.
		if !q.running.CompareAndSwap(false, true) {
			return
		}
	}
}

func (q *sessionQueue) popSystem() any {
	if q.sysN.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	m := q.system.pop()
	q.mu.Unlock()
	if m != nil {
		q.sysN.Add(-1)
	}
	return m
}

func (q *sessionQueue) popUser() any {
	if q.userN.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	m := q.user.pop()
	q.mu.Unlock()
	if m != nil {
		q.userN.Add(-1)
	}
	return m
}

func (q *sessionQueue) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			q.invoker.EscalateFailure(r, msg)
		}
	}()
	i, t := 0, q.dispatcher.Throughput()
	for {
		if i > t {
			i = 0
			runtime.Gosched()
		}
		i++
		if msg = q.popSystem(); msg != nil {
			switch msg.(type) {
			case *actor.SuspendMailbox:
				q.suspended.Store(true)
			case *actor.ResumeMailbox:
				q.suspended.Store(false)
			default:
				q.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if q.suspended.Load() {
			return
		}
		if msg = q.popUser(); msg == nil {
			return
		}
		q.invoker.InvokeUserMessage(msg)
	}
}
