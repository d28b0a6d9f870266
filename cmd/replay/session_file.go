package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The export format: JSON lines. The first line is a header; each further line is one
// event envelope exactly as messages.Marshal encodes it: the session's, in seq order,
// then (version 2) the events of the configurations' streams its tasks name
// (messages.ConfigRecorded), in digest order, which an import stores beside it.
// An export with no configuration is version 1, as builds before them wrote and read
// it. Golden files in testdata/ pin it.
const (
	exportFormat  = "troupe.session"
	exportVersion = 2
)

type exportHeader struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	SessionID string `json:"session_id"`
	Events    int    `json:"events"`
	// Configs counts the configurations' events after the session's (version 2).
	Configs int `json:"configs,omitempty"`
}

// ErrBadExport is wrapped by every error about an export file's content.
var ErrBadExport = errors.New("bad session export")

// writeExport writes the export of a session's events and its configurations'
// events, held whole.
func writeExport(w io.Writer, events []messages.Envelope, configs ...messages.Envelope) error {
	x, err := newExportWriter(w, events[0].SessionID, len(events), len(configs))
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

func newExportWriter(w io.Writer, sessionID string, events, configs int) (*exportWriter, error) {
	version := 1
	if configs > 0 {
		version = exportVersion
	}
	h, err := json.Marshal(exportHeader{Format: exportFormat, Version: version, SessionID: sessionID, Events: events, Configs: configs})
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
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
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
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: the file is gzip'd, and its gzip header is bad: %w", ErrBadExport, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 64<<10)
	}
	lr := &lineReader{r: br}
	first, err := lr.next()
	if err == io.EOF {
		return nil, nil, fmt.Errorf("%w: the file is empty", ErrBadExport)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadExport, err)
	}
	first = bytes.TrimPrefix(first, []byte("\ufeff")) // a byte order mark
	var h exportHeader
	d := json.NewDecoder(bytes.NewReader(first))
	d.DisallowUnknownFields()
	if err := d.Decode(&h); err != nil {
		return nil, nil, fmt.Errorf("%w: line 1 is not an export header: %v", ErrBadExport, err)
	}
	switch {
	case h.Format != exportFormat:
		return nil, nil, fmt.Errorf("%w: line 1: format %q, want %q", ErrBadExport, h.Format, exportFormat)
	case h.Version > exportVersion:
		return nil, nil, fmt.Errorf("%w: export format version %d is newer than this build reads (%d)", ErrBadExport, h.Version, exportVersion)
	case h.Version < 1:
		return nil, nil, fmt.Errorf("%w: export format version %d is invalid", ErrBadExport, h.Version)
	case h.Configs < 0 || h.Configs > 0 && h.Version < 2:
		return nil, nil, fmt.Errorf("%w: line 1: %d configurations in an export of version %d", ErrBadExport, h.Configs, h.Version)
	case h.SessionID == "":
		return nil, nil, fmt.Errorf("%w: the header names no session", ErrBadExport)
	case !node.ValidSessionID(h.SessionID):
		return nil, nil, fmt.Errorf("%w: line 1: session ID %q: a session ID is %s", ErrBadExport, h.SessionID, node.SessionIDRule)
	}
	for {
		b, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadExport, err)
		}
		line := lr.line
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if len(events) == h.Events && len(configs) == h.Configs {
			// Past what the header counts: another export (two files
			// concatenated), or events added by hand.
			var next exportHeader
			if json.Unmarshal(b, &next) == nil && next.Format == exportFormat {
				return nil, nil, fmt.Errorf("%w: line %d: the header of another export (of session %q) after the %d events and %d configurations of this one: import one export per file",
					ErrBadExport, line, next.SessionID, h.Events, h.Configs)
			}
			return nil, nil, fmt.Errorf("%w: line %d: more lines than the header's %d events and %d configurations", ErrBadExport, line, h.Events, h.Configs)
		}
		e, err := messages.Unmarshal(b)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
		}
		p, err := e.Decode()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
		}
		if len(events) == h.Events && h.Configs > 0 {
			if err := checkConfigEvent(e, p); err != nil {
				return nil, nil, fmt.Errorf("%w: line %d: %w", ErrBadExport, line, err)
			}
			configs = append(configs, e)
			continue
		}
		if e.SessionID != h.SessionID {
			return nil, nil, fmt.Errorf("%w: line %d: event of session %q in an export of %q", ErrBadExport, line, e.SessionID, h.SessionID)
		}
		if want := uint64(len(events) + 1); e.Seq != want {
			return nil, nil, fmt.Errorf("%w: line %d: seq %d where %d was expected (events missing or out of order)", ErrBadExport, line, e.Seq, want)
		}
		events = append(events, e)
	}
	if len(events) != h.Events || len(configs) != h.Configs {
		return nil, nil, fmt.Errorf("%w: the header promises %d events and %d configurations, the file has %d and %d (truncated?)", ErrBadExport, h.Events, h.Configs, len(events), len(configs))
	}
	if len(events) == 0 {
		return nil, nil, fmt.Errorf("%w: no events", ErrBadExport)
	}
	return events, configs, nil
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
	}
	return nil
}

