package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/tools"
)

// testResolver resolves the test's made-up names; others go to the system.
func testResolver(names map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		if addrs, ok := names[host]; ok {
			var out []netip.Addr
			for _, a := range addrs {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
}

func fetch(t *testing.T, tool tools.Tool, rawURL, method string) (string, error) {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"url": rawURL, "method": method})
	if method == "" {
		args, _ = json.Marshal(map[string]string{"url": rawURL})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return tool.Call(ctx, tools.Call{Key: "k", Arguments: string(args)})
}

// countingServer is a test server on 127.0.0.1 that counts its requests.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestHTTPFetchRefusesNonPublicAddresses(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secret") })
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	tool, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Resolve: testResolver(map[string][]string{
		"rebind.test": {"127.0.0.1"},
		"mixed.test":  {"93.184.216.34", "10.0.0.5"},
	})})
	if err != nil {
		t.Fatal(err)
	}
	for rawURL, why := range map[string]string{
		fmt.Sprintf("http://127.0.0.1:%d/", port):          "127.0.0.1: it is a loopback address",
		fmt.Sprintf("http://[::1]:%d/", port):              "::1: it is a loopback address",
		"http://169.254.169.254/latest/meta-data/":         "169.254.169.254: it is a cloud metadata address",
		"http://[fd00:ec2::254]/latest/meta-data/":         "fd00:ec2::254: it is a cloud metadata address",
		"http://10.0.0.1/":                                 "10.0.0.1: it is a private address",
		"https://192.168.1.1/":                             "a private address",
		"http://172.20.0.1/":                               "a private address",
		"http://[fc00::1]/":                                "a private (unique local) address",
		"http://169.254.1.1/":                              "a link-local address",
		"http://[fe80::1]/":                                "a link-local address",
		"http://100.64.0.1/":                               "a carrier-grade NAT address",
		"http://224.0.0.1/":                                "a multicast address",
		"http://[ff02::1]/":                                "a multicast address",
		fmt.Sprintf("http://0.0.0.0:%d/", port):            "an unspecified (this-network) address",
		fmt.Sprintf("http://[::]:%d/", port):               "an unspecified address",
		fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", port): "(127.0.0.1): it is a loopback address",
		"http://[64:ff9b::a00:1]/":                         "a private address (inside an IPv6 address)",
		"http://[2002:7f00:1::1]/":                         "a loopback address (inside an IPv6 address)",
		fmt.Sprintf("http://localhost:%d/", port):          "localhost (",
		fmt.Sprintf("http://rebind.test:%d/", port):        "rebind.test (127.0.0.1): it is a loopback address",
		"http://mixed.test/":                               "mixed.test (10.0.0.5): it is a private address",
	} {
		out, err := fetch(t, tool, rawURL, "")
		if !errors.Is(err, tools.ErrAddressRefused) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "tools.http_fetch.allow") {
			t.Errorf("%s: %q, %v; want refused: %s", rawURL, out, err, why)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback server was reached %d times", n)
	}
}

func TestHTTPFetchAllowedByConfig(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		if r.Method == http.MethodGet {
			fmt.Fprint(w, "hello, agent")
		}
	})
	for _, allow := range []string{"127.0.0.1/32", "127.0.0.1", "localhost"} {
		tool, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Allow: []string{allow}})
		if err != nil {
			t.Fatal(err)
		}
		u := srv.URL
		if allow == "localhost" {
			u = strings.Replace(u, "127.0.0.1", "localhost", 1)
		}
		out, err := fetch(t, tool, u+"/page", "")
		want := "HTTP 200 OK\nContent-Type: text/plain; charset=utf-8\nLast-Modified: Mon, 02 Jan 2006 15:04:05 GMT\n\nhello, agent"
		if err != nil || out != want {
			t.Errorf("allow %s: GET: %q, %v\nwant %q", allow, out, err, want)
		}
		out, err = fetch(t, tool, u+"/page", "HEAD")
		if err != nil || !strings.HasPrefix(out, "HTTP 200 OK\nContent-Type: text/plain") || strings.Contains(out, "hello") {
			t.Errorf("allow %s: HEAD: %q, %v", allow, out, err)
		}
	}
	if hits.Load() != 6 {
		t.Errorf("%d requests, want 6", hits.Load())
	}
}

