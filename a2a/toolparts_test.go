package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// The artifacts a stream assembles are bounded by all their parts, not their text
// alone: a remote agent that streams file parts (bytes) into an artifact, each
// event within the bound, passes it as a whole and fails the call, rather than
// growing the task the tool holds without end.
func TestToolBoundsTheArtifactsFileParts(t *testing.T) {
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
		"tasks/cancel": func(w http.ResponseWriter, _ *http.Request, id, _ json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, canceled)
		},
	})
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: ra.srv.URL + a2a.CardPath, MaxAnswerBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/files", Arguments: `{"message":"send files"}`})
	if !errors.Is(err, a2a.ErrAnswerTooLarge) {
		t.Fatalf("Call = %.200q, %v; want ErrAnswerTooLarge", out, err)
	}
}
