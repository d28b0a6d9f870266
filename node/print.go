package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
)

// PrintStep prints one event as a human-readable step line, as `node run` shows
// them; done reports that the event finished a task, and code is the exit code a
// command should return for it (0 completed, 1 failed). Its text goes through
// EscapeControls: tasks and model output reach the terminal as text, never as its
// commands.
func PrintStep(w io.Writer, e messages.Envelope) (code int, done bool) {
	printf := func(format string, args ...any) {
		io.WriteString(w, EscapeControls(fmt.Sprintf(format, args...)))
	}
	p, err := e.Decode()
	if err != nil {
		printf("  [%d] %s (undecodable: %v)\n", e.Seq, e.Type, err)
		return 0, false
	}
	switch p := p.(type) {
	case *messages.TaskSubmitted:
		printf("  [%d] task: %s\n", e.Seq, p.Input)
	case *messages.ModelRequested:
		if p.Purpose != "" {
			printf("  [%d] model %s: %s, step %d, %d messages\n", e.Seq, p.Model, p.Purpose, p.Step, p.Messages)
			break
		}
		printf("  [%d] model %s: step %d, %d messages\n", e.Seq, p.Model, p.Step, p.Messages)
	case *messages.ModelResponded:
		what := "answer"
		if len(p.Message.ToolCalls) > 0 {
			names := make([]string, len(p.Message.ToolCalls))
			for i, c := range p.Message.ToolCalls {
				names[i] = oneLine(c.Name)
			}
			what = "call " + strings.Join(names, ", ")
		}
		if p.Error != "" {
			what = "error: " + p.Error
		}
		printf("  [%d] model %s → %s (%d+%d tokens, %s)\n", e.Seq, p.Model, what, p.Usage.PromptTokens, p.Usage.CompletionTokens, micros(p.LatencyUS))
	case *messages.ToolCallRequested:
		if p.ChainStep != "" {
			printf("  [%d] chain step %s: tool %s(%s)\n", e.Seq, oneLine(p.ChainStep), oneLine(p.Tool), oneLine(p.Arguments))
			break
		}
		if p.Purpose != "" {
			printf("  [%d] %s: tool %s(%s)\n", e.Seq, oneLine(PurposeLabel(p.Purpose, p.CallID)), oneLine(p.Tool), oneLine(p.Arguments))
			break
		}
		printf("  [%d] tool %s(%s)\n", e.Seq, oneLine(p.Tool), oneLine(p.Arguments))
	case *messages.ToolCallCompleted:
		// A result is a tool's text, or a sub-agent's (a team member's) answer:
		// on the line too, so that it cannot pose as the steps after it.
		if p.Error != "" {
			printf("  [%d] tool %s → error: %s (%s)\n", e.Seq, oneLine(p.Tool), oneLine(p.Error), micros(p.LatencyUS))
		} else if k, err := messages.ParseEffectKey(p.Key); err == nil && p.Tool == DelegateTool {
			printf("  [%d] tool %s → %s (child session %s, %s)\n", e.Seq, p.Tool, oneLine(p.Result), ChildSessionID(k), micros(p.LatencyUS))
		} else {
			printf("  [%d] tool %s → %s (%s)\n", e.Seq, oneLine(p.Tool), oneLine(p.Result), micros(p.LatencyUS))
		}
	case *messages.TaskCompleted:
		note := ""
		if p.Note != "" {
			note = " (" + p.Note + ")"
		}
		printf("  [%d] done in %d steps%s\nanswer: %s\n", e.Seq, p.Steps, note, p.Output)
		return 0, true
	case *messages.TaskFailed:
		printf("  [%d] failed (%s): %s\n", e.Seq, p.Reason, p.Error)
		return 1, true
	case *messages.ApprovalRequested:
		expires := "waits for ever"
		if p.ExpiresUS > 0 {
			expires = "expires " + time.UnixMicro(p.ExpiresUS).UTC().Format(time.RFC3339)
		}
		printf("  [%d] approval needed: tool %s(%s), call %s (%s)\n", e.Seq, oneLine(p.Tool), oneLine(p.Arguments), oneLine(p.CallID), expires)
	case *messages.ApprovalResolved:
		verdict := "approved"
		if !p.Approve {
			verdict = "rejected"
		}
		if p.Reason != "" {
			verdict += ": " + oneLine(p.Reason)
		}
		printf("  [%d] %s (by %s)\n", e.Seq, verdict, p.By)
	case *messages.SessionForked:
		printf("  [%d] forked from %s at seq %d\n", e.Seq, p.ParentID, p.AtSeq)
	case *messages.TeamStateUpdated:
		printf("  [%d] team state: %s %s.%s by %s: %s\n", e.Seq, oneLine(p.Op), oneLine(p.Section), oneLine(p.Key), oneLine(p.By), oneLine(p.Value))
	}
	return 0, false
}

