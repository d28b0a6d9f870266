package nodeconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/mcp"
)

// A server's "oauth" and "elicitation" are read and checked, an unknown field of
// "oauth" is named with its path, and the client secret is among the secrets.
func TestLoadMCPOAuth(t *testing.T) {
	t.Setenv("TEST_NODECONFIG_SECRET", "s3cret-value")
	load := func(body string) (File, error) {
		path := filepath.Join(t.TempDir(), "node.json")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(path)
	}
	fc, err := load(`{"mcp_servers": {"remote": {"url": "https://mcp.example/mcp", "elicitation": "defaults",
		"oauth": {"client_id": "node", "client_secret_env": "TEST_NODECONFIG_SECRET", "redirect_url": "http://localhost:3000/callback", "scopes": ["tools"]}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := fc.MCPServers["remote"]; s.OAuth == nil || s.OAuth.ClientID != "node" || s.Elicitation != mcp.ElicitDefaults {
		t.Fatalf("server = %+v", s)
	}
	if !slices.Contains(MCPSecrets(fc.MCPServers), "s3cret-value") {
		t.Errorf("secrets = %q, want the client secret", MCPSecrets(fc.MCPServers))
	}
	for body, want := range map[string]string{
		`{"mcp_servers": {"remote": {"url": "https://mcp.example/mcp", "oauth": {"redirect_url": "http://localhost/cb", "secret": "x"}}}}`: `unknown field "mcp_servers.remote.oauth.secret"`,
		`{"mcp_servers": {"remote": {"url": "https://mcp.example/mcp", "oauth": {}}}}`:                                                     "mcp_servers.remote.oauth.redirect_url:",
		`{"mcp_servers": {"remote": {"url": "https://mcp.example/mcp", "elicitation": "ask"}}}`:                                            "mcp_servers.remote.elicitation:",
	} {
		if _, err := load(body); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", body, err, want)
		}
	}
}
