package node_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// asHost makes a request to url with the Host header host (and, for a POST, the
// headers a browser sends with a page's fetch to its own origin) and returns the
// answer's status and body.
func asHost(t *testing.T, method, url, host, token, body string) (int, string) {
	t.Helper()
	code, _, b := callWith(t, method+" "+url+" as "+host, method, url, body, func(req *http.Request) {
		req.Host = host
		if body != "" {
			req.Header.Set("Origin", "http://"+host)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	})
	return code, b
}

// A node without tokens on a loopback address refuses (403) a request whose Host
// is a DNS name of another site: a page of that site whose name its DNS points
// at 127.0.0.1 (DNS rebinding) is of the node's origin to the browser, which
// would otherwise let it read every session and run tasks, its POST passing the
// cross-origin check (its Origin is its Host). Localhost, the names under
// .localhost, the loopback names of /etc/hosts (localhost.localdomain, …), IP
// addresses in any form (127.1, as curl sends it), names without a dot and this
// host's name are served, and a node with
// tokens serves any Host (the page has no token). Before, only /mcp refused
// such a Host.
func TestOpenNodeOnLoopbackRefusesRebindingHosts(t *testing.T) {
	_, base, _ := serveHTTP(t, node.Config{})
	port := base[strings.LastIndex(base, ":")+1:]
	for _, host := range []string{"evil.example", "evil.example:" + port, "Evil.Example.:" + port, "127.0.0.1.nip.io:" + port, "localhost.localdomain.evil.example:" + port} {
		if code, body := asHost(t, "GET", base+"/v1/sessions", host, "", ""); code != http.StatusForbidden || !strings.Contains(body, "DNS rebinding") {
			t.Errorf("GET /v1/sessions as %s: %d %.200s, want 403 saying why", host, code, body)
		}
		if code, body := asHost(t, "POST", base+"/v1/tasks", host, "", `{"input":"What is 6 * 7?"}`); code != http.StatusForbidden {
			t.Errorf("POST /v1/tasks as %s: %d %.200s, want 403", host, code, body)
		}
	}
	self, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost:" + port, "LOCALHOST.:" + port, "app.localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "192.0.2.7", "node",
		"localhost.localdomain:" + port, "localhost4.localdomain4", "localhost6.localdomain6:" + port, "127.1:" + port, "0x7f.1",
		self + ":" + port, strings.ToUpper(self) + ".:" + port} {
		if code, body := asHost(t, "GET", base+"/v1/sessions", host, "", ""); code != http.StatusOK {
			t.Errorf("GET /v1/sessions as %s: %d %.200s, want 200", host, code, body)
		}
	}
	if code, body := asHost(t, "POST", base+"/v1/tasks", "localhost:"+port, "", `{"input":"What is 6 * 7?"}`); code != http.StatusAccepted {
		t.Errorf("POST /v1/tasks as localhost: %d %.200s, want 202", code, body)
	}

	const token = "0123456789abcdef0123456789abcdef"
	_, closed, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{token}}}})
	if code, body := asHost(t, "GET", closed+"/v1/sessions", "troupe.example.com", token, ""); code != http.StatusOK {
		t.Errorf("GET /v1/sessions of a node with tokens as troupe.example.com, with a token: %d %.200s, want 200", code, body)
	}
}
