package knowledge_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/pipelines/rag"
)

func writeFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

// A folder with good files and bad ones: the bad ones are reported and skipped,
// the good ones ingested under their relative paths, hidden names, symbolic links
// to folders (a loop) and a FIFO ignored without hanging.
func TestAddFolderSurvivesBadFiles(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	writeFile(t, "docs/guide.md", guide, 0o644)
	writeFile(t, "docs/notes.txt", "Plain notes.\n\nThe office closes at six.", 0o644)
	writeFile(t, "docs/sub/page.html", "<html><body><h1>Page</h1><p>An HTML page about lighthouses.</p></body></html>", 0o644)
	writeFile(t, "docs/broken.pdf", "%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer garbage", 0o644)
	writeFile(t, "docs/blob.bin", "\x00\x01\x02\xff\xfe\x00binary\x00junk\x9f", 0o644)
	writeFile(t, "docs/empty.md", "", 0o644)
	writeFile(t, "docs/locked.md", "A file nobody may read.", 0o000)
	writeFile(t, "docs/.hidden/secret.md", "hidden", 0o644)
	writeFile(t, "docs/.env", "TOKEN=x", 0o644)
	writeFile(t, "docs/new\nline\x1b[0m.md", "A name with a newline and an escape.", 0o644)
	if err := os.Symlink("/nonexistent/target.md", "docs/dangling.md"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", "docs/sub/loop"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo("docs/pipe.md", 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	b := f.base(t, "docs")
	var progress []knowledge.Progress
	res, err := knowledge.AddFolder(testCtx(t), b, []string{"docs"}, knowledge.FolderOptions{Workers: 3,
		Progress: func(p knowledge.Progress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	root0 := os.Geteuid() == 0 // root reads a file of mode 000
	wantOK := []string{"docs/guide.md", "docs/notes.txt", "docs/sub/page.html"}
	wantFailed := map[string]error{"docs/broken.pdf": rag.ErrMalformed, "docs/blob.bin": rag.ErrUnsupported,
		"docs/empty.md": knowledge.ErrEmpty, "docs/dangling.md": os.ErrNotExist, "docs/new\nline\x1b[0m.md": knowledge.ErrInvalid}
	if root0 {
		wantOK = append(wantOK, "docs/locked.md")
	} else {
		wantFailed["docs/locked.md"] = os.ErrPermission
	}
	slices.Sort(wantOK)
	var ok []string
	for _, r := range res.Results {
		ok = append(ok, r.Source)
		if r.Status != knowledge.StatusAdded {
			t.Errorf("%s: %s", r.Source, r.Status)
		}
	}
	if !slices.Equal(ok, wantOK) {
		t.Errorf("ingested %v, want %v", ok, wantOK)
	}
	if len(res.Failed) != len(wantFailed) {
		t.Errorf("failed %v, want %d", res.Failed, len(wantFailed))
	}
	for _, fe := range res.Failed {
		want, known := wantFailed[fe.Source]
		if !known || !errors.Is(fe, want) || fe.Message == "" {
			t.Errorf("%s failed with %v, want %v", fe.Source, fe.Err, want)
		}
	}
	if res.Added != len(wantOK) || res.Files != len(wantOK)+len(wantFailed) {
		t.Errorf("result %+v", res)
	}
	if len(progress) != res.Files || progress[len(progress)-1].Done != res.Files || progress[0].Total != res.Files {
		t.Errorf("progress %+v", progress)
	}
	if last := progress[len(progress)-1]; last.BytesDone != last.BytesTotal || last.BytesTotal == 0 {
		t.Errorf("bytes %d of %d", last.BytesDone, last.BytesTotal)
	}
	hits := search(t, b, knowledge.Query{Text: "lighthouses"}).Hits
	if len(hits) == 0 || hits[0].Source != "docs/sub/page.html" || !strings.HasPrefix(hits[0].HeadingPath, "# Page") {
		t.Errorf("hits %+v", hits)
	}
	for _, d := range b.Documents() {
		if strings.Contains(d.Source, ".hidden") || strings.Contains(d.Source, ".env") || strings.Contains(d.Source, "loop") || filepath.IsAbs(d.Source) {
			t.Errorf("ingested %s", d.Source)
		}
	}
	// Again: everything unchanged, nothing written, the failures reported again.
	n := len(events(t, f.log, "docs"))
	again, err := knowledge.AddFolder(testCtx(t), b, []string{"docs"}, knowledge.FolderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Unchanged != len(wantOK) || len(again.Failed) != len(wantFailed) || len(events(t, f.log, "docs")) != n {
		t.Errorf("second run %+v", again)
	}
	// A file given by name, and a path that does not exist.
	one, err := knowledge.AddFolder(testCtx(t), b, []string{"docs/notes.txt"}, knowledge.FolderOptions{})
	if err != nil || len(one.Results) != 1 || one.Results[0].Source != "docs/notes.txt" {
		t.Errorf("one file: %+v %v", one, err)
	}
	if _, err := knowledge.AddFolder(testCtx(t), b, []string{"nowhere"}, knowledge.FolderOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: %v", err)
	}
}

// A file over MaxDocumentBytes is refused by its size, without reading it.
func TestAddFolderRefusesHugeFile(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "huge.txt")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(knowledge.MaxDocumentBytes + 1); err != nil { // sparse
		t.Fatal(err)
	}
	fh.Close()
	writeFile(t, filepath.Join(root, "ok.md"), "fine", 0o644)
	f := newFixture(t)
	res, err := knowledge.AddFolder(testCtx(t), f.base(t, "docs"), []string{root}, knowledge.FolderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) != 1 || !errors.Is(res.Failed[0], knowledge.ErrTooLarge) || len(res.Results) != 1 {
		t.Errorf("%+v", res)
	}
	if !filepath.IsAbs(res.Results[0].Source) {
		t.Errorf("source %q of an absolute path is not absolute", res.Results[0].Source)
	}
}

// Prune removes the documents of files that left the folder, and only those.
func TestAddFolderPrune(t *testing.T) {
	t.Chdir(t.TempDir())
	writeFile(t, "docs/a.md", "alpha", 0o644)
	writeFile(t, "docs/sub/b.md", "beta", 0o644)
	writeFile(t, "docs/c.bin", "\xff\xfe\x00binary", 0o644)
	writeFile(t, "other/d.md", "delta", 0o644)
	f := newFixture(t)
	b := f.base(t, "docs")
	if _, err := knowledge.AddFolder(testCtx(t), b, []string{"./docs/", "other"}, knowledge.FolderOptions{}); err != nil {
		t.Fatal(err)
	}
	addText(t, b, "notes/e.md", "epsilon") // not from a folder: never pruned
	if err := os.Remove("docs/sub/b.md"); err != nil {
		t.Fatal(err)
	}
	res, err := knowledge.AddFolder(testCtx(t), b, []string{"docs"}, knowledge.FolderOptions{Prune: true, Key: "run2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Removed, []string{"docs/sub/b.md"}) || len(res.Failed) != 1 {
		t.Errorf("%+v", res)
	}
	var got []string
	for _, d := range b.Documents() {
		got = append(got, d.Source)
	}
	if want := []string{"docs/a.md", "notes/e.md", "other/d.md"}; !slices.Equal(got, want) {
		t.Errorf("documents %v, want %v", got, want)
	}
	// Pruning "." keeps documents outside it (absolute paths) and removes what left.
	if err := os.RemoveAll("other"); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(t.TempDir(), "abs.md")
	writeFile(t, abs, "absolute", 0o644)
	if _, err := knowledge.AddFolder(testCtx(t), b, []string{abs}, knowledge.FolderOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = knowledge.AddFolder(testCtx(t), b, []string{"."}, knowledge.FolderOptions{Prune: true})
	if err != nil || !slices.Equal(res.Removed, []string{"notes/e.md", "other/d.md"}) {
		t.Errorf("prune .: %+v %v", res, err)
	}
	if _, ok := b.Chunks(abs); !ok {
		t.Error("the absolute path was pruned")
	}
}

// A file named by several spellings of its path is one document, under the name
// the walk of its folder gives it.
func TestAddFolderCleansFilePaths(t *testing.T) {
	t.Chdir(t.TempDir())
	writeFile(t, "docs/ops/a.md", "# A\n\nThe alpha runbook.", 0o644)
	f := newFixture(t)
	b := f.base(t, "docs")
	res, err := knowledge.AddFolder(testCtx(t), b, []string{"./docs/ops/a.md", "docs//ops/a.md", "docs/./ops/a.md"}, knowledge.FolderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 1 || res.Files != 1 {
		t.Errorf("%+v", res)
	}
	again, err := knowledge.AddFolder(testCtx(t), b, []string{"docs"}, knowledge.FolderOptions{Prune: true})
	if err != nil || again.Unchanged != 1 || again.Added != 0 || len(again.Removed) != 0 {
		t.Errorf("the folder after the file: %+v %v", again, err)
	}
	var got []string
	for _, d := range b.Documents() {
		got = append(got, d.Source)
	}
	if want := []string{"docs/ops/a.md"}; !slices.Equal(got, want) {
		t.Errorf("documents %v, want %v", got, want)
	}
}
