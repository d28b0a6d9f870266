package nodeconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/mcp"
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
	}
	return nil
}

// MCPSecrets are the values of the servers' configuration that events must not
// hold: every header value (and the token of "Bearer <token>"), and the values of
// environment variables named like a secret (…KEY, …TOKEN, …SECRET, …PASSWORD, …).
// Other variables (NODE_ENV=production) are not secrets: redacting their values
// would blank out common words.
func MCPSecrets(servers map[string]mcp.ServerConfig) []string {
	var out []string
	for _, s := range servers {
		for _, v := range s.Headers {
			out = append(out, v)
			if _, token, ok := strings.Cut(v, " "); ok {
				out = append(out, strings.TrimSpace(token))
			}
		}
		for k, v := range s.Env {
			if secretName.MatchString(k) {
				out = append(out, v)
			}
		}
	}
	return out
}

var secretName = regexp.MustCompile(`(?i)(key|token|secret|passw|auth|credential|private)`)
