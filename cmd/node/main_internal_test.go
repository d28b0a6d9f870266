package main

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// node run --kafka says once that it is still waiting when no event of its task
// comes (no node serves the topics it submitted to), and passes the events on
// when they come, without a word.
func TestHintWhenSilent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan messages.Envelope)
	hints := make(chan struct{}, 4)
	out := hintWhenSilent(ctx, events, time.Millisecond, func() { hints <- struct{}{} })
	<-hints // the silence
	events <- messages.Envelope{Seq: 1}
	if e := <-out; e.Seq != 1 {
		t.Fatalf("passed on %+v", e)
	}
	close(events)
	if _, ok := <-out; ok {
		t.Fatal("the events' end was not passed on")
	}
	if len(hints) != 0 {
		t.Errorf("%d more hints, want the one", len(hints))
	}

	// Events that come at once: no hint.
	events = make(chan messages.Envelope, 1)
	hints = make(chan struct{}, 1)
	events <- messages.Envelope{Seq: 2}
	close(events)
	for range hintWhenSilent(ctx, events, time.Hour, func() { hints <- struct{}{} }) {
	}
	if len(hints) != 0 {
		t.Error("a hint though the task's events came")
	}
}
