package kafka

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestReachableAfterIdleAsksTheBrokersAgain: a check that found the brokers
// down, followed by a long idle (no /healthz probe, no task, while the brokers
// come back), does not answer the next call. That call waits for a new check,
// which finds them, rather than get the old outcome: before, it was returned
// however old it was, so that the first task posted to a node idle since an
// outage was refused, saying that the brokers cannot be reached, although they
// had been back for an hour, and so was every task sent during the check that
// call started.
func TestReachableAfterIdleAsksTheBrokersAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: the brokers are down
	r := &reach{brokers: []string{addr}, clientID: "troupe-test"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.check(ctx, false); err == nil {
		t.Fatal("check with the brokers down: nil, want an error")
	}

	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatalf("start kfake on port %d: %v", port, err)
	}
	defer kc.Close()
	// An hour goes by with nothing asking.
	r.mu.Lock()
	r.checked = r.checked.Add(-time.Hour)
	r.mu.Unlock()
	if err := r.check(ctx, false); err != nil {
		t.Errorf("the first check an hour after the brokers were found down, since back: %v; want nil", err)
	}
}
