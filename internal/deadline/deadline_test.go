package deadline_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/internal/deadline"
)

func TestEachCallIsBounded(t *testing.T) {
	const timeout = 800 * time.Millisecond
	const slack = timeout / deadline.Slack
	d := deadline.New(timeout)
	first := d.Context()
	for i := 0; i < 3; i++ {
		start := time.Now()
		c := d.Context()
		end := time.Now()
		at, ok := c.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		if at.Before(start.Add(timeout-slack)) || at.After(end.Add(timeout)) {
			t.Fatalf("call %d: deadline %s after its start, want within [%s, %s]", i, at.Sub(start), timeout-slack, timeout)
		}
		time.Sleep(slack / 2)
	}
	if d.Context() == first {
		t.Fatal("a context outlived its slack")
	}
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first context never ended")
	}
}
