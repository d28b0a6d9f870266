package mcp

import (
	"encoding/json"
	"net/http"
)

// ServersStatus is what StatusHandler answers: every MCP server of the
// configuration, sorted by name.
type ServersStatus struct {
	Servers []ServerStatus `json:"servers"`
}

// StatusHandler answers a GET with the servers' Status as JSON (ServersStatus):
// each one's state and error, its tools in the catalog, and the tools it offers
// that were left out and why (Skipped: a schema the node cannot check arguments
// against, a name clash, too many tools), which otherwise only the log says.
// redact, when set, cleans each error and reason of secrets (a server's error
// may quote its URL with a token). A nil Client answers no servers.
func (c *Client) StatusHandler(redact func(string) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := ServersStatus{Servers: []ServerStatus{}}
		if c != nil {
			out.Servers = c.Status()
		}
		if redact != nil {
			for i := range out.Servers {
				st := &out.Servers[i]
				st.Error = redact(st.Error)
				for j := range st.Skipped {
					st.Skipped[j] = redact(st.Skipped[j])
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(out)
	})
}
