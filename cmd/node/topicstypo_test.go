package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A topics file line naming, in the node's own "troupe." namespace, a topic the
// node has not (troupe.task for troupe.tasks) was taken: the topic meant was
// created with the default layout, one replica, without a word.
func TestTopicsFileWithATypoIsRefused(t *testing.T) {
	dir := t.TempDir()
	topics := filepath.Join(dir, "topics.txt")
	if err := os.WriteFile(topics, []byte("# layout\ntroupe.task 24 3 3600000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	// Without the check the node serves (until ctx ends): bound it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := run(ctx, []string{"serve", "--data", dir, "--http", "127.0.0.1:0", "--kafka", "127.0.0.1:1", "--topics", topics}, &bytes.Buffer{}, &stderr, options{})
	if code != 2 || !strings.Contains(stderr.String(), `topic "troupe.task" is not a topic of the node`) || !strings.Contains(stderr.String(), "troupe.tasks") {
		t.Errorf("exit %d, stderr %q; want 2 naming the line, the topic and the node's topics", code, stderr.String())
	}
}
