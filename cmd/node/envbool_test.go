package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreamUnwatchedEnvironmentIsParsed: TROUPE_STREAM_UNWATCHED is a boolean
// as the flag is (1, t, true, TRUE, 0, f, false, …); another value stops the node
// with an error naming the variable, as the node's other variables do, rather than
// leaving the setting off without a word.
func TestStreamUnwatchedEnvironmentIsParsed(t *testing.T) {
	for _, tc := range []struct {
		value string
		code  int
	}{{"yes", 2}, {"on", 2}, {"1", 0}, {"TRUE", 0}, {"false", 0}} {
		t.Setenv("TROUPE_STREAM_UNWATCHED", tc.value)
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"run", "--data", filepath.Join(t.TempDir(), "data"), "--model", "offline", "echo hi"}, &out, &errb, options{})
		if code != tc.code || (code == 2 && !strings.Contains(errb.String(), "TROUPE_STREAM_UNWATCHED")) {
			t.Errorf("TROUPE_STREAM_UNWATCHED=%s: exit %d, want %d: %s", tc.value, code, tc.code, errb.String())
		}
	}
}
