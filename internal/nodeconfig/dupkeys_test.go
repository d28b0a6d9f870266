package nodeconfig_test

import (
	"strings"
	"testing"
)

// A configuration file with a key twice in one object is refused, naming the key
// and its line, as the agents file's fields given twice are: encoding/json took the
// last silently, so a second "memory" section (or a "model" left below an edited
// one) dropped the first without a word.
func TestConfigWithAKeyTwiceIsRefused(t *testing.T) {
	for body, want := range map[string]string{
		"{\"model\": \"openai:gpt-4o\",\n \"model\": \"offline\"}":                                        `line 2: "model" is given twice`,
		"{\"memory\": {\"tool\": true, \"namespace\": \"user:alice\"},\n\n \"memory\": {\"tool\": true}}": `line 3: "memory" is given twice`,
		"{\"memory\": {\"tool\": true,\n \"tool\": false}}":                                               `line 2: "memory.tool" is given twice`,
	} {
		_, err := loadString(t, body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %s", body, err, want)
		}
	}
	// In a map's objects.
	if _, err := loadString(t, "{\"mcp_servers\": {\"a\": {\"command\": \"x\"},\n \"b\": {\"command\": \"y\",\n \"command\": \"z\"}}}"); err == nil ||
		!strings.Contains(err.Error(), `line 3: "mcp_servers.b.command" is given twice`) {
		t.Errorf("in a map: %v", err)
	}
	// The same key in two objects is no repeat.
	if _, err := loadString(t, `{"memory": {"tool": true}, "knowledge": {"tool": true}}`); err != nil {
		t.Fatal(err)
	}
}
