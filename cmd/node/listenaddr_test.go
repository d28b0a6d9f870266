package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// node serve --http with a bare port, no port or a port that is none says so,
// naming the flag and the forms that work, and exits 2 before it starts: it
// printed net.Listen's "missing port in address" and exited 1.
func TestServeHTTPAddressWithoutAPortIsExplained(t *testing.T) {
	for addr, want := range map[string]string{
		"18089":         "want 127.0.0.1:18089 (this host only) or :18089 (every interface)",
		"localhost":     "want HOST:PORT",
		"127.0.0.1:":    "is no port",
		"0.0.0.0:99999": "is no port",
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"serve", "--data", t.TempDir(), "--model", "offline", "--http", addr}, &out, &errb, options{})
		if code != 2 || !strings.Contains(errb.String(), "error: --http: ") || !strings.Contains(errb.String(), want) {
			t.Errorf("--http %q: exit %d, %q; want 2 and %q", addr, code, errb.String(), want)
		}
	}
}
