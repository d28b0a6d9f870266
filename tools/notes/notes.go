package notes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/entity"
	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// StreamPrefix starts the ID of every notes stream in the event log.
const StreamPrefix = eventlog.NotesStreamPrefix

// Status is what session listings (replay list) show as the status of a notes
// stream, which is not a session and has none.
const Status = "notes"

// Stream returns the ID of the stream that holds agent's notes.
func Stream(agent string) string { return StreamPrefix + agent }

// IsStream reports whether a stream ID of the event log is a notes stream, not a
// session: whoever resumes or runs sessions skips it.
func IsStream(id string) bool { return strings.HasPrefix(id, StreamPrefix) }

// Defaults and bounds of Config.
const (
	DefaultMaxBodyBytes = 8 << 10
	DefaultMaxTags      = 16
	DefaultMaxNotes     = 1000
	// MaxWordLen bounds a type and a tag, in characters.
	MaxWordLen = 32
	// MaxAttempts bounds the appends of one write that lose their seq to another
	// writer of the stream.
	MaxAttempts = entity.MaxAttempts
	// DefaultLimit and MaxLimit bound the notes list and search return.
	DefaultLimit = 20
	MaxLimit     = 100
	// defaultType is the type of a note added without one.
	defaultType = "note"
)

// Config configures an agent's notes.
type Config struct {
	// Log holds the notes' events (required).
	Log eventlog.Log
	// Agent names the agent whose notes these are (default "default"): they live in
	// the stream Stream(Agent).
	Agent string
	// MaxBodyBytes bounds a note's body (default DefaultMaxBodyBytes).
	MaxBodyBytes int
	// MaxTags bounds a note's tags (default DefaultMaxTags).
	MaxTags int
	// MaxNotes bounds the notes the agent keeps at once (default DefaultMaxNotes).
	MaxNotes int
	// Expand makes Tools return one tool per operation (notes_add, …) instead of the
	// one notes tool.
	Expand bool
	// Redact, when set, rewrites the text of a note (type, tags, body) before it is
	// stored: secrets must not enter events (package redact).
	Redact func(string) string
	// Now is the clock of the events' TS (default time.Now).
	Now func() time.Time
	// WritesRefused, when set, is why add, update and remove change nothing: each
	// answers ErrWritesRefused saying so, and list and search work. The tool's
	// operations and schemas are the same, so prompts are (a replay fork's notes,
	// which are the served node's).
	WritesRefused string
}

