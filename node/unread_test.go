package node_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/node"
)

// sendHead sends a request's headers and the first bytes of its body on a new
// connection to addr, and then nothing more: a client that sends its body slowly.
// It returns the connection and a reader of its answers, which must come within
// a few seconds (the server's read timeout is its default, 30 s).
func sendHead(t *testing.T, addr, head, start string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, head+"\r\n"+start); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// A request refused before its body is read (no token, no route, a method the
// route does not take, a Content-Type or a Content-Length it refuses; on the
// task route, A2A's) is answered at once, while the client is still sending its
// body, and the connection closes: net/http would first wait for up to 256 KiB
// more of a body nobody reads, so a client on a slow link, or one that stopped,
// had no answer until the read timeout. (A body of more than 256 KiB still to
// come net/http gives up on at once: the bodies here are smaller.)
func TestRefusalsDoNotWaitForTheBody(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	_, base, _ := serveHTTP(t, node.Config{A2A: &node.A2AConfig{}, Knowledge: &knowledge.Config{}, HTTP: node.HTTPConfig{MaxBody: 100000, Auth: node.AuthConfig{Tokens: []string{token}}}})
	addr := strings.TrimPrefix(base, "http://")
	const cl = "Content-Length: 200000\r\n" // under 256 KiB, which net/http would wait for
	auth := "Authorization: Bearer " + token + "\r\n"
	for _, c := range []struct {
		name, head string
		code       int
	}{
		{"no token", "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + cl, http.StatusUnauthorized},
		{"wrong token", "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nAuthorization: Bearer nope\r\n" + cl, http.StatusUnauthorized},
		{"no route", "POST /v1/nowhere HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + auth + cl, http.StatusNotFound},
		{"method", "POST /v1/stats HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + auth + cl, http.StatusMethodNotAllowed},
		{"content type", "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: text/plain\r\n" + auth + cl, http.StatusUnsupportedMediaType},
		{"too large", "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + auth + "Content-Length: 3145728\r\n", http.StatusRequestEntityTooLarge},
		{"cancel too large", "POST /v1/sessions/s1/cancel HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + auth + cl, http.StatusRequestEntityTooLarge},
		{"a2a no token", "POST /a2a HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + cl, http.StatusUnauthorized},
		{"a2a too large", "POST /a2a HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + auth + "Content-Length: 3145728\r\n", http.StatusRequestEntityTooLarge},
		// The routes with a bound of their own under 256 KiB check Content-Length
		// too: an approval, a question to a knowledge base, a login.
		{"approval too large", "POST /v1/sessions/s1/approvals/call_1 HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + auth + cl, http.StatusRequestEntityTooLarge},
		{"ask too large", "POST /v1/kb/docs/ask HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + auth + cl, http.StatusRequestEntityTooLarge},
		{"login too large", "POST /v1/auth/login HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n" + cl, http.StatusRequestEntityTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, br := sendHead(t, addr, c.head, `{"input":"`)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while the body is unsent: %v; want %d at once", err, c.code)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code || !resp.Close {
				t.Fatalf("%d (connection close %v) %s; want %d, closing the connection", resp.StatusCode, resp.Close, body, c.code)
			}
		})
	}
}

// An answer to a request whose body was read keeps the connection for the next
// request.
func TestAnswersToReadBodiesKeepTheConnection(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	bad := `{"input":`
	req := "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(bad)) + "\r\n"
	c, br := sendHead(t, strings.TrimPrefix(base, "http://"), req, bad)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Close {
			t.Fatalf("answer %d: %d, connection close %v; want 400 keeping the connection", i+1, resp.StatusCode, resp.Close)
		}
		if i == 0 {
			if _, err := io.WriteString(c, req+"\r\n"+bad); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Past the rate limit, a request with a body is answered 429 at once too.
func TestRateLimitRefusalDoesNotWaitForTheBody(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{Auth: node.AuthConfig{Rate: 0.001, Burst: 1}}})
	addr := strings.TrimPrefix(base, "http://")
	resp, err := http.Get(base + "/v1/sessions") // the burst
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, br := sendHead(t, addr, "POST /v1/tasks HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n", `{"input":"`)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer while the body is unsent: %v; want 429 at once", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !resp.Close {
		t.Fatalf("%d (connection close %v); want 429, closing the connection", resp.StatusCode, resp.Close)
	}
}

// A client that sends a refused body in full at once, not reading until it has
// written it (as Go's does), gets its refusal: the connection is shut for writing
// first and closed only later, not reset under the answer by the unread body.
func TestRefusalOfABodySentAtOnceArrives(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	body := `{"input":"` + strings.Repeat("a", 3<<20) + `"}`
	for i := range 20 {
		resp, err := http.Post(base+"/v1/tasks", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("post %d: %v; want 413", i+1, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("post %d: %d; want 413", i+1, resp.StatusCode)
		}
	}
}
