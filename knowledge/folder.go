package knowledge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/troupe-run/troupe/pipelines/rag"
	"golang.org/x/text/unicode/norm"
)

// FolderOptions say how AddFolder ingests.
type FolderOptions struct {
	// Workers bounds the files ingested at once (default GOMAXPROCS).
	Workers int
	// Progress, when set, hears of every file once it is done (ingested, unchanged
	// or failed). Calls are serialised: it needs no lock of its own, and must not
	// block for long.
	Progress func(Progress)
	// Key, when set, makes each file's ingestion idempotent under the key
	// Key + "/" + source + "/" + the file's hash.
	Key string
	// Prune removes, after the ingestion, the documents whose source lies under
	// one of the folders given and that the walk no longer found (deleted or
	// renamed files; hidden ones, which the walk skips, too). Files that failed
	// stay. Nothing is pruned when the run stopped on an error.
	Prune bool
}

// Progress reports one file of an AddFolder.
type Progress struct {
	// Done files of Total are finished; Source is the one that just finished.
	Done, Total int
	Source      string
	// Bytes is the file's size; BytesDone those of the files done so far, of
	// BytesTotal.
	Bytes, BytesDone, BytesTotal int64
	// Status is the file's AddResult.Status, or "failed" with Err.
	Status string
	Err    error
}

// StatusFailed is Progress.Status for a file that was not ingested.
const StatusFailed = "failed"

// FileError is a file AddFolder did not ingest, and why.
type FileError struct {
	Source string `json:"source"`
	Err    error  `json:"-"`
	// Message is Err's text (for JSON).
	Message string `json:"error"`
}

func (e FileError) Error() string { return e.Source + ": " + e.Message }

// Unwrap returns the cause.
func (e FileError) Unwrap() error { return e.Err }

// FolderResult is what AddFolder did.
type FolderResult struct {
	// Results holds the files ingested or found unchanged, by source.
	Results []AddResult `json:"results"`
	// Failed holds the files that were not ingested, by source.
	Failed []FileError `json:"failed"`
	// Added, Replaced and Unchanged count Results by status.
	Added     int `json:"added"`
	Replaced  int `json:"replaced"`
	Unchanged int `json:"unchanged"`
	// Files is the number of files found, Bytes their size.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Removed lists the documents FolderOptions.Prune removed.
	Removed []string `json:"removed,omitempty"`
}

// AddFolder ingests files and folders into base: each path is a file, or a folder
// walked recursively. Files are ingested in parallel (opts.Workers), each with Add,
// under its path as given joined with the names below it, without "." elements
// and repeated separators (relative paths stay relative: "./docs//guide.md" is
// "docs/guide.md", as the walk of the folder "docs" names it). Names starting with "." below a given path (hidden
// files and folders) are skipped, so are symbolic links to folders (which cannot
// make the walk loop) and anything that is not a regular file (a FIFO, a device).
// A file that cannot be ingested — unreadable, over MaxDocumentBytes, a format
// rag.Convert does not read, a corrupt PDF, no text, a chunk too large for an
// event (Config.MaxEventBytes) — is reported in
// FolderResult.Failed and the others are ingested. The error is for what stops the
// whole run: ctx ending, a path that does not exist, the knowledge base's log
// failing (then the files not yet ingested are reported as failed with it too).
func AddFolder(ctx context.Context, base *Base, paths []string, opts FolderOptions) (FolderResult, error) {
	var res FolderResult
	files, sizes, failed, err := walk(paths)
	if err != nil {
		return res, err
	}
	res.Files = len(files) + len(failed)
	var total int64
	for _, s := range sizes {
		total += s
	}
	res.Bytes = total
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = max(1, min(workers, len(files)))

	var mu sync.Mutex // guards res, done, bytesDone and the Progress calls
	done, bytesDone := 0, int64(0)
	report := func(source string, size int64, r AddResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		done++
		bytesDone += size
		p := Progress{Done: done, Total: res.Files, Source: source, Bytes: size, BytesDone: bytesDone, BytesTotal: total}
		if err != nil {
			res.Failed = append(res.Failed, FileError{Source: source, Err: err, Message: err.Error()})
			p.Status, p.Err = StatusFailed, err
		} else {
			res.Results = append(res.Results, r)
			p.Status = r.Status
			switch r.Status {
			case StatusAdded:
				res.Added++
			case StatusReplaced:
				res.Replaced++
			case StatusUnchanged:
				res.Unchanged++
			}
		}
		if opts.Progress != nil {
			opts.Progress(p)
		}
	}
	for _, f := range failed {
		report(f.Source, 0, AddResult{}, f.Err)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := ingestFile(ctx, base, files[i], sizes[i], opts.Key)
				if err != nil && fatal(err) && ctx.Err() == nil {
					cancel(err)
				}
				report(files[i], sizes[i], r, err)
			}
		}()
	}
