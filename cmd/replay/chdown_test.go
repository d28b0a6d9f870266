package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// A ClickHouse that is down (a typo in --clickhouse, a stopped server) is an error
// that names it, not a command that retries until it is interrupted.
func TestReplayGivesUpOnAClickHouseThatIsDown(t *testing.T) {
	defer func(w time.Duration) { clickhouseOpenWait = w }(clickhouseOpenWait)
	clickhouseOpenWait = time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	type result struct {
		code int
		errs string
	}
	done := make(chan result, 1)
	go func() {
		code, _, errs := replay(t, "list", "--clickhouse", addr)
		done <- result{code, errs}
	}()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.errs, addr) || !strings.Contains(r.errs, "gave up after") {
			t.Fatalf("list of a ClickHouse that is down: %d %s", r.code, r.errs)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("replay list --clickhouse %s of a server that is down was still retrying after 90 s", addr)
	}
}
