//go:build linux

package tools_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A root of "." holds the node's own files: its data directory (the event log)
// and its configuration. A model told to by what it read (a prompt injection)
// must neither read them nor rewrite them (the approvals and allow lists of the
// configuration, the tokens, the log), by their names, through "..", by an
// absolute path or through a symbolic link inside the root that leads there.
func TestFilesRefusesTheProtectedPaths(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(root, ".troupe")
	must(os.MkdirAll(data, 0o755))
	must(os.WriteFile(filepath.Join(data, "events.db"), []byte("log"), 0o644))
	must(os.WriteFile(filepath.Join(root, ".troupe.json"), []byte(`{"auth": {"tokens": ["x"]}}`), 0o644))
	must(os.WriteFile(filepath.Join(root, "agents.yaml"), []byte("agents: {}"), 0o644))
	must(os.WriteFile(filepath.Join(root, "notes.txt"), []byte("mine"), 0o644))
	must(os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(os.Symlink("../.troupe", filepath.Join(root, "sub", "data-link")))
	must(os.Symlink("../.troupe.json", filepath.Join(root, "sub", "config-link")))

	tool, err := tools.NewFiles(tools.FilesConfig{Root: root,
		Protect: []string{data, filepath.Join(root, ".troupe.json"), filepath.Join(root, "agents.yaml"), filepath.Join(root, "tokens.txt")}})
	must(err)
	for _, c := range []struct {
		op   string
		args map[string]any
	}{
		{"read", map[string]any{"path": ".troupe.json"}},
		{"read", map[string]any{"path": "./sub/../.troupe.json"}},
		{"read", map[string]any{"path": filepath.Join(root, ".troupe.json")}},
		{"read", map[string]any{"path": "sub/config-link"}},
		{"read", map[string]any{"path": ".troupe/events.db"}},
		{"read", map[string]any{"path": "sub/data-link/events.db"}},
		{"write", map[string]any{"path": ".troupe.json", "content": "{}"}},
		{"write", map[string]any{"path": "agents.yaml", "content": "agents: {}"}},
		{"write", map[string]any{"path": "tokens.txt", "content": "0123456789abcdef0123"}},
		{"write", map[string]any{"path": ".troupe/events.db", "content": "gone"}},
		{"write", map[string]any{"path": ".troupe/new/x", "content": "x"}},
		{"write", map[string]any{"path": "sub/data-link/events.db", "content": "gone"}},
		{"list", map[string]any{"path": ".troupe"}},
		{"list", map[string]any{"path": "sub/data-link"}},
		{"stat", map[string]any{"path": ".troupe/events.db"}},
	} {
		out, err := filesCall(t, tool, c.op, c.args)
		if !errors.Is(err, tools.ErrProtected) || !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s %v: %q, %v; want ErrProtected", c.op, c.args, out, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(data, "events.db")); string(b) != "log" {
		t.Errorf("the log was rewritten: %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "tokens.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tokens.txt was written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory was made in the data directory: %v", err)
	}

	// The rest of the root is the model's, and a list leaves the node's files out.
	if out, err := filesCall(t, tool, "read", map[string]any{"path": "notes.txt"}); err != nil || out != "mine" {
		t.Errorf("read notes.txt: %q, %v", out, err)
	}
	if _, err := filesCall(t, tool, "write", map[string]any{"path": "sub/out.txt", "content": "ok"}); err != nil {
		t.Errorf("write sub/out.txt: %v", err)
	}
	out, err := filesCall(t, tool, "list", map[string]any{})
	must(err)
	if strings.Contains(out, ".troupe") || strings.Contains(out, "agents.yaml") || !strings.Contains(out, "notes.txt") {
		t.Errorf("list:\n%s", out)
	}
	out, err = filesCall(t, tool, "list", map[string]any{"path": "sub"})
	must(err)
	if strings.Contains(out, "link") || !strings.Contains(out, "out.txt") {
		t.Errorf("list sub:\n%s", out)
	}

	// A root inside a protected path is refused when the tool is made.
	if _, err := tools.NewFiles(tools.FilesConfig{Root: data, Protect: []string{data}}); err == nil {
		t.Error("a root inside the data directory was taken")
	}
}

// A protected file reached by another name of the same file is still the
// node's: a hard link inside the root to the secret key or the tokens file
// (one an operator made for a backup, say) must not give the model its
// content, nor let it write through to it. The same test covers a name that
// the filesystem maps to the protected one (another case on a case-insensitive
// filesystem, another unicode normalisation on one that normalises): the tool
// compares the files themselves, not only their names.
func TestFilesRefusesAnotherNameOfAProtectedFile(t *testing.T) {
	root := t.TempDir()
	key := filepath.Join(root, "secret.key")
	if err := os.WriteFile(key, []byte("k3y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "backup"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(key, filepath.Join(root, "backup", "key.txt")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root, Protect: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"read", "stat"} {
		out, err := filesCall(t, tool, op, map[string]any{"path": "backup/key.txt"})
		if !errors.Is(err, tools.ErrProtected) {
			t.Errorf("%s backup/key.txt: %q, %v; want ErrProtected", op, out, err)
		}
		if strings.Contains(out, "k3y") {
			t.Errorf("%s gave the key: %q", op, out)
		}
	}
	if out, err := filesCall(t, tool, "list", map[string]any{"path": "backup"}); err != nil || strings.Contains(out, "key.txt") {
		t.Errorf("list backup: %q, %v", out, err)
	}
	if _, err := filesCall(t, tool, "write", map[string]any{"path": "backup/notes.txt", "content": "mine"}); err != nil {
		t.Errorf("write backup/notes.txt: %v", err)
	}
}

// A node makes its data directory, and may write its secret key file, after
// its tools are made (the first start): a protected path that did not exist
// then is judged as the file it is now, another name of it refused too.
func TestFilesRefusesAnotherNameOfAProtectedFileMadeLater(t *testing.T) {
	root := t.TempDir()
	key := filepath.Join(root, "secret.key")
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root, Protect: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("k3y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(key, filepath.Join(root, "key.txt")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	if out, err := filesCall(t, tool, "read", map[string]any{"path": "key.txt"}); !errors.Is(err, tools.ErrProtected) {
		t.Errorf("read key.txt: %q, %v; want ErrProtected", out, err)
	}
}
