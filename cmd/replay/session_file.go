package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The export format: JSON lines. The first line is a header; each further line is one
// event envelope exactly as messages.Marshal encodes it: the session's, in seq order,
// then (version 2) the events of the configurations' streams its tasks name
// (messages.ConfigRecorded), in digest order, which an import stores beside it.
// An export with no configuration is version 1, as builds before them wrote and read
// it. Version 3 adds, after the configurations, the memory changes the session
// made (memory.ChangeSession), each as its namespace's stream recorded it, the
// streams in order and each in seq order, which an import appends to the same
// namespaces (importPlan.writeMemory); an export of a session that changed no
// memory is of version 1 or 2 as before. Golden files in testdata/ pin it.
const (
	exportFormat  = "troupe.session"
	exportVersion = 3
)

type exportHeader struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	SessionID string `json:"session_id"`
	Events    int    `json:"events"`
	// Configs counts the configurations' events after the session's (version 2).
	Configs int `json:"configs,omitempty"`
	// Memory counts the memory changes after the configurations (version 3).
	Memory int `json:"memory,omitempty"`
}

// ErrBadExport is wrapped by every error about an export file's content.
var ErrBadExport = errors.New("bad session export")

// writeExport writes the export of a session's events and its configurations'
// events, held whole.
func writeExport(w io.Writer, events []messages.Envelope, configs ...messages.Envelope) error {
	x, err := newExportWriter(w, events[0].SessionID, len(events), len(configs), 0)
	if err != nil {
		return err
	}
	if err := x.write(events); err != nil {
		return err
	}
	if err := x.write(configs); err != nil {
		return err
	}
	return x.flush()
}

// exportWriter writes an export as its events come, a page at a time (write):
// the header first, which counts the session's events and its configurations',
// then each event, the session's and then the configurations', as
// messages.Marshal encodes it; flush ends it.
type exportWriter struct {
	bw  *bufio.Writer
	buf []byte // an event's encoding, reused
}

func newExportWriter(w io.Writer, sessionID string, events, configs, memory int) (*exportWriter, error) {
	version := 1
	switch {
	case memory > 0:
		version = 3
	case configs > 0:
		version = 2
	}
	h, err := json.Marshal(exportHeader{Format: exportFormat, Version: version, SessionID: sessionID, Events: events, Configs: configs, Memory: memory})
	if err != nil {
		return nil, err
	}
	x := &exportWriter{bw: bufio.NewWriter(w)}
	x.bw.Write(h)
	x.bw.WriteByte('\n')
	return x, nil
}

// write writes events, one line each. It fails as soon as a write does (a full
// disk), before the pages after them are read.
func (x *exportWriter) write(events []messages.Envelope) error {
	for _, e := range events {
		b, err := messages.AppendEnvelope(x.buf[:0], e)
		if err != nil {
			return err
		}
		x.buf = append(b, '\n')
		if _, err := x.bw.Write(x.buf); err != nil {
			return err
		}
	}
	return nil
}

func (x *exportWriter) flush() error { return x.bw.Flush() }

// maxExportLine bounds one line of an export, so that a hostile or broken file
// costs a bounded amount of memory per line. The events a node records stay below
// it: a task's input (and a tool call's arguments) is at most 1 MiB, which its
// event's JSON escapes at up to 6 bytes a byte ('<', '>', '&' and the control
// characters as \u00XX, invalid UTF-8 as \ufffd).
const maxExportLine = 16 << 20

// lineReader reads the lines of an export, each at most maxExportLine bytes,
// refusing a longer one as soon as the limit is passed instead of reading it whole.
type lineReader struct {
	r    *bufio.Reader
	line int // number of the line last returned, from 1
}

