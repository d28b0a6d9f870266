package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// PrintStep prints one event as a human-readable step line, as `node run` shows
// them; done reports that the event finished a task, and code is the exit code a
// command should return for it (0 completed, 1 failed).
func PrintStep(w io.Writer, e messages.Envelope) (code int, done bool) {
	p, err := e.Decode()
	if err != nil {
		fmt.Fprintf(w, "  [%d] %s (undecodable: %v)\n", e.Seq, e.Type, err)
		return 0, false
	}
	switch p := p.(type) {
	case *messages.TaskSubmitted:
		fmt.Fprintf(w, "  [%d] task: %s\n", e.Seq, p.Input)
	case *messages.ModelRequested:
		fmt.Fprintf(w, "  [%d] model %s: step %d, %d messages\n", e.Seq, p.Model, p.Step, p.Messages)
	case *messages.ModelResponded:
		what := "answer"
		if len(p.Message.ToolCalls) > 0 {
			names := make([]string, len(p.Message.ToolCalls))
			for i, c := range p.Message.ToolCalls {
				names[i] = c.Name
			}
			what = "call " + strings.Join(names, ", ")
		}
		if p.Error != "" {
			what = "error: " + p.Error
		}
		fmt.Fprintf(w, "  [%d] model %s → %s (%d+%d tokens, %s)\n", e.Seq, p.Model, what, p.Usage.PromptTokens, p.Usage.CompletionTokens, micros(p.LatencyUS))
	case *messages.ToolCallRequested:
		fmt.Fprintf(w, "  [%d] tool %s(%s)\n", e.Seq, p.Tool, p.Arguments)
	case *messages.ToolCallCompleted:
		if p.Error != "" {
			fmt.Fprintf(w, "  [%d] tool %s → error: %s (%s)\n", e.Seq, p.Tool, p.Error, micros(p.LatencyUS))
		} else {
			fmt.Fprintf(w, "  [%d] tool %s → %s (%s)\n", e.Seq, p.Tool, p.Result, micros(p.LatencyUS))
		}
	case *messages.TaskCompleted:
		fmt.Fprintf(w, "  [%d] done in %d steps\nanswer: %s\n", e.Seq, p.Steps, p.Output)
		return 0, true
	case *messages.TaskFailed:
		fmt.Fprintf(w, "  [%d] failed (%s): %s\n", e.Seq, p.Reason, p.Error)
		return 1, true
	case *messages.SessionForked:
		fmt.Fprintf(w, "  [%d] forked from %s at seq %d\n", e.Seq, p.ParentID, p.AtSeq)
	}
	return 0, false
}

func micros(us int64) string {
	return (time.Duration(us) * time.Microsecond).String()
}

// Follow prints a session's live events with PrintStep until tasks tasks finished,
// and returns the exit code a command should return (1 if any failed). It returns an
// error when ctx ends or the live feed closes first.
func Follow(ctx context.Context, w io.Writer, live <-chan messages.Envelope, tasks int) (int, error) {
	code := 0
	for tasks > 0 {
		select {
		case <-ctx.Done():
			return 130, ctx.Err()
		case e, ok := <-live:
			if !ok {
				return 1, errors.New("lost the live event feed")
			}
			if c, done := PrintStep(w, e); done {
				code = max(code, c)
				tasks--
			}
		}
	}
	return code, nil
}