// forkEvents copies a session's first at events into a new session: event IDs,
// causation and correlation IDs and idempotency keys are re-derived for the new
// session (so its effects are its own; a named task's ID is its name's in the new
// session, node.NamedTaskID), and a session.forked event at at+1, stamped ts,
// links it to its parent. Payloads are otherwise identical, but for the times
// the fork goes on against (pendingAt): a task unfinished at at, and an
// approval pending there, keep the time they had left at at's event.
func forkEvents(parent []messages.Envelope, at uint64, newID string, ts int64) ([]messages.Envelope, error) {
	if at < 1 || at > uint64(len(parent)) {
		return nil, fmt.Errorf("--at %d is outside the session's events 1..%d", at, len(parent))
	}
	oldID := parent[0].SessionID
	shift := ts - parent[at-1].TS
	moveTimes, err := forkMoves(parent, at, shift)
	if err != nil {
		return nil, err
	}
	ids := make(map[string]string, at)
	rekey := func(k string) string {
		if rest, ok := strings.CutPrefix(k, oldID+"/"); ok {
			return newID + "/" + rest
		}
		return k
	}
	out := make([]messages.Envelope, 0, at+1)
	for _, e := range parent[:at] {
		p, err := e.Decode()
		if err != nil {
			return nil, err
		}
		moved := moveTimes(e, p)
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
		}
		ne, err := messages.NewEnvelope(p)
		if err != nil {
			return nil, err
		}
		ne.Version = e.Version
		if !hasKey(p) && !moved {
			ne.Payload = e.Payload // nothing to re-derive: copy the bytes as recorded
		}
		ne.ID = fmt.Sprintf("%s/%d", newID, e.Seq)
		if ts, ok := p.(*messages.TaskSubmitted); ok && ts.TaskID != "" {
			// A named task is the fork's by its name too: sent again to the
			// fork, it is this task, as it is the parent's in the parent.
			ne.ID = node.NamedTaskID(newID, ts.TaskID)
		}
		ids[e.ID] = ne.ID
		ne.SessionID, ne.Seq, ne.TS, ne.Actor = newID, e.Seq, e.TS, e.Actor
		ne.CausationID = mapID(ids, e.CausationID)
		ne.CorrelationID = mapID(ids, e.CorrelationID)
		out = append(out, ne)
	}
	link, err := messages.NewEnvelope(&messages.SessionForked{ParentID: oldID, AtSeq: at, ShiftUS: shift})
	if err != nil {
		return nil, err
	}
	link.ID, link.SessionID, link.Seq, link.TS, link.Actor = fmt.Sprintf("%s/%d", newID, at+1), newID, at+1, ts, "replay"
	link.CausationID = out[len(out)-1].ID
	return append(out, link), nil
}

// forkMoves returns the function that moves the times of the events of parent
// a fork at at copies (pendingAt, by shift). parent may be a fork itself, whose
// session.forked events after at each moved the times of the events before them
// (messages.SessionForked.ShiftUS): those moves are undone first, so that the
// copied events are on their recording's clock again, as their TS are, and a
// fork of a fork moves them once.
func forkMoves(parent []messages.Envelope, at uint64, shift int64) (func(e messages.Envelope, p messages.Payload) bool, error) {
	moves := []func(e messages.Envelope, p messages.Payload) bool{}
	for _, l := range parent[at:] {
		if l.Type != messages.TypeSessionForked {
			continue
		}
		p, err := l.Decode()
		if err != nil {
			return nil, err
		}
		if back := p.(*messages.SessionForked).ShiftUS; back != 0 && l.Seq >= 1 && l.Seq-1 <= uint64(len(parent)) {
			moves = append(moves, pendingAt(parent[:l.Seq-1], -back))
		}
	}
	moves = append(moves, pendingAt(parent[:at], shift))
	return func(e messages.Envelope, p messages.Payload) bool {
		moved := false
		for _, m := range moves {
			moved = m(e, p) || moved
		}
		return moved
	}, nil
}

// pendingAt returns the function that moves, by shift microseconds, the times
// still ahead at the last of events (a session's first events, as a fork copies
// them): the deadline of each task that has not ended there (running or waiting
// its turn) and the expiry of each approval not answered there. It is given each
// event and its payload before its key is re-derived, and reports whether it
// changed the payload. The times are on the recording's clock: a fork made after
// them found its task past its deadline, or its approval expired (the answer asked
// on its terminal refused), the moment it went on, where the recording had time
// left at that event. Moved by the time from that event to the fork, they leave
// the fork the same time.
func pendingAt(events []messages.Envelope, shift int64) func(e messages.Envelope, p messages.Payload) bool {
	ended, answered := map[string]bool{}, map[string]bool{}
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			ended[e.CorrelationID] = true
		case messages.TypeApprovalResolved:
			if p, err := e.Decode(); err == nil {
				answered[p.(*messages.ApprovalResolved).Key] = true
			}
		}
	}
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
