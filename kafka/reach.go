package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// ErrBrokersUnreachable is wrapped by the errors of Publish and Reachable when
// none of the Publisher's brokers could be reached (a connection refused, or not
// answered within reachTimeout).
var ErrBrokersUnreachable = errors.New("cannot be reached")

// reachTimeout bounds one check of the brokers (Reachable): a connection and an
// ApiVersions request to each broker in turn, all of them together.
const reachTimeout = time.Second

// reachMaxAge is how long the outcome of a check of the brokers, or of a
// produce that went through, stands for the brokers' reachability: the checks
// made meanwhile reuse it rather than connect again.
const reachMaxAge = time.Second

// reach tells whether a Publisher's brokers can be reached, from what the
// Publisher knows already (a produce that went through within reachMaxAge) or a
// check of its own, made at most once per reachMaxAge, one at a time.
type reach struct {
	brokers  []string
	clientID string

	produced atomic.Int64 // unix nanoseconds of the last produce that went through

	mu      sync.Mutex
	checked time.Time // when the last check ended
	last    error     // its outcome
	running chan struct{}
}

// Reachable returns nil when the Publisher's brokers can be reached: a produce
// went through within the last second, or since the last check, or one of the
// brokers answers an ApiVersions request on a connection of its own. Otherwise it returns an error
// wrapping ErrBrokersUnreachable that names the brokers and says why ("the
// Kafka brokers at host:9092 cannot be reached: … dial tcp …: connection
// refused"). It costs an atomic load while produces go through; else it checks
// the brokers at most once a second, and a check takes at most a second
// (reachTimeout): the calls made meanwhile, and while the next check runs, get
// the last check's outcome (so it may be two seconds old) without waiting; only
// the first call, and the first after two seconds with no call, wait for a
// check, until it ends or ctx is done. A broker that answers but refuses
// writes (a topic missing, replicas out of sync) is reachable: Publish says
// what it refuses.
func (p *Publisher) Reachable(ctx context.Context) error {
	return p.reach.check(ctx, false)
}

// wrote records how a produce went: one that failed, whatever the reason, leaves
// the next check to the brokers.
func (r *reach) wrote(err error) {
	if err != nil {
		r.produced.Store(0)
		return
	}
	r.produced.Store(time.Now().UnixNano())
}

// check is Reachable; fresh (a produce just failed) takes neither a produce
// that went through nor a check that found the brokers for an answer, only a
// check under way, or one that failed within reachMaxAge. Past reachMaxAge, a
// check that is not fresh starts the next check and answers the last one's
// outcome without waiting; only the first check is waited for.
func (r *reach) check(ctx context.Context, fresh bool) error {
	produced := r.produced.Load()
	if !fresh && time.Since(time.Unix(0, produced)) < reachMaxAge {
		return nil
	}
	r.mu.Lock()
	// The newer of the last check and the last produce that went through (a
	// broker too slow for a check, 1 s, may take a produce, which waits longer).
	last, at := r.last, r.checked
	if !fresh && !r.checked.IsZero() && produced > r.checked.UnixNano() {
		last, at = nil, time.Unix(0, produced)
	}
	if !r.checked.IsZero() && time.Since(r.checked) < reachMaxAge && r.running == nil && (!fresh || r.last != nil) {
		r.mu.Unlock()
		return last
	}
	done := r.running
	if done == nil {
		done = make(chan struct{})
		r.running = done
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
			err := r.dial(ctx)
			cancel()
			r.mu.Lock()
			r.last, r.checked, r.running = err, time.Now(), nil
			r.mu.Unlock()
			close(done)
		}()
	}
	if !fresh && !r.checked.IsZero() && time.Since(at) < reachMaxAge+reachTimeout {
		// The last check's outcome stands while the next one runs (it ends
		// within reachTimeout): a broker that answers, but more slowly than the
		// caller waits (a health check, half a second), would otherwise be
		// found unreachable each time the outcome aged, and reachable again
		// once the check ended. An older outcome, one that nothing asked for
		// since (a node idle, with no health probe, while its brokers came
		// back), says nothing of the brokers now: the call waits for the check.
		r.mu.Unlock()
		return last
	}
	r.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("kafka: checking whether the Kafka brokers at %s can be reached: %w", strings.Join(r.brokers, ","), ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// dial asks every broker at once for its ApiVersions, each on a connection of
// its own, and returns nil as soon as one answers: the brokers can be reached if
// any of them can. Asked in turn within one reachTimeout, a first broker that
// hangs (it accepts but does not answer, or its packets are dropped) would take
// the whole of it and leave the others unasked.
func (r *reach) dial(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the others' connections, once one answered
	d := newDialer(r.clientID, reachTimeout)
	type answer struct {
		i   int
		err error
	}
	answers := make(chan answer, len(r.brokers))
	for i, b := range r.brokers {
		go func() { answers <- answer{i, askVersions(ctx, d, b)} }()
	}
	errs := make([]error, len(r.brokers)) // in the order of the brokers
	for range r.brokers {
		a := <-answers
		if a.err == nil {
			return nil
		}
		errs[a.i] = a.err
	}
	return &unreachableError{brokers: r.brokers, err: errors.Join(errs...)}
}

// askVersions connects to broker and asks it for its ApiVersions, within ctx.
func askVersions(ctx context.Context, d *kafkago.Dialer, broker string) error {
	conn, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	_, err = conn.ApiVersions()
	return err
}

// unreachableError is the error of brokers that could not be reached.
type unreachableError struct {
	brokers []string
	err     error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("the Kafka brokers at %s %s: %v", strings.Join(e.brokers, ","), ErrBrokersUnreachable, e.err)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrBrokersUnreachable, e.err} }

// unreachable returns the error of a Publish that failed with err when the
// brokers cannot be reached, for the publish to topic wire: what failed is the
// connection to them, whatever the error of the request that found out. With the
// brokers down, kafka-go's transport routes a produce by the metadata it still
// has or lost, and the first publish after a broker stopped failed with "fetch
// request error: topic not found (topic=…)", although the topic is there. When
// the brokers answer, it returns nil: err is theirs to tell.
func (r *reach) unreachable(wire string, err error) error {
	if answered(err) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	rerr := r.check(ctx, true)
	if rerr == nil {
		return nil
	}
	return fmt.Errorf("kafka: publish to %s: %w", wire, rerr)
}

// answered reports whether err is a broker's answer (an error code of its own,
// but for UnknownTopicOrPartition, which the metadata a produce was routed by
// may say of a topic while its broker is gone, and BrokerNotAvailable, which
// kafka-go says of a broker it cannot connect to), or a record refused before
// it was sent: no sign that the brokers cannot be reached.
func answered(err error) bool {
	var werr kafkago.WriteErrors
	if errors.As(err, &werr) {
		for _, e := range werr {
			if e != nil {
				return answered(e)
			}
		}
		return false
	}
	var tooLarge kafkago.MessageTooLargeError
	if errors.As(err, &tooLarge) || errors.Is(err, ErrInvalidTopic) {
		return true
	}
	var kerr kafkago.Error
	return errors.As(err, &kerr) && !errors.Is(err, kafkago.UnknownTopicOrPartition) && !errors.Is(err, kafkago.BrokerNotAvailable)
}
