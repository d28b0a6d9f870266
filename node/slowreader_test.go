package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A large session's events (GET /v1/sessions/{id}/events, which the dashboard's
// timeline reads whole) reach a client that reads them slowly but steadily, as one
// on a slow link does: the write timeout bounds a stall of the answer, not its
// length. Here 16 MiB of events go to a client that reads about 2 MiB a second,
// with a write timeout of 1 s.
func TestLargeSessionEventsReachASlowButSteadyReader(t *testing.T) {
	log := openLog(t)
	const session, results = "big-1", 64
	var events []messages.Envelope
	add := func(p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.SessionID, e.Seq, e.Actor = session, seq, "session"
		e.ID, e.TS = fmt.Sprintf("%s/%d", session, seq), time.Now().UnixMicro()
		events = append(events, e)
	}
	add(&messages.TaskSubmitted{Input: "read the big files"})
	for i := range results {
		add(&messages.ToolCallCompleted{Key: fmt.Sprintf("k%d", i), CallID: fmt.Sprintf("c%d", i), Tool: "files",
			Result: strings.Repeat("a large file ", 256<<10/13)})
	}
	add(&messages.TaskCompleted{Output: "done"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := log.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	_, base, _ := serveHTTP(t, node.Config{Log: log, HTTP: node.HTTPConfig{WriteTimeout: time.Second}})

	// A client with a small receive buffer, reading 64 KiB every 30 ms.
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(64 << 10)
		}
		return c, err
	}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sessions/"+session+"/events", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET events: %d", resp.StatusCode)
	}
	var body []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := io.ReadFull(resp.Body, buf)
		body = append(body, buf[:n]...)
		if err != nil {
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("reading the events after %d bytes: %v", len(body), err)
			}
			break
		}
		time.Sleep(30 * time.Millisecond)
	}
	var got []messages.Envelope
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("the answer (%d bytes) is no list of events: %v", len(body), err)
	}
	if len(got) != len(events) {
		t.Fatalf("%d events, want %d", len(got), len(events))
	}
}