// oneLine keeps a field of a step line (a tool's name, as the model wrote it, its
// arguments) on the line: newlines and tabs become \n and \t (EscapeControls, which
// keeps them, does the rest).
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\t") {
		return s
	}
	return strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(s)
}

// EscapeControls makes text safe to print to a terminal: every character that a
// terminal may take as a command rather than text is written as an escape sequence.
// C0 controls other than newline and tab, DEL and C1 controls become \a \b \f \r \v
// or \xNN (ESC is \x1b) and \u0080-\u009f; bidirectional overrides and isolates and
// the line and paragraph separators become \uNNNN (U+202E is \u202e); bytes that are
// not UTF-8 become \xNN (a lone 0x9b is CSI to some terminals). Everything else,
// newlines and any script included, is kept. The CLIs print tasks, model output and
// tool results through it; JSON output needs no such care.
func EscapeControls(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !needsEscape(r, size) {
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		switch {
		case r == utf8.RuneError:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\a':
			b.WriteString(`\a`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\v':
			b.WriteString(`\v`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// needsEscape reports whether EscapeControls escapes the rune r of size bytes.
func needsEscape(r rune, size int) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r == utf8.RuneError && size == 1: // not UTF-8
		return true
	case r < 0x80:
		return r < 0x20 || r == 0x7f
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

func micros(us int64) string {
	return (time.Duration(us) * time.Microsecond).String()
}

// ErrLostFeed is Follow's error when its live feed closed before its tasks
// finished; a feed of Node.WatchResuming says why (its lost).
var ErrLostFeed = errors.New("lost the live event feed")

// Follow prints a session's live events with PrintStep until tasks tasks finished,
// and returns the exit code a command should return (1 if any failed). It returns an
// error when ctx ends or the live feed closes first.
func Follow(ctx context.Context, w io.Writer, live <-chan messages.Envelope, tasks int) (int, error) {
	return FollowEach(ctx, w, live, tasks, nil)
}

// FollowEach is Follow that also hands each event, once printed, to each (when not
// nil); an error from each ends it with exit code 1.
//
// A feed of Node.WatchDeltas also has model.delta envelopes: the text of each model
// answer is printed as it streams, indented on lines of its own before the answer's
// step line, and each is handed to each too; a retried stream starts again on a new
// line "(again)".
func FollowEach(ctx context.Context, w io.Writer, live <-chan messages.Envelope, tasks int, each func(messages.Envelope) error) (int, error) {
	code := 0
	var streamed deltaText
	for tasks > 0 {
		select {
		case <-ctx.Done():
			return 130, ctx.Err()
		case e, ok := <-live:
			if !ok {
				return 1, ErrLostFeed
			}
			if e.Type == messages.TypeModelDelta { // a feed of WatchDeltas
				streamed.print(w, e)
				continue
			}
			streamed.end(w)
			if c, done := PrintStep(w, e); done {
				code = max(code, c)
				tasks--
			}
			if each != nil {
				if err := each(e); err != nil {
					return 1, err
				}
			}
		}
	}
	return code, nil
}

// deltaText prints the text of streamed model answers (model.delta) as it comes.
type deltaText struct {
	key string // the call whose text is being printed; "" when none is
	bol bool   // the next text starts a line (and its indent)
}

// print prints a delta's text, if it has any; undecodable ones are skipped (the
// answer comes whole anyway).
func (t *deltaText) print(w io.Writer, e messages.Envelope) {
	p, err := e.Decode()
	d, ok := p.(*messages.ModelDelta)
	if err != nil || !ok || d.Content == "" {
		return
	}
	switch {
	case t.key != d.Key:
		t.end(w)
		t.key, t.bol = d.Key, true
	case d.Reset:
		t.end(w)
		t.key, t.bol = d.Key, true
		io.WriteString(w, "  │ (again)\n")
	}
	for _, line := range strings.SplitAfter(EscapeControls(d.Content), "\n") {
		if line == "" {
			continue
		}
		if t.bol {
			io.WriteString(w, "  │ ")
		}
		io.WriteString(w, line)
		t.bol = strings.HasSuffix(line, "\n")
	}
}

// end ends the streamed text's line before anything else is printed.
func (t *deltaText) end(w io.Writer) {
	if t.key != "" && !t.bol {
		io.WriteString(w, "\n")
	}
	t.key, t.bol = "", false
}

// PurposeLabel names a paradigm's tool call in a step's line: its purpose and its
// call ID ("branch work-1"), or the purpose alone when the ID repeats it
// ("lessons", not "lessons lessons").
func PurposeLabel(purpose, callID string) string {
	if callID == "" || callID == purpose {
		return purpose
	}
	return purpose + " " + callID
}
