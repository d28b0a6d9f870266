//go:build linux

package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A name in the root is the environment's, not the tool's: one holding a newline
// cannot pose as more entries in a listing, nor one holding terminal controls or
// bytes that are not UTF-8 reach the model raw; such names are quoted.
func TestFilesListQuotesHostileNames(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"plain.txt", "x (3 bytes)\nfake.txt", "esc\x1b]0;t\x07.txt", "bad\xff.txt", `"quoted".txt`} {
		if err := os.WriteFile(filepath.Join(root, name), []byte("abc"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	out, err := filesCall(t, tool, "list", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`"\"quoted\".txt" (3 bytes)`,
		`"bad\xff.txt" (3 bytes)`,
		`"esc\x1b]0;t\a.txt" (3 bytes)`,
		`plain.txt (3 bytes)`,
		`"x (3 bytes)\nfake.txt" (3 bytes)`,
	}, "\n")
	if out != want {
		t.Errorf("list:\n%s\nwant:\n%s", out, want)
	}
}

// A write replaces a file's content, not its permissions: a private file stays
// private, an executable one executable.
func TestFilesWriteKeepsTheMode(t *testing.T) {
	root := t.TempDir()
	for name, mode := range map[string]os.FileMode{".env": 0o600, "run.sh": 0o750} {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, []byte("old"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{".env": 0o600, "run.sh": 0o750} {
		if _, err := filesCall(t, tool, "write", map[string]any{"path": name, "content": "new"}); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v after a write, want %v", name, st.Mode().Perm(), mode)
		}
	}
}

// A name as long as the system allows (255 bytes) can be written: the temporary
// file of the write has a name of its own that fits too.
func TestFilesWriteLongNames(t *testing.T) {
	root := t.TempDir()
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{strings.Repeat("n", 255), strings.Repeat("é", 127)} {
		for range 2 { // anew, then over the file
			if out, err := filesCall(t, tool, "write", map[string]any{"path": name, "content": "x"}); err != nil {
				t.Fatalf("write a %d-byte name: %q, %v", len(name), out, err)
			}
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 2 {
		t.Errorf("entries %d, want the 2 files and no temporary one", len(entries))
	}
}