// A server the configuration allows redirects to addresses it does not: each
// redirect is checked as the first request was.
func TestHTTPFetchChecksEveryRedirect(t *testing.T) {
	target, targetHits := countingServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "internal") })
	targetPort := target.Listener.Addr().(*net.TCPAddr).Port
	var front *httptest.Server
	front, _ = countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to":
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/ok":
			fmt.Fprint(w, "fine")
		}
	})
	frontURL := strings.Replace(front.URL, "127.0.0.1", "allowed.test", 1)
	tool, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Allow: []string{"allowed.test"}, Resolve: testResolver(map[string][]string{
		"allowed.test": {"127.0.0.1"},
		"rebind.test":  {"127.0.0.1"},
	})})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{
		fmt.Sprintf("http://127.0.0.1:%d/", targetPort),
		fmt.Sprintf("http://[::1]:%d/", targetPort),
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		fmt.Sprintf("http://rebind.test:%d/", targetPort),
		fmt.Sprintf("http://localhost:%d/", targetPort),
	} {
		out, err := fetch(t, tool, frontURL+"/to?u="+url.QueryEscape(to), "")
		if !errors.Is(err, tools.ErrAddressRefused) {
			t.Errorf("redirect to %s: %q, %v; want refused", to, out, err)
		}
	}
	if n := targetHits.Load(); n != 0 {
		t.Fatalf("the refused server was reached %d times", n)
	}
	out, err := fetch(t, tool, frontURL+"/to?u=/ok", "")
	if err != nil || !strings.Contains(out, "URL: "+frontURL+"/ok\n") || !strings.HasSuffix(out, "\n\nfine") {
		t.Errorf("allowed redirect: %q, %v", out, err)
	}
	if _, err := fetch(t, tool, frontURL+"/loop", ""); err == nil || !strings.Contains(err.Error(), "stopped after 5 redirects") {
		t.Errorf("redirect loop: %v", err)
	}
	if _, err := fetch(t, tool, frontURL+"/to?u="+url.QueryEscape("file:///etc/passwd"), ""); err == nil || !strings.Contains(err.Error(), "only http and https") {
		t.Errorf("redirect to file: %v", err)
	}
}

func TestHTTPFetchLimitsAndContent(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "5000")
			fmt.Fprint(w, strings.Repeat("é", 2500))
		case "/stream":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, strings.Repeat("a", 5000))
		case "/png":
			w.Header().Set("Content-Type", "image/png")
			fmt.Fprint(w, "\x89PNG\r\n\x1a\n")
		case "/sniffed":
			w.Header()["Content-Type"] = nil
			fmt.Fprint(w, "\x00\x01\x02binary")
		case "/latin1":
			w.Header().Set("Content-Type", "text/html; charset=ISO-8859-1")
			fmt.Fprint(w, "caf\xe9")
		case "/json":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"title":"not found"}`)
		case "/hang":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	})
	tool, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Allow: []string{"127.0.0.0/8"}, MaxBytes: 1001, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if l := tools.LimitsOf(tool); l.Timeout != 100*time.Millisecond || l.MaxOutput < 1001 || tools.HasSideEffects(tool) {
		t.Errorf("limits %+v", l)
	}
	for path, want := range map[string]string{
		"/big":    "\n\n" + strings.Repeat("é", 500) + "\n[truncated: 5000 bytes, showing the first 1000]",
		"/stream": "\n\n" + strings.Repeat("a", 1001) + "\n[truncated: more than 1001 bytes, showing the first 1001]",
		"/latin1": "\n\ncafé",
		"/json":   "HTTP 404 Not Found\nContent-Type: application/problem+json\n\n{\"title\":\"not found\"}",
	} {
		out, err := fetch(t, tool, srv.URL+path, "")
		if err != nil || !strings.HasSuffix(out, want) {
			t.Errorf("%s: %q, %v; want it to end %q", path, out, err, want)
		}
	}
	for path, want := range map[string]string{"/png": `"image/png"`, "/sniffed": `"application/octet-stream"`} {
		if _, err := fetch(t, tool, srv.URL+path, ""); !errors.Is(err, tools.ErrNotText) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", path, err)
		}
	}
	if _, err := fetch(t, tool, srv.URL+"/hang", ""); err == nil || !strings.Contains(err.Error(), "no complete response within 100ms") {
		t.Errorf("hang: %v", err)
	}
	for _, bad := range []string{"ftp://example.com/", "example.com", "http:///path", "http://exa mple.com/"} {
		if _, err := fetch(t, tool, bad, ""); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%q: %v, want invalid arguments", bad, err)
		}
	}
	if _, err := fetch(t, tool, srv.URL, "POST"); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("POST: %v", err)
	}
}

func TestHTTPFetchConfigIsChecked(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "not a host!", "", "http://x"} {
		if _, err := tools.NewHTTPFetch(tools.HTTPFetchConfig{Allow: []string{bad}}); err == nil {
			t.Errorf("allow %q was accepted", bad)
		}
	}
}
