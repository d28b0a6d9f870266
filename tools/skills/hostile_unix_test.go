//go:build unix

package skills_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/tools/skills"
)

// alive reports whether process pid still runs (and is no zombie of ours).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil {
		return !errors.Is(err, syscall.ESRCH)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command in parentheses: Z is a zombie.
	s := string(b)
	return !strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}

// A script that leaves a child behind and exits at once does not leave it running:
// the child is killed with the script's process group when the script ends, as it
// is when the script runs out of time.
func TestScriptLeavesNoChildBehind(t *testing.T) {
	dir := skillsDir(t)
	write(t, dir, "pdf-forms/scripts/daemon.sh", "sleep 300 >/dev/null 2>&1 </dev/null &\necho $!\n", 0o644)
	set, _ := load(t, skills.Config{Dir: dir, AllowScripts: true})
	out, err := call(t, toolNamed(t, set, skills.ToolRunScript), `{"skill":"pdf-forms","script":"scripts/daemon.sh"}`)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("out = %q: %v", out, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the script's child %d still runs after the script ended", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A script whose child keeps its output open past the script's end gets its output
// back, not an error about I/O that never completed.
func TestScriptChildHoldingOutputIsStopped(t *testing.T) {
	dir := skillsDir(t)
	write(t, dir, "pdf-forms/scripts/holder.sh", "echo started\nsleep 300 &\n", 0o644)
	set, _ := load(t, skills.Config{Dir: dir, AllowScripts: true})
	out, err := call(t, toolNamed(t, set, skills.ToolRunScript), `{"skill":"pdf-forms","script":"scripts/holder.sh"}`)
	if err != nil || out != "started\n" {
		t.Fatalf("out = %q, err = %v; want the script's output", out, err)
	}
}

// withDeadline runs f and fails the test if it does not return within 20 s.
func withDeadline(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s still waits for a writer of a named pipe", what)
	}
}

// A named pipe where a skill's file or its SKILL.md should be is refused at once,
// not opened for reading: that would wait for a writer that never comes, hanging
// the node's start (Load) or an MCP client's resource read (ReadBytes).
func TestNamedPipesDoNotHang(t *testing.T) {
	dir := skillsDir(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "alpha", "pipe.bin"), 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "piped"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "piped", skills.FileName), 0o644); err != nil {
		t.Fatal(err)
	}
	var set *skills.Set
	var problems []error
	withDeadline(t, "Load", func() { set, problems = load(t, skills.Config{Dir: dir}) })
	found := false
	for _, p := range problems {
		found = found || strings.Contains(p.Error(), "piped") && strings.Contains(p.Error(), "not a regular file")
	}
	if !found {
		t.Errorf("problems = %v, want piped/SKILL.md refused as no regular file", problems)
	}
	withDeadline(t, "ReadBytes", func() {
		if _, err := set.ReadBytes("alpha", "pipe.bin", 1<<20); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ReadBytes of a pipe: %v, want it refused as no regular file", err)
		}
	})
}
