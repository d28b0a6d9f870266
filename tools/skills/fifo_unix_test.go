//go:build unix

package skills_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/tools/skills"
)

// A named pipe in a skill's folder is refused at once, not opened: opening it
// would wait for a writer that never comes.
func TestReadSkillFileRefusesANamedPipe(t *testing.T) {
	dir := skillsDir(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "pdf-forms", "references", "pipe.md"), 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	set, _ := load(t, skills.Config{Dir: dir})
	read := toolNamed(t, set, skills.ToolReadFile)
	done := make(chan error, 1)
	go func() {
		_, err := call(t, read, `{"skill":"pdf-forms","path":"references/pipe.md"}`)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "is not a regular file") {
			t.Fatalf("reading the pipe: %v, want it refused as no regular file", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("reading the pipe still waits for a writer")
	}
}
