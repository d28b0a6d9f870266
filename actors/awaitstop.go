package actors

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"
)

// AwaitStop asks the actor pid to stop with stop (system.Root.Stop: after the
// message it is handling; system.Root.Poison: after the messages queued before
// it too) and waits until it has terminated, its children with it, or until ctx
// ends, whose error it then returns (the actor goes on stopping).
//
// It stands for protoactor's StopFuture and PoisonFuture, whose futures give up
// after a fixed 10 s: a caller that went on as if the actor had stopped then,
// closing what it uses (a node's event log, its bus), closed them under an actor
// still handling a message, as a session retrying a write to a log that is down,
// or a slow commit on a loaded machine, may be for longer. Here the caller's ctx
// bounds the wait.
//
// An actor that has stopped already, or a PID that never was one, is waited for
// no time: protoactor answers a Watch of a PID it does not know (its dead
// letters) with Terminated at once. So does an actor that another stop has
// already set stopping, even while its children still stop: the wait covers
// them only when this stop is the one that reaches the actor first.
func AwaitStop(ctx context.Context, system *actor.ActorSystem, pid *actor.PID, stop func(*actor.PID)) error {
	// A future with no timeout of its own watches the actor: its Watch is sent
	// before the stop, and a mailbox handles its system messages in order and
	// before its user messages, so the actor is watched before it stops.
	terminated := actor.NewFuture(system, -1)
	future, _ := system.ProcessRegistry.Get(terminated.PID())
	watched, _ := system.ProcessRegistry.Get(pid)
	watched.SendSystemMessage(pid, &actor.Watch{Watcher: terminated.PID()})
	stop(pid)
	done := make(chan struct{})
	go func() {
		_ = terminated.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// Ending the future (a no-op if it just got its Terminated) ends the
		// goroutine and unregisters the future; a Terminated that comes later
		// goes to the dead letters.
		future.Stop(terminated.PID())
		<-done
		return ctx.Err()
	}
}
