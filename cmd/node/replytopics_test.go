package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// --reply-topics-create and --reply-topics-max are checked at start, with --kafka.
func TestReplyTopicFlagsAreValidated(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--reply-topics-create", "troupe.replies."}, "--reply-topics-create"},
		{[]string{"--reply-topics-create", "a,,b"}, "empty prefix"},
		{[]string{"--reply-topics-max", "-1"}, "--reply-topics-max"},
		{[]string{"--reply-topics-max", "many"}, "from 0 to"},
	} {
		var stderr bytes.Buffer
		args := append([]string{"serve", "--data", t.TempDir(), "--kafka", "127.0.0.1:1"}, c.args...)
		if code := run(context.Background(), args, &bytes.Buffer{}, &stderr, options{}); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 saying %q", c.args, code, stderr.String(), c.want)
		}
	}
}