// Validate reports a configuration that cannot work. It does not look at Log,
// which whoever builds the notes may fill in later (a node, with its own log); New
// requires it.
func (c Config) Validate() error {
	switch {
	case c.Agent != "" && (strings.ContainsAny(c.Agent, "/\x00") || len(c.Agent) > 128):
		return fmt.Errorf("notes: agent %q: want at most 128 characters, no '/'", c.Agent)
	case c.MaxBodyBytes < 0 || c.MaxTags < 0 || c.MaxNotes < 0:
		return errors.New("notes: limits must not be negative")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Agent == "" {
		c.Agent = "default"
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxTags == 0 {
		c.MaxTags = DefaultMaxTags
	}
	if c.MaxNotes == 0 {
		c.MaxNotes = DefaultMaxNotes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Note is one note.
type Note struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Tags    []string  `json:"tags,omitempty"`
	Body    string    `json:"body"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`

	updatedSeq uint64 // orders the notes, most recently changed first
}

// Errors a note's change can fail with. Each also wraps tools.ErrInvalidArguments:
// the model's input was at fault, it reads why, and nothing retries the call.
var (
	ErrUnknownNote = errors.New("no such note")
	ErrBadNote     = errors.New("bad note")
	ErrLimit       = errors.New("over a notes limit")
)

// ErrWritesRefused is the error of a change of the notes while their writes are
// refused (Config.WritesRefused).
var ErrWritesRefused = errors.New("notes writes are refused here")

// inputError is an error in the model's input: it reads as its text and is both
// its kind and tools.ErrInvalidArguments.
type inputError struct {
	kind error
	text string
}

func (e *inputError) Error() string   { return "notes: " + e.text }
func (e *inputError) Unwrap() []error { return []error{e.kind, tools.ErrInvalidArguments} }

func inputErr(kind error, format string, args ...any) error {
	return &inputError{kind: kind, text: fmt.Sprintf(format, args...)}
}

// ErrConflict is wrapped by the error of a write that lost its seq to other writers
// MaxAttempts times in a row. It is transient: the call may be made again.
var ErrConflict = errors.New("notes: the notes stream kept changing under the write")

// Notes is an agent's notes: the fold of its stream, kept up to date with the log
// before every operation. It is safe for concurrent use; the writes called at once
// are decided one after another and appended together (entity.Batch).
type Notes struct {
	cfg    Config
	stream string
	s      entity.Stream
	batch  entity.Batch // the writes, decided and appended in groups

	mu    sync.Mutex
	seq   uint64            // the last seq folded
	notes map[string]*Note  // by ID
	keys  map[string]string // call key -> the note it changed
}

// New returns the notes of cfg.Agent. It reads nothing yet: every operation folds
// what the stream gained since the last one.
func New(cfg Config) (*Notes, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		return nil, errors.New("notes: no event log")
	}
	cfg.setDefaults()
	n := &Notes{cfg: cfg, stream: Stream(cfg.Agent), notes: map[string]*Note{}, keys: map[string]string{}}
	n.s = entity.Stream{Log: cfg.Log, ID: n.stream, Kind: "notes", Actor: "tool/notes", IDPrefix: "note-", Now: cfg.Now, Conflict: ErrConflict}
	n.batch = entity.Batch{Stream: &n.s, Fold: notesFold{n}, Lock: &n.mu}
	return n, nil
}

// Stream returns the ID of the stream the notes live in.
func (n *Notes) Stream() string { return n.stream }

// refresh folds the events appended since the last fold. The caller holds mu.
func (n *Notes) refresh(ctx context.Context) error { return n.s.CatchUp(ctx, notesFold{n}) }

// apply folds one event of the stream.
func (n *Notes) apply(e messages.Envelope) error {
	p, err := e.Decode()
	if err != nil {
		return fmt.Errorf("notes: %w", err)
	}
	ts := time.UnixMicro(e.TS).UTC()
	var key, id string
	switch p := p.(type) {
	case *messages.NoteAdded:
		key, id = p.Key, p.NoteID
		n.notes[id] = &Note{ID: id, Type: p.Type, Tags: slices.Clone(p.Tags), Body: p.Body, Created: ts, Updated: ts, updatedSeq: e.Seq}
	case *messages.NoteUpdated:
		key, id = p.Key, p.NoteID
		if note := n.notes[id]; note != nil {
			if p.Type != nil {
				note.Type = *p.Type
			}
			if p.Tags != nil {
				note.Tags = slices.Clone(*p.Tags)
			}
			if p.Body != nil {
				note.Body = *p.Body
			}
			note.Updated, note.updatedSeq = ts, e.Seq
		}
	case *messages.NoteRemoved:
		key, id = p.Key, p.NoteID
		delete(n.notes, id)
	default:
		return fmt.Errorf("notes: %s seq %d: a %s event has no place in a notes stream", e.SessionID, e.Seq, e.Type)
	}
	if key != "" {
		n.keys[key] = id
	}
	n.seq = e.Seq
	return nil
}

// write makes one change (entity.Batch.Write): it folds the stream and, unless a
// change with the call's key is in it already, appends the event change builds for
// the next seq, again after a refold when another writer took that seq. The changes
// called at once are decided one after another and appended together. change
// checks the input against the folded notes (with mu held); its error is returned,
// with nothing written. write returns the ID of the note the change (or the earlier
// one with the same key) changed. While writes are refused (Config.WritesRefused)
// it changes nothing and says why.
func (n *Notes) write(ctx context.Context, change func(seq uint64) (messages.Payload, error)) (string, error) {
	if n.cfg.WritesRefused != "" {
		return "", fmt.Errorf("%w: %s", ErrWritesRefused, n.cfg.WritesRefused)
	}
	key := tools.CallKey(ctx)
	var made messages.Payload
	var id string
	err := n.batch.Write(ctx, key, func(context.Context) ([]messages.Payload, error) {
		p, err := change(n.seq + 1)
		if err != nil {
			return nil, err
		}
		made = p
		return []messages.Payload{p}, nil
	}, func(applied bool) {
		if applied {
			id = n.keys[key]
		} else {
			id = n.idOf(made)
		}
	})
	return id, err
}

// notesFold is the notes as entity.Stream folds them. The caller holds mu.
type notesFold struct{ *Notes }

func (f notesFold) Seq() uint64                     { return f.seq }
func (f notesFold) Apply(e messages.Envelope) error { return f.apply(e) }
func (f notesFold) Sync(context.Context) error      { return nil }
func (f notesFold) Reset()                          { f.seq, f.notes, f.keys = 0, map[string]*Note{}, map[string]string{} }
func (f notesFold) Applied(key string) bool {
	_, ok := f.keys[key]
	return ok
}

// Add adds a note and returns it. typ defaults to "note".
func (n *Notes) Add(ctx context.Context, typ string, tags []string, body string) (Note, error) {
	t, tg, b, err := n.clean(ptrOr(typ, defaultType), &tags, &body)
	if err != nil {
		return Note{}, err
	}
	return n.get(n.write(ctx, func(seq uint64) (messages.Payload, error) {
		if len(n.notes) >= n.cfg.MaxNotes {
			return nil, inputErr(ErrLimit, "the agent keeps %d notes, the limit: remove or update notes it no longer needs before adding one", len(n.notes))
		}
		return &messages.NoteAdded{Key: tools.CallKey(ctx), NoteID: "n" + strconv.FormatUint(seq, 10), Type: *t, Tags: *tg, Body: *b}, nil
	}))
}

// Update changes the fields of note id that are set (non-nil) and returns it.
func (n *Notes) Update(ctx context.Context, id string, typ *string, tags *[]string, body *string) (Note, error) {
	if typ == nil && tags == nil && body == nil {
		return Note{}, inputErr(ErrBadNote, "nothing to update: give the note's new type, tags or body")
	}
	typ, tags, body, err := n.clean(typ, tags, body)
	if err != nil {
		return Note{}, err
	}
	id = strings.TrimSpace(id)
	return n.get(n.write(ctx, func(uint64) (messages.Payload, error) {
		if n.notes[id] == nil {
			return nil, n.unknown(id)
		}
		return &messages.NoteUpdated{Key: tools.CallKey(ctx), NoteID: id, Type: typ, Tags: tags, Body: body}, nil
	}))
}

// Remove removes note id.
func (n *Notes) Remove(ctx context.Context, id string) error {
	id = strings.TrimSpace(id)
	_, err := n.write(ctx, func(uint64) (messages.Payload, error) {
		if n.notes[id] == nil {
			return nil, n.unknown(id)
		}
		return &messages.NoteRemoved{Key: tools.CallKey(ctx), NoteID: id}, nil
	})
	return err
}

func (n *Notes) unknown(id string) error {
	return inputErr(ErrUnknownNote, "no note has the id %q: list or search the notes to find their ids", textclip.Head(id, 48))
}

// idOf returns the note an event of the stream changes.
func (n *Notes) idOf(p messages.Payload) string {
	switch p := p.(type) {
	case *messages.NoteAdded:
		return p.NoteID
	case *messages.NoteUpdated:
		return p.NoteID
	case *messages.NoteRemoved:
		return p.NoteID
	}
	return ""
}

// get returns a copy of note id, as it is now, after the write that returned it: a
// note removed since is unknown.
func (n *Notes) get(id string, err error) (Note, error) {
	if err != nil {
		return Note{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	note := n.notes[id]
	if note == nil {
		return Note{}, n.unknown(id)
	}
	return copyNote(note), nil
}

func copyNote(note *Note) Note {
	c := *note
	c.Tags = slices.Clone(note.Tags)
	return c
}

func ptrOr(s, dflt string) *string {
	if strings.TrimSpace(s) == "" {
		s = dflt
	}
	return &s
}

// clean checks and normalizes the fields of a change that are set: type and tags
// lowercased words (tags sorted, without repeats), the body trimmed, all redacted.
func (n *Notes) clean(typ *string, tags *[]string, body *string) (*string, *[]string, *string, error) {
	if typ != nil {
		t, err := n.word("type", *typ)
		if err != nil {
			return nil, nil, nil, err
		}
		typ = &t
	}
	if tags != nil {
		out := make([]string, 0, len(*tags))
		for _, raw := range *tags {
			t, err := n.word("tag", raw)
			if err != nil {
				return nil, nil, nil, err
			}
			out = append(out, t)
		}
		slices.Sort(out)
		out = slices.Compact(out)
		if len(out) > n.cfg.MaxTags {
			return nil, nil, nil, inputErr(ErrLimit, "%d tags; a note has at most %d", len(out), n.cfg.MaxTags)
		}
		tags = &out
	}
	if body != nil {
		b := strings.TrimSpace(*body)
		switch {
		case b == "":
			return nil, nil, nil, inputErr(ErrBadNote, "the body is empty: a note needs its text")
		case len(b) > n.cfg.MaxBodyBytes:
			return nil, nil, nil, inputErr(ErrLimit, "the body is %d bytes; the limit is %d: keep a note short, or split it", len(b), n.cfg.MaxBodyBytes)
		case !utf8.ValidString(b):
			return nil, nil, nil, inputErr(ErrBadNote, "the body is not UTF-8 text")
		}
		b = n.redact(b)
		body = &b
	}
	return typ, tags, body, nil
}

// word checks a type or a tag: 1 to MaxWordLen letters, digits, '-', '_', '.' or
// ':', lowercased.
func (n *Notes) word(what, s string) (string, error) {
	w := strings.ToLower(strings.TrimSpace(s))
	bad := w == "" || utf8.RuneCountInString(w) > MaxWordLen
	for _, r := range w {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("-_.:", r) {
			bad = true
		}
	}
	if bad {
		return "", inputErr(ErrBadNote, "%s %q is not a word: use 1 to %d letters, digits, '-', '_', '.' or ':' (no spaces)", what, textclip.Head(s, 48), MaxWordLen)
	}
	return n.redact(w), nil
}

func (n *Notes) redact(s string) string {
	if n.cfg.Redact == nil {
		return s
	}
	return n.cfg.Redact(s)
}
