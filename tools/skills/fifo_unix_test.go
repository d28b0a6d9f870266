//go:build unix

package skills_test

import (
	"os"
	"path/filepath"
	"slices"
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

// load_skill lists only the files read_skill_file reads: a symlink out of the
// folder (to /etc/passwd) or a named pipe is left out, a symlink to a file inside
// the folder is listed, and every file listed reads.
func TestLoadSkillListsOnlyReadableFiles(t *testing.T) {
	dir := skillsDir(t)
	refs := filepath.Join(dir, "pdf-forms", "references")
	for link, target := range map[string]string{"passwd": "/etc/passwd", "outside.md": "../../alpha/SKILL.md", "inside.md": "fields.md"} {
		if err := os.Symlink(target, filepath.Join(refs, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(refs, "pipe.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, _ := load(t, skills.Config{Dir: dir})
	_, files, err := set.Body("pdf-forms")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "references/inside.md") || !slices.Contains(files, "references/fields.md") {
		t.Errorf("files %v: want references/inside.md and references/fields.md", files)
	}
	for _, f := range files {
		if _, err := set.ReadFile("pdf-forms", f); err != nil {
			t.Errorf("listed %s does not read: %v", f, err)
		}
	}
}
