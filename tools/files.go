package tools

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// Errors of the files tool; each also wraps ErrInvalidArguments (the path was the
// model's), so the model reads them and nothing retries them.
var (
	// ErrOutsideRoot: the path leads outside the files tool's root, by "..", by an
	// absolute path, or through a symbolic link.
	ErrOutsideRoot = errors.New("the path leads outside the root")
	// ErrNotRegular: the path names a directory, device, named pipe or socket where a
	// regular file is wanted.
	ErrNotRegular = errors.New("not a regular file")
	// ErrProtected: the path names one of FilesConfig.Protect, or something under
	// one: the node's own files inside the root.
	ErrProtected = errors.New("the path is one of the node's own files, which the files tool does not touch")
)

// FilesConfig configures the files tool.
type FilesConfig struct {
	// Root is the directory the tool works in; it must exist. Nothing outside it
	// can be read, written or listed.
	Root string
	// MaxReadBytes bounds what one read returns (default 1 MiB); a longer file is cut
	// with a note, and read on with an offset.
	MaxReadBytes int
	// MaxWriteBytes bounds what one write writes (default 1 MiB).
	MaxWriteBytes int
	// MaxEntries bounds the entries one list returns (default 1000).
	MaxEntries int
	// ReadOnly leaves out the write operation.
	ReadOnly bool
	// Protect are paths (files or directories, absolute or relative to the
	// working directory) that the tool neither reads, writes, lists nor stats,
	// nor anything under them, when they lie inside Root: the node's data
	// directory (its event log), its configuration, agents and tokens files. A
	// root of "." would otherwise let a model read the node's secrets and rewrite
	// its settings (approvals, allow lists, tokens) or its log. They are judged
	// by their real paths, so a symbolic link inside the root that leads to one
	// is refused too; a list leaves them out.
	Protect []string
}

// MaxPathBytes bounds a path the files tool takes, as the system bounds one it
// resolves at once (PATH_MAX): the tool resolves a path one name at a time, and
// would otherwise make, and write under, directories nested deeper than any other
// program could reach by path.
const MaxPathBytes = 4096

// Defaults of FilesConfig.
const (
	DefaultFilesMaxBytes   = 1 << 20
	DefaultFilesMaxEntries = 1000
)

type fileReadArgs struct {
	Path   string `json:"path" jsonschema:"The file's path, relative to the work directory" tool:"minLength=1"`
	Offset int64  `json:"offset,omitempty" jsonschema:"The byte to start at (default 0), to read on past a truncated read" tool:"minimum=0"`
}

type fileWriteArgs struct {
	Path    string `json:"path" jsonschema:"The file's path, relative to the work directory; missing directories are created" tool:"minLength=1"`
	Content string `json:"content" jsonschema:"The file's whole new content (UTF-8 text)"`
}

type filePathArgs struct {
	Path string `json:"path,omitempty" jsonschema:"A path relative to the work directory (default: the work directory itself)"`
}

