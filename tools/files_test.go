//go:build linux

package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/tools"
)

// filesFixture makes a root with files, links and special files in it, and a file
// beside it that the tool must not reach.
func filesFixture(t *testing.T) (root, outside string) {
	t.Helper()
	parent := t.TempDir()
	root = filepath.Join(parent, "work")
	outside = filepath.Join(parent, "secret.txt")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(os.WriteFile(outside, []byte("top secret"), 0o644))
	must(os.WriteFile(filepath.Join(root, "a.txt"), []byte("alpha"), 0o644))
	must(os.WriteFile(filepath.Join(root, "sub", "b.txt"), []byte("beta"), 0o644))
	must(os.WriteFile(filepath.Join(root, "bin.dat"), []byte("x\x00y"), 0o644))
	must(os.Symlink("a.txt", filepath.Join(root, "link-in")))
	must(os.Symlink("../secret.txt", filepath.Join(root, "link-out")))
	must(os.Symlink(outside, filepath.Join(root, "link-abs")))
	must(os.Symlink("..", filepath.Join(root, "dir-out")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	return root, outside
}

func filesCall(t *testing.T, tool tools.Tool, op string, args map[string]any) (string, error) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"op": op, "args": args})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tool.Call(ctx, tools.Call{Key: "k", Arguments: string(b)})
}