// next returns the next line without its line ending, or io.EOF after the last.
func (lr *lineReader) next() ([]byte, error) {
	var line []byte
	for {
		frag, err := lr.r.ReadSlice('\n')
		content := len(frag)
		if err == nil {
			content-- // the newline
		}
		if len(line)+content > maxExportLine {
			return nil, fmt.Errorf("line %d is longer than %d MiB, the limit of a line", lr.line+1, maxExportLine>>20)
		}
		line = append(line, frag...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.EOF
		case err != nil && err != io.EOF:
			return nil, fmt.Errorf("line %d: %w", lr.line+1, err)
		}
		lr.line++
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if !utf8.Valid(line) {
			// A node writes UTF-8 only; another byte would be stored as it is
			// and read back as another text (U+FFFD), so it is refused.
			return nil, fmt.Errorf("line %d is not UTF-8 (at byte %d): an export is UTF-8 text", lr.line, invalidUTF8At(line))
		}
		return line, nil
	}
}

// invalidUTF8At returns the offset of the first byte of b that starts no UTF-8
// character, or -1 when b is UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// readExport parses and fully validates an export: the header, every envelope and its
// payload (unknown types and future schema versions are errors), one session whose ID
// ingress would accept (node.ValidSessionID), seqs 1..n without gaps, and the event
// count; then the configurations' events the header counts, each the one event of a
// configuration's stream (checkConfigEvent). No line may be longer than
// maxExportLine. It returns nothing unless all of it is sound.
//
// An export as users get it back is read as the export it is: gzip'd (to be mailed
// or stored), or saved by an editor with a UTF-8 byte order mark and CRLF line
// endings.
func readExport(r io.Reader) (events, configs []messages.Envelope, err error) {
	_, tail, err := scanExport(r, func(batch []messages.Envelope) error {
		events = append(events, batch...)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return events, tail.configs, nil
}

// importBatchMax and importBatchBytes bound a batch of scanExport: at most
// importBatchMax events, ended after the event that brings its payload to
// importBatchBytes, as export reads a session's pages.
const (
	importBatchMax   = exportPageMax
	importBatchBytes = exportPageBytes
)

// oneAppendEvents and oneAppendBytes bound the session import and fork write in
// one append, all of it or nothing (eventlog.Log.Append): one of at most
// oneAppendEvents events and oneAppendBytes of payload (oneAppend). A session
// past them is written in batches of a page, its first event last (sessionWriter).
//
// The bound is generous: a task's step is a handful of events, and a task
// reaches its budget of steps or tokens long before it records thousands, so
// that sessions far past it are rare. Held whole, a session at the bound costs
// the command its payload and the envelopes around it (a few hundred bytes
// each): around 100 MiB, well within a machine that runs a node. The ClickHouse log writes one append in one
// INSERT and admits it even past its buffer (clickhouse.Config.MaxBuffered,
// 100,000 events by default), and SQLite in one transaction.
const (
	oneAppendEvents = 100_000
	oneAppendBytes  = 64 << 20
)

// oneAppend is the bound of a session written in one append.
func oneAppend() appendBound { return appendBound{events: oneAppendEvents, bytes: oneAppendBytes} }

// appendBound bounds what is written in one append: at most events events and
// bytes of payload.
type appendBound struct{ events, bytes int }

// fits reports whether a session of events events and bytes of payload is
// within b.
func (b appendBound) fits(events, bytes int) bool { return events <= b.events && bytes <= b.bytes }

// sessionWriter appends a new session to a log as it is read, its events in
// seq order a batch at a time (add), then the events that end it (finish: the
// events that park an import's tasks, a fork's session.forked event). A session
// within the bound of one append (whole) is held and appended in one append by
// finish: all of it lands, or none. A larger one is appended a batch at a time
// as it comes, but for its first event, which finish appends last, with the
// events that end it: until then the log holds the session without its seq 1,
// which no node resumes. A session actor folds a session from seq 1, and its fold
// of one that starts later fails at its first event (a gap) before it decides
// or performs anything: a node that lists it as running fails to load it, and
// its supervisor gives up on it, having written nothing; a task sent to it
// fails alike. So an append that fails part way (a full disk, the log down)
// leaves an inert session, which the same writing completes: each event
// appended again at its position is a no-op (eventlog.Log.Append).
type sessionWriter struct {
	log     eventlog.Log
	whole   bool
	held    []messages.Envelope // whole: the events added; else the first (seq 1)
	written int                 // the events appended
}

func (w *sessionWriter) add(ctx context.Context, batch []messages.Envelope) error {
	if w.whole {
		w.held = append(w.held, batch...)
		return nil
	}
	if len(batch) > 0 && batch[0].Seq == 1 {
		w.held = append(w.held, batch[0])
		batch = batch[1:]
	}
	if len(batch) == 0 {
		return nil
	}
	if err := w.log.Append(ctx, batch); err != nil {
		return err
	}
	w.written += len(batch)
	return nil
}

// finish appends the events held with end.
func (w *sessionWriter) finish(ctx context.Context, end []messages.Envelope) error {
	last := append(w.held, end...)
	if err := w.log.Append(ctx, last); err != nil {
		return err
	}
	w.written += len(last)
	w.held = nil
	return nil
}

// partial is what an error of a session's writing says of the session left in
// the log: nothing ("") when nothing was appended.
func (w *sessionWriter) partial() string {
	if w.written == 0 {
		return ""
	}
	return fmt.Sprintf("the log holds %d of its events but not its first, so no node resumes it", w.written)
}

// exportTail is what an export holds after the session's events: the
// configurations' events (one per configuration the session's tasks name) and
// the memory changes the session made (version 3).
type exportTail struct {
	configs, memory []messages.Envelope
}

// scanExport is readExport of an export read as a stream, a line at a time:
// it calls batch with the session's events in seq order, a batch at a time
// (importBatchMax events, or about importBatchBytes of payload), as it
// validates them, and returns the header and what follows the events
// (exportTail), each memory change checked by checkMemoryEvent. It stops at the first error,
// batch's or the file's, after the batches before it: a caller that must
// write nothing of an unsound file reads it once to validate it, and then again.
func scanExport(r io.Reader, batch func(events []messages.Envelope) error) (h exportHeader, tail exportTail, err error) {
	var configs, mem []messages.Envelope
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return h, exportTail{}, fmt.Errorf("%w: the file is gzip'd, and its gzip header is bad: %w", ErrBadExport, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 64<<10)
	}
	lr := &lineReader{r: br}
	first, err := lr.next()
	if err == io.EOF {
		return h, exportTail{}, fmt.Errorf("%w: the file is empty", ErrBadExport)
	}
	if err != nil {
		return h, exportTail{}, fmt.Errorf("%w: %w", ErrBadExport, err)
	}
	first = messages.TrimByteOrderMark(first)
	// A later build's export is refused for its version before its keys: the
	// version that adds a key (configs, memory) adds it to the header, which
	// this build would otherwise call unknown rather than say why.
	var later struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if json.Unmarshal(first, &later) == nil && later.Format == exportFormat && later.Version > exportVersion {
		return h, exportTail{}, fmt.Errorf("%w: export format version %d is newer than this build reads (%d)", ErrBadExport, later.Version, exportVersion)
	}
	if err := checkKeys(first, headerKeys); err != nil {
		return h, exportTail{}, fmt.Errorf("%w: line 1 is not an export header: %w", ErrBadExport, err)
	}
	d := json.NewDecoder(bytes.NewReader(first))
	d.DisallowUnknownFields()
	if err := d.Decode(&h); err != nil {
		return h, exportTail{}, fmt.Errorf("%w: line 1 is not an export header: %v", ErrBadExport, err)
	}
	switch {
	case h.Format != exportFormat:
		return h, exportTail{}, fmt.Errorf("%w: line 1: format %q, want %q", ErrBadExport, h.Format, exportFormat)
	case h.Version > exportVersion:
		return h, exportTail{}, fmt.Errorf("%w: export format version %d is newer than this build reads (%d)", ErrBadExport, h.Version, exportVersion)
	case h.Version < 1:
		return h, exportTail{}, fmt.Errorf("%w: export format version %d is invalid", ErrBadExport, h.Version)
	case h.Events < 1:
		// An export holds a session, which has one event at least.
		return h, exportTail{}, fmt.Errorf("%w: line 1: %d events: an export holds one at least", ErrBadExport, h.Events)
	case h.Memory < 0 || h.Memory > 0 && h.Version < 3:
		return h, exportTail{}, fmt.Errorf("%w: line 1: %d memory changes in an export of version %d", ErrBadExport, h.Memory, h.Version)
	case h.Configs < 0 || h.Configs > 0 && h.Version < 2:
		return h, exportTail{}, fmt.Errorf("%w: line 1: %d configurations in an export of version %d", ErrBadExport, h.Configs, h.Version)
	case h.SessionID == "":
		return h, exportTail{}, fmt.Errorf("%w: the header names no session", ErrBadExport)
	case !node.ValidSessionID(h.SessionID):
		return h, exportTail{}, fmt.Errorf("%w: line 1: session ID %q: a session ID is %s", ErrBadExport, h.SessionID, node.SessionIDRule)
	}
	var (
		events  int                 // the session's events read
		pending []messages.Envelope // those not yet given to batch
		size    int                 // pending's payload
		ids     = eventIDs{session: h.SessionID}
	)
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		err := batch(pending)
		pending, size = nil, 0 // batch may keep the slice
		return err
	}
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return h, exportTail{}, fmt.Errorf("%w: %w", ErrBadExport, err)
		}
		line := lr.line
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if events == h.Events && len(configs) == h.Configs && len(mem) == h.Memory {
			// Past what the header counts: another export (two files
			// concatenated), or events added by hand.
			var next exportHeader
			if json.Unmarshal(b, &next) == nil && next.Format == exportFormat {
				return h, exportTail{}, fmt.Errorf("%w: line %d: the header of another export (of session %q) after the %d events and %d configurations of this one: import one export per file",
					ErrBadExport, line, next.SessionID, h.Events, h.Configs)
			}
			return h, exportTail{}, fmt.Errorf("%w: line %d: more lines than the header's %d events and %d configurations", ErrBadExport, line, h.Events, h.Configs)
		}
		if err := checkKeys(b, envelopeKeys); err != nil {
			return h, exportTail{}, fmt.Errorf("%w: line %d is not an event envelope: %w", ErrBadExport, line, err)
		}
		e, err := messages.Unmarshal(b)
		if err != nil {
			return h, exportTail{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
		}
		// The payload as a node writes it (json.Marshal of a json.RawMessage:
		// compact), whatever the spacing of a file another tool rewrote: the
		// analytics of the ClickHouse log read payloads with visitParamExtract*,
		// which finds no field whose value follows a space (export writes
		// payloads compact, so that its files are imported as they are).
		if e.Payload, err = json.Marshal(e.Payload); err != nil {
			return h, exportTail{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
		}
		if string(e.Payload) == "null" {
			// Decoded, it is an event with no field set: a node records an object.
			return h, exportTail{}, fmt.Errorf("%w: line %d: a %s event whose payload is null", ErrBadExport, line, e.Type)
		}
		p, err := e.Decode()
		if err != nil {
			return h, exportTail{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
		}
		if err := ids.add(e); err != nil {
			// The log refuses it: a session written in batches would be
			// refused part way, its configurations and first batches written.
			return h, exportTail{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
		}
		if events == h.Events && len(configs) == h.Configs {
			if err := checkMemoryEvent(e, p, h.SessionID, mem); err != nil {
				return h, exportTail{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
			}
			mem = append(mem, e)
			continue
		}
		if events == h.Events && h.Configs > 0 {
			if err := checkConfigEvent(e, p); err != nil {
				return h, exportTail{}, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
			}
			configs = append(configs, e)
			continue
		}
		if e.SessionID != h.SessionID {
			return h, exportTail{}, fmt.Errorf("%w: line %d: event of session %q in an export of %q", ErrBadExport, line, e.SessionID, h.SessionID)
		}
		if want := uint64(events + 1); e.Seq != want {
			return h, exportTail{}, fmt.Errorf("%w: line %d: seq %d where %d was expected (events missing or out of order)", ErrBadExport, line, e.Seq, want)
		}
		events++
		pending, size = append(pending, e), size+len(e.Payload)
		if len(pending) >= importBatchMax || size >= importBatchBytes || events == h.Events {
			if err := flush(); err != nil {
				return h, exportTail{}, err
			}
		}
	}
	if (events != h.Events || len(configs) != h.Configs) && h.Memory == 0 {
		return h, exportTail{}, fmt.Errorf("%w: the header promises %d events and %d configurations, the file has %d and %d (truncated?)", ErrBadExport, h.Events, h.Configs, events, len(configs))
	}
	if events != h.Events || len(configs) != h.Configs || len(mem) != h.Memory {
		return h, exportTail{}, fmt.Errorf("%w: the header promises %d events, %d configurations and %d memory changes, the file has %d, %d and %d (truncated?)", ErrBadExport, h.Events, h.Configs, h.Memory, events, len(configs), len(mem))
	}
	return h, exportTail{configs: configs, memory: mem}, nil
}

// The keys of an export's header and of an event's envelope, as export writes
// them (messages.AppendEnvelope).
var (
	headerKeys   = []string{"format", "version", "session_id", "events", "configs", "memory"}
	envelopeKeys = []string{"id", "session_id", "seq", "type", "v", "causation_id", "correlation_id", "ts", "actor", "payload"}
)

// checkKeys checks that line is a JSON object whose keys are among keys, as
// written there, each once. encoding/json takes a key in any case ("Seq" for
// "seq") and, given twice, the last value: a file read by another tool (which
// may take the first, or no other case) would say another thing than what
// import reads from it, or hold a field import drops. A line that is no JSON
// object is left to the decoding that follows, which says what is wrong with it.
func checkKeys(line []byte, keys []string) error {
	d := json.NewDecoder(bytes.NewReader(line))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	seen := make(map[string]bool, len(keys))
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil
		}
		key, _ := t.(string)
		switch {
		case seen[key]:
			return fmt.Errorf("key %q is given twice", key)
		case !slices.Contains(keys, key):
			return fmt.Errorf("unknown key %q (the keys are %s, in lower case)", key, strings.Join(keys, ", "))
		}
		seen[key] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// eventIDs finds an event ID an export gives twice (IDs are unique in a log),
// holding little for a session of any length: a node names most of a session's
// events by their position, "<session>/<seq>", so it keeps a flag for each event
// named so (at its seq) and the other IDs whole.
type eventIDs struct {
	session string
	byPos   []bool            // byPos[seq-1]: the session's event at seq is named by its position
	other   map[string]string // the other IDs, to where they were given
}

// add adds e's ID, read after the events added before, and fails if one of
// them has it.
func (s *eventIDs) add(e messages.Envelope) error {
	where := func(e messages.Envelope) string { return fmt.Sprintf("the event at %s seq %d", e.SessionID, e.Seq) }
	if at, ok := s.other[e.ID]; ok {
		return fmt.Errorf("event ID %q is given twice: %s has it, and %s", e.ID, at, where(e))
	}
	k, positional := uint64(0), false
	if rest, ok := strings.CutPrefix(e.ID, s.session+"/"); ok {
		n, err := strconv.ParseUint(rest, 10, 64)
		k, positional = n, err == nil && n > 0 && strconv.FormatUint(n, 10) == rest
	}
	if positional && k <= uint64(len(s.byPos)) && s.byPos[k-1] {
		return fmt.Errorf("event ID %q is given twice: the event at %s seq %d has it, and %s", e.ID, s.session, k, where(e))
	}
	if positional && e.SessionID == s.session && k == e.Seq {
		for uint64(len(s.byPos)) < k {
			s.byPos = append(s.byPos, false)
		}
		s.byPos[k-1] = true
		return nil
	}
	if s.other == nil {
		s.other = map[string]string{}
	}
	s.other[e.ID] = where(e)
	return nil
}

// checkConfigEvent checks an export's event of a configuration's stream, whose
// payload is p: the one event, at seq 1, of the stream of the digest it holds.
func checkConfigEvent(e messages.Envelope, p messages.Payload) error {
	c, ok := p.(*messages.ConfigRecorded)
	switch {
	case !ok:
		return fmt.Errorf("a %s event where a configuration was expected", e.Type)
	case len(c.Digest) != 64 || strings.Trim(c.Digest, "0123456789abcdef") != "" || e.SessionID != messages.ConfigStream(c.Digest):
		return fmt.Errorf("the configuration %q in stream %q", c.Digest, e.SessionID)
	case e.Seq != 1 || e.ID != e.SessionID+"/1":
		return fmt.Errorf("the configuration %s at seq %d, ID %q: want seq 1, ID %s/1", c.Digest, e.Seq, e.ID, e.SessionID)
	case !actors.ConfigOfDigest(&c.Config, c.Digest):
		// A configuration whose secrets were redacted as it was stored (in
		// its prompts, its roster's and members' descriptions) has another
		// digest than its content's; any other is its digest's, whatever
		// else of the event says "[REDACTED]".
		return fmt.Errorf("the configuration in stream %s is not the one of its digest: it was changed", e.SessionID)
	}
	return nil
}

// forkEvents copies a session's first at events into a new session: event IDs,
// causation and correlation IDs and idempotency keys are re-derived for the new
// session (so its effects are its own; a named task's ID is its name's in the new
// session, node.NamedTaskID), and a session.forked event at at+1, stamped ts,
// links it to its parent. Payloads are otherwise identical, but for the times
// the fork goes on against (pendingAt): a task unfinished at at, and an
// approval pending there, keep the time they had left at at's event; and a
// fork of a sub-agent's child session records its tasks without their parent
// (messages.TaskSubmitted.Parent): it is no child of anyone, but keeps the
// child's depth (messages.TaskSubmitted.Depth).
func forkEvents(parent []messages.Envelope, at uint64, newID string, ts int64) ([]messages.Envelope, error) {
	plan := newForkPlan(at)
	if err := plan.add(parent); err != nil {
		return nil, err
	}
	c, err := plan.copier(newID, ts)
	if err != nil {
		return nil, err
	}
	out, err := c.copy(parent)
	if err != nil {
		return nil, err
	}
	link, err := c.link()
	if err != nil {
		return nil, err
	}
	return append(out, link), nil
}

// forkPlan is what a fork at seq at needs to know of its parent before it
// copies its first at events: found in a reading of the parent a page at a time
// (add), so that a fork never holds the parent whole.
type forkPlan struct {
	at    uint64
	oldID string
	n     uint64 // the parent's events
	bytes int    // the payload of its first at events
	atTS  int64  // the TS of the event at seq at
	// links are the parent's session.forked events after at with a shift of
	// times (a fork's own): the seq of each and its shift.
	links []forkLink
	// ended is, for each task (correlation) ID, the seq of its first end;
	// answered, for each approval's key, that of its first answer.
	ended, answered map[string]uint64
}

type forkLink struct {
	seq   uint64
	shift int64
}

func newForkPlan(at uint64) *forkPlan {
	return &forkPlan{at: at, ended: map[string]uint64{}, answered: map[string]uint64{}}
}

// add adds the parent's next events, in seq order.
func (f *forkPlan) add(events []messages.Envelope) error {
	for _, e := range events {
		if f.n == 0 {
			f.oldID = e.SessionID
		}
		f.n++
		if f.n == f.at {
			f.atTS = e.TS
		}
		if f.n <= f.at {
			f.bytes += len(e.Payload)
		}
		switch e.Type {
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			if _, ok := f.ended[e.CorrelationID]; !ok {
				f.ended[e.CorrelationID] = f.n
			}
		case messages.TypeApprovalResolved:
			if p, err := e.Decode(); err == nil {
				if key := p.(*messages.ApprovalResolved).Key; f.answered[key] == 0 {
					f.answered[key] = f.n
				}
			}
		case messages.TypeSessionForked:
			if f.n <= f.at {
				continue
			}
			p, err := e.Decode()
			if err != nil {
				return err
			}
			if back := p.(*messages.SessionForked).ShiftUS; back != 0 && e.Seq >= 1 && e.Seq-1 <= f.n {
				f.links = append(f.links, forkLink{seq: e.Seq, shift: back})
			}
		}
	}
	return nil
}

// copier returns what copies the parent's first at events into the fork newID,
// whose session.forked event is stamped ts. It fails when at is outside the
// parent's events.
func (f *forkPlan) copier(newID string, ts int64) (*forkCopier, error) {
	if f.at < 1 || f.at > f.n {
		return nil, fmt.Errorf("--at %d is outside the session's events 1..%d", f.at, f.n)
	}
	shift := ts - f.atTS
	// The times a fork of a fork moved are moved back first (pendingMoves).
	var moves []func(e messages.Envelope, p messages.Payload) bool
	for _, l := range f.links {
		moves = append(moves, f.pendingAt(l.seq-1, -l.shift))
	}
	moves = append(moves, f.pendingAt(f.at, shift))
	return &forkCopier{plan: f, newID: newID, ts: ts, shift: shift, ids: make(map[string]string), moves: moves}, nil
}

// pendingAt is pendingMoves at the parent's event at seq k.
func (f *forkPlan) pendingAt(k uint64, shift int64) func(e messages.Envelope, p messages.Payload) bool {
	within := func(seqs map[string]uint64) map[string]bool {
		out := map[string]bool{}
		for id, seq := range seqs {
			if seq <= k {
				out[id] = true
			}
		}
		return out
	}
	return pendingMoves(within(f.ended), within(f.answered), shift)
}

// forkCopier copies the parent's first at events into the fork, a page at a
// time, in seq order (copy), then makes the fork's session.forked event (link).
type forkCopier struct {
	plan   *forkPlan
	newID  string
	ts     int64
	shift  int64
	ids    map[string]string // the parent's event IDs copied, to the fork's
	moves  []func(e messages.Envelope, p messages.Payload) bool
	lastID string // the fork's last event copied
	// depth is how deep a sub-agent the session is (node.TaskDepth of its
	// first task), once tasks says a task was copied: a new task of the fork
	// keeps it.
	depth int
	tasks bool
}

// copy copies the events of page (the parent's next) up to seq at.
func (c *forkCopier) copy(page []messages.Envelope) ([]messages.Envelope, error) {
	oldID, newID := c.plan.oldID, c.newID
	rekey := func(k string) string {
		if rest, ok := strings.CutPrefix(k, oldID+"/"); ok {
			return newID + "/" + rest
		}
		return k
	}
	out := make([]messages.Envelope, 0, len(page))
	for _, e := range page {
		if e.Seq > c.plan.at {
			break
		}
		p, err := e.Decode()
		if err != nil {
			return nil, err
		}
		changed := false // the payload, from its recorded bytes
		for _, m := range c.moves {
			changed = m(e, p) || changed
		}
		switch p := p.(type) {
		case *messages.ModelRequested:
			p.Key = rekey(p.Key)
		case *messages.ModelResponded:
			p.Key = rekey(p.Key)
		case *messages.ToolCallRequested:
			p.Key = rekey(p.Key)
			p.Chain = rekey(p.Chain) // a chain step names its chain's call by key
		case *messages.ToolCallCompleted:
			p.Key = rekey(p.Key)
		case *messages.ApprovalRequested:
			p.Key = rekey(p.Key)
		case *messages.ApprovalResolved:
			p.Key = rekey(p.Key)
		case *messages.TaskSubmitted:
			// A fork of a sub-agent's child session is no child: no call of
			// the child's parent delegated it, nor waits for its answer (a
			// sub-agent's task is its call's child session's, which ingress
			// checks), and listed with that parent a node would take it for
			// one of the parent's sub-agents. Its session.forked names where
			// it came from; it delegates as a session of its own.
			// It keeps the child's depth all the same (TaskSubmitted.Depth):
			// it delegates no deeper than the child could, and a fork of it
			// no deeper again, so forks do not lift the bound on nesting.
			if p.Parent != nil {
				p.Depth, p.Parent, changed = node.TaskDepth(p), nil, true
			}
			if !c.tasks {
				c.tasks, c.depth = true, node.TaskDepth(p)
			}
		}
		ne, err := messages.NewEnvelope(p)
		if err != nil {
			return nil, err
		}
		ne.Version = e.Version
		if !hasKey(p) && !changed {
			ne.Payload = e.Payload // nothing to re-derive: copy the bytes as recorded
		}
		ne.ID = fmt.Sprintf("%s/%d", newID, e.Seq)
		if ts, ok := p.(*messages.TaskSubmitted); ok && ts.TaskID != "" {
			// A named task is the fork's by its name too: sent again to the
			// fork, it is this task, as it is the parent's in the parent.
			ne.ID = node.NamedTaskID(newID, ts.TaskID)
		}
		c.ids[e.ID] = ne.ID
		ne.SessionID, ne.Seq, ne.TS, ne.Actor = newID, e.Seq, e.TS, e.Actor
		ne.CausationID = mapID(c.ids, e.CausationID)
		ne.CorrelationID = mapID(c.ids, e.CorrelationID)
		c.lastID = ne.ID
		out = append(out, ne)
	}
	return out, nil
}

// link is the fork's session.forked event, at at+1, caused by the last event copied.
func (c *forkCopier) link() (messages.Envelope, error) {
	at := c.plan.at
	link, err := messages.NewEnvelope(&messages.SessionForked{ParentID: c.plan.oldID, AtSeq: at, ShiftUS: c.shift})
	if err != nil {
		return messages.Envelope{}, err
	}
	link.ID, link.SessionID, link.Seq, link.TS, link.Actor = fmt.Sprintf("%s/%d", c.newID, at+1), c.newID, at+1, c.ts, "replay"
	link.CausationID = c.lastID
	return link, nil
}

// pendingMoves returns the function that moves, by shift microseconds, the times
// still ahead at an event of the parent (a fork copies the events up to it),
// given the tasks ended and the approvals answered there: the deadline of each
// task that has not ended there (running or waiting its turn) and the expiry of
// each approval not answered there. It is given each
// event and its payload before its key is re-derived, and reports whether it
// changed the payload. The times are on the recording's clock: a fork made after
// them found its task past its deadline, or its approval expired (the answer asked
// on its terminal refused), the moment it went on, where the recording had time
// left at that event. Moved by the time from that event to the fork, they leave
// the fork the same time. A fork of a fork moves back the times its parent moved
// first (messages.SessionForked.ShiftUS), so that the copied events are on their
// recording's clock again, as their TS are, and a fork of a fork moves them once.
func pendingMoves(ended, answered map[string]bool, shift int64) func(e messages.Envelope, p messages.Payload) bool {
	return func(e messages.Envelope, p messages.Payload) bool {
		switch p := p.(type) {
		case *messages.TaskSubmitted:
			if p.DeadlineUS > 0 && !ended[e.ID] {
				p.DeadlineUS += shift
				return true
			}
		case *messages.ApprovalRequested:
			if p.ExpiresUS > 0 && !answered[p.Key] {
				p.ExpiresUS += shift
				return true
			}
		}
		return false
	}
}

func hasKey(p messages.Payload) bool {
	switch p.(type) {
	case *messages.ModelRequested, *messages.ModelResponded, *messages.ToolCallRequested, *messages.ToolCallCompleted,
		*messages.ApprovalRequested, *messages.ApprovalResolved:
		return true
	}
	return false
}

func mapID(ids map[string]string, id string) string {
	if n, ok := ids[id]; ok {
		return n
	}
	return id
}
