//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// unprivilegedReplay returns a function that runs replay as a user who may not write
// the data directories of the test: as root, which may write anything, a copy of
// this test binary run as the user nobody; as another user, replay itself.
func unprivilegedReplay(t *testing.T) func(args ...string) (int, string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return func(args ...string) (int, string, string) { return replay(t, args...) }
	}
	// t.TempDir's parent is private to its owner: let nobody reach what is below it.
	bindir := t.TempDir()
	if err := os.Chmod(filepath.Dir(bindir), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(bindir, "replay.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = append(os.Environ(), replayChildEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if code < 0 {
			if strings.Contains(err.Error(), "operation not permitted") {
				t.Skipf("cannot start a process as the user nobody here: %v", err)
			}
			t.Fatalf("replay %v: %v", args, err)
		}
		return code, out.String(), errb.String()
	}
}

// The read commands read a copy of a log's events.db alone (no -shm, no LOCK) in a
// directory without write bits, as a user who cannot write it.
func TestReadCommandsOnAReadOnlyCopy(t *testing.T) {
	replayRO := unprivilegedReplay(t)
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	b, err := os.ReadFile(filepath.Join(src, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "copy")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "events.db"), b, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "--data", dir}, id},
		{[]string{"show", id, "--data", dir}, "completed: 144"},
		{[]string{"verify", id, "--data", dir}, "deterministic"},
		{[]string{"export", id, "--data", dir}, `"type":"task.completed"`},
	} {
		code, out, errs := replayRO(c.args...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("replay %v on a read-only copy: %d\n%s\n%s", c.args, code, out, errs)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("reading the copy created files: %v", ents)
	}
}