feed:
	for i := range files {
		select {
		case next <- i:
		case <-ctx.Done():
			for _, src := range files[i:] {
				report(src, 0, AddResult{}, fmt.Errorf("not ingested: %w", context.Cause(ctx)))
			}
			break feed
		}
	}
	close(next)
	wg.Wait()
	slices.SortFunc(res.Results, func(a, b AddResult) int { return strings.Compare(a.Source, b.Source) })
	slices.SortFunc(res.Failed, func(a, b FileError) int { return strings.Compare(a.Source, b.Source) })
	if err := context.Cause(ctx); err != nil {
		return res, fmt.Errorf("knowledge: ingesting %d files stopped: %w", len(files), err)
	}
	if opts.Prune {
		// Compared in NFC, as the documents are named (storedName): a file
		// named with decomposed accents is its document's.
		found := map[string]bool{}
		for _, f := range files {
			found[norm.NFC.String(f)] = true
		}
		for _, f := range failed {
			found[norm.NFC.String(f.Source)] = true
		}
		for _, d := range base.Documents() {
			if found[norm.NFC.String(d.Source)] || !underFolder(d.Source, paths) {
				continue
			}
			key := ""
			if opts.Key != "" {
				key = opts.Key + "/prune/" + d.Source + "/" + d.Hash[:16]
			}
			if err := base.Remove(ctx, d.Source, key); err != nil && !errors.Is(err, ErrNotFound) {
				return res, fmt.Errorf("knowledge: pruning %q: %w", d.Source, err)
			}
			res.Removed = append(res.Removed, d.Source)
		}
	}
	return res, nil
}

// underFolder reports whether source is a path below one of the folders among
// paths, as the walk names the files of a folder: "docs" holds "docs/a.md", "."
// holds every relative path that does not climb out ("a.md", "docs/a.md").
func underFolder(source string, paths []string) bool {
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue
		}
		if filepath.Clean(p) == "." {
			if !filepath.IsAbs(source) && source != ".." && !strings.HasPrefix(source, ".."+string(filepath.Separator)) {
				return true
			}
			continue
		}
		root := filepath.Clean(p) // the walk joins the names below it to the cleaned path
		if root == string(filepath.Separator) || strings.HasPrefix(norm.NFC.String(source), norm.NFC.String(root)+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// fatal reports whether an ingestion error stops a whole AddFolder: the log or the
// vector store failing, the base closed, the embedder failing for good. A file's
// own problem (its content, its name, its permissions) is not fatal.
func fatal(err error) bool {
	switch {
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrEmpty), errors.Is(err, ErrTooLarge), errors.Is(err, errFile),
		errors.Is(err, rag.ErrUnsupported), errors.Is(err, rag.ErrMalformed), errors.Is(err, rag.ErrTooLarge):
		return false
	}
	return true
}

// errFile marks a file that could not be read.
var errFile = errors.New("knowledge: unreadable file")

// ingestFile reads one file (at most MaxDocumentBytes + 1 bytes: a larger file is
// refused without reading it all) and adds it.
func ingestFile(ctx context.Context, base *Base, source string, size int64, key string) (AddResult, error) {
	if size > MaxDocumentBytes {
		return AddResult{}, fmt.Errorf("%w: %q: %d bytes, over the limit of %d", ErrTooLarge, source, size, MaxDocumentBytes)
	}
	f, err := os.Open(source)
	if err != nil {
		return AddResult{}, fmt.Errorf("%w: %w", errFile, err)
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	if err != nil {
		return AddResult{}, fmt.Errorf("%w: reading %q: %w", errFile, source, err)
	}
	if key != "" {
		key = key + "/" + source + "/" + rag.DocumentHash(body)[:16]
	}
	return base.Add(ctx, source, body, key)
}

// fileSource is the source of a file given by path: the path without "." elements
// and repeated separators, so that "./docs/a.md", "docs//a.md" and the file a.md
// of the folder "docs" are one document, "docs/a.md". A path with a ".." element
// stays as given: dropping "x/.." would name another file where x is a symbolic
// link.
func fileSource(path string) string {
	for _, e := range strings.Split(filepath.ToSlash(path), "/") {
		if e == ".." {
			return path
		}
	}
	return filepath.Clean(path)
}

// walk lists the regular files under paths, in order (each folder's entries
// sorted), with their sizes, and the entries it could not look at. A path that does
// not exist is an error.
func walk(paths []string) (files []string, sizes []int64, failed []FileError, err error) {
	seen := map[string]bool{}
	add := func(p string, size int64) {
		if !seen[p] {
			seen[p] = true
			files = append(files, p)
			sizes = append(sizes, size)
		}
	}
	fail := func(p string, err error) {
		if !seen[p] {
			seen[p] = true
			failed = append(failed, FileError{Source: p, Err: err, Message: err.Error()})
		}
	}
	for _, root := range paths {
		fi, err := os.Stat(root)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("knowledge: %w", err)
		}
		if !fi.IsDir() {
			if !fi.Mode().IsRegular() {
				return nil, nil, nil, fmt.Errorf("knowledge: %s is not a regular file nor a folder", root)
			}
			add(fileSource(root), fi.Size())
			continue
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == root {
					return err
				}
				fail(p, fmt.Errorf("%w: %w", errFile, err)) // an unreadable folder
				return nil
			}
			if p != root && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			fi, err := os.Stat(p) // follows a symbolic link to a file
			switch {
			case err != nil:
				fail(p, fmt.Errorf("%w: %w", errFile, err))
			case fi.IsDir(), !fi.Mode().IsRegular():
				// a symbolic link to a folder, a FIFO, a device: skipped
			default:
				add(p, fi.Size())
			}
			return nil
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("knowledge: walking %s: %w", root, err)
		}
	}
	return files, sizes, failed, nil
}
