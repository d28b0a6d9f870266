package nodeconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/redact"
)

// validateMCPServers checks the "mcp_servers" section, naming fields as
// mcp_servers.NAME.FIELD.
func validateMCPServers(servers map[string]mcp.ServerConfig) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		if err := servers[name].Validate(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// unknownMCPField names an unknown field of a server in the "mcp_servers" section
// (raw), or returns nil when no server has a field called name.
func unknownMCPField(raw json.RawMessage, name string) error {
	var servers map[string]map[string]json.RawMessage
	_ = json.Unmarshal(raw, &servers)
	for _, server := range slices.Sorted(maps.Keys(servers)) {
		if _, ok := servers[server][name]; ok {
			return fmt.Errorf("unknown field \"mcp_servers.%s.%s\": a server's fields are %s", server, name, jsonFields[mcp.ServerConfig]())
		}
		var oauth map[string]json.RawMessage
		_ = json.Unmarshal(servers[server]["oauth"], &oauth)
		if _, ok := oauth[name]; ok {
			return fmt.Errorf("unknown field \"mcp_servers.%s.oauth.%s\": its fields are %s", server, name, jsonFields[mcp.OAuthConfig]())
		}
	}
	return nil
}

// unknownServedField names an unknown field of the "mcp_server" section (raw), or
// returns nil when it has no field called name.
func unknownServedField(raw json.RawMessage, name string) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return nil
	}
	if _, ok := top[name]; ok {
		return fmt.Errorf("unknown field \"mcp_server.%s\": its fields are %s", name, jsonFields[mcp.ServedConfig]())
	}
	for _, section := range []string{"resources", "resource_templates", "prompts"} {
		fields := map[string]string{"resources": jsonFields[mcp.ServedResource](),
			"resource_templates": jsonFields[mcp.ServedTemplate](), "prompts": jsonFields[mcp.ServedPrompt]()}[section]
		var items []map[string]json.RawMessage
		_ = json.Unmarshal(top[section], &items)
		for i, item := range items {
			if _, ok := item[name]; ok {
				return fmt.Errorf("unknown field \"mcp_server.%s[%d].%s\": its fields are %s", section, i, name, fields)
			}
			if section != "prompts" {
				continue
			}
			for _, sub := range []string{"arguments", "messages"} {
				subFields := map[string]string{"arguments": jsonFields[mcp.ServedArgument](), "messages": jsonFields[mcp.ServedMessage]()}[sub]
				var subs []map[string]json.RawMessage
				_ = json.Unmarshal(item[sub], &subs)
				for j, x := range subs {
					if _, ok := x[name]; ok {
						return fmt.Errorf("unknown field \"mcp_server.prompts[%d].%s[%d].%s\": its fields are %s", i, sub, j, name, subFields)
					}
				}
			}
		}
	}
	return nil
}

// MCPSecrets are the values of the servers' configuration that events and logs must
// not hold: every header value (and the token of "Bearer <token>"), the values of
// environment variables named like a secret (…KEY, …TOKEN, …SECRET, …PASSWORD, …:
// redact.SecretName), the OAuth client secret read from the variable
// "oauth.client_secret_env" names, and the credentials of every URL among them: the
// server's "url" (https://user:password@host/mcp?api_key=...), and an environment
// value or an argument of a stdio server that is one
// (DATABASE_URL=postgres://user:password@host/db). The variables of the node's
// environment that "pass_env" passes count as the server's environment values.
// Other variables (NODE_ENV=production) are not secrets: redacting their values
// would blank out common words.
func MCPSecrets(servers map[string]mcp.ServerConfig) []string {
	var out []string
	for _, s := range servers {
		out = append(out, redact.URLSecrets(s.URL)...)
		for _, v := range s.Headers {
			out = append(out, redact.HeaderSecrets(v)...)
		}
		if secret := s.OAuth.Secret(); secret != "" {
			out = append(out, secret)
		}
		for k, v := range s.Env {
			out = envSecrets(out, k, v)
		}
		for _, a := range s.Args {
			out = append(out, redact.URLSecrets(a)...)
		}
		for _, kv := range s.Passed(os.Environ()) {
			k, v, _ := strings.Cut(kv, "=")
			out = envSecrets(out, k, v)
		}
	}
	return out
}

// envSecrets appends to out the secrets of a server's environment variable k=v:
// its value when its name says it is one, and any credentials of URLs in it.
func envSecrets(out []string, k, v string) []string {
	if redact.SecretName(k) {
		out = append(out, v)
	}
	return append(out, redact.URLSecrets(v)...)
}