func TestFilesStayInsideTheRoot(t *testing.T) {
	root, outside := filesFixture(t)
	if err := errors.Join(os.Symlink("loop-b", filepath.Join(root, "loop-a")), os.Symlink("loop-a", filepath.Join(root, "loop-b"))); err != nil {
		t.Fatal(err)
	}
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op, path string
		want     error
	}{
		{"read", "../secret.txt", tools.ErrOutsideRoot},
		{"read", "sub/../../secret.txt", tools.ErrOutsideRoot},
		{"read", outside, tools.ErrOutsideRoot},
		{"read", "/etc/passwd", tools.ErrOutsideRoot},
		{"read", "link-out", tools.ErrOutsideRoot},
		{"read", "link-abs", tools.ErrOutsideRoot},
		{"read", "dir-out/secret.txt", tools.ErrOutsideRoot},
		{"read", "fifo", tools.ErrNotRegular},
		{"read", "sub", tools.ErrNotRegular},
		{"read", "missing.txt", tools.ErrInvalidArguments},
		{"read", "bin.dat", tools.ErrInvalidArguments},
		{"write", "../escape.txt", tools.ErrOutsideRoot},
		{"write", filepath.Join(filepath.Dir(root), "escape.txt"), tools.ErrOutsideRoot},
		{"write", "link-out", tools.ErrNotRegular},
		{"write", "link-in", tools.ErrNotRegular},
		{"write", "dir-out/escape.txt", tools.ErrOutsideRoot},
		{"write", "fifo", tools.ErrNotRegular},
		{"write", "sub", tools.ErrNotRegular},
		{"list", "..", tools.ErrOutsideRoot},
		{"list", "dir-out", tools.ErrOutsideRoot},
		{"list", "/", tools.ErrOutsideRoot},
		// What the model got wrong about the tree is its error too.
		{"read", "a.txt/b", tools.ErrInvalidArguments},
		{"write", "a.txt/b", tools.ErrInvalidArguments},
		{"write", strings.Repeat("n", 300), tools.ErrInvalidArguments},
		{"write", strings.Repeat("d/", 3000) + "f", tools.ErrInvalidArguments},
		{"read", strings.Repeat("../", 1000) + "secret.txt", tools.ErrOutsideRoot},
		{"read", "loop-a", tools.ErrInvalidArguments},
		{"stat", "link-out", tools.ErrOutsideRoot},
		{"stat", "../secret.txt", tools.ErrOutsideRoot},
	} {
		args := map[string]any{"path": c.path}
		if c.op == "write" {
			args["content"] = "pwned"
		}
		out, err := filesCall(t, tool, c.op, args)
		if !errors.Is(err, c.want) || !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s %s: %q, %v; want %v", c.op, c.path, out, err, c.want)
			continue
		}
		if len(err.Error()) > 600 {
			t.Errorf("%s %.40s…: an error of %d bytes", c.op, c.path, len(err.Error()))
		}
		if strings.Contains(err.Error(), filepath.Dir(root)) && !strings.Contains(c.path, filepath.Dir(root)) {
			t.Errorf("%s %s: the error names a host path: %v", c.op, c.path, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "top secret" {
		t.Fatalf("the file outside was changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "escape.txt")); err == nil {
		t.Fatal("a file was written outside the root")
	}
	if _, err := os.Stat(filepath.Join(root, "d")); err == nil {
		t.Fatal("a path past 4096 bytes made directories")
	}
}

func TestFilesReadWriteListStat(t *testing.T) {
	root, _ := filesFixture(t)
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root, MaxReadBytes: 8, MaxWriteBytes: 64, MaxEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op   string
		args map[string]any
		want string
	}{
		{"read", map[string]any{"path": "a.txt"}, "alpha"},
		{"read", map[string]any{"path": "./sub/../a.txt"}, "alpha"},
		{"read", map[string]any{"path": filepath.Join(root, "a.txt")}, "alpha"},
		{"read", map[string]any{"path": "link-in"}, "alpha"},
		{"write", map[string]any{"path": "new/dir/c.txt", "content": "héllo, wörld"}, "wrote 14 bytes to new/dir/c.txt"},
		{"read", map[string]any{"path": "new/dir/c.txt"}, "héllo, \n[truncated: 14 bytes, showing bytes 0 to 8; read on with offset 8]"},
		{"read", map[string]any{"path": "new/dir/c.txt", "offset": 8}, "wörld"},
		{"write", map[string]any{"path": "a.txt", "content": "replaced"}, "wrote 8 bytes to a.txt"},
		{"read", map[string]any{"path": "a.txt"}, "replaced"},
		{"list", map[string]any{}, "a.txt (8 bytes)\nbin.dat (3 bytes)\ndir-out (a symbolic link)\nfifo (a named pipe)\nlink-abs (a symbolic link)\nlink-in (a symbolic link)\nlink-out (a symbolic link)\nnew/\nsub/"},
		{"list", map[string]any{"path": "sub"}, "b.txt (4 bytes)"},
		{"stat", map[string]any{"path": "sub/b.txt"}, `"path":"sub/b.txt","type":"file","size":4,"mode":"-rw-r--r--"`},
	} {
		out, err := filesCall(t, tool, c.op, c.args)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%s %v: %q, %v; want %q", c.op, c.args, out, err, c.want)
		}
	}
	if _, err := filesCall(t, tool, "write", map[string]any{"path": "big.txt", "content": strings.Repeat("x", 65)}); !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "the limit is 64") {
		t.Errorf("a write past the limit: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(root, "new", "dir"))
	if len(entries) != 1 {
		t.Errorf("the writes left temporary files: %v", entries)
	}
	ro, err := tools.NewFiles(tools.FilesConfig{Root: root, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ro.Ops(), " "); got != "read list stat" || tools.HasSideEffects(ro) {
		t.Errorf("read-only ops: %s", got)
	}
	if _, err := tools.NewFiles(tools.FilesConfig{Root: filepath.Join(root, "nope")}); err == nil {
		t.Error("a missing root was accepted")
	}
}

// A device file inside the root is refused (creating one needs privileges: skipped
// without them).
func TestFilesRefuseDeviceFiles(t *testing.T) {
	root := t.TempDir()
	if err := syscall.Mknod(filepath.Join(root, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Skipf("cannot make a device file here: %v", err)
	}
	tool, err := tools.NewFiles(tools.FilesConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for op, args := range map[string]map[string]any{"read": {"path": "null"}, "write": {"path": "null", "content": "x"}} {
		if _, err := filesCall(t, tool, op, args); !errors.Is(err, tools.ErrNotRegular) || !strings.Contains(err.Error(), "a device") {
			t.Errorf("%s a device: %v", op, err)
		}
	}
}
