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

// TestMilvusPrefixOptions: a prefix of Milvus collection names that Milvus would
// refuse is a usage error, whether it comes from the flag, the environment or the
// config file's milvus_prefix (in that order of precedence), for node serve and
// for node memory and node rag. A config file with a bad prefix is refused as it is
// read, whatever overrides it.
func TestMilvusPrefixOptions(t *testing.T) {
	badConfig := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(badConfig, []byte(`{"milvus_prefix":"file-x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(config, []byte(`{"milvus_prefix":"file_x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"--milvus-prefix", "9lives"}, `--milvus-prefix: "9lives": want letters, digits and underscores, starting with a letter or underscore`},
		{"", []string{"--milvus-prefix", strings.Repeat("a", 65)}, `at most 64 bytes`},
		{"env-x", nil, `--milvus-prefix: "env-x"`},
		{"", []string{"--config", badConfig}, `milvus_prefix: "file-x"`},
		{"env_x", []string{"--config", badConfig}, `milvus_prefix: "file-x"`},
		{"env-x", []string{"--config", config}, `--milvus-prefix: "env-x"`},
		{"env-x", []string{"--config", config, "--milvus-prefix", "flag x"}, `--milvus-prefix: "flag x"`},
	} {
		t.Setenv("TROUPE_MILVUS_PREFIX", c.env)
		for _, cmd := range [][]string{{"serve", "--model", "offline"}, {"memory", "search", "--namespace", "user:a"}, {"rag", "search", "--kb", "docs"}} {
			var out, errb bytes.Buffer
			args := append(append(cmd, "--data", t.TempDir()), c.args...)
			if cmd[0] != "serve" {
				args = append(args, "query")
			}
			// A node that took the prefix would serve until ctx ends.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			code := run(ctx, args, &out, &errb, options{})
			cancel()
			if code != 2 || !strings.Contains(errb.String(), c.want) {
				t.Errorf("%s: env %q, %v: exit %d, stderr %q; want 2 and %q", cmd[0], c.env, c.args, code, errb.String(), c.want)
			}
		}
	}
}
