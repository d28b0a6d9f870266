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

// The secret-named variables of the node's environment that a stdio server's
// "pass_env" passes are redacted like those of its "env"; the others it does not
// pass, and the non-secret ones, are not.
func TestMCPSecretsHoldThePassedVariables(t *testing.T) {
	t.Setenv("GITHUB_TOKEN", "ghp-passed-4e0c9a71")
	t.Setenv("GITLAB_TOKEN", "glpat-not-passed-8b2d")
	t.Setenv("GITHUB_ORG", "troupe-run-org")
	secrets := MCPSecrets(map[string]mcp.ServerConfig{"gh": {Command: "x", PassEnv: []string{"GITHUB_*"}}})
	if !slices.Contains(secrets, "ghp-passed-4e0c9a71") {
		t.Errorf("secrets %q lack the passed GITHUB_TOKEN", secrets)
	}
	if slices.Contains(secrets, "glpat-not-passed-8b2d") || slices.Contains(secrets, "troupe-run-org") {
		t.Errorf("secrets %q hold a variable not passed, or not secret", secrets)
	}
}
