package vectorstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Errors of the embedded store.
var (
	// ErrCorrupt means the log file holds a damaged record that is not a torn last
	// write (valid records follow it), or is not a vector store log at all. Open
	// changes nothing in that case: the file is left for inspection or restore.
	ErrCorrupt = errors.New("vectorstore: log file is corrupt")
	// ErrLocked means another Embedded store, in this process or another, has the
	// log file open.
	ErrLocked = errors.New("vectorstore: log file is locked by another store")
)

// Defaults of Config.
const (
	DefaultCompactRatio    = 4.0
	DefaultCompactMinBytes = 4 << 20
)

// Config configures an Embedded store. The zero value is a valid memory-only store.
type Config struct {
	// Path is the log file. Its directory is created if needed; a lock file is kept
	// beside it (Path + ".lock"). Empty Path keeps everything in memory only.
	Path string
	// NoSync skips the fsync after each write. By default Upsert and Delete return
	// only after their record is fsynced, so an acknowledged write survives a power
	// loss. With NoSync a write survives a crash of the process (the OS holds it) but
	// not of the machine; a torn last record is then dropped on the next Open.
	// Close always fsyncs.
	NoSync bool
	// CompactRatio: the log is rewritten to hold only live items when it grows
	// larger than CompactRatio times the live data. 0 means DefaultCompactRatio; it
	// must otherwise be greater than 1.
	CompactRatio float64
	// CompactMinBytes: no compaction happens while the log is smaller than this.
	// 0 means DefaultCompactMinBytes.
	CompactMinBytes int64
	// LockWait is how long Open waits for the lock file while a store in another
	// live process holds it (a node stopping while its successor starts), before it
	// fails with ErrLocked. The wait is logged once. 0, the default, fails at once.
	// A holder in this process, or one that is gone, never makes Open wait.
	// OpenContext's wait ends early with its context's error.
	LockWait time.Duration
	// Logger receives warnings (a dropped torn record, a failed compaction). Nil
	// discards them.
	Logger *slog.Logger
	// Index selects exact search (IndexExact, the zero value) or an HNSW graph per
	// collection (IndexHNSW), tuned by HNSW. The log is the same either way, so a
	// store can be reopened with the other index.
	Index Index
	// HNSW tunes the graphs of Index IndexHNSW; it is ignored otherwise.
	HNSW HNSWConfig
}

// Validate reports a Config that Open would reject.
func (c Config) Validate() error {
	if c.CompactRatio != 0 && (math.IsNaN(c.CompactRatio) || c.CompactRatio <= 1) {
		return fmt.Errorf("vectorstore: CompactRatio %v must be greater than 1 (or 0 for the default)", c.CompactRatio)
	}
	if c.LockWait < 0 {
		return fmt.Errorf("vectorstore: LockWait %s must not be negative", c.LockWait)
	}
	if c.CompactMinBytes < 0 {
		return fmt.Errorf("vectorstore: CompactMinBytes %d must not be negative", c.CompactMinBytes)
	}
	if c.Index != IndexExact && c.Index != IndexHNSW {
		return fmt.Errorf("vectorstore: unknown %v", c.Index)
	}
	return c.HNSW.validate()
}

