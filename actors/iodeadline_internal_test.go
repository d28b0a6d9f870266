package actors

import (
	"testing"
	"time"
)

func TestIODeadlinesBoundEachCall(t *testing.T) {
	const timeout = 800 * time.Millisecond
	d := newIODeadlines(timeout)
	first := d.ctx()
	for i := 0; i < 3; i++ {
		start := time.Now()
		c := d.ctx()
		end := time.Now()
		deadline, ok := c.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		if deadline.Before(start.Add(timeout-d.slack)) || deadline.After(end.Add(timeout)) {
			t.Fatalf("call %d: deadline %s after its start, want within [%s, %s]", i, deadline.Sub(start), timeout-d.slack, timeout)
		}
		time.Sleep(d.slack / 2)
	}
	if d.ctx() == first {
		t.Fatal("a context outlived its slack")
	}
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first context never ended")
	}
}
