package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/tools"
)

// A remote agent that moved its endpoint (its card names another URL; the old one
// answers 404) is reached at the new one: the call that found the old one gone
// fetches the card again and sends its message there, rather than every call
// failing at the endpoint the tool read at its first call until the node restarts.
func TestToolFollowsAnAgentThatMovedItsEndpoint(t *testing.T) {
	var mu sync.Mutex
	endpoint := "/v1"
	var sent []string
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":"fake","description":"a fake agent","version":"1","url":%q,"preferredTransport":"JSONRPC",
			"protocolVersion":"0.3.0","capabilities":{"streaming":false},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`,
			srv.URL+endpoint)
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, r.URL.Path)
		if r.URL.Path != endpoint {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_ = b
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":{"kind":"message","messageId":"a-%d","contextId":"c-1","role":"agent","parts":[{"kind":"text","text":"at %s"}]}}`, len(sent), endpoint)
	})
	srv = httptest.NewServer(mux)
	defer srv.Close()
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: srv.URL + a2a.CardPath})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`})
	if err != nil || !strings.Contains(out, "at /v1") {
		t.Fatalf("first call: %q, %v", out, err)
	}
	mu.Lock()
	endpoint = "/v2"
	mu.Unlock()
	out, err = tool.Call(context.Background(), tools.Call{Key: "s/2", Arguments: `{"message":"hi again"}`})
	if err != nil || !strings.Contains(out, "at /v2") {
		t.Fatalf("after the agent moved: %q, %v; want its answer at its new endpoint", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/v1", "/v1", "/v2"}; fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("requests went to %v, want %v", sent, want)
	}
}

// Calls that find together that the agent moved read its card again once and send
// their messages once each at its new endpoint: a message of the same ID (a call
// performed again while the first still runs) is resent once, both calls sharing
// its answer, rather than run twice at the agent; and a call that found the old
// endpoint gone while another read the card again waits for that card rather than
// failing with the old endpoint's 404.
func TestToolCallsThatFindTheAgentMovedResendOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		keys [2]string
	}{
		{"one message", [2]string{"s/7", "s/7"}},
		{"two messages", [2]string{"s/8", "s/9"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			endpoint := "/v1"
			gone := 0 // requests answered 404 at the old endpoint
			bothGone := make(chan struct{})
			cards := 0                // fetches of the card
			sends := map[string]int{} // message IDs sent at the endpoint
			var srv *httptest.Server
			mux := http.NewServeMux()
			mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				cards++
				again := cards > 1
				mu.Unlock()
				if again {
					// The card read again comes a while later: one call reads it,
					// the other meanwhile finds it being read.
					time.Sleep(200 * time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(w, `{"name":"fake","description":"a fake agent","version":"1","url":%q,"preferredTransport":"JSONRPC",
					"protocolVersion":"0.3.0","capabilities":{"streaming":false},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`,
					srv.URL+endpoint)
			})
			mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					Params struct {
						Message struct {
							ID string `json:"messageId"`
						} `json:"message"`
					} `json:"params"`
				}
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				mu.Lock()
				if r.URL.Path != endpoint {
					// Both calls find the old endpoint gone, together.
					if gone++; gone == 2 {
						close(bothGone)
					}
					mu.Unlock()
					select {
					case <-bothGone:
					case <-r.Context().Done():
					}
					http.NotFound(w, r)
					return
				}
				sends[req.Params.Message.ID]++
				mu.Unlock()
				// The answer takes a while: the other call's resend of the same
				// message comes while this one runs.
				time.Sleep(200 * time.Millisecond)
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":{"kind":"message","messageId":"a-1","contextId":"c-1","role":"agent","parts":[{"kind":"text","text":"done %s"}]}}`,
					req.Params.Message.ID)
			})
			srv = httptest.NewServer(mux)
			defer srv.Close()
			tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: srv.URL + a2a.CardPath})
			if err != nil {
				t.Fatal(err)
			}
			if out, err := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`}); err != nil {
				t.Fatalf("first call: %q, %v", out, err)
			}
			mu.Lock()
			endpoint = "/v2"
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			outs, errs := make([]string, 2), make([]error, 2)
			for i, key := range c.keys {
				wg.Go(func() {
					outs[i], errs[i] = tool.Call(ctx, tools.Call{Key: key, Arguments: `{"message":"do it"}`})
				})
			}
			wg.Wait()
			for i, key := range c.keys {
				if errs[i] != nil || !strings.Contains(outs[i], "done "+key) {
					t.Errorf("call %d (%s): %q, %v; want the agent's answer at its new endpoint", i, key, outs[i], errs[i])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			want := map[string]int{"s/1": 1}
			for _, key := range c.keys {
				want[key] = 1
			}
			if fmt.Sprint(sends) != fmt.Sprint(want) || cards != 2 {
				t.Errorf("messages sent %v, the card read %d times; want %v, the card read twice", sends, cards, want)
			}
		})
	}
}

// A call that shares another's resend of its message (both found the old
// endpoint gone) gets the answer when the call that sent it first gives up: the
// shared send is not cancelled by the first caller's context while another caller
// waits for it.
func TestToolSharedResendOutlivesTheCallThatStartedIt(t *testing.T) {
	var mu sync.Mutex
	endpoint := "/v1"
	atOld := []chan struct{}{make(chan struct{}), make(chan struct{})}      // a call reached the old endpoint
	releaseOld := []chan struct{}{make(chan struct{}), make(chan struct{})} // its 404 goes
	gone := 0
	atNew := make(chan struct{}, 4)
	answer := make(chan struct{})
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, `{"name":"fake","description":"a fake agent","version":"1","url":%q,"preferredTransport":"JSONRPC",
			"protocolVersion":"0.3.0","capabilities":{"streaming":false},"defaultInputModes":["text"],"defaultOutputModes":["text"],"skills":[]}`,
			srv.URL+endpoint)
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Params struct {
				Message struct {
					ID string `json:"messageId"`
				} `json:"message"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		if r.URL.Path != endpoint {
			i := gone
			gone++
			mu.Unlock()
			close(atOld[i])
			<-releaseOld[i]
			http.NotFound(w, r)
			return
		}
		warm := req.Params.Message.ID == "s/1"
		mu.Unlock()
		if !warm {
			atNew <- struct{}{}
			select {
			case <-answer:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"result":{"kind":"message","messageId":"a-1","contextId":"c-1","role":"agent","parts":[{"kind":"text","text":"done %s"}]}}`,
			req.Params.Message.ID)
	})
	srv = httptest.NewServer(mux)
	defer srv.Close()
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "fake", CardURL: srv.URL + a2a.CardPath})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tool.Call(context.Background(), tools.Call{Key: "s/1", Arguments: `{"message":"hi"}`}); err != nil {
		t.Fatalf("first call: %q, %v", out, err)
	}
	mu.Lock()
	endpoint = "/v2"
	mu.Unlock()
	deadline, cancelAll := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelAll()
	first, giveUp := context.WithCancel(deadline)
	defer giveUp()
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-deadline.Done():
			t.Fatalf("waiting for %s: %v", what, deadline.Err())
		}
	}
	var wg sync.WaitGroup
	outs, errs := make([]string, 2), make([]error, 2)
	call := func(i int, ctx context.Context) {
		wg.Go(func() {
			outs[i], errs[i] = tool.Call(ctx, tools.Call{Key: "s/7", Arguments: `{"message":"do it"}`})
		})
	}
	call(0, first)
	wait(atOld[0], "the first call at the old endpoint")
	call(1, deadline)
	wait(atOld[1], "the second call at the old endpoint")
	close(releaseOld[0])
	wait(atNew, "the first call's resend") // the first call sends the message again
	close(releaseOld[1])                   // the second finds the old endpoint gone and shares that send
	time.Sleep(300 * time.Millisecond)
	giveUp() // the first call ends; the second still waits
	time.Sleep(100 * time.Millisecond)
	close(answer)
	wg.Wait()
	if errs[1] != nil || !strings.Contains(outs[1], "done s/7") {
		t.Fatalf("the call still waiting: %q, %v; want the agent's answer", outs[1], errs[1])
	}
	if errs[0] == nil {
		t.Errorf("the call that gave up: %q, no error", outs[0])
	}
}