func (c Config) withDefaults() Config {
	if c.CompactRatio == 0 {
		c.CompactRatio = DefaultCompactRatio
	}
	if c.CompactMinBytes == 0 {
		c.CompactMinBytes = DefaultCompactMinBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.HNSW = c.HNSW.withDefaults()
	return c
}

// Embedded is the in-process Store: vectors held in memory, persisted to an
// append-only log file, searched exactly (every matching item is scored) or, with
// Config.Index IndexHNSW, through an HNSW graph per collection.
//
// Writers are serialized; a write appends its record to the log (and fsyncs it,
// unless Config.NoSync) before it becomes visible to searches, so anything a search
// has seen is on disk. Searches run in parallel with each other and with a write's
// disk I/O. Compaction runs inside the write that triggers it.
type Embedded struct {
	cfg Config

	// wmu serializes Upsert, Delete, Compact and Close. The fields below it change
	// only under wmu.
	wmu         sync.Mutex
	file        *os.File // nil when memory-only
	lock        *os.File
	size        int64 // bytes in file
	live        int64 // estimated encoded bytes of the live items
	compactSkip int64 // no automatic compaction below this size (after a failure)
	broken      error // set when the log can no longer be appended to safely
	replaying   bool  // Open is replaying the log: HNSW graphs are built after it

	// mu guards colls and closed for readers; writers hold wmu and mu to change them.
	mu     sync.RWMutex
	colls  map[string]*collection
	closed bool
}

var _ Store = (*Embedded)(nil)

// Open returns a store over cfg.Path, replaying its log. A torn last record (from a
// crash during a write) is dropped and the file truncated to the last valid record;
// a damaged record in the middle fails with ErrCorrupt and the file is not touched.
// The log is compacted when it is much larger than its live data.
func Open(cfg Config) (*Embedded, error) {
	return OpenContext(context.Background(), cfg)
}

// OpenContext is Open whose wait for a lock another process holds (Config.LockWait)
// ends when ctx does, with ctx's error: a node stopped while it waits to start stops
// at once.
func OpenContext(ctx context.Context, cfg Config) (*Embedded, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Embedded{cfg: cfg.withDefaults(), colls: make(map[string]*collection)}
	if cfg.Path == "" {
		return s, nil
	}
	s.replaying = true
	if err := s.openLog(ctx); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.replaying = false
	if s.cfg.Index == IndexHNSW {
		s.buildGraphs()
	}
	if s.shouldCompact() {
		if err := s.compact(); err != nil {
			s.cfg.Logger.Warn("vectorstore: compaction on open failed; continuing with the full log",
				"path", s.cfg.Path, "error", err)
		}
	}
	return s, nil
}

func (s *Embedded) openLog(ctx context.Context) error {
	path := s.cfg.Path
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("vectorstore: %w", err)
	}
	lock, err := lockFile(ctx, path+".lock", s.cfg.LockWait, s.cfg.Logger)
	if err != nil {
		return err
	}
	s.lock = lock
	// A leftover from a compaction interrupted before its rename: the log is intact.
	if err := os.Remove(compactPath(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("vectorstore: remove stale compaction file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("vectorstore: %w", err)
	}
	s.file = f
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("vectorstore: %w", err)
	}
	size := st.Size()

	magic := make([]byte, min(size, int64(len(logMagic))))
	if _, err := f.ReadAt(magic, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("vectorstore: read %s: %w", path, err)
	}
	if size < int64(len(logMagic)) {
		// New, or torn while being created (a prefix of the magic): start afresh.
		if string(magic) != logMagic[:len(magic)] {
			return fmt.Errorf("%w: %s is not a vector store log", ErrCorrupt, path)
		}
		if err := s.initLog(); err != nil {
			return err
		}
		return syncDir(dir)
	}
	if string(magic[:len(logMagic)-1]) != logMagic[:len(logMagic)-1] {
		return fmt.Errorf("%w: %s is not a vector store log", ErrCorrupt, path)
	}
	if magic[len(logMagic)-1] != logMagic[len(logMagic)-1] {
		return fmt.Errorf("%w: %s has log format version %d, this build reads version %d",
			ErrCorrupt, path, magic[len(logMagic)-1], logMagic[len(logMagic)-1])
	}

	res, err := scanLog(f, size, func(off int64, payload []byte) error {
		r, err := decodeRecord(payload)
		if err == nil {
			err = s.replay(r)
		}
		if err != nil {
			// %v, not %w: a bad record is corruption, not an invalid request of the caller.
			return fmt.Errorf("%w: record at offset %d: %v", ErrCorrupt, off, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vectorstore: open %s: %w", path, err)
	}
	if res.torn {
		s.cfg.Logger.Warn("vectorstore: dropping a torn last record (a write interrupted by a crash)",
			"path", path, "offset", res.end, "bytes", size-res.end)
		if err := f.Truncate(res.end); err != nil {
			return fmt.Errorf("vectorstore: truncate torn record of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("vectorstore: %w", err)
		}
	}
	s.size = res.end
	return nil
}

// initLog truncates the file to just the magic.
func (s *Embedded) initLog() error {
	if err := s.file.Truncate(0); err != nil {
		return fmt.Errorf("vectorstore: %w", err)
	}
	if _, err := s.file.WriteAt([]byte(logMagic), 0); err != nil {
		return fmt.Errorf("vectorstore: %w", err)
	}
	if err := s.file.Sync(); err != nil {
		return fmt.Errorf("vectorstore: %w", err)
	}
	s.size = int64(len(logMagic))
	return nil
}

// replay applies one record read from the log, checking it as a write would.
func (s *Embedded) replay(r record) error {
	if err := CheckCollectionName(r.collection); err != nil {
		return err
	}
	switch r.op {
	case opUpsert:
		batch, dim, err := prepareItems(r.items)
		if err != nil {
			return err
		}
		if len(batch) > 0 && dim != r.dim {
			return fmt.Errorf("record dimension %d, items have %d", r.dim, dim)
		}
		if r.dim == 0 {
			return errors.New("upsert record with dimension 0")
		}
		if c := s.colls[r.collection]; c != nil && c.dim != r.dim {
			return fmt.Errorf("%w: collection %q has dimension %d, record has %d", ErrDimension, r.collection, c.dim, r.dim)
		}
		s.applyUpsert(r.collection, r.dim, batch)
	case opDelete:
		s.applyDelete(r.collection, r.ids)
	}
	return nil
}

// applyUpsert changes the in-memory state; the caller holds wmu, and mu unless
// nothing can read concurrently (Open).
func (s *Embedded) applyUpsert(name string, dim int, batch []prepared) {
	c := s.colls[name]
	if c == nil {
		if s.cfg.Index == IndexHNSW {
			c = newStableCollection(dim)
			if !s.replaying {
				c.g = newGraph(s.cfg.HNSW)
			}
		} else {
			c = newCollection(dim)
		}
		s.colls[name] = c
	}
	if c.stable {
		s.live += int64(c.upsertStable(batch))
		return
	}
	for _, p := range batch {
		s.live += int64(itemSize(p.item) - c.upsert(p))
	}
}

func (s *Embedded) applyDelete(name string, ids []string) {
	c := s.colls[name]
	if c == nil {
		return
	}
	if c.stable {
		s.live -= int64(c.deleteStable(ids))
		return
	}
	for _, id := range ids {
		if n, ok := c.delete(id); ok {
			s.live -= int64(n)
		}
	}
}

// Upsert implements Store.
func (s *Embedded) Upsert(ctx context.Context, collection string, items []Item) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vectorstore: upsert: %w", err)
	}
	if err := CheckCollectionName(collection); err != nil {
		return err
	}
	batch, dim, err := prepareItems(items)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if len(batch) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil { // it may have been cancelled while we waited
		return fmt.Errorf("vectorstore: upsert: %w", err)
	}
	if c := s.colls[collection]; c != nil && c.dim != dim {
		return fmt.Errorf("%w: collection %q has dimension %d, the batch has %d", ErrDimension, collection, c.dim, dim)
	}
	if s.file != nil {
		stored := make([]Item, len(batch))
		for i, p := range batch {
			stored[i] = p.item
		}
		payload := encodeUpsert(nil, collection, dim, stored)
		if len(payload) > maxRecordSize {
			return fmt.Errorf("%w: batch encodes to %d bytes, more than %d: split it", ErrInvalid, len(payload), maxRecordSize)
		}
		if err := s.append(payload); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.applyUpsert(collection, dim, batch)
	s.mu.Unlock()
	s.autoCompact()
	s.autoSaveGraphs()
	return nil
}

// Delete implements Store.
func (s *Embedded) Delete(ctx context.Context, collection string, ids []string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vectorstore: delete: %w", err)
	}
	if err := CheckCollectionName(collection); err != nil {
		return err
	}
	for i, id := range ids {
		if id == "" {
			return fmt.Errorf("%w: ID %d is empty", ErrInvalid, i)
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vectorstore: delete: %w", err)
	}
	c := s.colls[collection]
	if c == nil {
		return nil
	}
	// Log only IDs that exist, once each: unknown IDs need no record.
	var present []string
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if _, ok := c.slot[id]; ok && !seen[id] {
			seen[id] = true
			present = append(present, id)
		}
	}
	if len(present) == 0 {
		return nil
	}
	if s.file != nil {
		if err := s.append(encodeDelete(collection, present)); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.applyDelete(collection, present)
	s.mu.Unlock()
	s.autoCompact()
	s.autoSaveGraphs()
	return nil
}

// Search implements Store.
func (s *Embedded) Search(ctx context.Context, collection string, q Query) ([]Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("vectorstore: search: %w", err)
	}
	if err := CheckCollectionName(collection); err != nil {
		return nil, err
	}
	if q.K <= 0 {
		return nil, fmt.Errorf("%w: K is %d, must be positive", ErrInvalid, q.K)
	}
	unit, err := normalize(q.Vector)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	c := s.colls[collection]
	if c == nil {
		return nil, nil
	}
	if len(unit) != c.dim {
		return nil, fmt.Errorf("%w: collection %q has dimension %d, the query has %d", ErrDimension, collection, c.dim, len(unit))
	}
	return c.search(ctx, unit, q.K, q.Filter)
}

// append writes one record at the end of the log and, unless NoSync, fsyncs it. A
// failed write is rolled back by truncation so that no partial record stays behind to
// make later records look like corruption; if even that fails, or an fsync fails
// (after which the kernel may have dropped the data), the store refuses further
// writes until it is reopened.
func (s *Embedded) append(payload []byte) error {
	if s.broken != nil {
		return s.broken
	}
	buf := frame(payload)
	if _, err := s.file.WriteAt(buf, s.size); err != nil {
		if terr := s.file.Truncate(s.size); terr != nil {
			s.broken = fmt.Errorf("vectorstore: log %s unusable after a failed write: %w", s.cfg.Path, errors.Join(err, terr))
		}
		return fmt.Errorf("vectorstore: write %s: %w", s.cfg.Path, err)
	}
	if !s.cfg.NoSync {
		if err := s.file.Sync(); err != nil {
			_ = s.file.Truncate(s.size)
			s.broken = fmt.Errorf("vectorstore: log %s unusable after a failed fsync: %w", s.cfg.Path, err)
			return s.broken
		}
	}
	s.size += int64(len(buf))
	return nil
}

func (s *Embedded) shouldCompact() bool {
	if s.file == nil {
		return false
	}
	return s.size > s.cfg.CompactMinBytes && s.size > s.compactSkip &&
		float64(s.size) > s.cfg.CompactRatio*float64(s.live+int64(len(logMagic)))
}

// autoCompact compacts when the log has grown much larger than the live data. A
// failure does not fail the write that triggered it (that write is durable); it is
// logged and retried once the log has grown by CompactMinBytes more.
func (s *Embedded) autoCompact() {
	if !s.shouldCompact() {
		return
	}
	if err := s.compact(); err != nil {
		s.compactSkip = s.size + s.cfg.CompactMinBytes
		s.cfg.Logger.Warn("vectorstore: compaction failed; the log keeps growing until it succeeds",
			"path", s.cfg.Path, "error", err)
	}
}

// Compact rewrites the log to hold only the live items, atomically: a crash during
// compaction leaves the old log in place. Writes wait for it; searches do not. It
// does nothing for a memory-only store.
func (s *Embedded) Compact(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vectorstore: compact: %w", err)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.file == nil {
		return nil
	}
	return s.compact()
}

func compactPath(path string) string { return path + ".compact" }

// compact writes the live state to a new file, fsyncs it, renames it over the log and
// fsyncs the directory. The caller holds wmu, so the state cannot change meanwhile;
// searches may read it concurrently, which is safe.
func (s *Embedded) compact() error {
	if s.broken != nil {
		return s.broken
	}
	tmpPath := compactPath(s.cfg.Path)
	f, err := os.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("vectorstore: compact: %w", err)
	}
	size, err := writeSnapshot(f, s.colls)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmpPath, s.cfg.Path)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(tmpPath)
		return fmt.Errorf("vectorstore: compact: %w", err)
	}
	// The renamed file is the log now, whatever happens next; keep appending to it.
	old := s.file
	s.file, s.size, s.compactSkip = f, size, 0
	_ = old.Close()
	if err := syncDir(filepath.Dir(s.cfg.Path)); err != nil {
		return fmt.Errorf("vectorstore: compact: %w", err)
	}
	return nil
}

