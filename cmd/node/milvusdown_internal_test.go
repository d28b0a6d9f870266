package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// A Milvus that does not answer when the node starts is a fault of the service (exit
// 1, which a supervisor's restart may outlast), not a usage error (exit 2, which only
// a change of the command mends).
func TestServeWithMilvusDownExitsOne(t *testing.T) {
	// An address that accepts nothing: a listener closed at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"serve", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--milvus", addr}, &stdout, &stderr, options{})
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), addr) || !strings.Contains(stderr.String(), "Milvus") {
		t.Errorf("the error names neither Milvus nor %s:\n%s", addr, stderr.String())
	}
}
