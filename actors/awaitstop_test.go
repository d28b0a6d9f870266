package actors_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/memory"
)

// hold is a message that an actor of holdingProps handles until release is
// closed, as a session actor handles an append to a slow log.
type hold struct{ entered, release, handled chan struct{} }

func newHold() *hold {
	return &hold{entered: make(chan struct{}), release: make(chan struct{}), handled: make(chan struct{})}
}

func holdingProps() *actor.Props {
	return actor.PropsFromFunc(func(c actor.Context) {
		if h, ok := c.Message().(*hold); ok {
			close(h.entered)
			<-h.release
			close(h.handled)
		}
	})
}

func newSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(sys.Shutdown)
	return sys
}

func within(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30 s", what)
	}
}

// errStillHandling is awaitStop's error when AwaitStop returned before handled was
// closed.
var errStillHandling = errors.New("AwaitStop returned while the actor still handled its message")

// awaitStop runs AwaitStop in the background; the channel gets its error, or
// errStillHandling if handled (when not nil) was not closed as it returned.
func awaitStop(ctx context.Context, sys *actor.ActorSystem, pid *actor.PID, stop func(*actor.PID), handled <-chan struct{}) <-chan error {
	errc := make(chan error, 1)
	go func() {
		err := actors.AwaitStop(ctx, sys, pid, stop)
		if handled != nil && err == nil {
			select {
			case <-handled:
			default:
				err = errStillHandling
			}
		}
		errc <- err
	}()
	return errc
}

func result(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("AwaitStop did not return within 30 s")
		return nil
	}
}

// TestAwaitStopWaitsForTheMessageInHand: an actor (or the child of a poisoned
// parent) handling a message when it is asked to stop is waited for until that
// message is handled, not given up on after a fixed time.
func TestAwaitStopWaitsForTheMessageInHand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent bool
	}{{"actor", false}, {"child of a poisoned parent", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sys := newSystem(t)
			h := newHold()
			var target, busy *actor.PID
			stop := sys.Root.Stop
			if !tc.parent {
				target = sys.Root.Spawn(holdingProps())
				busy = target
			} else {
				spawned := make(chan *actor.PID, 1)
				target = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
					if _, ok := c.Message().(*actor.Started); ok {
						spawned <- c.Spawn(holdingProps())
					}
				}))
				busy = <-spawned
				stop = sys.Root.Poison
			}
			sys.Root.Send(busy, h)
			within(t, h.entered, "the actor handles its message")
			asked := make(chan struct{})
			errc := awaitStop(context.Background(), sys, target, func(pid *actor.PID) { stop(pid); close(asked) }, h.handled)
			within(t, asked, "AwaitStop asks the actor to stop")
			close(h.release)
			if err := result(t, errc); err != nil {
				t.Fatalf("AwaitStop: %v", err)
			}
		})
	}
}

// TestAwaitStopEndsWithItsContext: an actor that keeps handling its message is
// waited for until the caller's context ends, whose error AwaitStop returns.
func TestAwaitStopEndsWithItsContext(t *testing.T) {
	sys := newSystem(t)
	h := newHold()
	t.Cleanup(func() { close(h.release) })
	pid := sys.Root.Spawn(holdingProps())
	sys.Root.Send(pid, h)
	within(t, h.entered, "the actor handles its message")
	ctx, cancel := context.WithCancel(context.Background())
	errc := awaitStop(ctx, sys, pid, sys.Root.Stop, nil)
	cancel()
	if err := result(t, errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitStop of a busy actor with its context cancelled: %v, want context.Canceled", err)
	}
}

// TestAwaitStopOfNoActorReturnsAtOnce: an actor that stopped already, and a PID
// that never was one, are answered at once, whatever the context allows.
func TestAwaitStopOfNoActorReturnsAtOnce(t *testing.T) {
	sys := newSystem(t)
	pid := sys.Root.Spawn(holdingProps())
	if err := result(t, awaitStop(context.Background(), sys, pid, sys.Root.Stop, nil)); err != nil {
		t.Fatalf("AwaitStop of a live actor: %v", err)
	}
	for name, pid := range map[string]*actor.PID{
		"stopped":   pid,
		"never was": actor.NewPID(sys.Address(), "nobody"),
	} {
		for how, stop := range map[string]func(*actor.PID){"stop": sys.Root.Stop, "poison": sys.Root.Poison} {
			if err := result(t, awaitStop(context.Background(), sys, pid, stop, nil)); err != nil {
				t.Fatalf("AwaitStop (%s) of an actor that %s: %v", how, name, err)
			}
		}
	}
}

// TestMemoryHostStopWaitsForTheRequestInHand: Stop waits until the namespace's
// actor finished the request it handles, and gives up when its context ends.
func TestMemoryHostStopWaitsForTheRequestInHand(t *testing.T) {
	for _, giveUp := range []bool{false, true} {
		h, _ := newMemoryHost(t, newMemories(t), time.Hour)
		entered, release, handled := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			_, _ = h.Do(context.Background(), "user:alice", func(context.Context, *memory.Namespace) (any, error) {
				close(entered)
				<-release
				close(handled)
				return nil, nil
			})
		}()
		within(t, entered, "the namespace handles its request")
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() {
			err := h.Stop(ctx)
			if err == nil {
				select {
				case <-handled:
				default:
					err = errStillHandling
				}
			}
			stopped <- err
		}()
		if giveUp {
			cancel()
			if err := result(t, stopped); !errors.Is(err, context.Canceled) {
				t.Fatalf("Stop with its context cancelled while a request is handled: %v, want context.Canceled", err)
			}
			close(release)
			continue
		}
		close(release)
		err := result(t, stopped)
		cancel()
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
}
