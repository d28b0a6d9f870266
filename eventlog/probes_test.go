package eventlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
)

func TestProbesPaceProbeWrites(t *testing.T) {
	down := errors.New("down")
	var failing error = down
	probes := 0
	p := &eventlog.Probes{Every: time.Hour}
	probe := func(_ context.Context, known error) error {
		probes++
		if known != down {
			t.Errorf("the probe was given %v, want the failure known", known)
		}
		return errors.New("still down")
	}
	known := func() error { return failing }
	if err := p.Try(context.Background(), known, probe); err == nil || err.Error() != "still down" || probes != 1 {
		t.Fatalf("first Try: %v after %d probes; want the probe's error", err, probes)
	}
	for range 3 {
		if err := p.Try(context.Background(), known, probe); err != down || probes != 1 {
			t.Fatalf("Try within Every: %v after %d probes; want the failure known, no probe", err, probes)
		}
	}
	failing = nil // a write went through
	if err := p.Try(context.Background(), known, probe); err != nil || probes != 1 {
		t.Fatalf("Try once writes go through: %v after %d probes", err, probes)
	}

	// A caller that finds another probing gets the failure known at once.
	failing = down
	q := &eventlog.Probes{}
	inProbe, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- q.Try(context.Background(), known, func(context.Context, error) error {
			close(inProbe)
			<-release
			return nil
		})
	}()
	<-inProbe
	if err := q.Try(context.Background(), known, func(context.Context, error) error {
		t.Error("a second caller probed while the first did")
		return nil
	}); err != down {
		t.Errorf("Try while another probes: %v, want the failure known", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("the probe that went through: %v", err)
	}
}