// FileInfo is what the stat operation returns.
type FileInfo struct {
	Path     string `json:"path"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Mode     string `json:"mode"`
	Modified string `json:"modified"`
}

// NewFiles returns the files tool: a Toolbox with the operations read, write, list
// and stat, confined to cfg.Root.
//
// Every path is resolved inside the root through os.Root: ".." that climbs out of
// it, an absolute path outside it (one inside it is taken relative to it) and a
// symbolic link that points out of it (or is absolute) are refused with
// ErrOutsideRoot. Only regular files are read or written: a directory, device, named
// pipe or socket is refused with ErrNotRegular, and files are opened non-blocking, so
// a named pipe cannot hang a call. A read returns text (a file holding NUL bytes is
// refused as binary) of at most MaxReadBytes, with a note when it is cut. A write
// replaces the whole file atomically (a temporary file renamed over it), keeping its
// permissions, so a call made twice with the same key leaves the same file, and
// refuses to write through a symbolic link. A list quotes a name that is not plain
// printable text (listedName). The paths of cfg.Protect, and what is under them,
// are refused with ErrProtected however they are reached. Errors name paths
// relative to the root, never the host's.
func NewFiles(cfg FilesConfig) (*Toolbox, error) {
	if strings.TrimSpace(cfg.Root) == "" {
		return nil, errors.New("tools: files: the root directory is not set")
	}
	abs, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("tools: files: root %q: %w", cfg.Root, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("tools: files: root %q: %w", cfg.Root, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("tools: files: root %q is not a directory", cfg.Root)
	}
	if cfg.MaxReadBytes <= 0 {
		cfg.MaxReadBytes = DefaultFilesMaxBytes
	}
	if cfg.MaxWriteBytes <= 0 {
		cfg.MaxWriteBytes = DefaultFilesMaxBytes
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultFilesMaxEntries
	}
	f := &files{cfg: cfg, abs: []string{abs}}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		f.abs = append(f.abs, real)
	}
	for _, p := range cfg.Protect {
		if strings.TrimSpace(p) == "" {
			continue
		}
		pa, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("tools: files: protected path %q: %w", p, err)
		}
		f.protect = append(f.protect, realPath(pa))
		f.protectAbs = append(f.protectAbs, pa)
	}
	f.protectInfo = make([]fs.FileInfo, len(f.protectAbs))
	if f.protected(".") {
		return nil, fmt.Errorf("tools: files: root %q is inside a path the tool must not touch (the node's data directory or one of its files): give it a directory of its own", cfg.Root)
	}
	readOnly := WithSideEffects(false)
	out := WithMaxOutput(cfg.MaxReadBytes + 1024)
	subs := []SubTool{
		Sub("read", fmt.Sprintf("Reads a text file (at most %d bytes per call; use offset to read on).", cfg.MaxReadBytes), f.read, readOnly, out),
		Sub("list", filesListDescription, f.list, readOnly, out),
		Sub("stat", "Tells a path's type, size, mode and modification time.", f.stat, readOnly),
	}
	if !cfg.ReadOnly {
		subs = slices.Insert(subs, 1, Sub("write", fmt.Sprintf("Writes a text file, replacing its content (at most %d bytes).", cfg.MaxWriteBytes),
			f.write, WithMaxArguments(cfg.MaxWriteBytes+4096)))
	}
	return NewToolbox("files", "Reads, writes and lists files in the agent's work directory; paths are relative to it.", subs...)
}

type files struct {
	cfg FilesConfig
	abs []string // the root's absolute path, and its real path when that differs
	// protect are the real paths of cfg.Protect.
	protect []string
	// protectAbs are the absolute paths of cfg.Protect, and protectInfo the
	// files they name as the system identifies them (os.SameFile), each found
	// when first seen (nil until then: a data directory is made after its
	// node's tools), under protectMu: another name of one (a hard link,
	// another case on a case-insensitive filesystem, another unicode
	// normalisation) is one too.
	protectAbs  []string
	protectMu   sync.Mutex
	protectInfo []fs.FileInfo
}

// protectedFiles returns the files of cfg.Protect that exist, as
// protectInfo keeps them.
func (f *files) protectedFiles() []fs.FileInfo {
	f.protectMu.Lock()
	defer f.protectMu.Unlock()
	out := make([]fs.FileInfo, 0, len(f.protectInfo))
	for i, st := range f.protectInfo {
		if st == nil {
			if s, err := os.Stat(f.protectAbs[i]); err == nil {
				f.protectInfo[i], st = s, s
			}
		}
		if st != nil {
			out = append(out, st)
		}
	}
	return out
}

// realPath is p, absolute and clean, with the symbolic links of the part of it
// that exists resolved; the rest, which does not exist yet, is joined as written.
func realPath(p string) string {
	p = filepath.Clean(p)
	var rest []string
	for {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{real}, rest...)...)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(append([]string{p}, rest...)...)
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

// protected reports whether rel, a path relative to the root (rel's answer),
// leads to one of the protected paths or under one, following the symbolic
// links inside the root as the system would.
func (f *files) protected(rel string) bool {
	if len(f.protect) == 0 {
		return false
	}
	target := realPath(filepath.Join(f.abs[0], rel))
	for _, p := range f.protect {
		if r, err := filepath.Rel(p, target); err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return true
		}
	}
	// The names differ; the files may not. The path and each of its parents
	// inside the root are compared with the protected files themselves (the
	// root's own parents were judged when the tool was made).
	infos := f.protectedFiles()
	if len(infos) == 0 {
		return false
	}
	for p := filepath.Clean(rel); ; p = filepath.Dir(p) {
		if st, err := os.Stat(filepath.Join(f.abs[0], p)); err == nil {
			for _, pi := range infos {
				if os.SameFile(st, pi) {
					return true
				}
			}
		}
		if p == "." || p == string(filepath.Separator) {
			return false
		}
	}
}

// rel turns a path from the model into one relative to the root, refusing what
// leaves it lexically; os.Root refuses what leaves it through symbolic links.
func (f *files) rel(p string, dflt string) (string, error) {
	p = strings.TrimSpace(p)
	if p == "" {
		if dflt == "" {
			return "", &ArgumentError{Tool: "files", Field: "path", Reason: "the path is empty"}
		}
		p = dflt
	}
	if strings.ContainsRune(p, 0) {
		return "", &ArgumentError{Tool: "files", Field: "path", Reason: "the path holds a NUL byte"}
	}
	if len(p) > MaxPathBytes {
		return "", &ArgumentError{Tool: "files", Field: "path", Reason: fmt.Sprintf("the path is %d bytes long; the limit is %d", len(p), MaxPathBytes)}
	}
	if filepath.IsAbs(p) {
		clean := filepath.Clean(p)
		for _, root := range f.abs {
			if r, err := filepath.Rel(root, clean); err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				return r, f.checkProtected(p, r)
			}
		}
		return "", f.outside(p)
	}
	clean := filepath.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", f.outside(p)
	}
	return clean, f.checkProtected(p, clean)
}

// checkProtected refuses p, relative to the root as rel, when it is protected.
func (f *files) checkProtected(p, rel string) error {
	if f.protected(rel) {
		return fmt.Errorf("files: %s: %w (%w)", quotePath(p), ErrProtected, ErrInvalidArguments)
	}
	return nil
}

// maxQuotedPath bounds a path quoted in an error (quotePath).
const maxQuotedPath = 256

// quotePath quotes a path of the model's for an error, clipped to its head when it
// is long: a path of half a megabyte is not worth sending back.
func quotePath(p string) string {
	if len(p) <= maxQuotedPath {
		return strconv.Quote(p)
	}
	cut := maxQuotedPath / 2
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(p[:cut]), len(p))
}

func (f *files) outside(p string) error {
	return fmt.Errorf("files: %s: %w, the agent's work directory (%w)", quotePath(p), ErrOutsideRoot, ErrInvalidArguments)
}

// fail rephrases an error of os.Root about path p without the host's paths.
func (f *files) fail(op, p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case err.Error() == "path escapes from parent":
		return f.outside(p)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("files: %s %s: no such file or directory (%w)", op, quotePath(p), ErrInvalidArguments)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("files: %s %s: permission denied (%w)", op, quotePath(p), ErrInvalidArguments)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("files: %s %s: a part of the path is a file, not a directory (%w)", op, quotePath(p), ErrInvalidArguments)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("files: %s %s: a name in the path is too long (%w)", op, quotePath(p), ErrInvalidArguments)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("files: %s %s: too many levels of symbolic links (%w)", op, quotePath(p), ErrInvalidArguments)
	}
	return fmt.Errorf("files: %s %s: %v", op, quotePath(p), err)
}

func (f *files) open() (*os.Root, error) {
	r, err := os.OpenRoot(f.abs[0])
	if err != nil {
		return nil, fmt.Errorf("files: the work directory cannot be opened: %w", err)
	}
	return r, nil
}

func notRegular(p string, mode fs.FileMode) error {
	return fmt.Errorf("files: %s is %s: %w (%w)", quotePath(p), kind(mode), ErrNotRegular, ErrInvalidArguments)
}

// kind names a file's type.
func kind(mode fs.FileMode) string {
	switch {
	case mode.IsRegular():
		return "a file"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

func (f *files) read(ctx context.Context, a fileReadArgs) (string, error) {
	p, err := f.rel(a.Path, "")
	if err != nil {
		return "", err
	}
	root, err := f.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	// Non-blocking, so that opening a named pipe returns at once; then refused.
	file, err := root.OpenFile(p, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return "", f.fail("read", a.Path, err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return "", f.fail("read", a.Path, err)
	}
	if !st.Mode().IsRegular() {
		return "", notRegular(a.Path, st.Mode())
	}
	if a.Offset > st.Size() {
		return "", &ArgumentError{Tool: "files", Field: "offset", Reason: fmt.Sprintf("offset %d is past the end of %s (%d bytes)", a.Offset, quotePath(a.Path), st.Size())}
	}
	buf := make([]byte, min(int64(f.cfg.MaxReadBytes)+1, st.Size()-a.Offset+1))
	n, err := file.ReadAt(buf, a.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", f.fail("read", a.Path, err)
	}
	buf = buf[:n]
	truncated := len(buf) > f.cfg.MaxReadBytes
	if truncated {
		buf = cutPartialRune(buf[:f.cfg.MaxReadBytes])
	}
	if slices.Contains(buf, 0) {
		return "", fmt.Errorf("files: %s is a binary file; read returns text only (%w)", quotePath(a.Path), ErrInvalidArguments)
	}
	text := strings.ToValidUTF8(string(buf), "\uFFFD")
	if truncated {
		next := a.Offset + int64(len(buf))
		text += fmt.Sprintf("\n[truncated: %d bytes, showing bytes %d to %d; read on with offset %d]", st.Size(), a.Offset, next, next)
	}
	return text, ctx.Err()
}

func (f *files) write(ctx context.Context, a fileWriteArgs) (string, error) {
	p, err := f.rel(a.Path, "")
	if err != nil {
		return "", err
	}
	if p == "." {
		return "", fmt.Errorf("files: %s is the work directory itself, not a file (%w)", quotePath(a.Path), ErrInvalidArguments)
	}
	if len(a.Content) > f.cfg.MaxWriteBytes {
		return "", &ArgumentError{Tool: "files", Field: "content", Reason: fmt.Sprintf("the content is %d bytes; the limit is %d", len(a.Content), f.cfg.MaxWriteBytes)}
	}
	if !utf8.ValidString(a.Content) {
		return "", &ArgumentError{Tool: "files", Field: "content", Reason: "the content is not UTF-8 text"}
	}
	root, err := f.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	// A file written anew keeps its permissions (a private file stays private);
	// a new one gets 0644 less the umask.
	perm := fs.FileMode(0)
	if st, err := root.Lstat(p); err == nil && !st.Mode().IsRegular() {
		return "", notRegular(a.Path, st.Mode())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", f.fail("write", a.Path, err)
	} else if err == nil {
		perm = st.Mode().Perm()
	}
	if dir := filepath.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return "", f.fail("write", a.Path, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(filepath.Dir(p), "."+tmpBase(filepath.Base(p))+".tmp-"+hex.EncodeToString(suffix[:]))
	file, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, cmp.Or(perm, 0o644))
	if err != nil {
		return "", f.fail("write", a.Path, err)
	}
	if perm != 0 {
		err = file.Chmod(perm) // as it was, whatever the umask
	}
	if err == nil {
		_, err = io.WriteString(file, a.Content)
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, p)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return "", f.fail("write", a.Path, err)
	}
	return fmt.Sprintf("wrote %d bytes to %s", len(a.Content), filepath.ToSlash(p)), nil
}

func (f *files) list(ctx context.Context, a filePathArgs) (string, error) {
	p, err := f.rel(a.Path, ".")
	if err != nil {
		return "", err
	}
	root, err := f.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	dir, err := root.Open(p)
	if err != nil {
		return "", f.fail("list", a.Path, err)
	}
	defer dir.Close()
	st, err := dir.Stat()
	if err != nil {
		return "", f.fail("list", a.Path, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("files: %s is %s, not a directory (%w)", quotePath(a.Path), kind(st.Mode()), ErrInvalidArguments)
	}
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return "", f.fail("list", a.Path, err)
	}
	entries = slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return f.protected(filepath.Join(p, e.Name())) })
	slices.SortFunc(entries, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	var b strings.Builder
	for i, e := range entries {
		if i == f.cfg.MaxEntries {
			fmt.Fprintf(&b, "[… and %d more entries]\n", len(entries)-i)
			break
		}
		name := listedName(e.Name())
		switch t := e.Type(); {
		case t.IsDir():
			fmt.Fprintf(&b, "%s/\n", name)
		case t.IsRegular():
			size := int64(-1)
			if info, err := e.Info(); err == nil {
				size = info.Size()
			}
			fmt.Fprintf(&b, "%s (%d bytes)\n", name, size)
		default:
			fmt.Fprintf(&b, "%s (%s)\n", name, kind(t))
		}
	}
	if b.Len() == 0 {
		return "(empty directory)", ctx.Err()
	}
	return strings.TrimSuffix(b.String(), "\n"), ctx.Err()
}

// maxTmpBase bounds the part of a name a write's temporary file takes, so that its
// name (with a dot and ".tmp-" and 12 hex digits) stays within the 255 bytes a
// name may have.
const maxTmpBase = 200

// tmpBase is the head of name that a write's temporary file is named after.
func tmpBase(name string) string {
	if len(name) <= maxTmpBase {
		return name
	}
	cut := maxTmpBase
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

// listedName is a directory entry's name as list shows it: as it is when it is
// plain printable text, and quoted as a Go string otherwise ("a\nb", "\x1b[2J",
// "\xff"): a name holding a newline would pose as more entries, and one holding
// terminal controls or bytes that are not UTF-8 would reach the model raw.
func listedName(name string) string {
	if q := strconv.Quote(name); q[1:len(q)-1] != name {
		return q
	}
	return name
}

func (f *files) stat(ctx context.Context, a filePathArgs) (FileInfo, error) {
	p, err := f.rel(a.Path, ".")
	if err != nil {
		return FileInfo{}, err
	}
	root, err := f.open()
	if err != nil {
		return FileInfo{}, err
	}
	defer root.Close()
	st, err := root.Stat(p)
	if err != nil {
		return FileInfo{}, f.fail("stat", a.Path, err)
	}
	return FileInfo{
		Path:     filepath.ToSlash(p),
		Type:     strings.TrimPrefix(strings.TrimPrefix(kind(st.Mode()), "a "), "an "),
		Size:     st.Size(),
		Mode:     st.Mode().String(),
		Modified: st.ModTime().UTC().Format(time.RFC3339),
	}, ctx.Err()
}
