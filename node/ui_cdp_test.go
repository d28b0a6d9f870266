package node_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// browser drives a headless Chromium over the DevTools protocol on a pipe
// (--remote-debugging-pipe: the browser reads commands on its fd 3 and writes
// answers and events on its fd 4, each a JSON message ended by a NUL byte), for
// the dashboard tests that type, click and wait for live updates. One page, one
// browser per test; everything is bounded by the test's deadline.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	toB     io.WriteCloser
	session string // the page's session (flattened)

	mu       sync.Mutex
	nextID   int
	pending  map[int]chan cdpAnswer
	problems []string // uncaught exceptions and policy refusals of the page
	readDone chan struct{}
}

type cdpAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type cdpMessage struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	SessionID string          `json:"sessionId"`
	cdpAnswer
}

// newBrowser starts Chromium and opens a page of 1200×720 CSS pixels.
func newBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	inR, inW, err := os.Pipe() // the test → the browser
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe() // the browser → the test
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--hide-scrollbars", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	inR.Close()
	outW.Close()
	b := &browser{t: t, cmd: cmd, toB: inW, pending: map[int]chan cdpAnswer{}, readDone: make(chan struct{})}
	go b.read(outR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = b.callCtx(ctx, "", "Browser.close", nil)
		_ = inW.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		<-b.readDone
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("the page logged: %s", p)
		}
		if t.Failed() {
			t.Logf("chromium's log:\n%s", stderr.String())
		}
	})
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	for _, m := range []string{"Runtime.enable", "Page.enable", "Log.enable"} {
		b.call(b.session, m, nil, nil)
	}
	b.call(b.session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1200, "height": 720, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

// read dispatches the browser's messages: answers to their callers; exceptions
// and Content-Security-Policy refusals of the page to problems.
func (b *browser) read(r io.ReadCloser) {
	defer close(b.readDone)
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		switch {
		case m.ID != 0:
			b.mu.Lock()
			ch := b.pending[m.ID]
			delete(b.pending, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m.cdpAnswer
			}
		case m.Method == "Runtime.exceptionThrown":
			b.problem(string(m.Params))
		case m.Method == "Log.entryAdded" && strings.Contains(string(m.Params), "Content Security Policy"):
			b.problem(string(m.Params))
		case m.Method == "Runtime.consoleAPICalled" && strings.Contains(string(m.Params), "Content Security Policy"):
			b.problem(string(m.Params))
		}
	}
}

func (b *browser) problem(p string) {
	b.mu.Lock()
	b.problems = append(b.problems, p)
	b.mu.Unlock()
}

// callCtx sends a command (to the page's session, or the browser's with "") and
// waits for its answer.
func (b *browser) callCtx(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpAnswer, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if _, err := b.toB.Write(append(raw, 0)); err != nil {
		return nil, fmt.Errorf("%s: writing to chromium: %w", method, err)
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: chromium closed the pipe", method)
		}
		if a.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, a.Error.Message)
		}
		return a.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// call is callCtx bounded at 30 s, failing the test on an error; it decodes the
// result into out unless out is nil.
func (b *browser) call(session, method string, params, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.callCtx(ctx, session, method, params)
	if err != nil {
		b.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			b.t.Fatalf("%s: %v: %s", method, err, res)
		}
	}
}

// navigate loads url in the page and waits until its document is loaded.
func (b *browser) navigate(url string) {
	b.t.Helper()
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, nil)
	u, _ := json.Marshal(url)
	b.waitTrue("the page "+url+" loaded", fmt.Sprintf(`location.href === %s && document.readyState === "complete"`, u))
}

// eval runs a JavaScript expression in the page (awaiting a promise) and decodes
// its value into out unless out is nil.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		b.t.Fatalf("evaluating %s: %s %s", expr, res.ExceptionDetails.Text, res.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(res.Result.Value) > 0 {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			b.t.Fatalf("evaluating %s: %v: %s", expr, err, res.Result.Value)
		}
	}
}

// waitTrue polls a JavaScript condition until it holds, for at most 30 s; on a
// timeout it fails the test with what and the page's text. A condition that
// throws, or a page between two documents, is a condition that does not hold yet.
func (b *browser) waitTrue(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	expr := "(() => { try { return Boolean(" + cond + "); } catch (e) { return false; } })()"
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		raw, err := b.callCtx(ctx, b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
		cancel()
		var res struct {
			Result struct {
				Value bool `json:"value"`
			} `json:"result"`
		}
		if err == nil && json.Unmarshal(raw, &res) == nil && res.Result.Value {
			return
		}
		if time.Now().After(deadline) {
			var text string
			b.eval("document.body ? document.body.innerText : ''", &text)
			b.t.Fatalf("waited 30 s for %s (%s); the page says:\n%s", what, cond, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitText waits until the page's visible text (or the element of selector's)
// contains s.
func (b *browser) waitText(selector, s string) {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	want, _ := json.Marshal(s)
	b.waitTrue(fmt.Sprintf("%q in %s", s, selector), fmt.Sprintf("document.querySelector(%s) && document.querySelector(%s).innerText.includes(%s)", q, q, want))
}

// click clicks the middle of the first element matching selector with the mouse.
func (b *browser) click(selector string) {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	b.waitTrue("an element "+selector+" to click", fmt.Sprintf("document.querySelector(%s) && !document.querySelector(%s).disabled", q, q))
	var at struct{ X, Y float64 }
	b.eval(fmt.Sprintf("(() => { const e = document.querySelector(%s); e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); return {X: r.x + r.width/2, Y: r.y + r.height/2}; })()", q), &at)
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		b.call(b.session, "Input.dispatchMouseEvent", map[string]any{"type": typ, "x": at.X, "y": at.Y, "button": "left", "clickCount": 1}, nil)
	}
}

// typeInto focuses the element of selector and types text as keyboard input.
func (b *browser) typeInto(selector, text string) {
	b.t.Helper()
	q, _ := json.Marshal(selector)
	b.waitTrue("an input "+selector, fmt.Sprintf("document.querySelector(%s) && document.querySelector(%s).offsetParent !== null", q, q))
	b.eval(fmt.Sprintf("document.querySelector(%s).focus()", q), nil)
	b.call(b.session, "Input.insertText", map[string]any{"text": text}, nil)
}

// screenshot keeps a PNG of the page as name in TROUPE_UI_SCREENSHOTS (a
// directory), else in the test's temporary directory, and returns its path.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	var res struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil || len(png) < 1000 {
		b.t.Fatalf("screenshot %s: %d bytes, %v", name, len(png), err)
	}
	dir := os.Getenv("TROUPE_UI_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return p
}
