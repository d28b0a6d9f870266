package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// toolServer is the server of a node with ts for tools and a model never asked,
// and a context of 30 s for the test's calls.
func toolServer(t *testing.T, ts ...tools.Tool) (*mcp.Server, context.Context) {
	t.Helper()
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "unused"), Tools: ts})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return mcp.NewServer(n, mcp.ServerOptions{}), ctx
}

// sdkSession serves srv over Streamable HTTP and connects the go-sdk's client to
// it: the server's URL and the session, both closed when the test ends.
func sdkSession(ctx context.Context, t *testing.T, srv *mcp.Server) (string, *sdk.ClientSession) {
	t.Helper()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return hs.URL, cs
}

// postRead posts body in session id and reads the answer's body whole.
func postRead(ctx context.Context, t *testing.T, url, id, body string) (*http.Response, []byte) {
	t.Helper()
	resp := post(ctx, t, url, id, body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, raw
}

// stdioServe serves srv over stdio on pipes until the test ends: the server's
// input, and its output.
func stdioServe(ctx context.Context, t *testing.T, srv *mcp.Server) (io.Writer, io.Reader) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() {
		_ = srv.Serve(sctx, mcp.LineTransport(inR, outW, 0))
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close() })
	return inW, outR
}

// writeLines writes each line, ended by a newline, to w.
func writeLines(t *testing.T, w io.Writer, lines ...string) {
	t.Helper()
	for _, line := range lines {
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
}

// linesOf are the lines of out, until out ends; size is the channel's buffer.
func linesOf(out io.Reader, size int) <-chan string {
	lines := make(chan string, size)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// answersOf are the lines of out that are JSON-RPC answers (those with an id),
// until out ends; size is the channel's buffer.
func answersOf(out io.Reader, size int) <-chan rpcAnswer {
	answers := make(chan rpcAnswer, size)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var a rpcAnswer
			if json.Unmarshal(sc.Bytes(), &a) == nil && len(a.ID) > 0 {
				answers <- a
			}
		}
		close(answers)
	}()
	return answers
}

// dialHTTP opens a TCP connection to hs, closed when the test ends, whose reads
// and writes fail after 10 s, for a request written by hand.
func dialHTTP(t *testing.T, hs *httptest.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// readRawAnswer reads the answer to the request written on c and its body whole;
// with none, the test fails with failf (which takes the error).
func readRawAnswer(t *testing.T, c net.Conn, failf string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf(failf, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, raw
}
