package a2a_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// A file part in a remote agent's answer is described to the model (its name,
// media type and size), its bytes neither shown nor kept: a file of some MiB, in
// one artifact update or appended in pieces, or in an answer that does not
// stream, passes an answer bound of 1 MiB, which counts what the model reads. A
// single multi-MiB file part failed the call before (ErrAnswerTooLarge), its
// bytes counted as if the model read them.
func TestToolDescribesTheFilesOfAnAnswer(t *testing.T) {
	big := base64.StdEncoding.EncodeToString(make([]byte, 3<<20)) // 3 MiB, 4 MiB of base64
	chunk := strings.Repeat("QUFB", 16<<10)                       // 48 KiB, 64 KiB of base64
	file := func(name, bytes string) string {
		return fmt.Sprintf(`{"kind":"file","file":{"name":%q,"mimeType":"application/octet-stream","bytes":%q}}`, name, bytes)
	}
	done := `{"kind":"status-update","taskId":"t-1","contextId":"c-1","status":{"state":"completed"},"final":true}`
	for _, c := range []struct {
		name      string
		streaming bool
		events    func() []string
		want      string
	}{
		{"one multi-MiB part streamed", true, func() []string {
			return []string{workingTask, `{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","artifact":{"artifactId":"a","parts":[` +
				`{"kind":"text","text":"here it is"},` + file("big.bin", big) + `]}}`, done}
		}, "here it is\n[file \"big.bin\", application/octet-stream, 3145728 bytes]\n\n(context_id: c-1)"},
		{"pieces appended", true, func() []string {
			events := []string{workingTask}
			for i := range 64 { // 4 MiB of base64
				events = append(events, fmt.Sprintf(`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","append":%t,"artifact":{"artifactId":"a","parts":[%s]}}`,
					i > 0, file(fmt.Sprintf("part-%d", i), chunk)))
			}
			return append(events, done)
		}, "[file \"part-0\", application/octet-stream, 49152 bytes]\n"},
		{"an answer that does not stream", false, func() []string {
			return []string{`{"kind":"message","messageId":"m-1","contextId":"c-1","role":"agent","parts":[{"kind":"text","text":"attached"},` + file("big.bin", big) + `]}`}
		}, "attached\n[file \"big.bin\", application/octet-stream, 3145728 bytes]\n\n(context_id: c-1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			events := c.events()
			ra := newRemoteAgent(t, c.streaming, map[string]rpcAnswer{
				"message/stream": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { sse(w, id, events...) },
				"message/send":   func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, events[0]) },
			})
			tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			out, err := tool.Call(context.Background(), tools.Call{Key: "s/files", Arguments: `{"message":"send files"}`})
			if err != nil || !strings.HasPrefix(out, c.want) || len(out) > 64<<10 {
				t.Fatalf("Call = %.300q (%d bytes), %v; want it to begin %q", out, len(out), err, c.want)
			}
		})
	}
}

// What a call reads of an answer as sent, files' bytes included, is bounded all
// the same (MaxStreamBytes): a stream of file parts past it fails the call
// saying so, and cancels the remote task, rather than being read without end.
func TestToolBoundsTheStreamItReads(t *testing.T) {
	chunk := strings.Repeat("QUFB", 16<<10) // 64 KiB of base64
	ra := newRemoteAgent(t, true, map[string]rpcAnswer{
		"message/stream": func(w http.ResponseWriter, r *http.Request, id, _ json.RawMessage) {
			sse(w, id, workingTask)
			for i := 0; i < 64 && r.Context().Err() == nil; i++ { // 4 MiB
				sse(w, id, fmt.Sprintf(`{"kind":"artifact-update","taskId":"t-1","contextId":"c-1","append":%t,`+
					`"artifact":{"artifactId":"a","parts":[{"kind":"file","file":{"bytes":%q,"mimeType":"application/octet-stream"}}]}}`, i > 0, chunk))
			}
			sse(w, id, `{"kind":"status-update","taskId":"t-1","contextId":"c-1","status":{"state":"completed"},"final":true}`)
		},
		"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) { rpcResult(w, id, canceled) },
	})
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 1 << 20, MaxStreamBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/files", Arguments: `{"message":"send files"}`})
	if !errors.Is(err, a2a.ErrAnswerTooLarge) || !strings.Contains(err.Error(), "passed 2097152 bytes as sent, files included") {
		t.Fatalf("Call = %.200q, %v; want ErrAnswerTooLarge saying the stream passed 2 MiB", out, err)
	}
	ra.next(t)
	if m := ra.next(t); m != "tasks/cancel" {
		t.Errorf("after the stream passed its bound the agent was asked %s, want tasks/cancel", m)
	}
}