// writeSnapshot writes the magic and one or more upsert records per collection (a
// record with no items keeps an emptied collection and its dimension).
func writeSnapshot(f *os.File, colls map[string]*collection) (int64, error) {
	off := int64(0)
	write := func(b []byte) error {
		n, err := f.WriteAt(b, off)
		off += int64(n)
		return err
	}
	if err := write([]byte(logMagic)); err != nil {
		return 0, err
	}
	var payload []byte
	for _, name := range slices.Sorted(maps.Keys(colls)) {
		c := colls[name]
		items := c.items
		if c.stable { // skip the holes
			items = slices.DeleteFunc(slices.Clone(items), func(it Item) bool { return it.ID == "" })
		}
		start := 0
		for {
			// Fill one record up to compactChunk bytes (at least one item).
			end, size := start, 0
			for end < len(items) && (end == start || size+itemSize(items[end]) <= compactChunk) {
				size += itemSize(items[end])
				end++
			}
			payload = encodeUpsert(payload[:0], name, c.dim, items[start:end])
			if err := write(frame(payload)); err != nil {
				return 0, err
			}
			start = end
			if start >= len(items) {
				break
			}
		}
	}
	return off, nil
}

// Close saves the HNSW graphs (when they changed), flushes and closes the log and
// releases its lock. It is idempotent; other methods fail with ErrClosed afterwards.
func (s *Embedded) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	if s.cfg.Index == IndexHNSW && s.file != nil && s.broken == nil && s.graphsChanged() {
		// The log holds the data; a graph not saved is rebuilt by the next Open.
		if err := s.saveGraphs(); err != nil {
			s.cfg.Logger.Warn("vectorstore: saving the HNSW graphs on close failed; the next Open rebuilds them",
				"path", s.cfg.Path, "error", err)
		}
	}
	s.mu.Lock()
	s.closed = true
	s.colls = nil
	s.mu.Unlock()
	var err error
	if s.file != nil && s.cfg.NoSync && s.broken == nil {
		err = s.file.Sync()
	}
	return errors.Join(err, s.closeFiles())
}

func (s *Embedded) closeFiles() error {
	var errs []error
	if s.file != nil {
		errs = append(errs, s.file.Close())
		s.file = nil
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close()) // closing releases the lock
		s.lock = nil
	}
	return errors.Join(errs...)
}

// syncDir makes a created or renamed directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

func (s *Embedded) graphsChanged() bool {
	for _, c := range s.colls {
		if c.g != nil && c.g.changes > 0 {
			return true
		}
	}
	return false
}
