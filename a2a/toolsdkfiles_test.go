package a2a_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// fileAgent is an agent served by the official Go SDK's server that answers with
// its task, ended, whose artifact holds a text part and a file of size bytes. (It
// writes the task whole, in one event: the SDK's server, v0.3.3, updates the
// task an event began while it writes that event to the stream, a data race.)
type fileAgent struct{ size int }

func (a fileAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	file := sdk.FilePart{File: sdk.FileBytes{FileMeta: sdk.FileMeta{Name: "scan.pdf", MimeType: "application/pdf"},
		Bytes: base64.StdEncoding.EncodeToString(make([]byte, a.size))}}
	task := sdk.NewSubmittedTask(rc, rc.Message)
	task.Status = sdk.TaskStatus{State: sdk.TaskStateCompleted}
	task.Artifacts = []*sdk.Artifact{{ID: sdk.NewArtifactID(), Parts: sdk.ContentParts{sdk.TextPart{Text: "the scan"}, file}}}
	return q.Write(ctx, task)
}

func (fileAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	return q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateCanceled, nil))
}

// An agent served by the official Go SDK that streams a 5 MiB file in an
// artifact of its task is answered, with the tool's defaults: the model reads the artifact's
// text and the file described, where the file's bytes, counted as the answer's,
// failed the call past an answer bound of 4 MiB.
func TestToolDescribesAFileAnSDKAgentStreams(t *testing.T) {
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"files","description":"an agent that answers with files","version":"1","url":%q,"preferredTransport":"JSONRPC",
			"protocolVersion":"0.3.0","capabilities":{"streaming":true},"defaultInputModes":["text"],"defaultOutputModes":["text","application/pdf"],"skills":[]}`,
			srv.URL+"/rpc")
	})
	mux.Handle("POST /rpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(fileAgent{size: 5 << 20})))
	srv = httptest.NewServer(mux)
	defer srv.Close()
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "files", CardURL: srv.URL + a2a.CardPath, MaxAnswerBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/scan", Arguments: `{"message":"scan it"}`})
	want := "the scan\n[file \"scan.pdf\", application/pdf, 5242880 bytes]\n\n(context_id: "
	if err != nil || !strings.HasPrefix(out, want) {
		t.Fatalf("Call = %.300q, %v; want it to begin %q", out, err, want)
	}
}
