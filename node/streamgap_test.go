package node_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// bigOnAsk answers an input that says "big" with 2 MiB (an event too large for a
// bus message, which travels as a reference to the log), any other with "ok".
type bigOnAsk struct{}

func (bigOnAsk) Name() string { return "big-on-ask" }

func (bigOnAsk) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	out := "ok"
	if strings.Contains(req.Messages[len(req.Messages)-1].Content, "big") {
		out = bigAnswer(2 << 20)
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: out}}, nil
}

// blipLog fails the next read of a session made outside a request (the hub's
// reading of an event too large for the bus), from seq from when set, once armed:
// a log that does not answer for a moment.
type blipLog struct {
	eventlog.Log
	session string
	from    uint64
	armed   atomic.Bool
}

type requestCtx struct{}

func (l *blipLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if session == l.session && (l.from == 0 || from == l.from) && ctx.Value(requestCtx{}) == nil && l.armed.CompareAndSwap(true, false) {
		return nil, errors.New("the log did not answer")
	}
	return l.Log.Read(ctx, session, from)
}

// A stream on a node that reads the session from troupe.events goes on after one
// of its events could not be read back (an event too large for the bus, whose
// reading from the log failed once): the hub drops that copy, "found in the log
// when the watcher next catches up", but the stream held every later event
// behind the missing one for as long as the client stayed, sending only
// heartbeats: the client never saw the task end.
func TestStreamGoesOnAfterADroppedBusCopy(t *testing.T) {
	c := newTestCluster(t, 0)
	session := fmt.Sprintf("gap-%d", time.Now().UnixNano())
	// The first large event of the second task (7: model.responded) is lost.
	streamAfterALostCopy(t, c, session, &blipLog{Log: c.log, session: session})
}

// The same when the lost copy is the task's end, the session's last event: no
// later event shows the stream that one is missing.
func TestStreamSendsATaskEndWhoseBusCopyWasLost(t *testing.T) {
	c := newTestCluster(t, 0)
	session := fmt.Sprintf("gap-end-%d", time.Now().UnixNano())
	// The second task's events: 5 task.submitted, 6 model.requested, 7
	// model.responded and 8 task.completed (both 2 MiB); 8 is lost.
	streamAfterALostCopy(t, c, session, &blipLog{Log: c.log, session: session, from: 8})
}

// streamAfterALostCopy runs two tasks in session on one node of c and follows
// the session's stream on another, which reads troupe.events; log, the other
// node's, fails a read of the second task's large events once, after the first
// task. The stream must send the second task's end.
func streamAfterALostCopy(t *testing.T, c *testCluster, session string, log *blipLog) {
	wide := func(cfg *node.Config) { cfg.Context.Window = 1_000_000 }
	runner, _ := clusterNode(t, c.k, c.group, c.log, "runner", 0, []tools.Tool{c.led.tool("runner")}, bigOnAsk{}, wide)
	api, _ := clusterNode(t, c.k, c.group, log, "api", node.RoleTools, []tools.Tool{c.led.tool("api")}, bigOnAsk{}, wide)
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.Config.BaseContext = func(net.Listener) context.Context { return context.WithValue(context.Background(), requestCtx{}, true) }
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if _, err := runner.Submit(ctx, node.Task{Input: "hello", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, runner, []string{session}, 60*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/sessions/"+session+"/stream?deltas=false", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type ev struct{ name, id string }
	events := make(chan ev, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 16<<20), 16<<20)
		var e ev
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && e.name != "":
				events <- e
				e = ev{}
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.name = line[7:]
			}
		}
	}()
	var got []string
	completed := func() string {
		for {
			select {
			case e, ok := <-events:
				if !ok {
					return ""
				}
				got = append(got, e.id+" "+e.name)
				if e.name == string(messages.TypeTaskCompleted) {
					return e.id
				}
			case <-time.After(30 * time.Second):
				return ""
			}
		}
	}
	first := completed()
	if first == "" {
		t.Fatal("the stream did not send the first task's end")
	}
	log.armed.Store(true)
	if _, err := runner.Submit(ctx, node.Task{Input: "answer big", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the second task's end", func() bool {
		events, err := c.log.Read(ctx, session, 1)
		ends := 0
		for _, e := range events {
			if e.Type == messages.TypeTaskCompleted {
				ends++
			}
		}
		return err == nil && ends == 2
	})
	// The api node reads the second task's large events from the log, the first
	// read failing.
	waitFor(t, 30*time.Second, "the api node reading back a large event", func() bool { return !log.armed.Load() })
	if second := completed(); second == "" {
		t.Fatalf("the stream never sent the second task's end (the first's was %s): it stalled behind the event it could not read; it sent %v", first, got)
	}
}
